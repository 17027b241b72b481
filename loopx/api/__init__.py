"""The public Python API: everything the CLI does, from Python, with typed results.

``Root.open()`` resolves the runtime root exactly as the CLI does; its groups
(``root.goals``, ``root.gates``, ``root.status``, ``root.quota``,
``root.turns``, ``root.fleet``) return the same models the matching
``--json`` output prints and raise the same :class:`loopx.errors.LoopxError`
subclasses. ``loopx/cli/`` is one client of it. See docs/api.md.

Like the CLI this is a composition root: it may import the agents and the
supervisor (lazily, so ``import loopx.api`` stays cheap); the kernel never
imports it.
"""

from __future__ import annotations

from loopx.api._fleet import Fleet
from loopx.api._gates import Gates
from loopx.api._goals import Goals
from loopx.api._quota import Quota
from loopx.api._root import Root
from loopx.api._status import Status
from loopx.api._turns import Turns

__all__ = ["Fleet", "Gates", "Goals", "Quota", "Root", "Status", "Turns"]
