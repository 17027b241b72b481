"""``/metrics``: Prometheus text exposition of what the status cache already knows.

Everything comes from the cached views and per-goal counters, the fleet
record and the heartbeats, so a scrape reads no goal file.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from datetime import datetime, timedelta

from loopx.fleet import AgentHeartbeat, FleetRecord
from loopx.status.cache import StatusCache
from loopx.status.fleetview import HEARTBEAT_STALE_S
from loopx.status.view import StatusProjection


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


_EXACT_INT = 2**53  # floats up to here hold every integer exactly


def _format(value: float) -> str:
    """A sample value with full precision: ``{:g}`` kept 6 digits (a timestamp 45 min off)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer() and abs(value) < _EXACT_INT:
        return str(int(value))
    return repr(value)  # the shortest text that reads back as the same float


class _Exposition:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def metric(
        self, name: str, kind: str, help_text: str, samples: Iterable[tuple[dict[str, str], float]]
    ) -> None:
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            label_text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
            body = f"{name}{{{label_text}}}" if label_text else name
            self.lines.append(f"{body} {_format(value)}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def render_metrics(
    cache: StatusCache,
    projection: StatusProjection,
    *,
    fleet: FleetRecord | None,
    heartbeats: Iterable[AgentHeartbeat],
    now: datetime,
) -> str:
    """The Prometheus text format (version 0.0.4) of the root's status."""
    out = _Exposition()
    kinds: Counter[str] = Counter()
    statuses: Counter[str] = Counter()
    interrupted = epochs = takeovers = 0
    for cached in list(cache.goals.values()):
        kinds.update(cached.history.kinds)
        statuses.update(cached.history.statuses)
        interrupted += cached.history.interrupted
        epochs += cached.epoch
        # Each claim raises the epoch once and each finished turn writes one
        # history line; claims that left no line (beyond a lease held now)
        # were taken over or abandoned.
        running = 1 if cached.view.lease is not None else 0
        takeovers += max(0, cached.epoch - cached.history.lines - running)
    out.metric(
        "loopx_goals",
        "gauge",
        "Goals in the status projection by actor and reason.",
        [
            ({"actor": a, "reason": r}, float(n))
            for (a, r), n in sorted(
                Counter((g.actor.value, g.reason.value) for g in projection.goals).items()
            )
        ],
    )
    out.metric(
        "loopx_turns_total",
        "counter",
        "Finished turns by the host's result kind (none: failed or stopped).",
        [({"kind": k}, float(n)) for k, n in sorted(kinds.items())]
        + [({"kind": "none"}, float(statuses.get("failed", 0) + statuses.get("stopped", 0)))],
    )
    out.metric(
        "loopx_turns_by_status_total",
        "counter",
        "Finished turns by journal status.",
        [({"status": s}, float(n)) for s, n in sorted(statuses.items())],
    )
    wall = sum(g.quota.spent_wall_s for g in projection.goals)
    cpu = sum(g.quota.spent_cpu_s for g in projection.goals)
    out.metric(
        "loopx_quota_window_spent_wall_seconds",
        "gauge",
        "Host wall time spent inside each goal's quota window, summed.",
        [({}, wall)],
    )
    out.metric(
        "loopx_quota_window_spent_cpu_seconds",
        "gauge",
        "Host CPU time spent inside each goal's quota window, summed.",
        [({}, cpu)],
    )
    out.metric(
        "loopx_quota_exhausted_goals",
        "gauge",
        "Goals whose window budget is spent.",
        [({}, float(sum(1 for g in projection.goals if g.quota.exhausted)))],
    )
    stale = now - timedelta(seconds=HEARTBEAT_STALE_S)
    beats = list(heartbeats)
    out.metric(
        "loopx_agents_alive",
        "gauge",
        "Agents whose heartbeat is fresher than 30 s.",
        [({}, float(sum(1 for h in beats if h.beat_at >= stale)))],
    )
    out.metric(
        "loopx_agents_wanted",
        "gauge",
        "Agents the supervisor keeps running.",
        [({}, float(fleet.agents_wanted if fleet else 0))],
    )
    out.metric(
        "loopx_agent_restarts_total",
        "counter",
        "Agent restarts by the supervisor.",
        [({}, float(sum(s.restarts for s in fleet.slots) if fleet else 0))],
    )
    out.metric(
        "loopx_agents_crash_loop",
        "gauge",
        "Agent slots in a crash loop.",
        [({}, float(sum(1 for s in fleet.slots if s.crash_loop) if fleet else 0))],
    )
    out.metric(
        "loopx_lease_claims_total",
        "counter",
        "Lease claims (sum of the goals' epochs).",
        [({}, float(epochs))],
    )
    out.metric(
        "loopx_lease_takeovers_total",
        "counter",
        "Claims that ended without a recorded turn: takeovers of an expired or dead holder's lease.",
        [({}, float(takeovers))],
    )
    quarantined = float(projection.quarantined_total)
    out.metric(
        "loopx_recovery_decisions_total",
        "counter",
        "Recovery decisions visible in the root: quarantined journals, turns failed as interrupted.",
        [({"decision": "quarantine"}, quarantined), ({"decision": "fail"}, float(interrupted))],
    )
    out.metric(
        "loopx_quarantined_journals",
        "gauge",
        "Entries in quarantine/ waiting for a human.",
        [({}, quarantined)],
    )
    degraded = projection.fleet.degraded
    out.metric(
        "loopx_degraded",
        "gauge",
        "1 while the root cannot take writes (disk full, read-only), with the reason.",
        [({"reason": degraded or ""}, 1.0 if degraded else 0.0)],
    )
    out.metric(
        "loopx_status_checked_timestamp_seconds",
        "gauge",
        "When the status sources were last checked (Unix time).",
        [({}, projection.checked_at.timestamp())],
    )
    return out.text()
