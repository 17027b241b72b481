"""A careless user: every subcommand with a bad root, bad ids, bad flags and bad files.

Each mistake must end in one `loopx: error:` line, one `hint:` line and the
documented exit code (docs/cli.md), never a traceback. The command lines run
through the real entry point in one subprocess (`tests/misuse_driver.py`), which
drops to `nobody` when the suite runs as root so an unwritable root is really
unwritable. A new subcommand must be added to COMMANDS (a test checks that).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from loopx import exitcodes
from loopx.cli._app import build_parser
from loopx.model import utcnow
from loopx.registry.goalrecords import HostKind, HostSpec
from loopx.registry.goals import GoalChanges, add_goal
from loopx.root import Layout, ResolvedRoot, RootSource, open_root

NOBODY = 65534
REPO = Path(__file__).resolve().parent.parent

# Every leaf command with arguments that would be valid on a good root ("{base}" is the arena).
COMMANDS: dict[str, list[str]] = {
    "init": [],
    "goal add": ["g2", "--objective", "x", "--host-kind", "demo"],
    "goal list": [],
    "goal import": ["{base}/goals.jsonl"],
    "goal show": ["g"],
    "goal pause": ["g"],
    "goal resume": ["g"],
    "goal done": ["g"],
    "goal reopen": ["g", "--yes"],
    "goal reset-session": ["g"],
    "goal worktree": ["g"],
    "goal merge": ["g"],
    "gate open": ["g", "--question", "ok?"],
    "gate resolve": ["g", "--answer", "yes"],
    "quota show": ["g"],
    "quota should-run": ["g"],
    "account add": ["acct", "--host-kind", "demo"],
    "account list": [],
    "account show": ["acct"],
    "account edit": ["acct", "--on-limit", "gate"],
    "account remove": ["acct"],
    "account resolve": ["acct", "--answer", "ok"],
    "account budget": ["--max-tokens", "10"],
    "account login": ["acct"],
    "account check": ["acct"],
    "schema": ["registry"],
    "agent run": ["--agent-id", "a1", "--once"],
    "supervisor run": ["--until-idle"],
    "supervisor start": [],
    "supervisor stop": [],
    "supervisor status": [],
    "supervisor attach": [],
    "supervisor scale": ["2"],
    "daemon run": ["--until-idle"],
    "daemon start": [],
    "daemon stop": [],
    "daemon status": [],
    "daemon attach": [],
    "daemon scale": ["2"],
    "batch run": ["{base}/plan.json"],
    "status": [],
    "refresh": [],
    "serve": ["--port", "0"],
    "archive": ["g", "--dry-run"],
    "probe": ["g"],
    "turn run-once": ["g"],
    "journal list": ["g"],
    "journal inspect": ["g", "k"],
    "logs": [],
    "recover": [],
    "demo": [],
    "replay": ["g"],
    "retention set": ["--keep-turns", "5"],
    "retention show": [],
    "gc": ["--dry-run"],
    "doctor": [],
    "hosts check": ["claude"],
    "notify add": ["json://127.0.0.1:9/hook", "--events", "gate"],
    "notify list": [],
    "notify remove": ["0123456789"],
    "notify set": ["--link-base", "http://127.0.0.1:9/"],
    "notify test": [],
}
ROOTLESS = {"schema"}  # reads no root
# These make the root they are given (a missing or empty directory is fine for them).
CREATORS = {"init", "demo", "batch run"}
ROOT_MISTAKES = ("missing", "file", "unwritable", "uninitialised")
ID_COMMANDS = [c for c, a in COMMANDS.items() if a[:1] == ["g"]]


def leaf_commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> set[str]:
    """Every runnable command line prefix of the parser ("goal add", "status", ...)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found: set[str] = set()
            for name, sub in action.choices.items():
                found |= leaf_commands(sub, (*prefix, name))
            return found
    return {" ".join(prefix)}


def root_cases() -> list[tuple[str, str]]:
    """(command, mistake) pairs where the root itself is wrong."""
    return [
        (command, mistake)
        for command in COMMANDS
        if command not in ROOTLESS
        for mistake in ROOT_MISTAKES
        if not (command in CREATORS and mistake in ("missing", "uninitialised"))
    ]


