"""What one turn per workdir adds to a claim: the lease alone against the lease and the lock.

Run as ``python benchmarks/workdir_lock.py [PASSES]``. The two are interleaved, so a
loaded machine slows both alike; the ratio and the difference of the medians are the figures.
The workdir is 7 levels deep (one ``stat`` and one marker per level).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from loopx.model import utcnow
from loopx.registry.goalrecords import HostKind, HostSpec
from loopx.registry.goals import GoalChanges, add_goal
from loopx.root import ResolvedRoot, RootSource, open_root
from loopx.turn.lease import claim, release
from loopx.turn.workdir import acquire_workdir, release_workdir


def main(passes: int) -> None:
    """Print the medians of both, their ratio and the lock's cost."""
    base = Path(tempfile.mkdtemp())
    layout = open_root(
        ResolvedRoot(base / "r", base / "r/registry.json", RootSource.FLAG), create=True
    )
    workdir = base / "a" / "b" / "c" / "repo"
    workdir.mkdir(parents=True)
    changes = GoalChanges(objective="o", workdir=str(workdir), host=HostSpec(kind=HostKind.DEMO))
    add_goal(layout, "g", changes, update=False, default_workdir=workdir, now=utcnow())

    def lease_only() -> None:
        lease = claim(layout, "g", agent_id="x", now=utcnow()).lease
        assert lease is not None
        release(layout, lease)

    def with_lock() -> None:
        lease = claim(layout, "g", agent_id="x", now=utcnow()).lease
        assert lease is not None
        hold = acquire_workdir(layout, str(workdir), lease, now=utcnow(), grace_s=30).hold
        assert hold is not None
        release_workdir(layout, hold)
        release(layout, lease)

    times: dict[str, list[float]] = {"lease": [], "lease+lock": []}
    for _ in range(passes):
        for name, run in (("lease", lease_only), ("lease+lock", with_lock)):
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    a, b = (statistics.median(times[k]) for k in ("lease", "lease+lock"))
    print(
        f"claim+release {a * 1e3:.2f} ms; with the workdir lock {b * 1e3:.2f} ms; "
        f"ratio {b / a:.2f}; the lock adds {(b - a) * 1e3:.2f} ms"
    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
