"""The demo host: ``python -m loopx.agents.demo [SWITCHES]``.

Real, deterministic work in the goal's workdir: each turn advances a counter
(``.loopx-demo/counter.json``) one step and reports ``progress``, then
``completed`` once the counter reaches ``--steps`` (3 by default). The counter
remembers the turn key that last advanced it, so running the same turn twice
(a host retry) does not advance it twice. Every run is appended to
``.loopx-demo/runs.log`` (``turn_key attempt pid``), which tests read to count
host runs.

Switches (argv, or extra words in ``$LOOPX_DEMO_ARGS``) make it misbehave on
purpose: fail, hang, ignore SIGTERM, burn CPU, fork workers, allocate memory,
print huge output, print invalid JSON, exit without a result, daemonise, leave a
``setsid`` grandchild behind. It is the host of the tests, the benchmarks and
the demo.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loopx import environ

STATE_DIR = ".loopx-demo"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m loopx.agents.demo", description=__doc__)
    p.add_argument("--steps", type=int, default=3, help="report completed at this count")
    p.add_argument("--fail", action="store_true", help="exit 3 without a result")
    p.add_argument("--hang", type=float, default=0.0, metavar="S", help="sleep S seconds first")
    p.add_argument("--ignore-term", action="store_true", help="ignore SIGTERM")
    p.add_argument("--burn", type=float, default=0.0, metavar="S", help="burn S CPU seconds")
    p.add_argument("--workers", type=int, default=0, metavar="N", help="fork N workers to --burn")
    p.add_argument("--alloc", type=int, default=0, metavar="MB", help="a child allocates MB")
    p.add_argument("--hold", type=float, default=0.5, metavar="S", help="how long --alloc holds")
    p.add_argument("--huge-output", type=int, default=0, metavar="BYTES", help="print BYTES")
    p.add_argument("--invalid-json", action="store_true", help="write a result that is not JSON")
    p.add_argument("--no-result", action="store_true", help="exit 0 without a result")
    p.add_argument("--stdout-result", action="store_true", help="print the result, no file")
    p.add_argument("--oversized", action="store_true", help="a summary over the size limit")
    p.add_argument("--kind", help="report this result kind instead of progress/completed")
    p.add_argument("--wait-seconds", type=float, default=None)
    p.add_argument("--question", default=None)
    p.add_argument(
        "--ask",
        metavar="QUESTION",
        help="ask a human QUESTION (needs_human) until a gate has an answer",
    )
    p.add_argument(
        "--daemon",
        type=float,
        default=0.0,
        metavar="S",
        help="daemonise a grandchild (fork, setsid, fork; no stdio; SIGTERM ignored) sleeping S",
    )
    p.add_argument(
        "--grandchild",
        type=float,
        default=0.0,
        metavar="S",
        help="leave a setsid'd grandchild ignoring SIGTERM that sleeps S seconds",
    )
    return p


def _burn(seconds: float) -> None:
    end = time.process_time() + seconds
    x = 0
    while time.process_time() < end:
        x += 1


def _fork_and(work: Callable[..., object], *args: object) -> int:
    pid = os.fork()
    if pid == 0:
        try:
            work(*args)
        finally:
            os._exit(0)
    return pid


def _alloc(mb: int, hold: float) -> None:
    block = bytearray(mb * 1024 * 1024)
    for i in range(0, len(block), 4096):  # touch every page so it is resident
        block[i] = 1
    time.sleep(hold)


def _grandchild(seconds: float) -> None:
    os.setsid()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    pid_file = Path(STATE_DIR) / "grandchild.pid"
    pid_file.write_text(f"{os.getpid()}\n")
    time.sleep(seconds)


def _daemon(seconds: float) -> None:
    """Fork, setsid, fork: a daemon with no stdio that ignores SIGTERM; its parent exits."""
    os.setsid()
    if os.fork() != 0:
        return  # the middle process exits at once (_fork_and's os._exit)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    (Path(STATE_DIR) / "daemon.pid").write_text(f"{os.getpid()}\n")
    time.sleep(seconds)


def _leave_behind(args: argparse.Namespace) -> None:
    """Start what ``--grandchild`` and ``--daemon`` ask to outlive this host."""
    if args.grandchild:
        _fork_and(_grandchild, args.grandchild)
    if args.daemon:
        os.waitpid(_fork_and(_daemon, args.daemon), 0)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)


def _advance(state_dir: Path, turn_key: str) -> int:
    """Advance the counter once per turn key; return the count."""
    path = state_dir / "counter.json"
    try:
        state = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        state = {"count": 0, "last_turn_key": None}
    if state.get("last_turn_key") != turn_key:
        state = {"count": int(state.get("count", 0)) + 1, "last_turn_key": turn_key}
        _write_atomic(path, json.dumps(state))
    return int(state["count"])


def _answer(envelope: dict[str, Any]) -> str | None:
    """The newest human answer among the envelope's gates, if any."""
    gates = envelope.get("state", {}).get("gates", [])
    answers = [g.get("answer") for g in gates if isinstance(g, dict) and g.get("answer")]
    return str(answers[-1]) if answers else None