BAD_FLAGS: dict[str, tuple[list[str], int, str]] = {
    "keep-turns-zero": (
        ["retention", "set", "--keep-turns", "0"],
        2,
        "invalid value for --keep-turns",
    ),
    "retention-unknown-goal": (
        ["retention", "set", "--goal", "nosuch", "--keep-turns", "3"],
        1,
        "nosuch",
    ),
    # case: (argv, exit code, a phrase of the error)
    "notify-no-scheme": (["notify", "add", "hook"], 2, "no scheme"),
    "notify-bad-event": (["notify", "add", "json://h/x", "--events", "gate,oops"], 2, "oops"),
    "notify-bad-link-base": (["notify", "add", "json://h/x", "--link-base", "ftp://h"], 2, "http"),
    "notify-unknown-target": (["notify", "remove", "nope"], 2, "'nope'"),
    "notify-set-bad-link-base": (["notify", "set", "--link-base", "ftp://h"], 2, "http"),
    "notify-bad-read-timeout": (
        ["notify", "add", "json://h/x", "--read-timeout", "0"],
        2,
        "--read-timeout",
    ),
    "agents-zero": (["supervisor", "run", "--agents", "0", "--until-idle"], 2, "at least 1"),
    "agents-huge": (["supervisor", "start", "--agents", "100000"], 2, "is more than"),
    "batch-agents-zero": (["batch", "run", "{base}/plan.json", "--agents", "0"], 2, "at least 1"),
    "demo-agents-huge": (["demo", "--agents", "100000"], 2, "is more than"),
    "scale-negative": (["supervisor", "scale", "-3"], 2, "at least 1"),
    "priority-not-int": (
        ["goal", "add", "g3", "--objective", "o", "--priority", "high"],
        2,
        "invalid int",
    ),
    "quota-out-of-range": (
        ["goal", "add", "g3", "--objective", "o", "--quota-compute", "7"],
        2,
        "--quota-compute",
    ),
    "workdir-missing": (
        ["goal", "add", "g3", "--objective", "o", "--workdir", "{base}/nowhere"],
        2,
        "does not exist",
    ),
    "workdir-a-file": (
        ["goal", "add", "g3", "--objective", "o", "--workdir", "{base}/afile"],
        2,
        "not a directory",
    ),
    "host-missing": (
        ["goal", "add", "g3", "--objective", "o", "--host", "no-such-program-x"],
        2,
        "not found",
    ),
    "host-bad-quotes": (
        ["goal", "add", "g3", "--objective", "o", "--host", "run 'x"],
        2,
        "cannot be split",
    ),
    "log-level": (["status", "--log-level", "loud"], 2, "invalid choice"),
    "unknown-command": (["frobnicate"], 2, "invalid choice"),
    "no-command": ([], 2, "required"),
    "gate-number": (
        ["gate", "resolve", "g", "--answer", "y", "--gate", "7"],
        1,
        "gate 7 is not open",
    ),
    "schema-name": (["schema", "nope"], 2, "nope"),
    "reopen-without-yes": (["goal", "reopen", "g"], 2, "runs finished work again"),
}
BAD_FILES: dict[str, tuple[list[str], int, str]] = {
    "plan-directory": (["batch", "run", "{base}/plandir.json"], 2, "is a directory"),
    "plan-yaml": (["batch", "run", "{base}/plan.yaml"], 2, ".json or .toml"),
    "plan-missing": (["batch", "run", "{base}/nope.json"], 2, "does not exist"),
    "plan-not-json": (["batch", "run", "{base}/broken.json"], 2, "not valid JSON"),
    "plan-no-host": (["batch", "run", "{base}/nohost.json"], 2, "no host"),
    "plan-missing-program": (["batch", "run", "{base}/badhost.json"], 2, "not found"),
    "registry-damaged": (["goal", "list", "--root", "{base}/damaged"], 1, "damaged"),
    "status-damaged": (["status", "--root", "{base}/damaged"], 1, "damaged"),
    "registry-flag-not-json": (["goal", "list", "--registry", "{base}/afile"], 1, "not valid JSON"),
}


def _initialised(path: Path, *, goal: bool) -> Layout:
    layout = open_root(ResolvedRoot(path, path / "registry.json", RootSource.FLAG), create=True)
    if goal:
        work = path.parent / "work"
        work.mkdir(exist_ok=True)
        changes = GoalChanges(
            objective="o", workdir=str(work), host=HostSpec(kind=HostKind.DEMO, argv=[])
        )
        add_goal(layout, "g", changes, update=False, default_workdir=work, now=utcnow())
    return layout


def _plan(path: Path, goals: list[dict[str, Any]]) -> None:
    path.write_text(json.dumps({"goals": goals}))


