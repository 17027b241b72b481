"""A sandboxed goal on a machine where bubblewrap cannot run: each of its turns would fail.

``sandbox_unavailable``: the goal says ``--sandbox bwrap`` but bwrap is not
installed or user namespaces are off (:func:`loopx.sandbox.unavailable`,
the check ``goal add`` makes). The goal's folder ``sandbox/`` (the host's
own home, written with the host's modes) is the host's, and the root walk
leaves it alone (:mod:`loopx.doctor.rootfiles`).
"""

from __future__ import annotations

from loopx.doctor.findings import Checker, FindingCode, Severity
from loopx.registry.goalrecords import Goal
from loopx.sandbox import unavailable


def check_sandbox(doc: Checker, goal: Goal) -> None:
    """A finding when the goal is sandboxed and this machine cannot run its sandbox."""
    if goal.sandbox is None:
        return
    refused = unavailable()
    if refused is None:
        return
    doc.add(
        Severity.ERROR,
        FindingCode.SANDBOX_UNAVAILABLE,
        doc.layout.goal_file(goal.id),
        f"the goal runs in a sandbox, but {refused.problem}: its turns cannot start",
        f"{refused.fix}  (or `loopx goal add {goal.id} --update --sandbox none`)",
        goal.id,
    )