def _result(args: argparse.Namespace, count: int, envelope: dict[str, Any]) -> dict[str, Any]:
    done = count >= args.steps
    kind = args.kind or ("completed" if done else "progress")
    answer = _answer(envelope)
    if args.ask and answer is None:
        kind = "needs_human"
    result: dict[str, Any] = {
        "schema_version": 1,
        "kind": kind,
        "summary": f"counter at {count} of {args.steps}",
        "next_action": None if done else "advance the counter",
        "evidence": [f"{STATE_DIR}/counter.json count={count}"],
        "state_patch": {
            "beliefs": [f"the counter is at {count}"],
            "todos": [
                {
                    "id": "count",
                    "text": f"count to {args.steps}",
                    "status": "done" if done else "open",
                }
            ],
        },
        "turn_key": envelope.get("turn_key"),
        "goal_id": envelope.get("goal_id"),
    }
    if args.wait_seconds is not None:
        result["wait_seconds"] = args.wait_seconds
    if kind == "needs_human":
        result["question"] = args.ask or args.question or "should the counter keep going?"
        result["summary"] = f"counter at {count} of {args.steps}; waiting for a human"
    elif args.ask:
        result["summary"] += f" (human said: {answer})"
    if args.oversized:
        result["summary"] = "x" * 10_000
    return result


def main(argv: list[str] | None = None) -> int:  # noqa: C901 - one flag, one misbehaviour, in order
    """Run one demo turn; returns the exit code."""
    words = list(sys.argv[1:] if argv is None else argv)
    words += shlex.split(os.environ.get(environ.DEMO_ARGS, ""))
    args = _parser().parse_args(words)
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raw = sys.stdin.read()
    envelope: dict[str, Any] = json.loads(raw) if raw.strip() else {}
    turn_key = os.environ.get(environ.TURN_KEY) or envelope.get("turn_key") or "no-turn"
    state_dir = Path(STATE_DIR)
    state_dir.mkdir(exist_ok=True)
    with (state_dir / "runs.log").open("a") as log:
        log.write(f"{turn_key} {envelope.get('attempt', 1)} {os.getpid()}\n")
        log.flush()
        os.fsync(log.fileno())
    _leave_behind(args)
    if args.hang:
        time.sleep(args.hang)
    children = [_fork_and(_burn, args.burn) for _ in range(args.workers)]
    if args.burn and not args.workers:
        _burn(args.burn)
    if args.alloc:
        children.append(_fork_and(_alloc, args.alloc, args.hold))
    for pid in children:
        os.waitpid(pid, 0)
    if args.huge_output:
        chunk = b"y" * 65536 + b"\n"
        left = args.huge_output
        while left > 0:
            sys.stdout.buffer.write(chunk[: min(left, len(chunk))])
            left -= len(chunk)
        sys.stdout.buffer.write(b"\n")
        sys.stdout.flush()
    if args.fail:
        sys.stderr.write("demo host: failing on purpose (--fail)\n")
        return 3
    count = _advance(state_dir, turn_key)
    if args.no_result:
        return 0
    text = "{not json" if args.invalid_json else json.dumps(_result(args, count, envelope))
    result_file = os.environ.get(environ.RESULT_FILE)
    if args.stdout_result or not result_file:
        sys.stdout.write(text + "\n")
    else:
        _write_atomic(Path(result_file), text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
