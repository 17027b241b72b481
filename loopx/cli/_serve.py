"""`loopx serve`: the dashboard and the HTTP status API (read-only unless --actions)."""

from __future__ import annotations

import argparse
import contextlib

from loopx import exitcodes
from loopx.api import StatusServer
from loopx.cli._common import Subparsers, add_command, root

DEFAULT_HOST, DEFAULT_PORT = StatusServer.DEFAULT_HOST, StatusServer.DEFAULT_PORT
SERVE_REFRESH_S, SERVE_TTL_S = StatusServer.REFRESH_S, StatusServer.TTL_S


def register(sub: Subparsers) -> None:
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
            f"require `Authorization: Bearer T` (default: ${StatusServer.TOKEN_ENV}); "
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
    # Refuse an open bind before the root is opened.
    StatusServer.check_bind(args.host, args.token or StatusServer.env_token(), actions=args.actions)
    server = root(args).serve(
        host=args.host,
        port=args.port,
        token=args.token,
        ttl_s=args.status_projection_cache_ttl_seconds,
        refresh_interval_s=args.refresh_interval_seconds,
        actions=args.actions,
    )
    mode = "actions enabled" if args.actions else "read-only"
    print(f"loopx serve: dashboard on {server.url} ({mode}; JSON at /status)", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    return exitcodes.OK
