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
