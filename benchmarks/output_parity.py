"""Output parity: a root built by 811387a's own CLI, read by 811387a and by this tree.

The status cache and memo were to change no output: on a 40-goal root with every kind of
goal, the status document and every ``--json`` output are byte-identical to 811387a's. This script:

1. makes a detached git worktree of the reference (``--base-rev``, 811387a) in a temporary
   folder with its own venv (``pip install -e``) and removes both at the end; or reuses one
   given with ``--base-tree PATH --base-venv PATH``;
2. builds a 40-goal root **with the reference's own CLI** (``init``, ``batch run``, ``goal add``,
   ``turn run-once``, ``gate``, ``goal pause``/``done``, ``archive``, ``probe``, ``recover``), so
   every file is one the reference wrote: goals that never ran, ran, finished (by a turn, by
   hand, by a batch fleet), failed (demo ``--fail``, invalid JSON, a shell host, a codex-kind
   host), asked a human (``gate open`` and the demo's ``--ask``), answered gates, waits, quota
   spent (CPU cap and wall share), paused, archived, probed (passing and failing probes), a
   quarantined journal, a damaged ``state.json``, a custom resource, priorities, one turn still
   running (a live ``turn run-once`` whose host sleeps, stopped at the end) and held by an agent
   that another host's supervisor reports in a crash loop (``supervisor.json`` written with the
   reference's own models: no CLI makes one);
3. copies that root (``cp -a``) to one path and, for each side in turn, restores it there and
   runs the same read-only commands (``COMMANDS`` and ``PER_GOAL``: every ``--json`` output the
   reference has that reads a root) with the clock frozen one instant after the build
   (Debian's ``faketime``), ``TZ=UTC``, a fresh ``XDG_CACHE_HOME`` at one path, from a neutral
   folder with ``python -P``;
4. compares each output with ``cmp``. For each that differs it prints the JSON difference,
   classifies every difference as a field a later change added (``LATER``: the field, the feature
   and the commit that added it, found with ``git log -S``) or as unexplained, strips exactly
   the ``LATER`` fields from this tree's output, writes it back in the outputs' own format
   (checked: the reference's output re-written that way is its own bytes) and compares again
   with ``cmp``. Then a table: command, identical as is, identical without the later fields.

The host's free memory and load (measured afresh by each quota decision) are masked (``N``)
before any comparison, as ``tests/test_quota_snapshot.py`` does; they are not the root's.
``doctor`` runs first, on the root as built: the reference keeps its status cache inside the
root (``projections/``), so a ``status`` run before it would add files for the reference's
``files_checked`` only (this tree keeps it in the host's cache directory).

    python benchmarks/output_parity.py                      # worktree + venv of 811387a made here
    python benchmarks/output_parity.py --base-tree /tmp/b811 --base-venv /tmp/b811-venv --keep

Exits 0 when every difference is a ``LATER`` one, 1 when any is unexplained. ``--keep`` keeps
the root and outputs; ``--outputs DIR`` compares a kept run again (after editing ``LATER``);
``--reuse DIR`` reads a kept root again (its running turn has ended by then, so doctor then
sees an orphaned journal, an ``info`` here and a ``warning`` in 811387a).

Where the reference's own JSON does not re-write to its bytes (pydantic writes ``0.00001``
where ``json`` writes ``1e-05``), the stripped output is compared with the reference re-written
the same way; the table says how many ("re-written").
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
HOST_NUMBERS = re.compile(rb'("available_memory_mb"|"load_1m"): [-+.e0-9]+')

# (name, argv after `loopx --root ROOT`), run in this order on each side; doctor first (see above).
COMMANDS: list[tuple[str, list[str]]] = [
    ("doctor", ["doctor", "--json"]),
    ("status-cold", ["status", "--json", "--clear-cache"]),
    ("status-warm", ["status", "--json"]),
    ("status-text", ["status"]),
    ("status-ttl0", ["status", "--json", "--ttl", "0"]),
    ("status-human", ["status", "--json", "--actor", "human"]),
    ("status-agent", ["status", "--json", "--actor", "agent"]),
    ("status-limit", ["status", "--json", "--limit", "5"]),
    ("refresh", ["refresh", "--json"]),
    ("refresh-full", ["refresh", "--full", "--json"]),
    ("goal-list", ["goal", "list", "--json"]),
    ("supervisor-status", ["supervisor", "status", "--json"]),
    ("archive-dry-run", ["archive", "done-00", "--dry-run", "--json"]),
    ("journal-inspect", ["journal", "inspect", "ran-01", "--json"]),
    ("should-run-line", ["quota", "should-run", "spent-00"]),
]
# (name, argv with {goal}): run for every goal of the root; one output file a goal.
PER_GOAL: list[tuple[str, list[str]]] = [
    ("goal-show", ["goal", "show", "{goal}", "--json"]),
    ("quota-show", ["quota", "show", "{goal}", "--json"]),
    ("should-run", ["quota", "should-run", "{goal}", "--json"]),
    ("journal-list", ["journal", "list", "{goal}", "--json"]),
    ("replay-verify", ["replay", "{goal}", "--verify", "--json"]),
]


@dataclass(frozen=True)
class Later:
    """A field a later change added to an output: its path (``a.b[].c``), where it came from."""

    path: str  # a regex matched whole against the difference's path
    feature: str
    commit: str
    what: str
    kind: str = "added"  # "changed": explained but kept (the strip removes only added fields)


# Exactly the fields later changes added; the strip removes these and nothing else.
_CHECK = ("done-check", "751df92 (merged 1d77d58)", "goal.done_check, state.last_check")
_WORKTREE = ("worktree per goal", "f02ec9f (merged 1d77d58)", "worktree, auto_merge")
_ACCOUNTS = ("accounts", "cb731f4 (merged 6cf65cb)", "goal.account, on_limit, max_limit_waits")
_DEGRADED = ("loop duties degrade", "ef236fd (merged 455290e)", "degraded")
_FAILURE = ("dashboard failures", "53eae46 (merged ffeeb3b)", "last_turn.failure_message")
_STARTED = ("dashboard timeline", "0530212 (merged 0ebb433)", "heartbeats carry the turn's start")
_RETENTION = ("retention", "f869405 (merged 2055444)", "replay's checkpoint and folded")
LATER: list[Later] = [
    Later(r"(goal|goals\[\])\.done_check", *_CHECK),
    Later(r"(state|goals\[\])\.last_check", *_CHECK),
    Later(r"differences\[\]\.(replayed|on_disk)>last_check", *_CHECK),
    # replay's preview of a file is its first 300 characters: state.json's last_check moves them.
    Later(r"differences\[\]\.(replayed|on_disk)", *_CHECK, kind="changed"),
    Later(r"(goal|goals\[\])\.(worktree|auto_merge)", *_WORKTREE),
    Later(r"(goal|goals\[\])\.(account|on_limit|max_limit_waits)", *_ACCOUNTS),
    Later(r"accounts", *_ACCOUNTS),
    Later(r"(supervisor|agents\[\])\.degraded", *_DEGRADED),
    Later(r"goals\[\]\.last_turn\.failure_message", *_FAILURE),
    Later(r"agents\[\]\.turn_started_at", *_STARTED),
    Later(r"checkpoint|folded", *_RETENTION),
]
# Strings of these outputs that hold a whole file's JSON (replay's differences): walked inside.
EMBEDDED = re.compile(r"differences\[\]\.(replayed|on_disk)")

FAKE_HOSTS = ("codex", "claude", "gemini")
# Run by the reference's python after the build: a supervisor of another host whose agent-7
# (the holder of running-00's lease) crash-loops, so status's crash-loop overlay shows.
CRASH_LOOP_FLEET = """
import socket, sys
from datetime import UTC, datetime
from loopx.fleet import AgentSlot, FleetRecord
now = datetime.now(UTC)
slots = [
    AgentSlot(index=0, agent_id="agent-7", crash_loop=True, restarts=6, recent_restarts=5),
    AgentSlot(index=1, agent_id="agent-1"),
]
record = FleetRecord(
    pid=1, pid_started_at=0.0, hostname="not-" + socket.gethostname(), agents_wanted=2,
    started_at=now, updated_at=now, slots=slots,
)
with open(sys.argv[1], "w") as f:
    f.write(record.model_dump_json(indent=2))
