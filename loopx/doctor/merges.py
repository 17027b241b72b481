"""A goal's merge that stopped part way: its `loopx goal merge` process is gone.

``goals/<id>/merge.json`` names the process that last wrote it (pid and start
time). A merge that is not finished while that process is gone was killed:
its scratch worktree, a lock its git left, or a base moved but a checkout not
yet brought along wait until `loopx goal merge ID` finishes it (after settling
what the killed git left) or `loopx goal merge ID --abort` cancels it;
`loopx recover` does the first, or the second when git refuses. A live merge
is information only. Read-only.
"""

from __future__ import annotations

from loopx.doctor.findings import Checker, FindingCode, Severity
from loopx.process import ProcessIdentity
from loopx.worktree.mergejournal import MergeJournal, MergeOutcome, journal_file


def check_merge(doc: Checker, goal_id: str) -> None:
    """Report the goal's unfinished merge: a warning when its process is gone."""
    path = journal_file(doc.layout, goal_id)
    journal = doc.model(
        path,
        MergeJournal,
        f"`loopx goal merge {goal_id} --abort` cannot read it either: move it aside, then check "
        f"the repository with `git worktree list` and `git status`",
        goal_id=goal_id,
    )
    if not isinstance(journal, MergeJournal) or journal.finished:
        return
    into = f"merge of {journal.branch} into {journal.base}"
    owner = None
    if journal.owner_pid is not None and journal.owner_started is not None:
        owner = ProcessIdentity(journal.owner_pid, journal.owner_started)
    if owner is not None and owner.alive():
        doc.add(
            Severity.INFO,
            FindingCode.MERGE_UNFINISHED,
            path,
            f"{into} is running (pid {owner.pid}, after step {journal.step})",
            "",
            goal_id,
        )
        return
    moved = journal.outcome is MergeOutcome.MERGED
    who = f"its process (pid {owner.pid}) is gone" if owner is not None else "its process is gone"
    doc.add(
        Severity.WARNING,
        FindingCode.MERGE_UNFINISHED,
        path,
        f"{into} stopped after step {journal.step}; {who}. The base is at "
        f"{'the merged commit' if moved else 'its old commit'}",
        f"loopx goal merge {goal_id}  (finishes it)  or  loopx goal merge {goal_id} --abort  "
        "(undoes it)",
        goal_id,
    )
