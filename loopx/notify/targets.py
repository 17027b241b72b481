"""``notify.json``: where notifications go. Mode 0600: an Apprise URL holds its service's secret."""

from __future__ import annotations

import hashlib
import os
import re
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Final, Literal

from pydantic import Field

from loopx.errors import UsageError
from loopx.model import Record, UtcDatetime
from loopx.root import Layout
from loopx.secrets import REDACTED
from loopx.storage.files import atomic_write_bytes, read_model_or_none
from loopx.storage.locks import locked

CONFIG_NAME: Final = "notify.json"
SECRET_MODE: Final = 0o600


class EventKind(StrEnum):
    """What a notification is about (`notify add --events`)."""

    GATE = "gate"  # a gate opened: a person must answer
    FAILING = "failing"  # a goal started failing
    CRASH_LOOP = "crash_loop"  # a goal's turns or an agent crash in a loop
    LIMIT = "limit"  # a usage limit stops a goal
    BUDGET = "budget"  # a budget is spent
    AUTH = "auth"  # an account's login was refused: its goals wait for a new login
    DONE = "done"  # a goal is done
    DISK = "disk"  # the fleet is degraded by a disk floor or quota
    SUPERVISOR = "supervisor"  # the supervisor is down (its process is gone), or back
    HOST = "host"  # the canary quarantined a host kind (its CLI drifted), or trusts it again


ALL_EVENTS: Final = tuple(EventKind)
# How long a target's receiver may take to answer a POST before its fate is unknown. Apprise's
# own default (4 s) made a receiver that answers in 6 s take every message many times.
READ_TIMEOUT_S: Final = 15.0
CONNECT_TIMEOUT_S: Final = 5.0  # a receiver that does not accept in this long did not take it
MAX_TIMEOUT_S: Final = 300.0


class NotifyTarget(Record):
    """One Apprise URL and the events it gets."""

    id: Annotated[str, Field(min_length=1, max_length=40)]  # short, derived from the URL
    url: Annotated[str, Field(min_length=1, max_length=4000)]
    # None: every kind, including kinds added after the target was.
    events: list[EventKind] | None = None
    added_at: UtcDatetime
    read_timeout_s: Annotated[float, Field(gt=0, le=MAX_TIMEOUT_S)] = READ_TIMEOUT_S

    @property
    def kinds(self) -> tuple[EventKind, ...]:
        """The kinds this target gets."""
        return ALL_EVENTS if self.events is None else tuple(self.events)


class NotifyConfig(Record):
    """``notify.json``: the notification targets and the dashboard's address for links."""

    schema_version: Literal[1] = 1
    targets: list[NotifyTarget] = Field(default_factory=list)
    link_base: str | None = None  # `notify set --link-base`; else a running serve's address


class InvalidNotifyUrlError(UsageError):
    """A URL that is not an Apprise URL."""

    def __init__(self, url: str, why: str) -> None:
        super().__init__(
            f"not a notification URL: {redact_url(url)}: {why}",
            hint="use an Apprise URL such as json://host:port/path, ntfy://topic, "
            "slack://..., discord://..., tgram://..., mailto://... (see docs/notifications.md)",
        )


class InvalidEventsError(UsageError):
    """`--events` names an unknown event."""

    def __init__(self, unknown: list[str]) -> None:
        super().__init__(
            f"unknown notification event(s): {', '.join(unknown)}",
            hint=f"choose from {','.join(ALL_EVENTS)}",
        )


class NotifyTargetNotFoundError(UsageError):
    """`notify remove ID` names no target."""

    def __init__(self, target: str) -> None:
        super().__init__(
            f"no notification target {target!r}",
            hint="`loopx notify list` shows the targets' ids",
        )


_SCHEME: Final = re.compile(r"^[a-z][a-z0-9+.-]*://", re.IGNORECASE)
# user:password@ and every path or query part after the host can be a secret (tokens, webhooks).
_USERINFO: Final = re.compile(r"^([a-z][a-z0-9+.-]*://)[^/@]*@", re.IGNORECASE)


def redact_url(url: str) -> str:
    """``url`` with everything that may be a secret replaced: only the scheme and host remain. Pure.

    ``json://user:pw@127.0.0.1:8000/hook?x=1`` -> ``json://[REDACTED]@127.0.0.1:8000/[REDACTED]``.
    """
    match = _SCHEME.match(url)
    if match is None:
        return REDACTED
    scheme = match.group(0)
    rest = url[len(scheme) :]
    userinfo = ""
    if "@" in rest.split("/", 1)[0]:
        userinfo = f"{REDACTED}@"
        rest = rest.split("@", 1)[1]
    host, sep, tail = rest.partition("/")
    host = host.split("?", 1)[0]
    return f"{scheme}{userinfo}{host}{sep}{REDACTED if tail else ''}"


