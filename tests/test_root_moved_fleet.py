"""A root renamed under a running fleet: a recorded stop, then a clean restart."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from loopx.root.held import NOTE_NAME
from tests.fleet_helpers import kill_everything, start_supervisor, wait_for
from tests.turnkit import make_root


@pytest.mark.timeout(180)
def test_a_renamed_root_stops_the_fleet_saying_why_and_the_next_start_reads_it(
    tmp_path: Path,
) -> None:
    """Given a running supervisor, rename its root: it exits 1 with root_moved; after moving
    the root back, the next start reports the recorded stop and runs."""
    root = tmp_path / "root"
    make_root(root)
    log = tmp_path / "supervisor.log"
    sup = start_supervisor(root, "--agents", "1", log=log)
    try:
        wait_for("the ready line", lambda: "supervisor_ready" in log.read_text(), timeout=60)
        moved = tmp_path / "moved"
        os.rename(root, moved)
        assert sup.wait(timeout=60) == 1
        assert "root_moved" in log.read_text()
        note = json.loads((moved / NOTE_NAME).read_text())
        assert note["path"] == str(root)
        assert not root.exists(), "nothing was recreated at the old path"
        os.rename(moved, root)
        again = start_supervisor(root, "--agents", "1", log=log)
        try:
            wait_for(
                "the previous stop to be reported",
                lambda: "previous_stop_root_moved" in log.read_text(),
                timeout=60,
            )
            assert not (root / NOTE_NAME).exists()
        finally:
            kill_everything(root, again)
    finally:
        kill_everything(root, sup)
