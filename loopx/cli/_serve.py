"""`loopx serve`: the dashboard and the HTTP status API (read-only unless --actions)."""

from __future__ import annotations

import argparse
from typing import Any

from loopx import environ, exitcodes
from loopx.cli._common import add_command, layout
from loopx.status.server import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    SERVE_REFRESH_S,
    SERVE_TTL_S,
    check_bind,
    make_server,
    serve,
)


def register(sub: Any) -> None:
    """Add `serve`."""
    parser = add_command(
        sub, "serve", help="serve the dashboard, status, goals and metrics over HTTP"
    )
    parser.add_argument(
        "--host", default=DEFAULT_HOST, help=f"address to bind (default {DEFAULT_HOST})"
    )
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0 picks one)"
    )
    parser.add_argument(
        "--token",
        metavar="T",
        help=(
            f"require `Authorization: Bearer T` (default: ${environ.SERVE_TOKEN}); "
            "needed off loopback"
        ),
    )
    parser.add_argument(
        "--actions",
        action="store_true",
        help="let the dashboard answer gates, pause, resume and finish goals (needs --token)",
    )
    parser.add_argument(
        "--refresh-interval-seconds",
        type=float,
        default=SERVE_REFRESH_S,
        metavar="S",
        help=f"refresh the cached projection this often (default {SERVE_REFRESH_S:g})",
    )
    parser.add_argument(
        "--status-projection-cache-ttl-seconds",
        type=float,
        default=SERVE_TTL_S,
        metavar="S",
        help=f"a cache younger than this is not refreshed (default {SERVE_TTL_S:g})",
    )
    parser.set_defaults(func=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    """Bind, print the address, serve until interrupted."""
    token = args.token or environ.text(environ.SERVE_TOKEN)
    check_bind(args.host, token, actions=args.actions)  # refuse an open bind before the root
    server = make_server(
        layout(args),
        host=args.host,
        port=args.port,
        token=token,
        ttl_s=args.status_projection_cache_ttl_seconds,
        refresh_interval_s=args.refresh_interval_seconds,
        actions=args.actions,
    )
    host, port = str(server.server_address[0]), server.server_address[1]
    shown = f"[{host}]" if ":" in host else host
    mode = "actions enabled" if args.actions else "read-only"
    print(f"loopx serve: dashboard on http://{shown}:{port}/ ({mode}; JSON at /status)", flush=True)
    try:
        serve(server)
    except KeyboardInterrupt:
        pass
    return exitcodes.OK