def _build_arena(base: Path) -> None:
    _initialised(base / "ok", goal=True)
    _initialised(base / "ro", goal=True)
    (base / "damaged").mkdir(mode=0o700)
    (base / "damaged" / "registry.json").write_text("{not json")
    (base / "empty").mkdir(mode=0o700)
    (base / "afile").write_text("just a file\n")
    (base / "plandir.json").mkdir()
    (base / "plan.yaml").write_text("goals: []\n")
    (base / "broken.json").write_text('{"goals": [')
    _plan(base / "plan.json", [{"id": "p", "objective": "x", "host_kind": "demo"}])
    (base / "goals.jsonl").write_text('{"id": "i1", "objective": "x", "workdir": "/tmp"}\n')
    _plan(base / "nohost.json", [{"id": "p", "objective": "x"}])
    _plan(base / "badhost.json", [{"id": "p", "objective": "x", "host": "no-such-program-x"}])


def _as_nobody() -> bool:
    return hasattr(os, "getuid") and os.getuid() == 0


def _hand_over(base: Path) -> None:
    """Give the arena to nobody (when running as root); then make `ro` unwritable."""
    if _as_nobody():
        for dirpath, dirnames, filenames in os.walk(base):
            for name in [dirpath, *(os.path.join(dirpath, n) for n in dirnames + filenames)]:
                os.lchown(name, NOBODY, NOBODY)
    (base / "ro").chmod(0o500)


def _root_for(base: Path, mistake: str) -> str:
    return str(
        {
            "missing": base / "missing",
            "file": base / "afile",
            "unwritable": base / "ro",
            "uninitialised": base / "empty",
        }[mistake]
    )


def _argv(base: Path, words: list[str], root: str) -> list[str]:
    return ["--root", root, *(w.replace("{base}", str(base)) for w in words)]


@pytest.fixture(scope="module")
def arena() -> Iterator[Path]:
    """A directory nobody can use (pytest's tmp_path is private to root)."""
    base = Path(tempfile.mkdtemp(prefix="loopx-misuse-"))
    base.chmod(0o755)
    try:
        _build_arena(base)
        _hand_over(base)
        yield base
    finally:
        (base / "ro").chmod(0o700)
        shutil.rmtree(base, ignore_errors=True)


def all_cases(arena: Path) -> dict[str, list[str]]:
    """Every command line of the suite, keyed by case id."""
    cases: dict[str, list[str]] = {}
    for command, mistake in root_cases():
        root = _root_for(arena, mistake)
        cases[f"root:{command}:{mistake}"] = _argv(
            arena, [*command.split(), *COMMANDS[command]], root
        )
    ok = str(arena / "ok")
    for command in ID_COMMANDS:
        rest = COMMANDS[command][1:]
        for label, goal_id in (("invalid", "../x"), ("unknown", "nope")):
            words = [*command.split(), goal_id, *rest]
            cases[f"id:{command}:{label}"] = _argv(arena, words, ok)
    for command, valid in COMMANDS.items():
        words = [*command.split(), *valid, "--no-such-flag"]
        cases[f"flag:{command}"] = _argv(arena, words, ok)
    for name, (words, _, _) in (BAD_FLAGS | BAD_FILES).items():
        cases[f"case:{name}"] = _argv(arena, words, ok)
    # Two successes that share the arena: creators do create, and init is idempotent.
    cases["init-creates"] = ["--root", str(arena / "fresh"), "init"]
    return cases


