"""Where the notifications' links point: a configured address, or a `loopx serve` that runs now.

``notify set --link-base URL`` is the address people use (a reverse proxy's,
an SSH tunnel's). Without one, a running ``loopx serve`` on this host lends its
own address: it records it with its pid in ``notify.d/serve.json`` at its
start and removes it at its stop, and a record whose process is gone (a
SIGKILLed server) lends nothing. :func:`probe` says whether an address answers.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Final, Literal

from loopx.fleet import process_runs
from loopx.model import Record, UtcDatetime, utcnow
from loopx.notify.outbox import OUTBOX_DIR
from loopx.notify.targets import NotifyConfig
from loopx.process import ProcessIdentity
from loopx.root import Layout
from loopx.storage.dirs import ensure_dir
from loopx.storage.files import atomic_write_model, read_model_or_none

SERVE_NAME: Final = "serve.json"
LEGACY_SERVE_NAME: Final = "serve.url"  # written at every start and never cleared: not read
PROBE_TIMEOUT_S: Final = 3.0


class ServeAddress(Record):
    """``notify.d/serve.json``: the address a running `loopx serve` serves at (no token in it)."""

    schema_version: Literal[1] = 1
    url: str
    pid: int
    pid_started_at: float
    hostname: str
    started_at: UtcDatetime


def serve_path(layout: Layout) -> Path:
    """``<root>/notify.d/serve.json``."""
    return layout.root / OUTBOX_DIR / SERVE_NAME


def record_serve(layout: Layout, url: str) -> None:
    """Lend this server's address to the links while it runs (see :func:`clear_serve`)."""
    me = ProcessIdentity.current()
    path = serve_path(layout)
    ensure_dir(path.parent)
    record = ServeAddress(
        url=url,
        pid=me.pid,
        pid_started_at=me.started_at,
        hostname=os.uname().nodename,
        started_at=utcnow(),
    )
    atomic_write_model(path, record)
    (path.parent / LEGACY_SERVE_NAME).unlink(missing_ok=True)


def clear_serve(layout: Layout) -> None:
    """Take this server's address back at its stop (another server's record is left alone)."""
    with contextlib.suppress(Exception):
        record = read_model_or_none(serve_path(layout), ServeAddress)
        if record is not None and record.pid == os.getpid():
            serve_path(layout).unlink(missing_ok=True)


def running_serve(layout: Layout) -> ServeAddress | None:
    """The recorded server, if it runs now on this host; None otherwise (or unreadable)."""
    try:
        record = read_model_or_none(serve_path(layout), ServeAddress)
    except Exception:  # noqa: BLE001 - a damaged record lends no address
        return None
    if record is None or record.hostname != os.uname().nodename:
        return None
    return record if process_runs(record.pid, record.pid_started_at) else None


def link_base(layout: Layout, config: NotifyConfig) -> str | None:
    """Where the links point: ``notify set --link-base``, else a running serve's address, else none."""
    if config.link_base:
        return config.link_base
    serve = running_serve(layout)
    return serve.url if serve is not None else None


def probe(url: str, *, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """Whether ``url`` answers: None when it does (any HTTP status), else what went wrong.

    A 401 or 403 answers: the dashboard asks for its token once the page is open.
    """
    import urllib.error  # noqa: PLC0415 - only when a link is checked
    import urllib.request  # noqa: PLC0415

    request = urllib.request.Request(url, method="GET")  # noqa: S310 - http(s) checked on set
    try:
        with urllib.request.urlopen(request, timeout=timeout_s):  # noqa: S310
            return None
    except urllib.error.HTTPError:
        return None
    except urllib.error.URLError as e:
        return f"{url} does not answer: {e.reason}"
    except (OSError, ValueError) as e:
        return f"{url} does not answer: {e}"