"""


def _fake_bin(build: Path) -> Path:
    """Executables named like the real CLIs that fail at once (registered, one of them run)."""
    bin_dir = build / "bin"
    bin_dir.mkdir(parents=True)
    for name in FAKE_HOSTS:
        path = bin_dir / name
        path.write_text("#!/bin/sh\necho 'fake host: no model here' >&2\nexit 1\n")
        path.chmod(0o755)
    return bin_dir


class BaseCli:
    """The reference's CLI on one root: each call a process, refused codes named per call."""

    def __init__(self, python: Path, root: Path, cwd: Path) -> None:
        self.python = python
        self.root = root
        self.cwd = cwd
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
        self.env["TZ"] = "UTC"

    def argv(self, *args: str) -> list[str]:
        return [str(self.python), "-P", "-m", "loopx", "--root", str(self.root), *args]

    def __call__(self, *args: str, ok: tuple[int, ...] = (0,)) -> str:
        done = subprocess.run(
            self.argv(*args),
            capture_output=True,
            text=True,
            cwd=self.cwd,
            env=self.env,
            timeout=300,
            check=False,
        )
        if done.returncode not in ok:
            raise SystemExit(
                f"building the root: `loopx {' '.join(args)}` exited {done.returncode}:\n"
                f"{done.stderr[-2000:]}"
            )
        return done.stdout


