"""Where the notifications' links point: configured, or a serve that runs now; never a dead one."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from loopx.model import utcnow
from loopx.notify.links import ServeAddress, link_base, serve_path
from loopx.notify.targets import load_config
from loopx.root import Layout
from loopx.storage.files import atomic_write_model
from tests.fleet_helpers import clean_env, cli, wait_for


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_set_link_base_is_what_the_links_use_and_list_warns_when_it_does_not_answer(
    root: Path,
) -> None:
    """`notify set --link-base`: list shows it, and warns (stderr, --json) when it does not answer."""
    assert cli(root, "init").returncode == 0
    assert cli(root, "notify", "add", "json://127.0.0.1:9/hook").returncode == 0
    dead = f"http://127.0.0.1:{_dead_port()}/"
    done = cli(root, "notify", "set", "--link-base", dead)
    assert done.returncode == 0, done.stderr
    listed = cli(root, "notify", "list")
    assert f"links: {dead}" in listed.stdout
    assert "does not answer" in listed.stderr
    doc = json.loads(cli(root, "notify", "list", "--json").stdout)
    assert doc["link_base"] == dead
    assert "does not answer" in doc["link_base_problem"]
    report = json.loads(cli(root, "doctor", "--json").stdout)
    assert [f["code"] for f in report["findings"] if f["code"] == "link_base"] == ["link_base"]
    assert cli(root, "notify", "set", "--link-base", "ftp://x/").returncode == 2
    cleared = cli(root, "notify", "set", "--no-link-base", "--json")
    assert json.loads(cleared.stdout)["link_base"] is None
    assert "no dashboard address" in json.loads(cleared.stdout)["link_base_problem"]


def test_a_killed_serve_lends_no_address(root: Path, layout: Layout) -> None:
    """A serve record whose process is gone (a SIGKILLed server) is not where the links point."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    me = ServeAddress(
        url="http://127.0.0.1:1/",
        pid=child.pid,
        pid_started_at=1.0,
        hostname=os.uname().nodename,
        started_at=utcnow(),
    )
    serve_path(layout).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_model(serve_path(layout), me)
    assert link_base(layout, load_config(layout)) is None


def test_a_running_serve_lends_its_address_until_it_stops(root: Path) -> None:
    """While serve runs its address answers and list says nothing; SIGTERM takes it back."""
    assert cli(root, "init").returncode == 0
    assert cli(root, "notify", "add", "json://127.0.0.1:9/hook").returncode == 0
    serve = subprocess.Popen(
        [sys.executable, "-m", "loopx", "--root", str(root), "serve", "--no-token", "--port", "0"],
        env=clean_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = wait_for(
            "serve's address",
            lambda: json.loads(cli(root, "notify", "list", "--json").stdout)["link_base"],
            timeout=30,
        )
        doc = json.loads(cli(root, "notify", "list", "--json").stdout)
        assert doc["link_base_problem"] is None
        assert url.startswith("http://127.0.0.1:")
    finally:
        serve.terminate()
        serve.wait(timeout=30)
    doc = json.loads(cli(root, "notify", "list", "--json").stdout)
    assert doc["link_base"] is None
