"""The canary's contract probe passes on every tested version of each real CLI.

The probe runs the CLI's ``--version`` and ``--help`` and two turns through its
adapter against LoopX's own loopback echo endpoint (no mock of the tests): the
newest Claude Code prints the session's cost on resume, and the probe checks the
adapter still reads the run's own.
"""

from __future__ import annotations

import pytest

from loopx.agents.canary.probe import probe
from loopx.hostcanary import ProbeOutcome
from loopx.model import utcnow
from tests.realhosts.conftest import NEWEST, PINNED, bin_of, releases, require_cli

pytestmark = [pytest.mark.realhosts, pytest.mark.timeout(240)]

CASES = [(cli, release) for cli in ("codex", "claude", "gemini") for release in releases(cli)]


@pytest.mark.parametrize(("cli", "release"), CASES, ids=[f"{c}-{r}" for c, r in CASES])
def test_every_tested_version_passes_the_contract_probe(cli, release):
    """Version read, flags present, output parsed, session resumed, run-own usage: passed."""
    require_cli(cli, release)
    result = probe(cli, now=utcnow(), path=str(bin_of(release)))
    expected = (PINNED if release == "pinned" else NEWEST)[cli]
    assert (result.outcome, result.detail) == (ProbeOutcome.PASSED, "")
    assert result.fingerprint is not None
    assert (result.fingerprint.version, result.tested, result.smoke) == (expected, True, True)


def test_aider_passes_the_probe_without_a_smoke():
    """aider: version read and flags present; the echo endpoint speaks no Chat Completions."""
    result = probe("aider", now=utcnow(), path=str(require_cli("aider").parent))
    assert (result.outcome, result.detail) == (ProbeOutcome.PASSED, "")
    assert result.fingerprint is not None
    assert (result.fingerprint.version, result.tested, result.smoke) == (
        PINNED["aider"],
        True,
        False,
    )


def _wrapped(tmp_path, release: str, script: str) -> str:
    """A PATH whose claude is a shell wrapper around the real one of ``release``."""
    real = require_cli("claude", release)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "claude"
    wrapper.write_text(f'#!/bin/sh\nREAL="{real}"\n{script}\nexec "$REAL" "$@"\n')
    wrapper.chmod(0o755)
    return str(bin_dir)


@pytest.mark.parametrize("release", releases("claude"))
def test_a_real_claude_with_a_renamed_flag_is_drift(tmp_path, release):
    """The real CLI's help with --output-format renamed: flag_missing, before any smoke."""
    script = (
        '[ "$1" = --help ] && { "$REAL" --help | sed s/--output-format/--output-fmt/g; exit 0; }'
    )
    result = probe("claude", now=utcnow(), path=_wrapped(tmp_path, release, script))
    assert (result.outcome, result.detail, result.smoke) == (
        ProbeOutcome.FLAG_MISSING,
        "--output-format missing from `claude --help`",
        False,
    )


@pytest.mark.parametrize("release", releases("claude"))
def test_a_real_claude_printing_another_version_passes_untested(tmp_path, release):
    """Another version that still keeps the contract passes, and is recorded as untested."""
    script = '[ "$1" = --version ] && { echo "2.1.340 (Claude Code)"; exit 0; }'
    result = probe("claude", now=utcnow(), path=_wrapped(tmp_path, release, script))
    assert result.fingerprint is not None
    assert (result.outcome, result.fingerprint.version, result.tested) == (
        ProbeOutcome.PASSED,
        "2.1.340",
        False,
    )
