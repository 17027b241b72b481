"""The prompt a coding-agent CLI (codex, claude, gemini) gets for one turn, and its result schema.

The prompt is a pure function of the envelope, so a turn's prompt can be
rebuilt from its journal. It carries what the goal state knows (objective,
next action, beliefs, priorities, non-goals, open todos, answered gates) and
ends with the exact JSON the agent must answer with: a ``HostResult``
(``docs/host-protocol.md``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Final

from loopx.state import TodoStatus
from loopx.turn.outcome import ResultKind
from loopx.turn.protocol import Envelope, HostResult

# Bounds keep a long-lived goal's prompt small; the state file holds everything.
MAX_BELIEFS: Final = 30
MAX_TODOS: Final = 50
MAX_GATES: Final = 10

KIND_MEANINGS: Final = (
    ("progress", "you advanced the work and more turns are needed"),
    ("completed", "the objective is fully achieved; no more turns"),
    ("wait", "nothing useful to do now; set wait_seconds"),
    ("needs_human", "only a person can unblock you; set question (a gate opens)"),
    ("failed", "you could not make progress; say why in summary"),
)

# Keywords OpenAI strict structured outputs may reject; pydantic still
# validates them when the answer is parsed.
_STRICT_DROP: Final = frozenset({"default", "maxLength", "minLength", "title"})


def result_schema() -> dict[str, Any]:
    """The JSON Schema of :class:`HostResult`, as pydantic states it."""
    return HostResult.model_json_schema()


def strict_result_schema() -> dict[str, Any]:
    """The result schema in the form ``codex exec --output-schema`` needs.

    OpenAI strict structured outputs require every object to list all its
    properties in ``required`` and to set ``additionalProperties: false``; an
    optional field is expressed as nullable instead. ``const`` becomes a
    one-value ``enum``.
    """
    strict: dict[str, Any] = _strict(result_schema())
    return strict


def _strict(node: Any) -> Any:  # noqa: ANN401 - walks arbitrary JSON
    if isinstance(node, list):
        return [_strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _STRICT_DROP and not isinstance(value, dict):
            continue
        if key == "const":
            out["enum"] = [value]
        elif key in {"properties", "$defs"}:
            out[key] = {name: _strict(sub) for name, sub in value.items()}
        else:
            out[key] = _strict(value)
    if "properties" in out:
        out["required"] = list(out["properties"])
        out["additionalProperties"] = False
    return out


def _bullets(lines: Iterable[str], empty: str) -> str:
    items = [f"- {line}" for line in lines]
    return "\n".join(items) if items else empty


def _check_section(envelope: Envelope) -> list[str]:
    """The goal's last done-check, when it failed: the agent must make it pass."""
    check = envelope.state.last_check
    if check is None or check.passed:
        return []
    output = check.output_tail.strip() or "(it printed nothing)"
    return [
        "## Done-check failed\n"
        f"LoopX ran the goal's done-check after turn {check.turn_key}: it {check.summary}. "
        'The goal is not done until it passes; do not answer "completed" before it does. '
        "The end of its output:\n```\n" + output + "\n```"
    ]


def _interrupted(envelope: Envelope) -> list[str]:
    """The section saying the previous attempt of this turn was interrupted, if it was."""
    if not envelope.interrupted:
        return []
    title = f"## Attempt {envelope.attempt}: the previous attempt was interrupted"
    return [f"{title}\n{envelope.interrupted}"]


def _continue_prompt(envelope: Envelope) -> str:
    """The short prompt of the stall ladder's resume: the session already holds the rest."""
    return (
        f"{envelope.stalled}\n\nWhen this turn's work is done, end with the result JSON "
        f"for turn key {envelope.turn_key}, as asked at the start of this session."
    )


def _handoff(envelope: Envelope) -> list[str]:
    """The section saying this turn runs in a fresh session on another account, if it does."""
    if not envelope.handoff:
        return []
    return [f"## Hand-off: a fresh session continues this goal\n{envelope.handoff}"]


