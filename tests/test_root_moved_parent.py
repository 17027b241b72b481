"""The root's parent directory renamed (or renamed and linked back) under a running supervisor.

The supervisor used to die on the first refused write ("refusing to use
<parent>: it is a symlink") before its root check ran: no ``root_moved`` in
its log, no ``root-moved.json``, a ``supervisor.json`` still saying running.
Now any refusal caused by the move stops the fleet as the root check does,
and the record of the end lands in the directory it opened.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from loopx import exitcodes
from loopx.root.held import NOTE_NAME
from tests.fleet_helpers import kill_everything, start_supervisor, wait_for
from tests.turnkit import make_root


@pytest.mark.timeout(180)
@pytest.mark.parametrize("linked", [False, True], ids=["renamed", "renamed-and-linked"])
def test_a_moved_parent_stops_the_supervisor_with_root_moved_recorded(
    tmp_path: Path, *, linked: bool
) -> None:
    """Given a supervisor on parent/root, move parent away (and leave a symlink to it at the
    old name): the supervisor exits 1 logging root_moved, with no traceback, and the moved
    root holds the note and a supervisor.json that says it stopped."""
    parent = tmp_path / "parent"
    parent.mkdir(mode=0o700)
    root = parent / "root"
    make_root(root)
    log = tmp_path / "supervisor.log"
    sup = start_supervisor(root, "--agents", "1", log=log)
    try:
        wait_for("the ready line", lambda: "supervisor_ready" in log.read_text(), timeout=60)
        moved = tmp_path / "moved"
        os.rename(parent, moved)
        if linked:
            parent.symlink_to(moved)
        assert sup.wait(timeout=90) == exitcodes.FAILURE
        text = log.read_text()
        assert '"root_moved"' in text
        assert "Traceback" not in text
        assert "refusing to use" not in text
        note = json.loads((moved / "root" / NOTE_NAME).read_text())
        assert note["path"] == str(root)
        record = json.loads((moved / "root" / "supervisor.json").read_text())
        assert (record["state"], record["exit_code"]) == ("stopped", exitcodes.FAILURE)
    finally:
        kill_everything(root, sup)
