"""The status document assembled from per-goal fragments is the projection serialized whole."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from loopx.fleet import AgentSlot, FleetRecord
from loopx.model import utcnow
from loopx.registry.goals import open_gate
from loopx.registry.model import GoalStatus
from loopx.registry.quota_policy import QuotaPolicy
from loopx.status import document
from loopx.status.current import load_status, status_document
from loopx.status.documents import GoalDetail, StatusPage, status_page
from loopx.status.projection import GoalInputs, project
from loopx.status.snapshot import snapshot_file
from loopx.status.sources import probes_dir
from loopx.status.view import (
    GoalStatusView,
    ProbeObservation,
    StatusProjection,
    json_bytes,
    trusted,
)
from loopx.storage.files import atomic_write_model
from loopx.testing.status_fixtures import (
    make_goal,
    register_goals,
    seed_goal,
    write_lease,
)

NOW = datetime(2026, 1, 2, 12, 0, tzinfo=UTC)
ODD = 'quote " backslash \\ tab \t newline \n bell \x07 del \x7f caf\u00e9 \u2028 \U0001f600'


def whole(projection: StatusProjection) -> bytes:
    """The document as it was printed before: the projection serialized at once."""
    return json_bytes(projection, indent=2) + b"\n"


def every_kind_of_goal(layout) -> None:
    """Goals that never ran (several templates, odd objectives), ran, gated, leased, damaged."""
    now = utcnow()
    root = layout.root
    plain = [make_goal(f"n{i:02d}", now=now, workdir=root, objective="same work") for i in range(8)]
    templates = [
        make_goal("p-1", now=now, workdir=root, status=GoalStatus.PAUSED, priority=3),
        make_goal("p-2", now=now, workdir=root, status=GoalStatus.PAUSED, priority=3),
        make_goal("done.1", now=now, workdir=root, objective="x", status=GoalStatus.DONE),
        make_goal("done.2", now=now, workdir=root, objective="x", status=GoalStatus.DONE),
        make_goal(
            "pol1",
            now=now,
            workdir=root,
            objective="x",
            quota=QuotaPolicy(compute=0.5, window_hours=2),
        ),
        make_goal(
            "pol2",
            now=now,
            workdir=root,
            objective="x",
            quota=QuotaPolicy(compute=0.5, window_hours=2),
        ),
        make_goal("zero_1", now=now, workdir=root, quota=QuotaPolicy(compute=0)),
        make_goal("zero_2", now=now, workdir=root, quota=QuotaPolicy(compute=0)),
        make_goal("odd1", now=now, workdir=root, objective=ODD),
        make_goal("odd2", now=now, workdir=root, objective=ODD),
        make_goal("long", now=now, workdir=root, objective="\u00e9" * 300),
        make_goal("probed", now=now, workdir=root, objective="same work"),
        make_goal("quarantined", now=now, workdir=root, objective="same work"),
        make_goal("damaged", now=now, workdir=root, objective="same work"),
        make_goal("leased", now=now, workdir=root),
        make_goal("expired", now=now, workdir=root),
    ]
    ran = [seed_goal(layout, f"ran{i}", now=now, history=2, workdir=root) for i in range(3)]
    register_goals(layout, [*plain, *templates, *ran])
    open_gate(layout, "ran1", 'Ship "it"? \\ \u00e9', now=now)
    write_lease(layout, "leased", now=now)
    write_lease(layout, "expired", now=now - timedelta(hours=2))
    (layout.quarantine_dir / "quarantined__turn-1.json").write_text("{}")
    layout.ensure_goal_dirs("damaged")
    layout.state_file("damaged").write_text("{not json")
    probe = ProbeObservation(
        goal_id="probed",
        command="echo \"hi\" \\ '\u00e9'",
        cwd=str(root),
        exit_code=0,
        stdout='line one\nline "two" \\ \u00e9\n',
        started_at=now,
        duration_s=0.1,
    )
    probes_dir(layout).mkdir(parents=True, exist_ok=True)
    atomic_write_model(probes_dir(layout) / "probed.json", probe)


def test_a_root_with_every_kind_of_goal_prints_the_same_bytes(layout):
    """Never-ran goals of several templates, ran, gated, leased, quarantined, damaged, probed."""
    # Given a root with every kind of goal and its projection
    every_kind_of_goal(layout)
    projection = load_status(layout, now=utcnow(), ttl_s=60)
    reasons = {g.reason.value for g in projection.goals}
    assert {"paused", "done", "quarantined", "gate_pending", "running", "ready"} <= reasons
    # Then the assembled document is the whole one, byte for byte
    assert document.status_bytes(projection) == whole(projection)
    # And the never-ran goals of one template share its fragment (not each serialized)
    shared = document._goal_pieces(list(projection.goals), [])
    assert {"n01", "n07", "done.2", "pol2", "odd2"} <= set(shared)
    assert not {"ran0", "leased", "quarantined", "damaged", "probed"} & set(shared)


def test_status_document_prints_and_keeps_the_whole_bytes(layout):
    """status_document returns, and keeps as the snapshot, the projection serialized whole."""
    every_kind_of_goal(layout)
    now = utcnow()
    printed = status_document(layout, now=now, ttl_s=60)
    projection = load_status(layout, now=now, ttl_s=60)
    assert printed == whole(projection)
    assert snapshot_file(layout).read_bytes().endswith(b"\n" + printed)


def test_a_root_without_goals(layout):
    """No goal: the document ends with an empty goals list, as pydantic prints it."""
    projection = load_status(layout, now=utcnow())
    assert projection.goals == []
    assert document.status_bytes(projection) == whole(projection)
    assert document.status_bytes(projection).endswith(b'"goals": []\n}\n')


def test_a_root_with_one_goal(layout):
    """One goal that never ran: one fragment, no separator."""
    register_goals(layout, [make_goal("only", now=utcnow(), workdir=layout.root)])
    projection = load_status(layout, now=utcnow())
    assert document.status_bytes(projection) == whole(projection)
    assert json.loads(document.status_bytes(projection))["goals"][0]["goal_id"] == "only"


def test_a_root_that_reloaded_its_cache(layout):
    """Views rebuilt from the shards by another process print the same bytes."""
    every_kind_of_goal(layout)
    load_status(layout, now=utcnow())
    from loopx.status.cache import StatusCache

    other = StatusCache(layout)
    other.refresh(now=utcnow(), ttl_s=60)
    projection = other.projection()
    assert projection is not None
    assert document.status_bytes(projection) == whole(projection)


# --- projections no root makes: the assembly must still print what pydantic would -----------


def _goal(goal_id: str, **fields: object):
    """A goal whose never-ran view shares its values with its kind's (one objective for all)."""
    fields.setdefault("objective", "the same work")
    return make_goal(goal_id, now=NOW - timedelta(days=1), workdir=Path("/tmp"), **fields)


