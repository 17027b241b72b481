"""``loopx doctor``'s orchestrator: run every layer's check over the root, worst findings first."""

from __future__ import annotations

import os
from datetime import datetime

from loopx.doctor.accounts import check_accounts
from loopx.doctor.findings import Checker, DoctorReport, FindingCode, Severity, q
from loopx.doctor.fleethealth import check_fleet
from loopx.doctor.goalfiles import check_goal
from loopx.doctor.linkcheck import check_links
from loopx.doctor.projections import check_projections, check_quarantine
from loopx.doctor.registry import check_registry, goal_names
from loopx.doctor.reliability import (
    check_clock_behind,
    check_free_inodes,
    check_leftover_processes,
)
from loopx.doctor.rootfiles import walk_root
from loopx.errors import LoopxError
from loopx.model import utcnow
from loopx.root import Layout


def diagnose(layout: Layout, *, now: datetime | None = None) -> DoctorReport:
    """Check the whole root (read-only) and return every finding, worst first."""
    doctor = Checker(layout, now or utcnow())
    root = layout.root
    if not root.exists() and not root.is_symlink():
        doctor.add(
            Severity.ERROR,
            FindingCode.ROOT_MISSING,
            root,
            "the runtime root does not exist",
            f"loopx init --root {q(root)}",
        )
    elif root.is_symlink():
        doctor.add(
            Severity.ERROR,
            FindingCode.SYMLINK,
            root,
            f"the runtime root is a symlink (to {os.readlink(root)!r}); LoopX refuses it",
            "point --root at the real directory",
        )
    elif not root.is_dir():
        doctor.add(
            Severity.ERROR,
            FindingCode.NOT_A_DIRECTORY,
            root,
            "the runtime root is a file, not a directory; LoopX refuses it",
            "point --root at a directory (or move the file away and `loopx init` there)",
        )
    elif not layout.registry.exists():
        doctor.add(
            Severity.ERROR,
            FindingCode.NOT_INITIALISED,
            layout.registry,
            "the runtime root has no registry, so every command but `init` refuses it",
            f"loopx init --root {q(root)}",
        )
    else:
        if not os.access(root, os.W_OK | os.X_OK):
            doctor.add(
                Severity.ERROR,
                FindingCode.PERMISSIONS,
                root,
                "the runtime root is not writable by you, so every command refuses it",
                f"chmod 700 {q(root)}",
            )
        walk_root(doctor)
        old_layout = check_registry(doctor)
        for goal_id in goal_names(doctor):
            try:
                # An old single-file registry holds the policies; its goals have no goal.json yet.
                check_goal(doctor, goal_id, registered=old_layout)
            except (LoopxError, OSError) as e:
                doctor.add(
                    Severity.ERROR,
                    FindingCode.SCHEMA,
                    layout.goals_dir / goal_id,
                    f"could not be checked: {e}",
                    "",
                    goal_id,
                )
        check_accounts(doctor)
        check_fleet(doctor)
        check_leftover_processes(doctor)
        check_clock_behind(doctor)
        check_free_inodes(doctor)
        check_projections(doctor)
        check_quarantine(doctor)
        check_links(doctor)
    order = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}
    findings = sorted(doctor.findings, key=lambda f: (order[f.severity], f.path, f.code))
    counts = {s: sum(1 for f in findings if f.severity is s) for s in Severity}
    return DoctorReport(
        root=str(root),
        healthy=counts[Severity.ERROR] == 0 and counts[Severity.WARNING] == 0,
        counts=counts,
        files_checked=doctor.files,
        goals_checked=doctor.goals,
        journals_checked=doctor.journals,
        findings=findings,
    )