def _last_check(envelope: Envelope) -> list[str]:
    """A hand-off's fresh session is shown the last done-check even when it passed."""
    check = envelope.state.last_check
    if not envelope.handoff or check is None or not check.passed:
        return []
    output = check.output_tail.strip() or "(it printed nothing)"
    return [
        f"## Last done-check\nAfter turn {check.turn_key} it {check.summary}. The end of its "
        "output:\n```\n" + output + "\n```"
    ]


def build_prompt(envelope: Envelope, *, resumed: bool = False) -> str:
    """The whole prompt of one turn. Pure.

    Args:
        envelope: the turn's envelope.
        resumed: the CLI continues an earlier session of this goal, so the
            agent already read the instructions once; they are repeated
            anyway because the state may have changed since.

    """
    if resumed and envelope.stalled:
        return _continue_prompt(envelope)
    minutes = max(1, int(envelope.turn_timeout_s // 60))
    intro = (
        "This continues the same goal as before; the state below is current."
        if resumed
        else "You are an autonomous coding agent driven by LoopX, a supervisor of long-lived goals."
    )
    sections = [
        intro,
        (
            f"Goal {envelope.goal_id}, turn {envelope.seq} (turn key {envelope.turn_key}). "
            f"Working directory: {envelope.workdir}. You have about {minutes} minutes; "
            "do one bounded, useful chunk of work, then stop and report."
        ),
        *_interrupted(envelope),
        *([f"## The previous session stalled\n{envelope.stalled}"] if envelope.stalled else []),
        *_handoff(envelope),
        *_state_sections(envelope),
        *_check_section(envelope),
        *_last_check(envelope),
        *_answer_sections(envelope),
    ]
    return "\n\n".join(sections) + "\n"


def _state_sections(envelope: Envelope) -> list[str]:
    """The objective and the goal's state: next action, beliefs, lists, todos, answers. Pure."""
    state = envelope.state
    beliefs = state.beliefs[-MAX_BELIEFS:]
    todos = [t for t in state.todos if t.status is TodoStatus.OPEN][:MAX_TODOS]
    answered = [g for g in state.gates if g.answer is not None][-MAX_GATES:]
    return [
        f"## Objective\n{envelope.objective}",
        f"## Next action\n{state.next_action or '(none recorded: choose the most useful step)'}",
        "## Beliefs (oldest first)\n" + _bullets(beliefs, "(none yet)"),
        "## Priorities\n" + _bullets(state.priorities, "(none)"),
        "## Non-goals (do not work on these)\n" + _bullets(state.non_goals, "(none)"),
        "## Open todos\n" + _bullets((f"[{t.id}] {t.text}" for t in todos), "(none)"),
        "## Answers from a human\n"
        + _bullets((f"Q: {g.question}\n  A: {g.answer}" for g in answered), "(none)"),
    ]


def _answer_sections(envelope: Envelope) -> list[str]:
    """How to answer: the result's kinds and fields, an example, the JSON Schema. Pure."""
    example = HostResult(
        kind=ResultKind.PROGRESS,
        summary="what you did this turn, in one or two sentences",
        next_action="the single most useful next step",
        evidence=["tests/test_x.py passes", "commit abc123"],
    ).model_dump(mode="json", exclude={"turn_key", "goal_id"})
    kinds = "\n".join(f'- "{kind}": {meaning}' for kind, meaning in KIND_MEANINGS)
    return [
        (
            "## How to answer\n"
            "When you stop, your final message must be exactly one JSON object (no prose "
            "around it) matching the JSON Schema below. `kind` is one of:\n"
            f"{kinds}\n"
            "`state_patch` updates the goal state: `beliefs` are appended, `priorities` and "
            "`non_goals` replace the lists when not null, `todos` are upserted by id "
            '(status "open", "done" or "dropped"). Leave `turn_key` and `goal_id` null or set them '
            f'to "{envelope.turn_key}" and "{envelope.goal_id}".'
        ),
        "Example:\n```json\n" + json.dumps(example, indent=2) + "\n```",
        "JSON Schema:\n```json\n" + json.dumps(result_schema(), separators=(",", ":")) + "\n```",
    ]
