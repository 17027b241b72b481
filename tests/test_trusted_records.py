"""Records built without validation (quota window, history counts) equal their validated twins."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from loopx.history.reader import HistoryCounts, count_history
from loopx.quota.budget import QuotaView, quota_view, spend_at
from loopx.quota.window import BucketFold, SpendColumns, SpendTotals, WindowSpend, window_of
from loopx.registry.quota_policy import QuotaPolicy
from loopx.testing.status_fixtures import history_line
from loopx.turn.outcome import ResultKind

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)

POLICIES = [
    QuotaPolicy(),
    QuotaPolicy(compute=0),
    QuotaPolicy(compute=0.001, window_hours=1),
    QuotaPolicy(compute=0.5, cpu_seconds=1.0, max_tokens=10, max_cost_usd=0.01),
]


def buckets(*turns: tuple[float, float]) -> SpendColumns:
    """Buckets of turns given as (minutes before NOW, wall seconds)."""
    fold = BucketFold()
    for minutes_ago, wall_s in turns:
        fold.add(
            NOW - timedelta(minutes=minutes_ago),
            wall_s=wall_s,
            cpu_s=wall_s,
            tokens=7,
            cost_usd=0.5,
        )
    return fold.columns()


SPENDS = [
    SpendColumns(),
    buckets((30, 1.0)),
    buckets((3000, 9.0), (50, 2.0), (5, 3.5)),  # one bucket before a one-hour window
    buckets((10, 5000.0)),  # spent: refills later
]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("columns", SPENDS)
def test_quota_view_equals_its_validated_twin(policy, columns):
    """Every field, its type and its JSON are those validation gives."""
    for now in (NOW, NOW.astimezone(timezone(timedelta(hours=2)))):
        spend = spend_at(policy, columns, now=now)
        view = quota_view(policy, spend, now=now)
        twin = QuotaView.model_validate(dict(view.__dict__))
        assert view == twin
        assert view.model_dump_json() == twin.model_dump_json()
        assert {k: type(v) for k, v in view.__dict__.items()} == {
            k: type(v) for k, v in twin.__dict__.items()
        }
        assert view.model_fields_set == twin.model_fields_set


@pytest.mark.parametrize("columns", SPENDS)
def test_window_of_equals_model_construct(columns):
    """The window's sums, built as they are, equal model_construct's record."""
    start = NOW - timedelta(hours=1)
    lifetime = SpendTotals(wall_s=1.0, turns=2)
    got = window_of(columns, window_start=start, lifetime=lifetime)
    want = WindowSpend.model_construct(**got.__dict__)
    assert got == want and got.model_fields_set == want.model_fields_set
    assert got.model_dump_json() == WindowSpend.model_validate(got.model_dump()).model_dump_json()


def test_naive_window_start_is_refused():
    """A naive timestamp is refused, as the field's validation refuses it."""
    spend = spend_at(QuotaPolicy(), SpendColumns(), now=NOW).model_copy(
        update={"window_start": datetime(2026, 12, 1)}  # noqa: DTZ001 - the naive value tested
    )
    with pytest.raises(ValueError, match="timezone"):
        quota_view(QuotaPolicy(), spend, now=NOW)


def test_history_counts_equal_their_validated_twin(tmp_path):
    """Counts extended from a file's lines, cold and from an offset, equal validated ones."""
    path = tmp_path / "history.jsonl"
    lines = [
        history_line("g", seq, ended_at=NOW, kind=kind, status=status)
        for seq, (kind, status) in enumerate(
            [
                (ResultKind.PROGRESS, "committed"),
                (ResultKind.COMPLETED, "committed"),
                (None, "failed"),
            ],
            start=1,
        )
    ]
    path.write_text("".join(line.model_dump_json() + "\n" for line in lines[:2]))
    first = count_history(path, HistoryCounts())
    with path.open("a") as f:
        f.write(lines[2].model_dump_json() + "\n")
    for counts in (first, count_history(path, first), count_history(path, HistoryCounts())):
        twin = HistoryCounts.model_validate(counts.model_dump())
        assert counts == twin and counts.model_fields_set == twin.model_fields_set
        assert counts.model_dump_json() == twin.model_dump_json()
    assert count_history(path, first).lines == 3


def test_policy_window_is_its_hours():
    """The shared window lengths are each policy's own."""
    for hours in (1, 1.5, 24, 168):
        policy = QuotaPolicy(window_hours=hours)
        assert policy.window == timedelta(hours=hours) == policy.window
        assert policy.window_start(NOW) == NOW - timedelta(hours=hours)
