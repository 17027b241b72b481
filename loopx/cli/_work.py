"""`goal add --worktree ...` options, `loopx goal worktree` and `loopx goal merge`."""

from __future__ import annotations

import argparse

from loopx import exitcodes
from loopx.cli._common import Subparsers, add_command, print_json, root
from loopx.errors import UsageError
from loopx.worktree.mergejournal import MergeMode, MergeOutcome

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from loopx.worktree.mergejournal import MergeJournal
    from loopx.worktree.show import WorktreeView

# Outcomes after which the base is unchanged and a gate waits for a person.
_GATED = frozenset({MergeOutcome.CONFLICT, MergeOutcome.CHECK_FAILED, MergeOutcome.BASE_MOVED})


def add_worktree_options(add: argparse.ArgumentParser) -> None:
    """`goal add`'s worktree options."""
    add.add_argument(
        "--worktree",
        action="store_true",
        help="run the goal's turns in its own git worktree of --workdir (branch loopx/<id>), "
        "made on its first claim (docs/work.md)",
    )
    add.add_argument(
        "--base",
        metavar="BRANCH",
        help="with --worktree: the branch to start from and merge into "
        "(default: the one checked out in --workdir now)",
    )
    add.add_argument(
        "--worktree-include",
        action="append",
        default=[],
        metavar="PATTERN",
        help="with --worktree: copy untracked files matching this glob (relative to the "
        "repository, e.g. .env) into the worktree (repeatable)",
    )
    add.add_argument(
        "--worktree-dir",
        metavar="DIR",
        help="with --worktree: make the worktree in DIR/<id> (default: <root>/worktrees)",
    )
    add.add_argument(
        "--auto-merge",
        action="store_true",
        default=None,
        help="with --worktree: merge the goal's branch into its base once it is done "
        "(as `loopx goal merge` does)",
    )


def worktree_arguments(args: argparse.Namespace) -> dict[str, Any]:
    """The `goal add` keywords of the worktree options."""
    return {
        "worktree": args.worktree,
        "base": args.base,
        "worktree_include": args.worktree_include,
        "worktree_dir": args.worktree_dir,
        "auto_merge": args.auto_merge,
    }


def register_work(actions: Subparsers) -> None:
    """Add `goal worktree` and `goal merge`."""
    show = add_command(
        actions, "worktree", help="show a goal's git worktree (or remove it with --remove)"
    )
    show.add_argument("goal_id", metavar="ID")
    show.add_argument(
        "--remove",
        action="store_true",
        help="remove the worktree and its branch; refused while they hold uncommitted changes "
        "or commits the base lacks",
    )
    show.add_argument("--json", action="store_true")
    show.set_defaults(func=run_worktree)

    merge = add_command(
        actions,
        "merge",
        help="merge a done worktree goal's branch into its base, after its done-check passes "
        "on the merged tree",
    )
    merge.add_argument("goal_id", metavar="ID")
    merge.add_argument(
        "--mode",
        choices=[m.value for m in MergeMode],
        help="ff (fast-forward only), merge (a merge commit; the default) or squash",
    )
    merge.add_argument(
        "--abort",
        action="store_true",
        help="cancel the goal's merge in progress (one a kill interrupted): remove its scratch "
        "worktree and put a base it moved back; says what it undid",
    )
    merge.add_argument("--json", action="store_true")
    merge.set_defaults(func=run_merge)


def run_worktree(args: argparse.Namespace) -> int:
    """Show or remove a goal's worktree."""
    view = root(args).goals.worktree(args.goal_id, remove=args.remove)
    if args.json:
        print_json(view)
    elif view.removed:
        print(f"removed worktree {view.path} and branch {view.branch} of goal {view.goal_id}")
    else:
        print(_describe(view))
    return exitcodes.OK


def _describe(view: WorktreeView) -> str:
    if view.phase is None:
        return f"goal {view.goal_id}: worktree {view.path} (branch {view.branch}) not made yet"
    state = "dirty: " + ", ".join(view.changes[:10]) if view.dirty else "clean"
    there = "" if view.exists else "  MISSING"
    return (
        f"goal {view.goal_id}: {view.path}{there}\n"
        f"  branch {view.branch}: {view.ahead} ahead, {view.behind} behind {view.base}; {state}"
    )


def run_merge(args: argparse.Namespace) -> int:
    """Merge a goal's branch into its base (or cancel the merge in progress: --abort)."""
    goals = root(args).goals
    if args.abort:
        if args.mode is not None:
            raise UsageError(
                "--abort takes no --mode", hint=f"loopx goal merge {args.goal_id} --abort"
            )
        journal = goals.abort_merge(args.goal_id)
    else:
        journal = goals.merge(args.goal_id, mode=args.mode)
    if args.json:
        print_json(journal)
    else:
        print(_merge_line(journal))
    return exitcodes.NEEDS_HUMAN if journal.outcome in _GATED else exitcodes.OK


def _merge_line(journal: MergeJournal) -> str:
    into, base = f"{journal.branch} into {journal.base}", journal.base
    gate = f"; gate {journal.gate_id} is open on goal {journal.goal_id}"
    lines = {
        MergeOutcome.MERGED: f"merged {into} ({journal.mode}): {base} is at {journal.merged_commit}",
        MergeOutcome.UP_TO_DATE: f"{base} already holds every commit of {journal.branch}; "
        "nothing moved",
        MergeOutcome.ALREADY_MERGED: f"already merged: {base} already has every change of "
        f"{journal.branch}; nothing moved, the goal stays done",
        MergeOutcome.ABORTED: f"aborted the merge of {into}: {'; '.join(journal.undone)}; "
        f"{base} is at {journal.base_old}",
        MergeOutcome.CONFLICT: f"merge of {into} conflicts in {', '.join(journal.conflicts[:10])}; "
        f"{base} unchanged{gate}",
        MergeOutcome.CHECK_FAILED: f"the done-check failed on the merged tree; {base} "
        f"unchanged{gate}",
    }
    return lines.get(journal.outcome, f"{base} moved while merging; unchanged by this merge{gate}")
