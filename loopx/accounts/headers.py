"""``accounts/<name>/provider-headers.json``: the rate-limit headers a sandboxed turn's proxy saw.

The proxy of a sandboxed turn (:mod:`loopx.agents.sandbox.proxy`) sees every
response of the account's provider, and keeps the latest value of each
rate-limit, retry and usage header here, with when it saw it. Admission
reads them as the account's latest word on its windows
(:func:`loopx.accounts.accountfiles.held_account`, through
:mod:`loopx.accounts.headerwindows`); nothing here decides. The file's model
and its reading are in :mod:`loopx.accounts.accountfiles`, with the account's others. Last writer wins: each write is one atomic rewrite of the whole
file, merged with the one it replaces.
"""

from __future__ import annotations

from loopx.accounts.accountfiles import ProviderHeaders, SeenHeader, headers_file, read_headers
from loopx.model import utcnow
from loopx.root import Layout
from loopx.storage.dirs import ensure_dir
from loopx.storage.files import atomic_write_model


def record_headers(layout: Layout, account: str, seen: dict[str, str]) -> None:
    """Merge ``seen`` (lower-case name -> value) into the account's file."""
    now = utcnow()
    old = read_headers(layout, account) or ProviderHeaders(account=account)
    merged = {**old.headers, **{k: SeenHeader(value=v, seen_at=now) for k, v in seen.items()}}
    path = headers_file(layout, account)
    ensure_dir(path.parent)
    atomic_write_model(path, ProviderHeaders(account=account, headers=merged), durable=False)