def build(cli: BaseCli, build_dir: Path) -> subprocess.Popen[bytes]:  # noqa: C901, PLR0915 - one step a kind of goal, in order
    """The 40-goal root, every file written by the reference; returns the still-running turn."""
    bin_dir = _fake_bin(build_dir)
    wd = build_dir / "wd"

    def add(goal_id: str, *extra: str, host: str = "", kind: str = "demo") -> None:
        (wd / goal_id).mkdir(parents=True)
        args = ["goal", "add", goal_id, "--objective", f"parity goal {goal_id}"]
        args += ["--workdir", str(wd / goal_id), "--host-kind", kind]
        if host:
            args += [f"--host={host}"]  # = : a host starting with -- is no switch of ours
        cli(*args, *extra)

    def turn(goal_id: str, times: int = 1) -> None:
        for _ in range(times):
            cli("turn", "run-once", goal_id, "--json", ok=(0, 1, 3, 4, 5))

    cli("init", "--json")
    plan = build_dir / "plan.json"
    plan.write_text(
        json.dumps(
            {
                "schema_version": 1,
                "goals": [
                    {"id": "batch-00", "objective": "count to 2", "host_kind": "demo",
                     "host": ["--steps", "2"], "workdir": str(wd / "batch-00")},
                    {"id": "batch-01", "objective": "count to 1", "host_kind": "demo",
                     "host": ["--steps", "1"], "workdir": str(wd / "batch-01"), "priority": 2},
                ],
            }
        )
    )  # fmt: skip
    for goal_id in ("batch-00", "batch-01"):
        (wd / goal_id).mkdir(parents=True)
    report = cli.root / "reports" / "batch"
    cli("batch", "run", str(plan), "--agents", "1", "--report", str(report), "--json", ok=(0, 4))
    for i in range(4):
        add(f"never-{i:02d}", host="--steps 5")
    add("never-04", "--priority", "5", host="--steps 5")
    add("res-00", "--resource", "gpu=1", host="--steps 5")
    for name in FAKE_HOSTS:
        add(f"{name}-00", "--session-max-turns", "20", host=str(bin_dir / name), kind=name)
    turn("codex-00")
    add("cmd-never-00", host="sh -c true", kind="command")
    add("cmd-fail-00", host="sh -c 'exit 2'", kind="command")
    turn("cmd-fail-00")
    add("cmd-ok-00", host=f"{cli.python} -P -m loopx.agents.demo --steps 4", kind="command")
    turn("cmd-ok-00")
    limits = ["--max-tokens", "1000", "--max-cost-usd", "2", "--turn-timeout", "60"]
    for i, (extra, turns) in enumerate([([], 1), ([], 2), (["--priority", "-3"], 1), (limits, 1)]):
        add(f"ran-{i:02d}", *extra, host="--steps 5")
        turn(f"ran-{i:02d}", turns)
    add("done-00", host="--steps 1")
    turn("done-00")
    add("done-01", host="--steps 5")
    cli("goal", "done", "done-01", "--json")
    add("done-02", host="--steps 2")
    turn("done-02", 2)
    add("fail-00", host="--fail")
    turn("fail-00")
    add("fail-01", "--max-host-attempts", "1", host="--fail")
    turn("fail-01", 2)
    add("fail-02", host="--invalid-json")
    turn("fail-02")
    add("gate-00", host="--steps 5")
    cli("gate", "open", "gate-00", "--question", "which API: v2 or v3?", "--json")
    add("gate-01", host="--ask 'v2 or v3?'")
    turn("gate-01")
    add("gate-02", host="--ask 'v2 or v3?'")
    turn("gate-02")
    cli("gate", "resolve", "gate-02", "--answer", "v3", "--json")
    for i in range(2):
        add(f"wait-{i:02d}", host=f"--kind wait --wait-seconds {3600 * (i + 1)}")
        turn(f"wait-{i:02d}")
    add("spent-00", "--cpu-seconds", "0.2", host="--burn 0.6")
    turn("spent-00")
    add("spent-01", "--quota-compute", "0.00001", host="--hang 1.5")
    turn("spent-01")
    add("paused-00", host="--steps 5")
    cli("goal", "pause", "paused-00", "--json")
    add("paused-01", host="--steps 5")
    turn("paused-01")
    cli("goal", "pause", "paused-01", "--json")
    add("arch-00", host="--steps 1")
    turn("arch-00")
    cli("archive", "arch-00", "--json")
    add("arch-01", host="--steps 5")
    cli("archive", "arch-01", "--allow-registered", "--json")
    add("probe-00", "--next-probe", "echo counter at 1 of 5", host="--steps 5")
    turn("probe-00")
    cli("probe", "probe-00", "--json")
    add("probe-01", "--next-probe", "sh -c 'echo no build >&2; exit 4'", host="--steps 5")
    cli("probe", "probe-01", "--json", ok=(0, 1))
    add("quar-00", host="--steps 5")
    turn("quar-00")
    torn = cli.root / "goals" / "quar-00" / "turns" / "quar-00-t000002-e1.json"
    torn.write_text('{"schema_version": 1, "goal_id": "quar-00", "turn')
    cli("recover", "--json", ok=(0, 1))
    add("damaged-00", host="--steps 5")
    turn("damaged-00")
    (cli.root / "goals" / "damaged-00" / "state.json").write_text("{not json")
    add("running-00", host="--hang 3600")
    running = subprocess.Popen(
        cli.argv("turn", "run-once", "running-00", "--agent-id", "agent-7"),
        cwd=cli.cwd,
        env=cli.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # stopped as a group with its host at the end
    )
    runs = wd / "running-00" / ".loopx-demo" / "runs.log"
    deadline = time.monotonic() + 60
    while not runs.exists():
        if time.monotonic() > deadline or running.poll() is not None:
            raise SystemExit("building the root: the running-00 turn never started its host")
        time.sleep(0.1)
    fleet = [str(cli.python), "-P", "-c", CRASH_LOOP_FLEET, str(cli.root / "supervisor.json")]
    subprocess.run(fleet, check=True, cwd=cli.cwd, env=cli.env, timeout=60)
    goals = json.loads(cli("goal", "list", "--json"))
    count = len(goals["goals"]) if isinstance(goals, dict) else len(goals)
    if count != 40:
        raise SystemExit(f"building the root: {count} goals registered, not 40")
    return running


