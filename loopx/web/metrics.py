"""``/metrics``: what the status cache already knows, exposed by prometheus_client.

Everything comes from the cached views and per-goal counters, the fleet
record and the heartbeats, so a scrape reads no goal file. Each scrape
builds its families afresh and prometheus_client writes the text format
(imported only by `loopx serve`, like the rest of the HTTP stack).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from loopx.fleet import AgentHeartbeat, FleetRecord
from loopx.status.cache import StatusCache
from loopx.status.fleetview import HEARTBEAT_STALE_S
from loopx.status.view import StatusProjection


class _Families:
    """The families of one scrape, handed to prometheus_client's exposition as a collector."""

    def __init__(self) -> None:
        self.families: list[Metric] = []

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)

    def metric(
        self, name: str, kind: str, help_text: str, samples: Iterable[tuple[dict[str, str], float]]
    ) -> None:
        rows = list(samples)
        labels = sorted({k for values, _ in rows for k in values})
        family: Metric
        if kind == "counter":
            family = CounterMetricFamily(name, help_text, labels=labels)
        else:
            family = GaugeMetricFamily(name, help_text, labels=labels)
        for values, value in rows:
            family.add_metric([values.get(k, "") for k in labels], value)
        self.families.append(family)

    def text(self) -> str:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)  # a collector is anything with collect()
        return generate_latest(registry).decode()


def _account_metrics(out: _Families, projection: StatusProjection) -> None:
    """Each account's state, the goals it holds back and its window's spend."""
    accounts = [a for a in projection.accounts if not a.whole_root]
    out.metric(
        "loopx_account_state",
        "gauge",
        "1 for each account's state now (ok, limited, overloaded, budget_spent, needs_human, damaged).",
        [({"account": a.name, "state": str(a.state)}, 1.0) for a in accounts],
    )
    out.metric(
        "loopx_account_until_seconds",
        "gauge",
        "When a limited or overloaded account takes turns again (Unix time).",
        [({"account": a.name}, a.until.timestamp()) for a in accounts if a.until is not None],
    )
    out.metric(
        "loopx_account_waiting_goals",
        "gauge",
        "Goals each account holds back now.",
        [({"account": a.name}, float(len(a.waiting))) for a in accounts],
    )
    spent = [a for a in projection.accounts if a.spend is not None]
    out.metric(
        "loopx_account_spend_tokens",
        "gauge",
        "Tokens spent inside each budgeted account's window (the root's budget: account '').",
        [
            ({"account": "" if a.whole_root else a.name}, float(a.spend.tokens))
            for a in spent
            if a.spend
        ],
    )
    out.metric(
        "loopx_account_spend_cost_usd",
        "gauge",
        "Cost spent inside each budgeted account's window (estimated where the host gave none).",
        [({"account": "" if a.whole_root else a.name}, a.spend.cost_usd) for a in spent if a.spend],
    )


def render_metrics(
    cache: StatusCache,
    projection: StatusProjection,
    *,
    fleet: FleetRecord | None,
    heartbeats: Iterable[AgentHeartbeat],
    now: datetime,
) -> str:
    """The Prometheus text format (version 0.0.4) of the root's status."""
    out = _Families()
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
        running = 1 if cached.leased else 0
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
    _account_metrics(out, projection)
    out.metric(
        "loopx_status_checked_timestamp_seconds",
        "gauge",
        "When the status sources were last checked (Unix time).",
        [({}, projection.checked_at.timestamp())],
    )
    return out.text()
