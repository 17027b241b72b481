"""The HTTP front end of a root: `loopx serve`'s server, the dashboard, metrics and actions.

It reads the status layer through its public functions (the projection and
its documents) and writes only through the registry's calls, as the CLI does.
Only ``server`` and ``app`` import the HTTP stack (Starlette, uvicorn,
sse-starlette, prometheus_client), and only `loopx serve` imports them.
"""