def stop(running: subprocess.Popen[bytes], runs: Path) -> None:
    """End the running turn (SIGTERM, as a supervisor would) and the demo host it started."""
    host_pids = [int(line.split()[2]) for line in runs.read_text().splitlines() if line.strip()]
    running.terminate()
    try:
        running.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(running.pid, 9)
        running.wait()
    for pid in host_pids:  # the host's own session: gone with its turn, or ended here
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)


def goal_ids(root: Path) -> list[str]:
    """The root's goal ids (a folder each under ``goals/``), sorted."""
    return sorted(p.name for p in (root / "goals").iterdir() if p.is_dir())


def invocations(ids: list[str]) -> Iterator[tuple[str, str, list[str]]]:
    """(command, output file, argv) in run order."""
    for name, argv in COMMANDS:
        yield name, name, argv
    for name, argv in PER_GOAL:
        for goal_id in ids:
            yield name, f"{name}.{goal_id}", [a.replace("{goal}", goal_id) for a in argv]


def run_side(
    python: Path, pristine: Path, root: Path, out: Path, *, frozen: str, ids: list[str]
) -> None:
    """Restore ``root`` from ``pristine`` (cp -a), run every invocation, save exit code and stdout."""
    if root.exists():
        shutil.rmtree(root)
    subprocess.run(["cp", "-a", str(pristine), str(root)], check=True)
    cache = root.parent / "xdg-cache"  # one path for both sides: outputs may name it
    shutil.rmtree(cache, ignore_errors=True)
    neutral = root.parent / "cwd"
    neutral.mkdir(exist_ok=True)
    out.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
    env |= {
        "TZ": "UTC",
        "XDG_CACHE_HOME": str(cache),
        "NO_FAKE_STAT": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "COLUMNS": "200",
    }
    for _cmd, file_name, argv in invocations(ids):
        done = subprocess.run(
            [
                "faketime",
                "-f",
                frozen,
                str(python),
                "-P",
                "-m",
                "loopx",
                "--root",
                str(root),
                *argv,
            ],
            capture_output=True,
            cwd=neutral,
            env=env,
            timeout=300,
            check=False,
        )
        stdout = HOST_NUMBERS.sub(rb"\1: N", done.stdout)
        (out / file_name).write_bytes(f"exit {done.returncode}\n".encode() + stdout)


