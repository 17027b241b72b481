"""``loopx doctor``: check a whole runtime root and say exactly what to repair.

Read-only: it never creates, locks, moves or rewrites anything (a lease with a
dead holder is reported, not cleared), so it is safe next to a running
supervisor. Every finding is typed: a severity, a code, the path, what is
wrong and the exact command or action that repairs it. ``error`` means damage
or an unsafe root, ``warning`` something a human (or ``loopx recover``) must
deal with, ``info`` a fact that needs nothing. A root is healthy when it has
neither errors nor warnings.

The checks live one module per layer: ``files`` (permissions, owners,
symlinks, temp files), ``registry``, ``goals`` (state, history, ledger, run
logs), ``journals`` (lease, epoch, turn journals), ``fleet`` (supervisor and
heartbeats), ``projections`` (status cache, probes, quarantine), ``worktrees``
(each worktree goal's worktree as git sees it; ``--repair`` removes its dead
locks); ``diagnose`` runs them in order and ``findings`` holds what they report.
"""

from __future__ import annotations

from loopx.doctor.diagnose import diagnose
from loopx.doctor.findings import DoctorReport, Finding, FindingCode, Severity

__all__ = ["DoctorReport", "Finding", "FindingCode", "Severity", "diagnose"]
