"""`loopx serve`: the dashboard and the HTTP status API (read-only unless --actions)."""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

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
        "--token-file",
        metavar="FILE",
        type=Path,
        help=(
            f"read the token from FILE (mode 600); default ${StatusServer.TOKEN_ENV}, "
            "else the root's serve.token, made on first use"
        ),
    )
    # Refused when given (a token in argv is readable by every local user); kept to say so.
    parser.add_argument("--token", metavar="T", help=argparse.SUPPRESS)
    parser.add_argument(
        "--no-token",
        action="store_true",
        help="serve without a token (loopback only; every local user can then read the fleet)",
    )
    parser.add_argument(
        "--allowed-host",
        metavar="NAME",
        action="append",
        default=[],
        help="also answer requests for Host NAME (a reverse proxy's name; repeatable)",
    )
    parser.add_argument(
        "--actions",
        action="store_true",
        help="let the dashboard answer gates, pause, resume and finish goals",
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
    """Bind, print the address (with the token, once), serve until interrupted."""
    if args.token is not None:
        StatusServer.refuse_token_in_argv()
    server = root(args).serve(
        host=args.host,
        port=args.port,
        token_file=args.token_file,
        no_token=args.no_token,
        ttl_s=args.status_projection_cache_ttl_seconds,
        refresh_interval_s=args.refresh_interval_seconds,
        actions=args.actions,
        allowed_hosts=args.allowed_host,
    )
    mode = "actions enabled" if args.actions else "read-only"
    if server.token is None:
        print(
            "loopx serve: warning: no token; every local user can read this fleet",
            file=sys.stderr,
        )
    print(f"loopx serve: dashboard on {server.page_url} ({mode}; JSON at /status)", flush=True)
    if server.token_path is not None:
        print(f"loopx serve: token in {server.token_path}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    return exitcodes.OK
