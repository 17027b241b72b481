"""The HTTP front end of a root: `loopx serve`'s server, the dashboard, metrics and actions.

An outer ring, as the CLI is: it imports only the kernel, and only the API
imports it. It reads the status layer through its public functions (the
projection and its documents) and writes only through the calls the API hands
it (:class:`~loopx.web.actioncalls.ActionCalls`: the CLI's own). Only
``server``, ``app``, ``replies``, ``metrics`` and the ``routes_*`` modules
import the HTTP stack (Starlette, uvicorn, sse-starlette, prometheus_client),
and only `loopx serve` imports them.
"""