def run_driver(cases: dict[str, list[str]]) -> dict[str, dict[str, Any]]:
    """Run the cases in one driver process (as nobody when root); results by case id."""
    request = {"uid": NOBODY if _as_nobody() else None, "cases": list(cases.values())}
    proc = subprocess.run(
        [sys.executable, "-m", "tests.misuse_driver"],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(zip(cases, json.loads(proc.stdout), strict=True))


@pytest.fixture(scope="module")
def results(arena: Path) -> dict[str, dict[str, Any]]:
    """Every case run once, in one driver process; keyed by case id."""
    return run_driver(all_cases(arena))


def assert_one_line_error(result: dict[str, Any], code: int, phrase: str = "") -> None:
    """Exit ``code``, and stderr is exactly `loopx: error: ...` + `hint: ...`."""
    where = f"loopx {' '.join(result['argv'])}"
    assert result["crash"] is None, f"{where} raised:\n{result['crash']}"
    lines = result["stderr"].splitlines()
    assert "Traceback" not in result["stderr"], f"{where}:\n{result['stderr']}"
    assert len(lines) == 2, f"{where} printed {len(lines)} lines:\n{result['stderr']}"
    assert lines[0].startswith("loopx: error: "), f"{where}: {lines[0]}"
    assert lines[1].startswith("hint: "), f"{where}: {lines}"
    assert len(lines[1]) > len("hint: "), f"{where}: {lines}"
    assert phrase in lines[0], f"{where}: {phrase!r} not in {lines[0]!r}"
    assert result["code"] == code, f"{where} exited {result['code']}, not {code}: {lines}"


def test_every_command_is_covered() -> None:
    """COMMANDS lists exactly the CLI's commands: a new one must be added here."""
    assert set(COMMANDS) == leaf_commands(build_parser())


@pytest.mark.parametrize(("command", "mistake"), root_cases())
def test_a_bad_root_is_one_line(results: dict[str, Any], command: str, mistake: str) -> None:
    """A missing, file, unwritable or uninitialised root: exit 1, one line naming it, a hint."""
    result = results[f"root:{command}:{mistake}"]
    if command == "doctor":
        # doctor's job is to describe such a root: a report on stdout and exit 1.
        assert (result["code"], result["crash"], result["stderr"]) == (1, None, "")
        assert result["stdout"].strip()
        return
    assert_one_line_error(result, exitcodes.FAILURE, "runtime root")


@pytest.mark.parametrize("command", ID_COMMANDS)
def test_an_invalid_goal_id_is_a_usage_error(results: dict[str, Any], command: str) -> None:
    """A goal id that is not one safe path segment: exit 2 before any path is built."""
    assert_one_line_error(results[f"id:{command}:invalid"], exitcodes.USAGE, "invalid goal id")


@pytest.mark.parametrize("command", [c for c in ID_COMMANDS if c != "goal add"])
def test_an_unknown_goal_is_named(results: dict[str, Any], command: str) -> None:
    """A goal the registry does not have: exit 1 naming it, with a hint to list goals."""
    assert_one_line_error(results[f"id:{command}:unknown"], exitcodes.FAILURE, "'nope'")


@pytest.mark.parametrize("command", list(COMMANDS))
def test_an_unknown_flag_is_a_usage_error(results: dict[str, Any], command: str) -> None:
    """Every command refuses an unknown flag in one line with a --help hint, exit 2."""
    result = results[f"flag:{command}"]
    assert_one_line_error(result, exitcodes.USAGE, "--no-such-flag")
    assert "--help" in result["stderr"]


@pytest.mark.parametrize("name", list(BAD_FLAGS))
def test_bad_flags(results: dict[str, Any], name: str) -> None:
    """Out-of-range, unparsable and nonsensical flags: one line with the documented code."""
    _, code, phrase = BAD_FLAGS[name]
    assert_one_line_error(results[f"case:{name}"], code, phrase)


@pytest.mark.parametrize("name", list(BAD_FILES))
def test_bad_files(results: dict[str, Any], name: str) -> None:
    """A plan that is a directory, YAML, broken or hostless; a damaged registry: one line."""
    _, code, phrase = BAD_FILES[name]
    assert_one_line_error(results[f"case:{name}"], code, phrase)


def test_bad_flags_changed_nothing(results: dict[str, Any], arena: Path) -> None:
    """Refused `goal add`s registered nothing."""
    assert not (arena / "ok" / "goals" / "g3" / "goal.json").exists()
    assert results["init-creates"]["code"] == exitcodes.OK


def _loopx(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
    return subprocess.Popen(
        [sys.executable, "-m", "loopx", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=base | (env or {}),
    )


def test_the_console_entry_point_too(tmp_path: Path) -> None:
    """Through `python -m loopx`: a file root, a relative LOOPX_ROOT and --version, in parallel."""
    afile = tmp_path / "afile"
    afile.write_text("x")
    procs = [
        _loopx("status", "--root", str(afile)),
        _loopx("goal", "list", env={"LOOPX_ROOT": "relative/root"}),
        _loopx("--version"),
    ]
    (_, file_err), (_, rel_err), (version, _) = (p.communicate(timeout=60) for p in procs)
    assert [p.returncode for p in procs] == [1, 1, 0]
    assert file_err.splitlines()[0].endswith("is not a directory"), file_err
    assert "relative path" in rel_err, rel_err
    assert rel_err.count("\n") == 2, rel_err
    assert version.startswith("loopx ")


def _importing_loopx(proc: subprocess.Popen[str]) -> bool:
    """The child has loaded pydantic's core: it is inside the CLI's Ctrl-C guard."""
    try:
        return any("pydantic_core" in m.path for m in psutil.Process(proc.pid).memory_maps())
    except psutil.Error:
        return proc.poll() is not None


def test_ctrl_c_during_start_up_is_quiet(tmp_path: Path) -> None:
    """SIGINT while the CLI is still importing exits without a traceback."""
    proc = _loopx("status", "--root", str(tmp_path))
    deadline = time.monotonic() + 30
    while not _importing_loopx(proc) and time.monotonic() < deadline:
        time.sleep(0.001)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert "Traceback" not in err, err
    assert proc.returncode in (exitcodes.INTERRUPTED, -signal.SIGINT, 1), (proc.returncode, err)
