"""``accounts/<name>/provider-headers.json``: the rate-limit headers a sandboxed turn's proxy saw.

The proxy of a sandboxed turn (:mod:`loopx.agents.sandbox.proxy`) sees every
response of the account's provider, and keeps the latest value of each
rate-limit, retry and usage header here, with when it saw it. Admission
reads them as the account's latest word on its windows; nothing here
decides. Last writer wins: each write is one atomic rewrite of the whole
file, merged with the one it replaces.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from loopx.accounts.files import accounts_dir
from loopx.errors import CorruptFileError, UnsafePathError
from loopx.model import Record, UtcDatetime, utcnow
from loopx.root import Layout
from loopx.storage.files import atomic_write_model, ensure_dir, read_model_or_none


class SeenHeader(Record):
    """One header's latest value."""

    value: str
    seen_at: UtcDatetime


class ProviderHeaders(Record):
    """The latest rate-limit and usage headers of the account's provider, by lower-case name."""

    schema_version: Literal[1] = 1
    account: str
    headers: dict[str, SeenHeader] = Field(default_factory=dict)


def headers_file(layout: Layout, account: str) -> Path:
    """``accounts/<name>/provider-headers.json``."""
    return accounts_dir(layout) / account / "provider-headers.json"


def read_headers(layout: Layout, account: str) -> ProviderHeaders | None:
    """What was recorded for ``account`` (None: nothing yet, or a file LoopX did not write)."""
    try:
        return read_model_or_none(headers_file(layout, account), ProviderHeaders)
    except (CorruptFileError, UnsafePathError):
        return None


def record_headers(layout: Layout, account: str, seen: dict[str, str]) -> None:
    """Merge ``seen`` (lower-case name -> value) into the account's file."""
    now = utcnow()
    old = read_headers(layout, account) or ProviderHeaders(account=account)
    merged = {**old.headers, **{k: SeenHeader(value=v, seen_at=now) for k, v in seen.items()}}
    path = headers_file(layout, account)
    ensure_dir(path.parent)
    atomic_write_model(path, ProviderHeaders(account=account, headers=merged), durable=False)
