"""Leases: which agent works on a goal now, fenced by a monotonic epoch."""

from __future__ import annotations

from typing import Literal

from loopx.model import Record, UtcDatetime


class Lease(Record):
    """``goals/<id>/lease.json``, created exclusively by the claiming agent.

    ``epoch`` is the goal's fencing counter at claim time; every later write
    of the turn checks it against ``goals/<id>/epoch`` and is refused
    (``lease_lost``) once a takeover raised the counter.
    """

    schema_version: Literal[1] = 1
    goal_id: str
    agent_id: str
    pid: int
    pid_started_at: float  # psutil create_time() of `pid`, to tell a reused pid apart
    hostname: str
    epoch: int
    turn_key: str | None = None
    acquired_at: UtcDatetime
    renewed_at: UtcDatetime
    expires_at: UtcDatetime
