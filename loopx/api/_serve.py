"""``root.serve()``: `loopx serve`, the dashboard and HTTP status API, as an object one can stop."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, ClassVar, Self

from loopx import environ
from loopx.root import Layout
from loopx.web import serving

if TYPE_CHECKING:
    from loopx.web import server as http
    from loopx.web.actioncalls import ActionCalls
    from loopx.web.token import ServeToken


def action_calls(layout: Layout) -> ActionCalls:
    """The calls the dashboard's actions make: the CLI's, ``root.gates`` and ``root.goals``.

    The web never imports the API; the server gets these from here, so a gate
    answered or a goal paused from the page goes through the same API call as
    ``loopx gate resolve`` or ``loopx goal pause``. A merge runs as
    ``loopx goal merge`` in a child process (``merge_in_child``), apart from
    the server's threads.
    """
    from functools import partial  # noqa: PLC0415 - only a server with actions needs these

    from loopx.api._gates import Gates  # noqa: PLC0415
    from loopx.api._goals import Goals  # noqa: PLC0415
    from loopx.web.actioncalls import ActionCalls  # noqa: PLC0415
    from loopx.worktree.merge import merge_in_child  # noqa: PLC0415

    gates, goals = Gates(layout), Goals(layout)
    return ActionCalls(
        resolve_gate=gates.resolve,
        pause=goals.pause,
        resume=goals.resume,
        done=goals.done,
        reopen=goals.reopen,
        merge=partial(merge_in_child, layout),
    )


class StatusServer:
    """A bound status server of one root; serving once :meth:`start` (or :meth:`serve_forever`) runs.

    ``with root.serve() as server:`` serves in a background thread and stops
    on leaving the block.
    """

    DEFAULT_HOST: ClassVar[str] = serving.DEFAULT_HOST  # `loopx serve --host` default
    DEFAULT_PORT: ClassVar[int] = serving.DEFAULT_PORT  # `--port` default (0 picks a free port)
    REFRESH_S: ClassVar[float] = serving.SERVE_REFRESH_S  # `--refresh-interval-seconds` default
    TTL_S: ClassVar[float] = serving.SERVE_TTL_S  # `--status-projection-cache-ttl-seconds` default
    TOKEN_ENV: ClassVar[str] = environ.SERVE_TOKEN  # the variable the token may come from

    def __init__(
        self,
        layout: Layout,
        *,
        host: str,
        port: int,
        token: ServeToken,
        actions: bool,
        refresh_interval_s: float,
        ttl_s: float,
        allowed_hosts: Sequence[str] = (),
    ) -> None:
        from loopx.web import server as http  # noqa: PLC0415 - the HTTP stack, only to serve

        self._server: http.HttpServer = http.make_server(
            layout,
            host=host,
            port=port,
            token=token.value,
            ttl_s=ttl_s,
            refresh_interval_s=refresh_interval_s,
            actions=action_calls(layout) if actions else None,
            allowed_hosts=allowed_hosts,
        )
        self.actions = actions
        self._layout = layout
        self.token: str | None = token.value
        self.token_source: str = token.source.value  # none, file, env, stored, created
        self.token_path: Path | None = token.path
        self._thread: threading.Thread | None = None
        self._serving = threading.Event()
        self._stopped = threading.Event()

    @staticmethod
    def env_token(env: Mapping[str, str] | None = None) -> str | None:
        """``$LOOPX_SERVE_TOKEN`` of ``env`` (default ``os.environ``), what `--token` defaults to."""
        return environ.text(environ.SERVE_TOKEN, os.environ if env is None else env)

    @staticmethod
    def resolve_token(
        layout: Layout,
        *,
        host: str,
        env: Mapping[str, str] | None = None,
        token_file: Path | None = None,
        no_token: bool = False,
    ) -> ServeToken:
        """The token `loopx serve` serves with: ``--no-token``, ``--token-file``, the variable, or the root's.

        Raises:
            NoTokenOffLoopbackError: ``no_token`` off loopback.
            TokenFileError: the token file is missing, empty or readable by others.
        """
        from loopx.web.token import resolve_token  # noqa: PLC0415 - only the serving API needs it

        return resolve_token(
            layout,
            host=host,
            env_token=StatusServer.env_token(env),
            token_path=token_file,
            no_token=no_token,
        )

    @staticmethod
    def refuse_token_in_argv() -> None:
        """`loopx serve --token T`: refused, with the ways that keep the token out of ``ps``.

        Raises:
            TokenInArgvError: always.
        """
        from loopx.web.bind import TokenInArgvError  # noqa: PLC0415 - only the serving API needs it

        raise TokenInArgvError

    @property
    def auth_headers(self) -> dict[str, str]:
        """The ``Authorization`` header a client of this server sends (none without a token)."""
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    @property
    def page_url(self) -> str:
        """The dashboard's URL with the token in its fragment (never sent to a server or a log)."""
        return f"{self.url}#token={self.token}" if self.token else self.url

    @staticmethod
    def check_bind(host: str, token: str | None, *, actions: bool = False) -> None:
        """Refuse a bind `loopx serve` refuses, before anything is opened.

        Raises:
            InsecureBindError: ``host`` is not loopback and there is no token.
            ActionsNeedTokenError: ``actions`` without a token.
        """
        from loopx.web.bind import check_bind  # noqa: PLC0415 - only the serving API needs it

        check_bind(host, token, actions=actions)

    @property
    def address(self) -> tuple[str, int]:
        """The bound host and port (the real port when 0 was asked for)."""
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        """``http://HOST:PORT/``, the dashboard's address (an IPv6 host in brackets)."""
        host, port = self.address
        return f"http://{f'[{host}]' if ':' in host else host}:{port}/"

    def serve_forever(self) -> None:
        """Serve in this thread until :meth:`stop` (from another thread) or Ctrl-C; then close."""
        self._serving.set()
        from loopx.notify.links import clear_serve, record_serve  # noqa: PLC0415 - small
        from loopx.web.server import serve  # noqa: PLC0415 - imported by __init__ already

        try:
            record_serve(self._layout, self.url)  # the links point here while this server runs
        except OSError as e:
            from loopx.log import get_logger  # noqa: PLC0415 - rare

            get_logger(__name__).warning("serve_url_not_recorded", error=str(e))

        try:
            serve(self._server)
        finally:
            clear_serve(self._layout)
            self._stopped.set()

    def start(self) -> Self:
        """Serve in a background (daemon) thread; returns at once."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self.serve_forever, name="loopx-serve", daemon=True
            )
            self._thread.start()
        return self

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until the server stopped (or ``timeout_s`` passed); whether it stopped."""
        return self._stopped.wait(timeout_s)

    def stop(self) -> None:
        """Stop serving, stop the refresh thread and close the socket. Idempotent."""
        if self._stopped.is_set():
            return
        if self._thread is not None:
            self._serving.wait()  # shutdown() before serve_forever() starts would hang
        if self._serving.is_set():
            self._server.shutdown()  # serve_forever closes everything on its way out
            self._stopped.wait()
            return
        self._server.server_close()  # bound, never served
        self._stopped.set()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, _t: type[BaseException] | None, _e: BaseException | None, _tb: TracebackType | None
    ) -> None:
        self.stop()
