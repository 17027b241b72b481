"""`loopx serve`: the read-only HTTP status server."""

from __future__ import annotations

import argparse
from typing import Any

from loopx import environ, exitcodes
from loopx.cli._common import add_command, layout
from loopx.status.cache import DEFAULT_TTL_S
from loopx.status.server import DEFAULT_HOST, DEFAULT_PORT, check_bind, make_server, serve


def register(sub: Any) -> None:
    """Add `serve`."""
    parser = add_command(sub, "serve", help="serve status, goals and metrics over HTTP (GET only)")
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
        "--refresh-interval-seconds",
        type=float,
        default=5.0,
        metavar="S",
        help="refresh the cached projection this often (default 5)",
    )
    parser.add_argument(
        "--status-projection-cache-ttl-seconds",
        type=float,
        default=DEFAULT_TTL_S,
        metavar="S",
        help=f"a cache younger than this is not refreshed (default {DEFAULT_TTL_S:g})",
    )
    parser.set_defaults(func=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    """Bind, print the address, serve until interrupted."""
    token = args.token or environ.text(environ.SERVE_TOKEN)
    check_bind(args.host, token)  # before touching the root: refuse an open bind first
    server = make_server(
        layout(args),
        host=args.host,
        port=args.port,
        token=token,
        ttl_s=args.status_projection_cache_ttl_seconds,
        refresh_interval_s=args.refresh_interval_seconds,
    )
    host, port = str(server.server_address[0]), server.server_address[1]
    shown = f"[{host}]" if ":" in host else host
    print(f"loopx serve: listening on http://{shown}:{port}/status", flush=True)
    try:
        serve(server)
    except KeyboardInterrupt:
        pass
    return exitcodes.OK
