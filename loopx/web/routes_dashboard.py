"""The dashboard's own API: overview, goals, a goal's detail, live output, run logs, audit.

Served under the same :class:`~loopx.web.app.Guard` (Host allow-list, token) as every
route; the page's actions are :mod:`loopx.web.routes_actions`.
"""

from __future__ import annotations

from http import HTTPStatus

from starlette.requests import Request
from starlette.responses import Response

from loopx.model import utcnow
from loopx.registry.goalrecords import Goal
from loopx.status.sources import read_fleet
from loopx.status.view import GoalStatusView
from loopx.turn.livetail import read_live
from loopx.web import dashboard, goaldetail
from loopx.web.actions import read_audit
from loopx.web.replies import (
    dumps,
    error_reply,
    handled,
    json_reply,
    known_goal,
    no_such_goal,
    query_number,
    query_params,
    service_of,
    worktree_states,
)
from loopx.web.service import Snapshot, StatusService
from loopx.web.worktrees import done_worktree_goals


@handled
def overview(request: Request) -> Response:
    """``/api/overview``."""
    service = service_of(request)
    snap = service.snapshot()
    fleet, beats = read_fleet(service.layout)
    head = [g.goal_id for g in dashboard.attention_head(snap.projection) if g.open_gates]
    doc = dashboard.overview(
        snap.projection,
        snap.by_id,
        agents=dashboard.agent_rows(fleet, beats, now=utcnow()),
        seq=service.feed.seq,
        actions=service.actions,
        gates=dashboard.oldest_open_gates(service.layout, head),
    )
    waiting, total = worktree_states(request).merge_waiting(_done_worktree_goals(request, snap))
    return json_reply(
        doc.model_copy(update={"merge_waiting": waiting, "merge_waiting_total": total})
    )


def _done_worktree_goals(
    request: Request, snap: Snapshot
) -> list[tuple[Goal, GoalStatusView | None]]:
    """The done worktree goals of ``snap``: one pass over the goals per snapshot generation."""
    kept = getattr(request.app.state, "done_worktree_goals", None)
    if kept is not None and kept[0] == snap.generation:
        found: list[tuple[Goal, GoalStatusView | None]] = kept[1]
        return found
    found = done_worktree_goals(snap.projection.goals, service_of(request).goal_policy)
    request.app.state.done_worktree_goals = (snap.generation, found)
    return found


@handled
def api_goals(request: Request) -> Response:
    """``/api/goals``: a filtered page of the queue."""
    f = dashboard.parse_filter(query_params(request))
    offset = query_number(request, "offset", 0, 10**9)
    limit = query_number(request, "limit", dashboard.DEFAULT_ROWS, dashboard.MAX_ROWS)
    service = service_of(request)
    running = _running(service)
    now_running = ",".join(f"{g}={a.turn_key}" for g, a in sorted(running.items()))

    def build(snap: Snapshot) -> bytes:
        goals = dashboard.filtered(snap.projection.goals, f)
        gated = [g.goal_id for g in goals[offset : offset + limit] if g.open_gates]
        gates = dashboard.oldest_open_gates(service.layout, gated)  # a page's states at most
        return dumps(
            dashboard.goals_page(goals, f, offset=offset, limit=limit, running=running, gates=gates)
        )

    body = service.cached(f"api-goals:{offset}:{limit}:{f.model_dump_json()}:{now_running}", build)
    return Response(body, media_type="application/json")


@handled
def api_goal(request: Request) -> Response:
    """``/api/goals/<id>``: policy, state, view and recent turns."""
    goal_id = known_goal(request)
    if goal_id is None:
        return no_such_goal(request)
    service = service_of(request)
    snap = service.snapshot()
    view = snap.projection.goals[snap.by_id[goal_id]]
    policy = service.goal_policy(goal_id)
    tree = None
    if policy is not None and policy.worktree is not None:
        tree = worktree_states(request).state(policy, view).panel
    doc = goaldetail.goal_detail(
        service.layout, view, policy, actions=service.actions, worktree=tree
    )
    return json_reply(doc.model_copy(update={"running": _running(service).get(goal_id)}))


def _running(service: StatusService) -> dict[str, dashboard.AgentRow]:
    fleet, beats = read_fleet(service.layout)
    return dashboard.running_turns(dashboard.agent_rows(fleet, beats, now=utcnow()))


@handled
def api_live(request: Request) -> Response:
    """``/api/goals/<id>/live``: the running host's output; 204 when none runs."""
    goal_id = known_goal(request)
    if goal_id is None:
        return no_such_goal(request)
    live = read_live(service_of(request).layout, goal_id)
    return Response(status_code=HTTPStatus.NO_CONTENT) if live is None else json_reply(live)


@handled
def api_run(request: Request) -> Response:
    """``/api/goals/<id>/runs/<seq>``: a turn's markdown report."""
    goal_id = known_goal(request)
    if goal_id is None:
        return no_such_goal(request)
    log_doc = goaldetail.run_log(service_of(request).layout, goal_id, request.path_params["seq"])
    if log_doc is None:
        return error_reply(
            HTTPStatus.NOT_FOUND, f"goal {goal_id!r} has no run log {request.path_params['seq']}"
        )
    return json_reply(log_doc)


@handled
def audit(request: Request) -> Response:
    """``/api/audit?limit=100``: who did what, when, applied or refused; newest first."""
    limit = query_number(request, "limit", 100, 1000)
    return json_reply(read_audit(service_of(request).layout, limit))
