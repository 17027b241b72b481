"""`loopx retention set|show` and `loopx gc [--dry-run] [--json]`."""

from __future__ import annotations

import argparse

from loopx import exitcodes
from loopx.cli._common import Subparsers, add_command, print_json, root
from loopx.retention.gc import GcReport
from loopx.retention.policy import RetentionSettings


def register(sub: Subparsers) -> None:
    """Add `retention set`, `retention show` and `gc`."""
    retention = add_command(
        sub, "retention", help="what the root keeps of its goals' past, and disk limits"
    )
    actions = retention.add_subparsers(dest="action", metavar="ACTION", required=True)
    setter = add_command(actions, "set", help="change the root's retention policy or a goal's")
    setter.add_argument("--goal", metavar="ID", help="change this goal's keep fields only")
    setter.add_argument("--keep-turns", type=int, metavar="N", help="keep each goal's last N turns")
    setter.add_argument(
        "--keep-days", type=float, metavar="D", help="and its turns of the last D days"
    )
    setter.add_argument(
        "--keep-failed-days",
        type=float,
        metavar="D",
        help="keep turns that failed or opened a gate D days",
    )
    setter.add_argument(
        "--max-root-mb",
        type=int,
        metavar="N",
        help="no new turn while the root holds more (0: none)",
    )
    setter.add_argument(
        "--min-free-disk-mb", type=int, metavar="N", help="no new turn below this much free space"
    )
    setter.add_argument("--json", action="store_true")
    setter.set_defaults(func=run_set)
    shower = add_command(actions, "show", help="the retention policy, limits and overrides")
    shower.add_argument("--json", action="store_true")
    shower.set_defaults(func=run_show)

    gc = add_command(sub, "gc", help="fold old turns into checkpoints and remove what they replace")
    gc.add_argument("--dry-run", action="store_true", help="show what would go; change nothing")
    gc.add_argument("--goal", action="append", metavar="ID", help="only this goal (repeatable)")
    gc.add_argument("--json", action="store_true")
    gc.set_defaults(func=run_gc)


def _print_settings(settings: RetentionSettings) -> None:
    keep = settings.keep
    print(
        f"keep: the last {keep.keep_turns} turns and {keep.keep_days:g} days of each goal; "
        f"failed or gated turns {keep.keep_failed_days:g} days"
    )
    quota = f"{settings.max_root_mb} MB" if settings.max_root_mb is not None else "none"
    floor = settings.min_free_disk_mb
    floor_text = f"{floor} MB" if floor is not None else "64 MB, or a tenth of the disk if less"
    print(f"root size quota: {quota}; free-space floor: {floor_text}")
    for goal_id, override in sorted(settings.goals.items()):
        fields = ", ".join(f"{k}={v:g}" for k, v in override.model_dump(exclude_none=True).items())
        print(f"goal {goal_id}: {fields or 'the root policy'}")


def run_set(args: argparse.Namespace) -> int:
    """Change the policy; print the new settings."""
    settings = root(args).retention.set(
        goal_id=args.goal,
        keep_turns=args.keep_turns,
        keep_days=args.keep_days,
        keep_failed_days=args.keep_failed_days,
        max_root_mb=args.max_root_mb,
        min_free_disk_mb=args.min_free_disk_mb,
    )
    if args.json:
        print_json(settings)
    else:
        _print_settings(settings)
    return exitcodes.OK


def run_show(args: argparse.Namespace) -> int:
    """Print the settings."""
    settings = root(args).retention.show()
    if args.json:
        print_json(settings)
    else:
        _print_settings(settings)
    return exitcodes.OK


def _print_gc(report: GcReport) -> None:
    verb = "would fold" if report.dry_run else "folded"
    for goal in report.goals:
        if goal.skipped:
            print(f"{goal.goal_id}: skipped: {goal.skipped}")
        elif goal.folded or goal.files or goal.expired:
            print(
                f"{goal.goal_id}: {verb} {goal.folded} turn(s) (checkpoint at turn "
                f"{goal.through_seq}), {goal.kept} kept longer, {goal.expired} expired, "
                f"{goal.files} file(s), {goal.bytes / 1024:.0f} KiB"
            )
    what = "would remove" if report.dry_run else "removed"
    print(
        f"{verb} {report.folded} turn(s) of {len(report.goals)} goal(s); {what} "
        f"{report.files} file(s), {report.bytes / 1024:.0f} KiB"
    )


def run_gc(args: argparse.Namespace) -> int:
    """One gc pass; exit 0 (a skipped goal is not an error: it is tried again next time)."""
    report = root(args).retention.gc(dry_run=args.dry_run, goals=args.goal)
    if args.json:
        print_json(report)
    else:
        _print_gc(report)
    return exitcodes.OK
