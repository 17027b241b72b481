"""Store a quota decision for the warm ``loopx quota should-run`` (:mod:`loopx.quota.warmanswer`).

The validated path calls :func:`store_snapshot` after it decided with the
real clock. It stores the decision's ``--json`` document and its line as
memos (:mod:`loopx.memo`), only when they can be trusted:

* no input file changed while the decision read them (their fingerprints
  before and after agree; the aggregate is taken after, since the decision
  itself may fold new ledger lines into it);
* the goal has no host guard (its answer moves with the host's memory and load);
* filling the holes (:func:`loopx.quota.warmanswer.filler`) for the decision's own
  instant and host numbers gives back exactly the bytes the validated path
  prints, so the two paths print the same bytes.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from functools import partial
from typing import Final

from loopx import exitcodes, memo
from loopx.quota.decision import QuotaDecision
from loopx.quota.host import HostNumbers
from loopx.quota.phrases import in_phrase
from loopx.quota.warmanswer import filler, input_files, iso_z, memo_key, memo_path
from loopx.registry.goalrecords import Goal
from loopx.root import Layout

# Stop serving this much before the computed instant: a bucket's leaving time
# goes through a float-to-microsecond rounding, and early only costs one decision.
MARGIN: Final = timedelta(milliseconds=1)

Hole = tuple[int, int, str]


def _field(body: bytes, name: str, hole: str) -> Hole | None:
    """The value of the one ``"name": value`` line of ``body`` as a hole."""
    key = f'"{name}": '.encode()
    if body.count(key) != 1:
        return None
    start = body.index(key) + len(key)
    end = body.index(b"\n", start)
    return start, end - 1 if body[end - 1 : end] == b"," else end, hole


def _phrase(body: bytes, decision: QuotaDecision, *, tail: bytes) -> list[Hole] | None:
    """The waiting message's ``(in N s)``, just before ``tail``; [] when it has none."""
    at = decision.next_eligible_at
    if at is None:
        return []
    phrase = in_phrase(at, decision.decided_at).encode()
    if not decision.message.endswith(phrase.decode()) or body.count(phrase + tail) != 1:
        return None
    start = body.index(phrase + tail)
    return [(start, start + len(phrase), f"in:{at.isoformat()}")]


def _holes(body: bytes, decision: QuotaDecision, *, as_json: bool) -> list[Hole] | None:
    if not as_json:
        return _phrase(body, decision, tail=b"\n")
    if decision.window_hours is None:
        return None
    found = [
        _field(body, "decided_at", "at"),
        _field(body, "measured_at", "at"),
        _field(body, "window_start", f"since:{decision.window_hours!r}"),
        _field(body, "available_memory_mb", "mem"),
        _field(body, "load_1m", "load"),
        _field(body, "cpu_count", "cpus"),
    ]
    phrase = _phrase(body, decision, tail=b'",\n')
    if phrase is None or any(h is None for h in found):
        return None
    return [h for h in found if h is not None] + phrase


def store_snapshot(
    layout: Layout,
    goal: Goal,
    decision: QuotaDecision,
    *,
    before: dict[str, memo.Fingerprint],
    valid_until: datetime | None,
) -> bool:
    """Store ``decision`` for the warm path if it can be trusted (see the module); best effort.

    ``before`` are the input files' fingerprints taken before the decision
    read them (:func:`fingerprints`). Returns whether both memos were written.
    """
    policy, room = goal.quota, decision.headroom
    if policy.min_free_memory_mb is not None or policy.max_load_per_cpu is not None or room is None:
        return False
    files = input_files(layout, goal.id)
    aggregate = files[-1]
    checked = {n: fp for n, fp in before.items() if n != aggregate}  # see the module
    at = decision.decided_at.timestamp()
    fill = filler(at, HostNumbers(room.available_memory_mb, room.load_1m, room.cpu_count))
    until = None if valid_until is None else (valid_until - MARGIN).timestamp()
    store = partial(  # what both memos share: the decision's files, instant and exit code
        memo.store,
        inputs=files,
        before=checked,
        computed_at=at,
        valid_until=until,
        exit_code=exitcodes.OK if decision.allowed else exitcodes.NOT_ALLOWED,
        key=memo_key(layout),
    )
    stored = 0
    for as_json, body in (
        (True, (decision.model_dump_json(indent=2) + "\n").encode()),
        (False, (decision.line() + "\n").encode()),
    ):
        holes = _holes(body, decision, as_json=as_json)
        if holes is None or memo.fill_holes(body, holes, fill) != body:
            continue
        stored += store(memo_path(layout, goal.id, as_json=as_json), body, holes=holes)
    return stored == 2  # noqa: PLR2004 - the --json document and the line


def fingerprints(layout: Layout, goal_id: str) -> dict[str, memo.Fingerprint]:
    """The fingerprint of each file a decision of ``goal_id`` reads."""
    return {name: memo.fingerprint(name) for name in input_files(layout, goal_id)}


__all__ = ["fingerprints", "iso_z", "store_snapshot"]
