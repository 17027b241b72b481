"""``root.serve()``: `loopx serve`, the dashboard and HTTP status API, as an object one can stop."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING, ClassVar, Self

from loopx import environ
from loopx.root import Layout
from loopx.status import serving

if TYPE_CHECKING:
    from loopx.status import server as http


class StatusServer:
    """A bound status server of one root; serving once :meth:`start` (or :meth:`serve_forever`) runs.

    ``with root.serve() as server:`` serves in a background thread and stops
    on leaving the block.
    """

    DEFAULT_HOST: ClassVar[str] = serving.DEFAULT_HOST  # `loopx serve --host` default
    DEFAULT_PORT: ClassVar[int] = serving.DEFAULT_PORT  # `--port` default (0 picks a free port)
    REFRESH_S: ClassVar[float] = serving.SERVE_REFRESH_S  # `--refresh-interval-seconds` default
    TTL_S: ClassVar[float] = serving.SERVE_TTL_S  # `--status-projection-cache-ttl-seconds` default
    TOKEN_ENV: ClassVar[str] = environ.SERVE_TOKEN  # the variable `--token` defaults to

    def __init__(
        self,
        layout: Layout,
        *,
        host: str,
        port: int,
        token: str | None,
        actions: bool,
        refresh_interval_s: float,
        ttl_s: float,
    ) -> None:
        from loopx.status import server as http  # noqa: PLC0415 - the HTTP stack, only to serve

        self._server: http.StatusServer = http.make_server(
            layout,
            host=host,
            port=port,
            token=token,
            ttl_s=ttl_s,
            refresh_interval_s=refresh_interval_s,
            actions=actions,
        )
        self.actions = actions
        self._thread: threading.Thread | None = None
        self._serving = threading.Event()
        self._stopped = threading.Event()

    @staticmethod
    def env_token(env: Mapping[str, str] | None = None) -> str | None:
        """``$LOOPX_SERVE_TOKEN`` of ``env`` (default ``os.environ``), what `--token` defaults to."""
        return environ.text(environ.SERVE_TOKEN, os.environ if env is None else env)

    @staticmethod
    def check_bind(host: str, token: str | None, *, actions: bool = False) -> None:
        """Refuse a bind `loopx serve` refuses, before anything is opened.

        Raises:
            InsecureBindError: ``host`` is not loopback and there is no token.
            ActionsNeedTokenError: ``actions`` without a token.
        """
        from loopx.status.bind import check_bind  # noqa: PLC0415 - only the serving API needs it

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
        from loopx.status.server import serve  # noqa: PLC0415 - imported by __init__ already

        try:
            serve(self._server)
        finally:
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
        self._server.service.stop()  # bound, never served
        self._server.server_close()
        self._stopped.set()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, _t: type[BaseException] | None, _e: BaseException | None, _tb: TracebackType | None
    ) -> None:
        self.stop()
