"""The canary's contract probe of one host kind's CLI: version, flags, and a free two-turn smoke.

In order, stopping at the first that fails (its :class:`ProbeOutcome`):

1. the binary is found on PATH (``missing`` otherwise: nothing to probe);
2. ``--version`` prints a version (``version_unreadable``);
3. every flag the adapter passes (``help_flags``) is an option in its help
   (``help_argv``) (``flag_missing``);
4. where the CLI takes a custom endpoint (:data:`.endpoints.ENDPOINTS`), two
   turns through the adapter against the loopback :class:`.echo.EchoServer`,
   in a private home: each run's output reads as a result
   (``output_unparsed``), the second continues the first's session
   (``session_not_resumed``), and the second run's tokens and cost are its
   own, not the session's (``usage_not_per_run``).

Nothing here touches the root; the caller records the result
(:func:`loopx.hostcanary.record_probe`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from datetime import datetime, timedelta
from pathlib import Path
from typing import Final

from loopx.agents.canary.echo import EchoServer
from loopx.agents.canary.endpoints import ENDPOINTS
from loopx.agents.hosts import host_for
from loopx.agents.hosts.base import Host, HostOutput, Interpretation
from loopx.hostcanary import Fingerprint, ProbeOutcome, ProbeResult
from loopx.registry.goalrecords import Goal, HostSpec
from loopx.registry.hostprogram import DEFAULT_PROGRAMS
from loopx.state import GoalState, HostSession
from loopx.turn.protocol import Envelope

RUN_TIMEOUT_S: Final = 90.0
OUTPUT_LIMIT: Final = 1024 * 1024
VERSION: Final = re.compile(r"\d+\.\d+\.\d+(?:[-+.][0-9A-Za-z.-]+)?")


class ProbeFailedError(Exception):
    """A check failed: the outcome and its words (caught in :func:`probe`, never raised out)."""

    def __init__(self, outcome: ProbeOutcome, detail: str) -> None:
        super().__init__(detail)
        self.outcome, self.detail = outcome, detail


def program_name(kind: str) -> str:
    """The program a kind runs by default (a plug-in kind's is its own name)."""
    return DEFAULT_PROGRAMS.get(kind, kind)


def tested_versions(host: Host) -> tuple[str, ...]:
    """The versions the adapter declares it was tested with (none: an adapter without the list)."""
    return tuple(getattr(host, "tested_versions", ()))


def _run(argv: list[str], env: dict[str, str], cwd: Path, stdin: bytes = b"") -> HostOutput:
    try:
        proc = subprocess.run(
            argv, input=stdin, capture_output=True, env=env, cwd=cwd, timeout=RUN_TIMEOUT_S,
            check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired as e:
        msg = f"`{' '.join(argv[:2])}` did not finish in {RUN_TIMEOUT_S:g} s"
        raise ProbeFailedError(ProbeOutcome.PROBE_ERROR, msg) from e
    except OSError as e:
        raise ProbeFailedError(ProbeOutcome.PROBE_ERROR, f"{argv[0]} cannot run: {e}") from e
    return HostOutput(
        exit_code=proc.returncode if proc.returncode >= 0 else None,
        signal=-proc.returncode if proc.returncode < 0 else None,
        stdout=proc.stdout[:OUTPUT_LIMIT].decode(errors="replace"),
        stderr=proc.stderr[:OUTPUT_LIMIT].decode(errors="replace"),
    )


def read_version(program: str, env: dict[str, str], cwd: Path) -> str:
    """The version ``program --version`` prints."""
    out = _run([program, "--version"], env, cwd)
    found = VERSION.search(out.stdout) or VERSION.search(out.stderr)
    if out.exit_code != 0 or found is None:
        text = (out.stdout + out.stderr).strip()[:120] or "(nothing)"
        msg = f"`{Path(program).name} --version` exited {out.exit_code} printing {text!r}"
        raise ProbeFailedError(ProbeOutcome.VERSION_UNREADABLE, msg)
    return found.group(0)


def installed_version(program: str, path: str | None = None) -> tuple[str | None, str | None]:
    """(where ``program`` is on ``path``, the version it prints); None for what is not found."""
    binary = shutil.which(program, path=path)
    if binary is None:
        return None, None
    with tempfile.TemporaryDirectory(prefix="loopx-version-") as tmp:
        try:
            return binary, read_version(binary, base_env(Path(tmp)), Path(tmp))
        except ProbeFailedError:
            return binary, None


def check_flags(host: Host, program: str, env: dict[str, str], cwd: Path) -> None:
    """Every flag the adapter passes is an option its help lists (a subcommand: a command)."""
    help_argv = list(getattr(host, "help_argv", ("--help",)))
    out = _run([program, *help_argv], env, cwd)
    text = out.stdout + out.stderr
    for flag in getattr(host, "help_flags", ()):
        listed = re.compile(rf"^\s*(?:-\w,\s*)?{re.escape(flag)}(?![\w-])", re.MULTILINE)
        if not listed.search(text):
            where = " ".join([Path(program).name, *help_argv])
            raise ProbeFailedError(ProbeOutcome.FLAG_MISSING, f"{flag} missing from `{where}`")


def _envelope(goal: Goal, root: Path, seq: int, session: HostSession | None) -> Envelope:
    now = datetime.now().astimezone()
    return Envelope(
        goal_id=goal.id,
        turn_key=f"{goal.id}-{seq}-1",
        seq=seq,
        epoch=1,
        objective=goal.objective,
        workdir=goal.workdir,
        root=str(root),
        result_file=str(root / f"result-{seq}.json"),
        turn_timeout_s=RUN_TIMEOUT_S,
        deadline_at=now + timedelta(seconds=RUN_TIMEOUT_S),
        state=GoalState(goal_id=goal.id, host_session=session),
    )


def _turn(host: Host, goal: Goal, envelope: Envelope, env: dict[str, str]) -> Interpretation:
    """One turn through the adapter, spawned as the turn runner does (cwd: the workdir)."""
    invocation = host.prepare(goal, envelope)
    output = _run(invocation.argv, {**env, **invocation.env}, Path(goal.workdir), invocation.stdin)
    result_file = Path(envelope.result_file)
    text = result_file.read_text(errors="replace") if result_file.exists() else None
    return host.interpret(envelope, output.model_copy(update={"result_file_text": text}))


def smoke(
    host: Host, kind: str, program: str, home: Path, env: dict[str, str], *, now: datetime
) -> None:
    """Two turns against the echo endpoint: parsed, resumed, and the second's usage its own."""
    work, root = home / "work", home / "root"
    work.mkdir()
    root.mkdir()
    goal = Goal(
        id="canary",
        objective="reply with the result object",
        workdir=str(work),
        host=HostSpec(kind=kind, argv=[program]),
        created_at=now,
        updated_at=now,
    )
    with EchoServer() as echo:
        run_env = {**env, **ENDPOINTS[kind](echo.url, home)}
        first = _turn(host, goal, _envelope(goal, root, 1, None), run_env)
        n1 = len(echo.requests)
        _parsed(first, "run 1")
        if first.session is None or not first.session.session_id:
            raise ProbeFailedError(ProbeOutcome.SESSION_NOT_RESUMED, "run 1 named no session")
        second = _turn(host, goal, _envelope(goal, root, 2, first.session), run_env)
        n2 = len(echo.requests) - n1
    _parsed(second, "run 2 (resumed)")
    if second.session is None or second.session.session_id != first.session.session_id:
        got = second.session.session_id if second.session else None
        msg = f"run 2 was given session {first.session.session_id} and reported {got}"
        raise ProbeFailedError(ProbeOutcome.SESSION_NOT_RESUMED, msg)
    _own_usage(first, second, n1, n2)


def _parsed(seen: Interpretation, which: str) -> None:
    if seen.result is None:
        words = seen.failure.message if seen.failure is not None else "no result"
        raise ProbeFailedError(ProbeOutcome.OUTPUT_UNPARSED, f"{which}: {words}"[:300])


def _own_usage(first: Interpretation, second: Interpretation, n1: int, n2: int) -> None:
    """The second run's figures scale with its own requests, not the session's (Pure)."""
    scale = n2 / n1 if n1 else 1.0
    expected = (first.input_tokens * scale, first.output_tokens * scale, first.cost_usd * scale)
    got = (second.input_tokens, second.output_tokens, second.cost_usd)
    if any(abs(g - e) > max(1e-9, 1e-6 * e) for g, e in zip(got, expected, strict=True)):
        msg = (
            f"run 2 reported {got[0]} in, {got[1]} out, ${got[2]:.6f} for {n2} requests; "
            f"run 1 {first.input_tokens} in, {first.output_tokens} out, "
            f"${first.cost_usd:.6f} for {n1}: the figures cover more than the run"
        )
        raise ProbeFailedError(ProbeOutcome.USAGE_NOT_PER_RUN, msg)


def base_env(home: Path) -> dict[str, str]:
    """A private HOME and config directory; PATH kept so the CLI finds its interpreter."""
    return {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "NO_COLOR": "1",
        "TZ": "UTC",
    }


def probe(kind: str, *, now: datetime, path: str | None = None) -> ProbeResult:
    """Probe ``kind``'s CLI (found on ``path``, default $PATH); never raises for a failed check.

    Raises:
        HostUnsupportedError: no adapter of ``kind`` is installed.
    """
    host = host_for(kind)
    program = shutil.which(program_name(kind), path=path)
    if program is None:
        detail = f"{program_name(kind)} not found on PATH"
        return ProbeResult(kind=kind, outcome=ProbeOutcome.MISSING, detail=detail, checked_at=now)
    st = os.stat(program)
    fingerprint = Fingerprint(path=program, size=st.st_size, mtime_ns=st.st_mtime_ns)
    outcome, detail, smoked = ProbeOutcome.PASSED, "", False
    with tempfile.TemporaryDirectory(prefix="loopx-canary-") as tmp:
        home = Path(tmp)
        env = base_env(home)
        try:
            version = read_version(program, env, home)
            fingerprint = fingerprint.model_copy(update={"version": version})
            check_flags(host, program, env, home)
            if kind in ENDPOINTS:
                smoked = True
                smoke(host, kind, program, home, env, now=now)
        except ProbeFailedError as e:
            outcome, detail = e.outcome, e.detail
    return ProbeResult(
        kind=kind,
        outcome=outcome,
        detail=detail,
        fingerprint=fingerprint,
        tested=fingerprint.version in tested_versions(host),
        smoke=smoked,
        checked_at=now,
    )
