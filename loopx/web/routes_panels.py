"""The routes of the dashboard's later panels: a goal's newest run log and the timeline.

Served under the same :class:`~loopx.web.app.Guard` (Host allow-list, token) as every
other data route; both reply JSON, which the page renders as text.
"""

from __future__ import annotations

from http import HTTPStatus

from starlette.requests import Request
from starlette.responses import Response

from loopx.model import utcnow
from loopx.status.sources import read_fleet
from loopx.web import dashboard, goaldetail, timeline
from loopx.web.replies import (
    dumps,
    error_reply,
    handled,
    json_reply,
    known_goal,
    no_such_goal,
    service_of,
)
from loopx.web.service import Snapshot


@handled
def api_latest_run(request: Request) -> Response:
    """``/api/goals/<id>/runs/latest``: the newest turn's markdown report (a failing goal's link)."""
    goal_id = known_goal(request)
    if goal_id is None:
        return no_such_goal(request)
    layout = service_of(request).layout
    seq = goaldetail.latest_run_seq(layout, goal_id)
    log_doc = goaldetail.run_log(layout, goal_id, seq) if seq is not None else None
    if log_doc is None:
        return error_reply(HTTPStatus.NOT_FOUND, f"goal {goal_id!r} has no run log yet")
    return json_reply(log_doc)


def _turn_reader(request: Request) -> timeline.TurnReader:
    reader: timeline.TurnReader | None = getattr(request.app.state, "turn_reader", None)
    if reader is None:
        reader = request.app.state.turn_reader = timeline.TurnReader(service_of(request).layout)
    return reader


@handled
def api_timeline(request: Request) -> Response:
    """``/api/timeline``: each agent's turns of the last hour (bounded; see loopx.web.timeline)."""
    service = service_of(request)
    now = utcnow()
    fleet, beats = read_fleet(service.layout)
    agents = dashboard.agent_rows(fleet, beats, now=now)
    running = ",".join(f"{a.agent_id}={a.turn_key}" for a in agents if a.alive and a.turn_key)

    def build(snap: Snapshot) -> bytes:
        start = now - timeline.WINDOW
        recent = timeline.recent_goals(snap.projection.goals, start)
        lines, truncated = _turn_reader(request).read(recent, start)
        doc = timeline.timeline(
            lines,
            agents,
            now=now,
            goals_read=min(len(recent), timeline.MAX_GOALS),
            truncated=truncated,
        )
        return dumps(doc)

    # One reply kept for 10 s and while the same turns run (a turn that starts or ends changes
    # its agent's heartbeat), so a busy fleet's refreshes do not rebuild it every second; kept in
    # its own slot, since a key per 10 s would fill an idle generation's reply cache.
    snap = service.snapshot()
    key = f"{int(now.timestamp()) // 10}:{running}"
    kept: tuple[str, bytes] | None = getattr(request.app.state, "timeline", None)
    if kept is not None and kept[0] == key:
        return Response(kept[1], media_type="application/json")
    body = build(snap)
    request.app.state.timeline = (key, body)
    return Response(body, media_type="application/json")