def split(raw: bytes) -> tuple[bytes, bytes]:
    head, _, body = raw.partition(b"\n")
    return head, body


def child(path: str, key: str) -> str:
    """``a.b``; ``x>b`` inside an embedded document."""
    return f"{path}{key}" if path.endswith(">") or not path else f"{path}.{key}"


def walk(base: Any, this: Any, path: str = "") -> Iterator[tuple[str, str, Any, Any]]:  # noqa: C901 - dict, list, embedded, leaf
    """(kind, path, base value, this value): ``added``, ``removed`` or ``changed``; lists by index."""
    if isinstance(base, dict) and isinstance(this, dict):
        for key in this:
            sub = child(path, key)
            if key not in base:
                yield "added", sub, None, this[key]
            else:
                yield from walk(base[key], this[key], sub)
        for key in base:
            if key not in this:
                yield "removed", child(path, key), base[key], None
        if [k for k in this if k in base] != [k for k in base if k in this]:
            yield "changed", f"{path}(key order)", list(base), list(this)
    elif isinstance(base, list) and isinstance(this, list):
        for i, (b, t) in enumerate(zip(base, this, strict=False)):
            yield from walk(b, t, f"{path}[{i}]")
        if len(base) != len(this):
            yield "changed", f"{path}(length)", len(base), len(this)
    elif embedded(path, base) is not None and embedded(path, this) is not None:
        yield from walk(embedded(path, base), embedded(path, this), f"{path}>")
    elif base != this or type(base) is not type(this):
        yield "changed", path, base, this


def embedded(path: str, value: Any) -> Any:
    """The JSON a replay difference's string holds, or None."""
    if not (isinstance(value, str) and EMBEDDED.fullmatch(generic(path))):
        return None
    try:
        return json.loads(value)
    except ValueError:
        return None


def generic(path: str) -> str:
    return re.sub(r"\[\d+\]", "[]", path)


def later_for(kind: str, path: str) -> Later | None:
    for entry in LATER:
        if entry.kind == kind and re.fullmatch(entry.path, generic(path)):
            return entry
    return None


