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


def _verify(unit: Path, *extra: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    assert ANALYZE is not None
    return subprocess.run(
        [ANALYZE, *extra, "verify", str(unit)], capture_output=True, text=True, env=env, check=False, timeout=60
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
