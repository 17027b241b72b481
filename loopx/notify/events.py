"""What happened between two status projections, as notification events. Pure.

A *condition* is something true in one projection that a person should hear
about once (a goal waits on gate 3, a goal fails, the fleet is low on disk);
an *event* is a condition of the current projection that the previous one did
not have. Conditions have stable ids, so the outbox can tell a restart's
re-derived event from a new one. ``REASON_EVENTS`` maps the status reasons to
event kinds: a new reason (an account's usage limit, a spent budget) is one
line there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from enum import StrEnum
from typing import Final

from loopx.hostcanary import HostsFile, TrustStatus
from loopx.model import Record, UtcDatetime
from loopx.notify.targets import EventKind
from loopx.status.fleetview import DISK_PHRASES
from loopx.status.view import GoalStatusView, IncidentKind, StatusProjection, StatusReason

# The status reasons that are notification events, by reason code (a string, so a
# reason another branch adds maps here before the enum has it).
REASON_EVENTS: Final[Mapping[str, EventKind]] = {
    StatusReason.GATE_PENDING.value: EventKind.GATE,
    StatusReason.FAILING.value: EventKind.FAILING,
    StatusReason.CRASH_LOOP.value: EventKind.CRASH_LOOP,
    StatusReason.QUOTA_EXHAUSTED.value: EventKind.LIMIT,
    StatusReason.DONE.value: EventKind.DONE,
}
# An account's state that is a notification event: a limit, a spent budget, a refused login.
# One per parking: the condition is the account's, however many of its goals' turns met it.
ACCOUNT_EVENTS: Final[Mapping[str, EventKind]] = {
    "limited": EventKind.LIMIT,
    "budget_spent": EventKind.BUDGET,
    "login_refused": EventKind.AUTH,
}
# The conditions that end with a "recovered" message: the fleet's own incidents.
RECOVERABLE: Final[Mapping[str, EventKind]] = {
    "supervisor:": EventKind.SUPERVISOR,
    "crash_loop:agent:": EventKind.CRASH_LOOP,
    "disk:": EventKind.DISK,
    "host:": EventKind.HOST,
}
SUPERVISOR_DOWN: Final = "supervisor:down"


# A batch longer than this shows its first lines and a count: a phone shows a short message.
MAX_LINES: Final = 10
FAILURE_CHARS: Final = 300  # the failure's own text, as the history line keeps it


class Severity(StrEnum):
    """How a message is typed (Apprise's notify types: a chat colours, a phone sorts by it)."""

    SUCCESS = "success"
    INFO = "info"
    WARNING = "warning"
    FAILURE = "failure"


# Least to most urgent: a batch is typed by its most urgent event.
_RANK: Final = {s: i for i, s in enumerate(Severity)}
SEVERITY: Final[Mapping[EventKind, Severity]] = {
    EventKind.GATE: Severity.WARNING,
    EventKind.FAILING: Severity.FAILURE,
    EventKind.CRASH_LOOP: Severity.FAILURE,
    EventKind.LIMIT: Severity.WARNING,
    EventKind.BUDGET: Severity.WARNING,
    EventKind.AUTH: Severity.FAILURE,
    EventKind.DONE: Severity.SUCCESS,
    EventKind.DISK: Severity.FAILURE,
    EventKind.SUPERVISOR: Severity.FAILURE,
    EventKind.HOST: Severity.FAILURE,
}


class NotifyEvent(Record):
    """One thing to tell people, with the id that makes it sent once."""

    id: str  # the condition: kind:goal[:gate id] or kind:fleet[:agent]
    kind: EventKind
    goal_id: str | None = None
    gate_id: int | None = None
    title: str
    body: str
    path: str  # the dashboard's fragment that answers it: "#/goal/<id>"
    since: UtcDatetime  # when the projection first showed it
    severity: Severity = Severity.INFO

    @property
    def key(self) -> str:
        """The event's own id: its condition and when it began (a condition may come back)."""
        return f"{self.id}@{self.since:%Y%m%dT%H%M%SZ}"


def _goal_path(goal_id: str) -> str:
    from urllib.parse import quote  # noqa: PLC0415 - small, only here

    return f"#/goal/{quote(goal_id, safe='')}"


def conditions(
    projection: StatusProjection,
    open_gates: Mapping[str, Iterable[tuple[int, str]]] | None = None,
) -> dict[str, NotifyEvent]:
    """Every condition of ``projection`` worth a notification, by id. Pure.

    ``open_gates`` gives a gate-pending goal's open gates as ``(id, question)``
    (from its state); without them the projection's oldest question stands
    for the goal's gates.
    """
    since = projection.generated_at
    found: dict[str, NotifyEvent] = {}
    for goal in projection.goals:
        kind = REASON_EVENTS.get(str(goal.reason))
        if kind is None:
            continue
        path = _goal_path(goal.goal_id)
        if kind is EventKind.GATE:
            gates = list((open_gates or {}).get(goal.goal_id, ()))
            if not gates:
                gates = [(0, goal.gate_question or "a gate is open")]
            for gate_id, question in gates:
                ident = f"gate:{goal.goal_id}:{gate_id}"
                found[ident] = NotifyEvent(
                    id=ident,
                    kind=kind,
                    goal_id=goal.goal_id,
                    gate_id=gate_id or None,
                    title=f"{goal.goal_id}: gate {gate_id} asks you",
                    body=question,
                    path=path,
                    since=since,
                    severity=SEVERITY[kind],
                )
            continue
        ident = f"{kind.value}:{goal.goal_id}"
        found[ident] = NotifyEvent(
            id=ident,
            kind=kind,
            goal_id=goal.goal_id,
            title=f"{goal.goal_id}: {goal.reason}",
            body=_goal_body(goal),
            path=path,
            since=since,
            severity=SEVERITY[kind],
        )
    found.update(_fleet_conditions(projection))
    return found


def _fleet_conditions(projection: StatusProjection) -> dict[str, NotifyEvent]:
    """The conditions of the fleet and the accounts, by id. Pure."""
    since = projection.generated_at
    found: dict[str, NotifyEvent] = {}
    fleet = projection.fleet
    for agent in fleet.crash_loop_agents:
        ident = f"crash_loop:agent:{agent}"
        found[ident] = NotifyEvent(
            id=ident,
            kind=EventKind.CRASH_LOOP,
            title=f"agent {agent} is in a crash loop",
            body=f"the supervisor stopped restarting agent {agent}",
            path="#/",
            since=since,
            severity=SEVERITY[EventKind.CRASH_LOOP],
        )
    for account in projection.accounts:
        kind = ACCOUNT_EVENTS.get(str(account.state))
        if kind is None:
            continue
        ident = f"{kind.value}:account:{account.name}"
        found[ident] = NotifyEvent(
            id=ident,
            kind=kind,
            title=f"account {account.name}: {account.state}",
            body=account.message or f"account {account.name} holds its goals back",
            path="#/",
            since=since,
            severity=SEVERITY[kind],
        )
    if fleet.degraded and any(p in fleet.degraded for p in DISK_PHRASES):
        found["disk:fleet"] = NotifyEvent(
            id="disk:fleet",
            kind=EventKind.DISK,
            title="the fleet is degraded: disk",
            body=fleet.degraded,
            path="#/",
            since=since,
            severity=SEVERITY[EventKind.DISK],
        )
    for incident in fleet.incidents:
        if incident.kind is IncidentKind.SUPERVISOR_DOWN:
            found[SUPERVISOR_DOWN] = supervisor_down(incident.explanation, since)
    return found


def host_conditions(hosts: HostsFile) -> dict[str, NotifyEvent]:
    """One condition per quarantined host kind, dated from its quarantine: sent once. Pure."""
    found: dict[str, NotifyEvent] = {}
    for kind, record in hosts.kinds.items():
        if record.status is not TrustStatus.QUARANTINED or record.quarantined_at is None:
            continue
        ident = f"host:{kind}"
        found[ident] = NotifyEvent(
            id=ident,
            kind=EventKind.HOST,
            title=f"host {kind} is quarantined: its goals wait",
            body=f"{record.reason}; other host kinds keep running. "
            f"Check it again with `loopx hosts check {kind}`, or trust this version "
            f"with `loopx hosts check {kind} --accept`",
            path="#/",
            since=record.quarantined_at,
            severity=SEVERITY[EventKind.HOST],
        )
    return found


def supervisor_down(body: str, since: datetime) -> NotifyEvent:
    """The supervisor is down: no turn runs. Pure."""
    return NotifyEvent(
        id=SUPERVISOR_DOWN,
        kind=EventKind.SUPERVISOR,
        title="the supervisor is down",
        body=body,
        path="#/",
        since=since,
        severity=SEVERITY[EventKind.SUPERVISOR],
    )


def recovered(ident: str, now: datetime) -> NotifyEvent | None:
    """The "recovered" event of a fleet incident ``ident`` that ended; None for other conditions. Pure."""
    kind = next((k for prefix, k in RECOVERABLE.items() if ident.startswith(prefix)), None)
    if kind is None:
        return None
    if kind is EventKind.SUPERVISOR:
        title, body = "the supervisor is running again", "its agents run the goals again"
    elif kind is EventKind.CRASH_LOOP:
        agent = ident.removeprefix("crash_loop:agent:")
        title, body = f"agent {agent} recovered", "it is no longer in a crash loop"
    elif kind is EventKind.HOST:
        host = ident.removeprefix("host:")
        title, body = f"host {host} is trusted again", "its goals run again"
    else:
        title, body = "the disk recovered", "new turns start again"
    return NotifyEvent(
        id=f"recovered:{ident}",
        kind=kind,
        title=title,
        body=body,
        path="#/",
        since=now,
        severity=Severity.SUCCESS,
    )


def new_events(active: Iterable[str], current: Mapping[str, NotifyEvent]) -> list[NotifyEvent]:
    """The conditions of ``current`` whose ids are not in ``active``, in a stable order. Pure."""
    seen = set(active)
    return [e for ident, e in sorted(current.items()) if ident not in seen]


def events_between(
    previous: StatusProjection | None,
    current: StatusProjection,
    open_gates: Mapping[str, Iterable[tuple[int, str]]] | None = None,
) -> list[NotifyEvent]:
    """What ``current`` shows that ``previous`` did not (everything when there is none). Pure."""
    before = conditions(previous, open_gates) if previous is not None else {}
    return new_events(before, conditions(current, open_gates))


def _goal_body(goal: GoalStatusView) -> str:
    """A goal's explanation, and for a failed last turn the failure in its own words. Pure."""
    turn = goal.last_turn
    if turn is None or not turn.failure_message or goal.reason is not StatusReason.FAILING:
        return goal.explanation
    what = f"turn {turn.seq} failed" + (f" ({turn.failure})" if turn.failure else "")
    return f"{goal.explanation}\n  {what}: {turn.failure_message[:FAILURE_CHARS]}"


def severity(events: Iterable[NotifyEvent]) -> Severity:
    """A batch's type: its most urgent event's. Pure."""
    return max((e.severity for e in events), key=_RANK.__getitem__, default=Severity.INFO)


def message(events: list[NotifyEvent], link_base: str | None) -> tuple[str, str]:
    """One message (title, body) for a batch of events, each with its dashboard link. Pure.

    At most ``MAX_LINES`` events are written out; the rest are counted, with
    the dashboard's link. The last line names the events' ids, so a person
    (or a receiver without an idempotency header) can tell a repeat.
    """
    title = events[0].title if len(events) == 1 else f"LoopX: {len(events)} need attention"
    base = link_base.rstrip("/") + "/" if link_base else ""
    lines = [f"- {e.title}: {e.body}\n  {base}{e.path}" for e in events[:MAX_LINES]]
    if len(events) > MAX_LINES:
        lines.append(f"- and {len(events) - MAX_LINES} more: {base}#/")
    lines.append("ids: " + " ".join(e.key for e in events))
    return title, "\n".join(lines)
