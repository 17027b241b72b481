"""The systemd units verify with systemd-analyze."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNITS = Path(__file__).resolve().parent.parent / "systemd"
ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed here")


def _loopx_bin() -> str:
    found = Path(sys.executable).with_name("loopx")
    assert found.exists(), "the loopx console script is not installed next to this Python"
    return str(found)


def _verify(
    unit: Path, *extra: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    assert ANALYZE is not None
    return subprocess.run(
        [ANALYZE, *extra, "verify", str(unit)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=60,
    )


@needs_analyze
def test_system_unit_verifies(tmp_path: Path) -> None:
    """The system unit has no error or warning once its paths exist on this machine."""
    text = (UNITS / "loopx-supervisor.service").read_text()
    text = text.replace("/opt/loopx/venv/bin/loopx", _loopx_bin())
    text = text.replace("/etc/loopx/loopx.env", str(UNITS / "loopx.env"))
    unit = tmp_path / "loopx-supervisor.service"
    unit.write_text(text)
    proc = _verify(unit)
    assert (proc.returncode, proc.stdout + proc.stderr) == (0, "")


@needs_analyze
def test_user_unit_verifies(tmp_path: Path) -> None:
    """The user unit has no error or warning."""
    text = (UNITS / "user" / "loopx-supervisor.service").read_text()
    unit = tmp_path / "loopx-supervisor.service"
    unit.write_text(text.replace("%h/.local/bin/loopx", _loopx_bin()))
    runtime = tmp_path / "xdg-runtime"
    runtime.mkdir(mode=0o700)
    proc = _verify(unit, "--user", env={**os.environ, "XDG_RUNTIME_DIR": str(runtime)})
    assert (proc.returncode, proc.stdout + proc.stderr) == (0, "")


def test_units_agree_with_the_supervisor_on_stop_timing() -> None:
    """TimeoutStopSec leaves room beyond the supervisor's --stop-grace-seconds."""
    for unit in (UNITS / "loopx-supervisor.service", UNITS / "user" / "loopx-supervisor.service"):
        text = unit.read_text()
        assert "Type=notify" in text
        assert "KillMode=mixed" in text
        grace = int(text.split("--stop-grace-seconds ")[1].split()[0])
        timeout = int(text.split("TimeoutStopSec=")[1].split("s")[0])
        assert timeout > grace


def _exec_start(unit_text: str, env: dict[str, str], setting: str = "ExecStart") -> list[str]:
    """ExecStart's (or ``setting``'s) argv with ${VAR} expanded from ``env``, as systemd does."""
    line = next(s for s in unit_text.splitlines() if s.startswith(f"{setting}="))
    words = line.removeprefix(f"{setting}=").split()
    out = []
    for word in words:
        expanded = word
        for key, value in env.items():
            expanded = expanded.replace("${" + key + "}", value)
        out.append(expanded)
    return out


def test_supervisor_started_as_execstart_speaks_notify(tmp_path: Path) -> None:
    """Run ExecStart exactly (loopx.env's variables, NOTIFY_SOCKET, WATCHDOG_USEC): READY, WATCHDOG, STOPPING, exit 0."""
    import socket
    import time

    root = tmp_path / "root"
    env_file = dict(
        line.split("=", 1)
        for line in (UNITS / "loopx.env").read_text().splitlines()
        if line and not line.startswith("#")
    )
    env_file["LOOPX_ROOT"] = str(root)
    env_file["LOOPX_AGENTS"] = "1"
    unit_text = (UNITS / "loopx-supervisor.service").read_text()
    argv = _exec_start(unit_text, env_file)
    assert argv[0] == "/opt/loopx/venv/bin/loopx"
    argv[0] = _loopx_bin()
    # ExecStartPre initialises the root (every command but init refuses an uninitialised one).
    pre = _exec_start(unit_text, env_file, "ExecStartPre")
    assert pre[1:] == ["init", "--root", str(root)]
    subprocess.run([_loopx_bin(), *pre[1:]], check=True, capture_output=True)
    sock_path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(sock_path))
    sock.settimeout(30)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
    env.update(env_file)
    # systemd sets WATCHDOG_USEC from WatchdogSec; 1 s makes the pings come every 0.5 s.
    env.update(NOTIFY_SOCKET=str(sock_path), WATCHDOG_USEC="1000000")
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        messages: list[str] = []
        deadline = time.monotonic() + 60
        while (
            not any("READY=1" in m for m in messages)
            or sum("WATCHDOG=1" in m for m in messages) < 2
        ):
            assert time.monotonic() < deadline, messages
            messages.append(sock.recv(4096).decode())
        ready = next(i for i, m in enumerate(messages) if "READY=1" in m)
        assert any("WATCHDOG=1" in m for m in messages[ready + 1 :])
        proc.send_signal(15)
        while not any("STOPPING=1" in m for m in messages):
            assert time.monotonic() < deadline, messages
            messages.append(sock.recv(4096).decode())
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        sock.close()


@needs_analyze
def test_system_unit_exposure_is_at_most_4(tmp_path: Path) -> None:
    """`systemd-analyze security --offline=true` rates the system unit 4.0 or less."""
    assert ANALYZE is not None
    proc = subprocess.run(
        [ANALYZE, "security", "--offline=true", str(UNITS / "loopx-supervisor.service")],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    line = next(s for s in proc.stdout.splitlines() if "Overall exposure level" in s)
    exposure = float(line.split(": ")[1].split()[0])
    assert exposure <= 4.0, line  # the bound the unit is held to
    docs = (UNITS.parent / "docs" / "operations.md").read_text()
    assert f"rates the unit {exposure}" in docs, "docs/operations.md states the figure"


@needs_analyze
def test_user_unit_exposure_is_at_most_5_and_stated(tmp_path: Path) -> None:
    """The user unit is hardened as far as a user manager allows, and the docs say how far."""
    assert ANALYZE is not None
    unit = UNITS / "user" / "loopx-supervisor.service"
    proc = subprocess.run(
        [ANALYZE, "security", "--offline=true", str(unit)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    line = next(s for s in proc.stdout.splitlines() if "Overall exposure level" in s)
    exposure = float(line.split(": ")[1].split()[0])
    assert exposure <= 5.0, line  # the bound the unit is held to
    docs = (UNITS.parent / "docs" / "operations.md").read_text()
    assert f"rates the user unit {exposure}" in docs, "docs/operations.md states the figure"


def test_units_do_not_restart_a_usage_error() -> None:
    """Exit 2 (a usage error) is never restarted: RestartPreventExitStatus=2 in both units."""
    for unit in (UNITS / "loopx-supervisor.service", UNITS / "user" / "loopx-supervisor.service"):
        assert "RestartPreventExitStatus=2" in unit.read_text().splitlines()


def test_documentation_exists_after_the_documented_install() -> None:
    """Documentation= names the file the wheel installs under <prefix>/share/doc/loopx."""
    text = (UNITS / "loopx-supervisor.service").read_text()
    docs = [s.split("=", 1)[1] for s in text.splitlines() if s.startswith("Documentation=file:")]
    assert docs == ["file:/opt/loopx/venv/share/doc/loopx/operations.md"]
    pyproject = (UNITS.parent / "pyproject.toml").read_text()
    assert '"share/doc/loopx" = ["docs/*.md"]' in pyproject
    installed = Path(sys.prefix) / "share" / "doc" / "loopx" / "operations.md"
    if installed.exists():  # a non-editable install (the wheel); editable ones skip data files
        assert installed.read_text() == (UNITS.parent / "docs" / "operations.md").read_text()
