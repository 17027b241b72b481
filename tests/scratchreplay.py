"""The replay of a goal's journals through a scratch root, as ``loopx replay`` ran it before.

Kept as the oracle of tests/test_replay_fold.py: it runs the live turn's phase
functions (``durable_writeback``, ``quota_spend``, ``scheduler_apply``) with
real files in a scratch root, and the in-memory fold must give the same bytes.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from loopx.quota.ledger import append_spend
from loopx.root import Layout, ResolvedRoot, RootSource, open_root
from loopx.state import GoalState, load_state
from loopx.storage.files import atomic_write_model, read_bytes
from loopx.turn.checkpoint import Checkpoint
from loopx.turn.differences import Difference, DifferenceKind
from loopx.turn.journal import TurnJournal
from loopx.turn.phases import quota_spend, scheduler_apply
from loopx.turn.writeback import durable_writeback

HUMAN_FIELDS = ("gates", "host_session")
CHAIN_SKIP = frozenset({*HUMAN_FIELDS, "updated_at"})


def _chain_differences(replayed: GoalState, journal: TurnJournal) -> list[Difference]:
    planned = journal.plan.envelope.state.model_dump(mode="json")
    rebuilt = replayed.model_dump(mode="json")
    return [
        Difference(
            file=f"turns/{journal.turn_key}.json",
            key=f"plan.envelope.state.{name}",
            kind=DifferenceKind.CHAIN,
            disk=planned.get(name),
            replayed=rebuilt.get(name),
        )
        for name in rebuilt
        if name not in CHAIN_SKIP and planned.get(name) != rebuilt.get(name)
    ]


def _replay_into(
    scratch: Layout, goal_id: str, journals: list[TurnJournal], checkpoint: Checkpoint | None
) -> list[Difference]:
    scratch.ensure_goal_dirs(goal_id)
    if checkpoint is not None:
        atomic_write_model(scratch.state_file(goal_id), checkpoint.state, durable=False)
        for record in checkpoint.ledger:
            append_spend(scratch, record)
    chain: list[Difference] = []
    for index, journal in enumerate(journals):
        planned = journal.plan.envelope.state
        if index == 0 and checkpoint is None:
            base = planned
        else:
            current = load_state(scratch, goal_id)
            chain += _chain_differences(current, journal)
            base = current.model_copy(update={n: getattr(planned, n) for n in HUMAN_FIELDS})
        atomic_write_model(scratch.state_file(goal_id), base, durable=False)
        durable_writeback(scratch, journal)
        quota_spend(scratch, journal)
        scheduler_apply(scratch, journal)
    if not journals and checkpoint is None:
        atomic_write_model(scratch.state_file(goal_id), GoalState(goal_id=goal_id), durable=False)
    return chain


def scratch_replay(
    checkpoint: Checkpoint | None, journals: list[TurnJournal], *, goal_id: str
) -> tuple[dict[str, bytes], list[Difference]]:
    """The files (relative to the goal directory) and chain differences of a scratch replay."""
    with tempfile.TemporaryDirectory(prefix="loopx-replay-") as tmp:
        root = Path(tmp) / "root"
        scratch = open_root(
            ResolvedRoot(root, root / "registry.json", RootSource.FLAG), create=True
        )
        chain = _replay_into(scratch, goal_id, journals, checkpoint)
        goal_dir = scratch.goal_dir(goal_id)
        files: dict[str, bytes] = {}
        for name in ("state.json", "history.jsonl", "quota.jsonl"):
            if (goal_dir / name).exists():
                files[name] = read_bytes(goal_dir / name)
        for path in sorted(scratch.runs_dir(goal_id).iterdir()):
            if not path.name.startswith("."):
                files[f"runs/{path.name}"] = read_bytes(path)
    return files, chain
