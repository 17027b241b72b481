"""The done-check runner: exit code, a bounded output tail, the tree killed at the timeout."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from loopx.agents.checkrun import run_done_check
from loopx.donecheck import OUTPUT_TAIL_CHARS
from tests.fleet_helpers import alive


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}


def _check(tmp_path: Path, code: str, timeout_s: float = 30.0):
    return run_done_check(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        timeout_s=timeout_s,
        env=_env(),
        loopx_root=str(tmp_path),
        kill_grace_s=0.5,
    )


def test_exit_zero_passes_and_runs_in_the_directory(tmp_path):
    """A check that exits 0 passes; it ran in ``cwd``."""
    result = _check(tmp_path, "import os;print(os.getcwd())")
    assert (result.passed, result.exit_code, result.output_tail.strip()) == (
        True,
        0,
        str(tmp_path),
    )


def test_a_failing_check_keeps_its_exit_code_and_both_streams(tmp_path):
    """Non-zero is not passed; stdout and stderr both reach the tail."""
    result = _check(
        tmp_path, "import sys;print('out');print('3 failed', file=sys.stderr);sys.exit(3)"
    )
    assert not result.passed
    assert result.exit_code == 3
    assert "out" in result.output_tail
    assert "3 failed" in result.output_tail
    assert result.describe() == "failed with exit code 3"


def test_only_the_tail_of_a_long_output_is_kept(tmp_path):
    """1 MB of output keeps its last OUTPUT_TAIL_CHARS characters and counts the rest."""
    code = "import sys;sys.stdout.write('a'*1000000 + 'THE END');sys.exit(1)"
    result = _check(tmp_path, code)
    assert len(result.output_tail) == OUTPUT_TAIL_CHARS
    assert result.output_tail.endswith("THE END")
    assert result.output_dropped == 1000007 - OUTPUT_TAIL_CHARS


def test_the_whole_tree_is_killed_at_the_timeout(tmp_path):
    """A check and the grandchild it started are gone once the timeout passes."""
    pidfile = tmp_path / "grandchild.pid"
    code = (
        "import subprocess,sys,time;"
        "p=subprocess.Popen([sys.executable,'-c','import time;time.sleep(60)']);"
        f"open({str(pidfile)!r},'w').write(str(p.pid));time.sleep(60)"
    )
    started = time.monotonic()
    result = _check(tmp_path, code, timeout_s=1.0)
    assert result.timed_out
    assert not result.passed
    assert time.monotonic() - started < 20
    grandchild = int(pidfile.read_text())
    assert not alive(grandchild)


def test_usage_is_measured(tmp_path):
    """CPU burnt by the check is charged (psutil/rusage)."""
    result = _check(
        tmp_path, "import time\nt=time.process_time()\nwhile time.process_time()-t<0.3: pass"
    )
    assert result.usage.cpu_s >= 0.25
    assert result.usage.wall_s > 0


def test_a_missing_program_is_a_spawn_error(tmp_path):
    """A program that cannot start is reported, never raised."""
    result = run_done_check(
        ["no-such-check-program-xyz"],
        cwd=tmp_path,
        timeout_s=5,
        env=_env(),
        loopx_root=str(tmp_path),
    )
    assert not result.passed
    assert result.spawn_error is not None
    assert "no-such-check-program-xyz" in result.describe()