def strip(value: Any, path: str = "") -> Any:
    """``value`` without the ``LATER`` fields (matched by their generic path)."""
    inner = embedded(path, value)
    if inner is not None:
        return dump(strip(inner, f"{path}>"), value.encode()).decode()
    if isinstance(value, dict):
        kept = {}
        for key, item in value.items():
            sub = child(path, key)
            if later_for("added", sub) is None:
                kept[key] = strip(item, sub)
        return kept
    if isinstance(value, list):
        return [strip(item, f"{path}[{i}]") for i, item in enumerate(value)]
    return value


def dump(value: Any, like: bytes) -> bytes:
    """``value`` written as the outputs write JSON (pydantic's indent=2, or one line)."""
    indent = 2 if like.lstrip().startswith((b"{\n", b"[\n")) else None
    text = json.dumps(value, indent=indent, ensure_ascii=False)
    if indent is None:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text.encode() + (b"\n" if like.endswith(b"\n") else b"")


def cmp(a: Path, b: Path) -> bool:
    return subprocess.run(["cmp", "-s", str(a), str(b)], check=False).returncode == 0


@dataclass
class Row:
    command: str
    files: int = 0
    same: int = 0
    same_stripped: int = 0
    rewritten: int = 0  # compared with the reference's JSON re-written (its floats)


def compare(work: Path, ids: list[str]) -> tuple[list[Row], list[str]]:
    """cmp each output, then the JSON differences, the strip and cmp again."""
    rows: dict[str, Row] = {}
    unexplained: list[str] = []
    seen: dict[tuple[str, str, str], list[str]] = {}
    stripped_dir = work / "this-stripped"
    stripped_dir.mkdir()
    for cmd, file_name, _argv in invocations(ids):
        row = rows.setdefault(cmd, Row(cmd))
        row.files += 1
        base_file, this_file = work / "base" / file_name, work / "this" / file_name
        if cmp(base_file, this_file):
            row.same += 1
            row.same_stripped += 1
            continue
        base_head, base_body = split(base_file.read_bytes())
        this_head, this_body = split(this_file.read_bytes())
        try:
            base_json, this_json = json.loads(base_body), json.loads(this_body)
        except ValueError:
            print(f"--- {file_name}: not JSON on both sides, text diff:")
            diff = difflib.unified_diff(
                base_file.read_text().splitlines(), this_file.read_text().splitlines(),
                "811387a", "this", lineterm="", n=1,
            )  # fmt: skip
            print("\n".join(diff))
            unexplained.append(f"{file_name}: text differs")
            continue
        if base_head != this_head:
            unexplained.append(f"{file_name}: {base_head.decode()} against {this_head.decode()}")
        for kind, path, old, new in walk(base_json, this_json):
            entry = later_for(kind, path)
            key = (cmd, kind, generic(path))
            seen.setdefault(key, []).append(f"{file_name}: {old!r} -> {new!r}"[:300])
            if entry is None and len(seen[key]) == 1:
                unexplained.append(f"{file_name}: {kind} {path}: {old!r} -> {new!r}"[:400])
        stripped = stripped_dir / file_name
        stripped.write_bytes(this_head + b"\n" + dump(strip(this_json), this_body))
        against = base_file
        if dump(base_json, base_body) != base_body:
            # pydantic writes 1e-05 as 0.00001: compare with the reference re-written the same way.
            against = stripped_dir / f"{file_name}.811387a"
            against.write_bytes(base_head + b"\n" + dump(base_json, base_body))
            row.rewritten += 1
        if cmp(against, stripped):
            row.same_stripped += 1
    print("\n== differences, by command and field (later feature, or UNEXPLAINED)")
    for (cmd, kind, path), where in sorted(seen.items()):
        entry = later_for(kind, path)
        cause = f"{entry.feature} {entry.commit}: {entry.what}" if entry else "UNEXPLAINED"
        print(f"{cmd}: {kind} {path} ({len(where)} outputs) -- {cause}")
        print(f"    e.g. {where[0]}")
    return list(rows.values()), unexplained


