"""The host kind step: a goal whose host kind the canary quarantined waits, and says why.

The canary (:mod:`loopx.hostcanary`) quarantines a host kind whose CLI drifted
from what its adapter expects. Its goals then wait here, before a journal is
planned, with the quarantine's reason as the refusal's message; they run again
once a probe passes or a person accepts the version. A quarantine never fails
a goal.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Final

from loopx.errors import CorruptFileError
from loopx.hostcanary import quarantine_reason, read_hosts
from loopx.log import get_logger
from loopx.model import utcnow
from loopx.quota.decision import QuotaReason
from loopx.turn.steps.context import Stop, StopKind, TurnContext

log = get_logger(__name__)

# A quarantined kind's goals look again this often (the agents' index also wakes them as soon
# as hosts.json changes).
QUARANTINE_RECHECK: Final = timedelta(seconds=60)


def admit_host_kind(ctx: TurnContext) -> TurnContext | Stop:
    """The context as it is, or a wait while the goal's host kind is quarantined."""
    try:
        reason = quarantine_reason(read_hosts(ctx.layout), ctx.goal.host.kind)
    except CorruptFileError as e:
        # The canary's own file must not stop the fleet: trusted until it is repaired.
        log.warning("hosts_file_damaged", error=e.message)
        return ctx
    if reason is None:
        return ctx
    log.info("turn_refused", reason=QuotaReason.HOST_QUARANTINED.value, message=reason)
    decision = ctx.journal.plan.quota if ctx.journal is not None else ctx.decision
    if decision is None:
        return Stop(StopKind.WAIT, "host_quarantined")
    refusal = decision.model_copy(
        update={
            "allowed": False,
            "reason": QuotaReason.HOST_QUARANTINED,
            "message": reason,
            "next_eligible_at": utcnow() + QUARANTINE_RECHECK,
        }
    )
    return Stop(StopKind.WAIT, "host_quarantined", quota=refusal)