def target_id(url: str) -> str:
    """A stable short id for a URL (its hash: printing it reveals nothing). Pure."""
    return hashlib.sha256(url.encode()).hexdigest()[:10]


def parse_events(text: str | None) -> list[EventKind] | None:
    """`--events a,b` as kinds (None, every kind, when ``text`` is None).

    Raises:
        InvalidEventsError: an unknown name.
    """
    if text is None:
        return None
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in EventKind.__members__.values()]
    if unknown or not names:
        raise InvalidEventsError(unknown or [text])
    return [EventKind(n) for n in dict.fromkeys(names)]


def check_url(url: str) -> None:
    """Refuse what is not an Apprise-style ``scheme://...`` URL (checked again by Apprise on send).

    Raises:
        InvalidNotifyUrlError: no scheme, or whitespace inside.
    """
    if _SCHEME.match(url) is None:
        raise InvalidNotifyUrlError(url, "it has no scheme://")
    if any(c.isspace() for c in url):
        raise InvalidNotifyUrlError(url, "it contains whitespace")


def config_path(layout: Layout) -> Path:
    """``<root>/notify.json``."""
    return layout.root / CONFIG_NAME


def load_config(layout: Layout) -> NotifyConfig:
    """The root's notification config (empty when there is none).

    Raises:
        CorruptFileError: the file is not the schema.
    """
    return read_model_or_none(config_path(layout), NotifyConfig) or NotifyConfig()


def save_config(layout: Layout, config: NotifyConfig) -> None:
    """Write ``notify.json`` atomically, mode 0600."""
    path = config_path(layout)
    atomic_write_bytes(path, config.model_dump_json(indent=2).encode() + b"\n")
    os.chmod(path, SECRET_MODE)


def check_link_base(link_base: str) -> None:
    """Refuse a dashboard address that is not http(s).

    Raises:
        InvalidNotifyUrlError: not an http:// or https:// URL.
    """
    if not link_base.startswith(("http://", "https://")) or any(c.isspace() for c in link_base):
        raise InvalidNotifyUrlError(link_base, "--link-base must be an http:// or https:// URL")


def check_timeout(seconds: float) -> None:
    """Refuse a read timeout outside (0, ``MAX_TIMEOUT_S``].

    Raises:
        InvalidTimeoutError: out of range.
    """
    if not 0 < seconds <= MAX_TIMEOUT_S:
        raise InvalidTimeoutError(seconds)


class InvalidTimeoutError(UsageError):
    """`--read-timeout` out of range."""

    def __init__(self, seconds: float) -> None:
        super().__init__(
            f"--read-timeout {seconds:g} is out of range",
            hint=f"give seconds in (0, {MAX_TIMEOUT_S:g}]; the default is {READ_TIMEOUT_S:g}",
        )


def add_target(
    layout: Layout,
    url: str,
    events: list[EventKind] | None,
    *,
    now: datetime,
    link_base: str | None = None,
    read_timeout_s: float | None = None,
) -> NotifyTarget:
    """Add (or replace the events of) the target for ``url``; set ``link_base`` when given.

    Raises:
        InvalidNotifyUrlError: ``url`` is not a notification URL.
        InvalidTimeoutError: ``read_timeout_s`` is out of range.
    """
    check_url(url)
    if link_base is not None:
        check_link_base(link_base)
    if read_timeout_s is not None:
        check_timeout(read_timeout_s)
    target = NotifyTarget(
        id=target_id(url),
        url=url,
        events=events,
        added_at=now,
        read_timeout_s=read_timeout_s or READ_TIMEOUT_S,
    )
    with locked(config_path(layout)):
        config = load_config(layout)
        others = [t for t in config.targets if t.id != target.id]
        save_config(
            layout,
            config.model_copy(
                update={
                    "targets": [*others, target],
                    "link_base": link_base if link_base is not None else config.link_base,
                }
            ),
        )
    return target


def remove_target(layout: Layout, ident: str) -> NotifyTarget:
    """Remove the target of id ``ident`` (or of that exact URL).

    Raises:
        NotifyTargetNotFoundError: none matches.
    """
    with locked(config_path(layout)):
        config = load_config(layout)
        found = [t for t in config.targets if ident in (t.id, t.url)]
        if not found:
            raise NotifyTargetNotFoundError(redact_url(ident) if "://" in ident else ident)
        keep = [t for t in config.targets if t.id != found[0].id]
        save_config(layout, config.model_copy(update={"targets": keep}))
    return found[0]


def set_link_base(layout: Layout, link_base: str | None) -> NotifyConfig:
    """Set (or, with None, clear) the dashboard's address the links point at.

    Raises:
        InvalidNotifyUrlError: not an http:// or https:// URL.
    """
    if link_base is not None:
        check_link_base(link_base)
    with locked(config_path(layout)):
        config = load_config(layout).model_copy(update={"link_base": link_base})
        save_config(layout, config)
    return config