def base_install(args: argparse.Namespace, work: Path) -> tuple[Path, Path | None]:
    """The reference's python, and the worktree to remove (None when given)."""
    if args.base_venv:
        return Path(args.base_venv) / "bin" / "python", None
    tree = work / "base-tree"
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), args.base_rev],
        check=True,
        capture_output=True,
    )
    venv = work / "base-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", "-e", str(tree)],
        check=True,
        capture_output=True,
    )
    return venv / "bin" / "python", tree


def main() -> int:  # noqa: PLR0915 - the steps of the docstring, in order
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-rev", default="811387a", help="the reference (default 811387a)")
    parser.add_argument(
        "--base-tree", help="a worktree of the reference to reuse (with --base-venv)"
    )
    parser.add_argument("--base-venv", help="that worktree's venv (pip install -e of it)")
    parser.add_argument("--this", default=sys.executable, help="this tree's python")
    parser.add_argument(
        "--reuse", metavar="DIR", help="reuse the root a --keep run built and kept in DIR"
    )
    parser.add_argument("--outputs", metavar="DIR", help="only compare the outputs kept in DIR")
    parser.add_argument(
        "--keep", action="store_true", help="keep the root and outputs (path printed)"
    )
    args = parser.parse_args()
    if bool(args.base_tree) != bool(args.base_venv):
        parser.error("--base-tree and --base-venv go together")
    if shutil.which("faketime") is None:
        parser.error("faketime is not installed: apt-get install -y faketime")
    if args.outputs:  # compare again what a --keep run kept
        work = Path(args.outputs)
        shutil.rmtree(work / "this-stripped", ignore_errors=True)
        return report(work, goal_ids(work / "pristine"))
    work = Path(tempfile.mkdtemp(prefix="loopx-parity-"))
    tree: Path | None = None
    running: subprocess.Popen[bytes] | None = None
    try:
        base_python, tree = base_install(args, work)
        pristine = work / "pristine"
        if args.reuse:  # the root an earlier --keep run built (its running turn has ended)
            kept = Path(args.reuse)
            subprocess.run(["cp", "-a", str(kept / "pristine"), str(pristine)], check=True)
            frozen = (kept / "frozen").read_text().strip()
        else:
            build_dir = work / "build"
            build_dir.mkdir()
            cli = BaseCli(base_python, build_dir / "root", build_dir)
            started = time.monotonic()
            running = build(cli, build_dir)
            subprocess.run(["cp", "-a", str(cli.root), str(pristine)], check=True)
            # One instant a little after every file the build wrote, for both sides.
            at = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2)
            frozen = at.strftime("%Y-%m-%d %H:%M:%S")
            took = time.monotonic() - started
            print(f"built 40 goals with {base_python} in {took:.0f} s; clock {frozen}")
            (work / "frozen").write_text(frozen)
        ids = goal_ids(pristine)
        root = work / "side" / "root"
        root.parent.mkdir()
        run_side(base_python, pristine, root, work / "base", frozen=frozen, ids=ids)
        run_side(Path(args.this), pristine, root, work / "this", frozen=frozen, ids=ids)
        return report(work, ids)
    finally:
        if running is not None:
            stop(running, work / "build" / "wd" / "running-00" / ".loopx-demo" / "runs.log")
        if tree is not None:
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=False
            )
        if args.keep:
            print(f"kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def report(work: Path, ids: list[str]) -> int:
    """Compare the kept outputs of ``work``, print the table; 0 when all match without LATER."""
    rows, unexplained = compare(work, ids)
    print("\n| command | outputs | identical as is | identical without the later fields |")
    print("| --- | ---: | ---: | ---: |")
    for row in rows:
        note = f" ({row.rewritten} re-written)" if row.rewritten else ""
        print(f"| {row.command} | {row.files} | {row.same} | {row.same_stripped}{note} |")
    total = sum(r.files for r in rows)
    print(
        f"\n{sum(r.same for r in rows)} of {total} outputs identical as is, "
        f"{sum(r.same_stripped for r in rows)} without the later fields"
    )
    if unexplained:
        print("\nunexplained differences:")
        for line in unexplained:
            print(f"  {line}")
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
