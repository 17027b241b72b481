"""How long the codex/claude adapters take to read a turn's output, at the capture limit.

Cases: a 1 MiB codex event stream (command items with output, then the final
message), a claude result object with a 200 KB final text, and the result
extractor on 1 MiB of prose full of `{` that are not JSON (its worst case).
Each case is the median of repeated calls.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from datetime import UTC, datetime, timedelta

from loopx.agents.hosts.base import HostOutput
from loopx.agents.hosts.claude import ClaudeHost
from loopx.agents.hosts.codex import CodexHost
from loopx.agents.hosts.extract import find_json_object
from loopx.agents.hosts.prompt import build_prompt
from loopx.state import GoalState
from loopx.turn.protocol import Envelope

MIB = 1024 * 1024
RESULT = json.dumps({"kind": "progress", "summary": "done", "next_action": "next"})


def envelope() -> Envelope:
    now = datetime.now(UTC)
    state = GoalState(goal_id="g", beliefs=[f"belief {i}" * 20 for i in range(100)])
    return Envelope(
        goal_id="g", turn_key="g-1-1", seq=1, epoch=1, objective="x" * 2000, workdir="/w",
        root="/r", result_file="/r/res.json", turn_timeout_s=600,
        deadline_at=now + timedelta(seconds=600), state=state,
    )  # fmt: skip


def codex_stream() -> str:
    lines = [json.dumps({"type": "thread.started", "thread_id": "t"}), '{"type":"turn.started"}']
    item = {"type": "command_execution", "command": "pytest", "exit_code": 0, "status": "completed"}
    n = 0
    while sum(len(line) + 1 for line in lines) < MIB - 4096:
        output = f"test_{n} PASSED\n" * 40
        lines.append(
            json.dumps(
                {
                    "type": "item.completed",
                    "item": {"id": f"i{n}", **item, "aggregated_output": output},
                }
            )
        )
        n += 1
    lines.append(
        json.dumps(
            {"type": "item.completed", "item": {"id": "m", "type": "agent_message", "text": RESULT}}
        )
    )
    lines.append(
        json.dumps(
            {
                "type": "turn.completed",
                "usage": {"input_tokens": 9, "cached_input_tokens": 0, "output_tokens": 1},
            }
        )
    )
    return "\n".join(lines) + "\n"


def median_ms(fn: object, seconds: float) -> float:
    samples = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(samples) < 5:
        t = time.perf_counter()
        fn()  # type: ignore[operator]
        samples.append((time.perf_counter() - t) * 1000)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=2.0, help="per case")
    args = parser.parse_args()
    env = envelope()
    codex_out = HostOutput(exit_code=0, stdout=codex_stream())
    text = "prose " * 33_000 + "\n```json\n" + RESULT + "\n```"
    claude_payload = {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "result": text,
        "session_id": "s",
        "total_cost_usd": 0.1,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }
    claude_out = HostOutput(exit_code=0, stdout=json.dumps(claude_payload))
    junk = ("if (x) { y } else { z } " * 45_000)[:MIB]
    worst = ('{"a": x} ' * 120_000)[:MIB]
    cases = {
        f"codex interpret, {len(codex_out.stdout) / MIB:.2f} MiB events": lambda: (
            CodexHost().interpret(env, codex_out)
        ),
        f"claude interpret, {len(text) // 1000} KB result text": lambda: ClaudeHost().interpret(
            env, claude_out
        ),
        "find_json_object, 1 MiB of non-JSON braces": lambda: find_json_object(junk),
        'find_json_object, 1 MiB of `{"a": x}` (worst case)': lambda: find_json_object(worst),
        f"build_prompt ({len(build_prompt(env)) // 1000} KB prompt)": lambda: build_prompt(env),
    }
    print("| case | median ms |\n| --- | ---: |")
    for name, fn in cases.items():
        print(f"| {name} | {median_ms(fn, args.seconds):.2f} |")


if __name__ == "__main__":
    main()