def _projection(goals: list[GoalStatusView]) -> StatusProjection:
    base = project([], fleet=None, heartbeats=[], quarantined_total=0, now=NOW)
    return base.model_copy(update={"goals": goals})


def _never_ran(n: int) -> list[GoalStatusView]:
    """``n`` ready goals' views of one template (shared value objects)."""
    p = project(
        [GoalInputs(goal=_goal(f"g{i}")) for i in range(n)],
        fleet=None,
        heartbeats=[],
        quarantined_total=0,
        now=NOW,
    )
    return list(p.goals)


def _with(view: GoalStatusView, **fields: object) -> GoalStatusView:
    """``view`` with ``fields`` replaced, sharing every other value object (as a copy does)."""
    return trusted(GoalStatusView, {**view.__dict__, **fields})


def test_crash_loop_overlay_on_a_template(layout):
    """Ready never-ran goals overlaid with crash_loop (each a copy) print as the whole does."""
    slots = [AgentSlot(index=i, agent_id=f"agent-{i}", crash_loop=True) for i in range(2)]
    fleet = FleetRecord(
        pid=1,
        pid_started_at=0.0,
        hostname="h",
        agents_wanted=2,
        started_at=NOW,
        updated_at=NOW,
        slots=slots,
    )
    inputs = [GoalInputs(goal=_goal(f"g{i}")) for i in range(4)]
    inputs.append(GoalInputs(goal=_goal("paused", status=GoalStatus.PAUSED)))
    p = project(inputs, fleet=fleet, heartbeats=[], quarantined_total=0, now=NOW)
    assert [g.reason.value for g in p.goals] == ["crash_loop"] * 4 + ["paused"]
    assert document.status_bytes(p) == whole(p)


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"warnings": ["a warning"]}, id="warnings"),
        pytest.param({"quarantined": ["g__t.json"]}, id="quarantined"),
        pytest.param({"explanation": 'another "one" \\ \u00e9'}, id="explanation"),
        pytest.param({"objective": ODD}, id="objective"),
        pytest.param({"priority": 10**30}, id="big-int"),
        pytest.param({"next_eligible_at": NOW + timedelta(hours=1)}, id="datetime"),
        pytest.param({"goal_id": 'a "quoted" \\ id\n\u00e9'}, id="escaped-id"),
        pytest.param({"goal_id": "caf\u00e9"}, id="non-ascii-id"),
    ],
)
@pytest.mark.parametrize("which", [(0,), (2, 4)], ids=["first", "later"])
def test_one_view_of_a_template_differs(change: dict[str, object], which: tuple[int, ...]):
    """A view sharing all but one value with its template's views prints its own value."""
    # Given views of one template, where the first (whose fragment the others would
    # take) or later ones differ in one value
    views = _never_ran(5)
    assert len(document._goal_pieces(views, [])) == 4  # all but the first share its fragment
    for i in which:
        views[i] = _with(views[i], **change)
    p = _projection(views)
    assert document.status_bytes(p) == whole(p)


@pytest.mark.filterwarnings("ignore::UserWarning")  # pydantic: a tuple where a list is due
def test_an_empty_tuple_for_a_list():
    """Empty warnings that are not a list: not the template's (pydantic may print them apart)."""
    views = _never_ran(3)
    views[1] = _with(views[1], warnings=())
    p = _projection(views)
    assert document.status_bytes(p) == whole(p)


def test_same_values_in_another_field_order():
    """A view holding the template's very values in another key order prints in its order."""
    views = _never_ran(3)
    d = views[1].__dict__
    swapped = dict(reversed(list(d.items())))
    views[1] = trusted(GoalStatusView, swapped)
    p = _projection(views)
    assert document.status_bytes(p) == whole(p)


def test_another_kind_of_view_or_projection_is_printed_whole():
    """A view subclass in goals, or a projection subclass: the whole serialization, as before."""
    views = _never_ran(3)
    detail = GoalDetail.model_validate(views[1].model_dump())
    p = _projection([views[0], detail, views[2]])
    assert document.status_bytes(p) == whole(p)
    page = status_page(_projection(views), offset=0, limit=2, actor=None)
    assert isinstance(page, StatusPage)
    assert document.status_bytes(page) == whole(page)


def test_the_view_model_allows_sharing():
    """GoalStatusView prints its fields in order, goal_id first, nothing computed from them.

    If this fails, the document still prints right but serializes every goal.
    """
    assert document._SHARE_FRAGMENTS
