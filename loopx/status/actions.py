"""Dashboard actions: answer a gate, pause, resume, mark done; each one audited.

Every action calls the same registry function as the CLI (``loopx gate
resolve``, ``loopx goal pause|resume|done``), so validation, locks and error
messages are the CLI's. Every attempt that reaches the server with actions
enabled, allowed or refused, is appended to ``logs/audit.jsonl``.
"""

from __future__ import annotations

import secrets
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Final, Literal
from urllib.parse import urlsplit

from pydantic import Field

from loopx.errors import InvalidPolicyError
from loopx.model import Record, UtcDatetime
from loopx.registry.goals import resolve_gate, set_status
from loopx.registry.model import GoalStatus
from loopx.root import Layout
from loopx.state import Gate
from loopx.storage.files import ensure_dir
from loopx.storage.jsonl import append_record
from loopx.worktree.merge import merge_in_child
from loopx.worktree.mergejournal import MergeJournal

AUDIT_NAME: Final = "audit.jsonl"
MAX_ACTION_BODY: Final = 16 * 1024
TOKEN_HEADER: Final = "X-Loopx-Token"  # noqa: S105 - a header name, not a secret


class Action(StrEnum):
    """What a dashboard user may do to a goal."""

    RESOLVE_GATE = "resolve-gate"
    PAUSE = "pause"
    RESUME = "resume"
    DONE = "done"
    MERGE = "merge"  # issue 26: `loopx goal merge` (docs/work.md), run as a child process


_STATUS_OF: Final = {
    Action.PAUSE: GoalStatus.PAUSED,
    Action.RESUME: GoalStatus.ACTIVE,
    Action.DONE: GoalStatus.DONE,
}


class Outcome(StrEnum):
    """How an audited attempt ended."""

    APPLIED = "applied"
    REFUSED = "refused"  # no token, wrong token, cross-site, malformed request
    FAILED = "failed"  # the library refused it (no such goal, no open gate, ...)


class ActionRequest(Record):
    """The JSON body of ``POST /api/goals/<id>/<action>``."""

    answer: Annotated[str, Field(min_length=1, max_length=4000)] | None = None
    gate_id: int | None = None


class ActionResult(Record):
    """The reply to an applied action."""

    schema_version: Literal[1] = 1
    goal_id: str
    action: Action
    goal_status: GoalStatus | None = None  # pause, resume, done
    gate: Gate | None = None  # resolve-gate
    merge: MergeJournal | None = None  # merge: its journal (outcome, gate opened)


class AuditRecord(Record):
    """One line of ``logs/audit.jsonl``: who tried what on which goal, and how it ended."""

    schema_version: Literal[1] = 1
    id: str = Field(default_factory=lambda: secrets.token_hex(8))
    at: UtcDatetime
    client: str  # the peer address the request came from
    action: str  # an Action value, or the unknown name that was asked for
    goal_id: str
    outcome: Outcome
    detail: str = ""  # the refusal or error message; the answer's gate id when applied
    answer: str | None = None  # a gate's answer as given


def audit_file(layout: Layout) -> Path:
    """``logs/audit.jsonl``."""
    return layout.logs_dir / AUDIT_NAME


def record_audit(layout: Layout, record: AuditRecord) -> None:
    """Append ``record`` to the audit log (durable, under the file's lock)."""
    ensure_dir(layout.logs_dir)
    append_record(audit_file(layout), record, key_field="id")


def perform(
    layout: Layout, goal_id: str, action: Action, request: ActionRequest, *, now: datetime
) -> ActionResult:
    """Apply ``action`` through the CLI's library call.

    Raises:
        GoalNotFoundError: no such goal.
        GoalStateError: no open gate to answer, or the goal is archived.
        InvalidPolicyError: a gate answer is missing.

    """
    if action is Action.RESOLVE_GATE:
        if request.answer is None or not request.answer.strip():
            raise InvalidPolicyError("answer", "a gate answer must not be empty")
        gate = resolve_gate(layout, goal_id, request.answer, now=now, gate_id=request.gate_id)
        return ActionResult(goal_id=goal_id, action=action, gate=gate)
    if action is Action.MERGE:
        return ActionResult(goal_id=goal_id, action=action, merge=merge_in_child(layout, goal_id))
    goal = set_status(layout, goal_id, _STATUS_OF[action], now=now)
    return ActionResult(goal_id=goal_id, action=action, goal_status=goal.status)


def cross_site_reason(site: str | None, origin: str | None, host: str | None) -> str | None:
    """Why a state-changing request looks cross-site, or None when it does not. Pure.

    Browsers send ``Sec-Fetch-Site`` and ``Origin`` with every POST; a page on
    another site can never make them say ``same-origin`` and this host.
    Clients that send neither (curl, scripts) are judged by the token alone.

    Args:
        site: the ``Sec-Fetch-Site`` header.
        origin: the ``Origin`` header.
        host: the ``Host`` header (what the browser addressed).

    """
    if site is not None and site not in {"same-origin", "none"}:
        return f"Sec-Fetch-Site is {site!r}; actions are accepted from this dashboard only"
    if origin is not None:
        if origin == "null":
            return "Origin is null (a sandboxed or file page); use the dashboard itself"
        if host is None or urlsplit(origin).netloc.lower() != host.lower():
            return f"Origin {origin!r} is not this server ({host}); cross-site requests are refused"
    return None
