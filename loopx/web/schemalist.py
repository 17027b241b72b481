"""The documents the web front end writes or replies, by the name `loopx schema NAME` knows.

The kernel's list (:mod:`loopx.schemas`) cannot name them, since the kernel
never imports the web; the API, the composition root, joins both lists
(``loopx.api._schemas``). Same two kinds as the kernel's: a file under the
root (``FILES``) and a reply of `loopx serve` (``OUTPUTS``).
"""

from __future__ import annotations

from pydantic import BaseModel

from loopx.web import dashboard, goaldetail
from loopx.web.actions import ActionResult, AuditPage, AuditRecord, GateConflict
from loopx.web.bulkactions import BulkActionResult, BulkAnswerResult
from loopx.web.changefeed import ChangeEvent
from loopx.web.timeline import Timeline
from loopx.web.worktrees import WorktreeState

# Files under a runtime root.
FILES: dict[str, type[BaseModel]] = {
    "audit": AuditRecord,  # logs/audit.jsonl: each action tried from the dashboard
}

# What the dashboard's routes on `loopx serve` reply (docs/cli.md "loopx serve").
OUTPUTS: dict[str, type[BaseModel]] = {
    "change-event": ChangeEvent,
    "dashboard-overview": dashboard.Overview,
    "dashboard-goals": dashboard.GoalsPage,
    "dashboard-goal": goaldetail.GoalDetail,
    "dashboard-run-log": goaldetail.RunLog,
    "dashboard-action": ActionResult,
    "dashboard-gate-conflict": GateConflict,
    "dashboard-audit": AuditPage,
    "dashboard-bulk-answer": BulkAnswerResult,  # POST /api/answers
    "dashboard-bulk-action": BulkActionResult,  # POST /api/bulk/<pause|resume>
    "dashboard-timeline": Timeline,  # GET /api/timeline
    "dashboard-worktree": WorktreeState,  # GET /api/goals/<id>/worktree
}
