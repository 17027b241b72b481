"""A multi-node Ray cluster on this machine, for the tests: one raylet per node, each its own temp dir.

``ray start`` daemonises a node's processes; every one of them (GCS, raylet,
agents, workers and the hosts they spawn) inherits ``LXTEST_RAY_NODE``, a
value unique to the node, so the node is stopped by killing exactly those
processes by pid. ``ray stop`` is never used: it stops every Ray process of
the machine, other users' included.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import psutil

from tests.fleet_helpers import clean_env

NODE_TAG: Final = "LXTEST_RAY_NODE"
START_TIMEOUT_S: Final = 180.0
RAY_ENV: Final = {
    "RAY_USAGE_STATS_ENABLED": "0",
    # `ray start --address` refuses to run without it. It also makes Ray advertise the
    # machine's address rather than 127.0.0.1 (it replaces a loopback --node-ip-address).
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1",
    "RAY_AUTH_MODE": "disabled",
    "RAY_DEDUP_LOGS": "0",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class RayNode:
    """One node: its temp dir (sessions, sockets, logs) and the tag its processes carry."""

    name: str
    temp_dir: Path
    resources: dict[str, float]
    gcs_port: int | None = None  # the head's
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def tag(self) -> str:
        return str(self.temp_dir)

    def argv(self, head_address: str | None) -> list[str]:
        ray = str(Path(sys.executable).with_name("ray"))
        argv = [
            ray, "start", "--num-cpus", "2",
            "--resources", json.dumps(self.resources), "--temp-dir", str(self.temp_dir),
            "--disable-usage-stats", "--min-worker-port", "0", "--max-worker-port", "0",
            # Fixed defaults (52365, 8265) would collide with the other node or other users.
            "--dashboard-agent-listen-port", str(free_port()),
            "--dashboard-agent-grpc-port", str(free_port()),
            "--metrics-export-port", str(free_port()),
        ]  # fmt: skip
        if head_address is None:
            self.gcs_port = free_port()
            argv += [
                "--head", "--port", str(self.gcs_port), "--include-dashboard", "false",
                "--dashboard-host", "127.0.0.1", "--dashboard-port", str(free_port()),
            ]  # fmt: skip
        else:
            argv += ["--address", head_address]
        return argv

    def start(self, head_address: str | None = None) -> None:
        env = clean_env(**RAY_ENV, **self.extra_env, **{NODE_TAG: self.tag})
        done = subprocess.run(
            self.argv(head_address),
            capture_output=True, text=True, env=env, timeout=START_TIMEOUT_S, check=False,
        )  # fmt: skip
        assert done.returncode == 0, f"ray start ({self.name}) failed: {done.stderr[-2000:]}"

    @property
    def address(self) -> str:
        assert self.gcs_port is not None, "not a head node"
        return f"127.0.0.1:{self.gcs_port}"

    def processes(self) -> list[psutil.Process]:
        """Every live process of this node (by its tag), workers and their hosts included."""
        found = []
        for proc in psutil.process_iter():
            with contextlib.suppress(psutil.Error):
                if proc.environ().get(NODE_TAG) == self.tag:
                    found.append(proc)
        return found

    def raylet(self) -> psutil.Process | None:
        for proc in self.processes():
            with contextlib.suppress(psutil.Error):
                if proc.name() == "raylet":
                    return proc
        return None

    def node_id(self) -> str:
        raylet = self.raylet()
        assert raylet is not None, f"{self.name} has no raylet"
        for arg in raylet.cmdline():
            if arg.startswith("--node_id="):
                return arg.removeprefix("--node_id=")
        raise AssertionError(f"{self.name}'s raylet names no --node_id")

    def kill(self) -> None:
        """SIGKILL every process of the node (a machine lost at once)."""
        procs = self.processes()
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(procs, timeout=10)


def new_node(name: str, resources: dict[str, float], **extra_env: str) -> RayNode:
    """A node with a short private temp dir (Ray's socket paths must stay under 108 bytes)."""
    return RayNode(
        name, Path(tempfile.mkdtemp(prefix=f"lx{name}.")), resources, extra_env=extra_env
    )
