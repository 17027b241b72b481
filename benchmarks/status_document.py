"""The ``loopx status --json`` document's bytes on an existing root, in-process: whole vs assembled.

Builds the projection as a cold ``loopx status --json --clear-cache`` does
(the cache cleared, then refreshed), then times, ``--passes`` times each (the
lowest wall time is printed), serialising it whole (``json_bytes(projection,
indent=2) + b"\\n"``, what ``status_document`` did before) and assembling it
from per-goal fragments (:func:`loopx.status.document.status_bytes`), and
checks the two are the same bytes. Both run with the collector paused, as
``status_document`` runs them. Clears the root's status cache.

    python benchmarks/status_document.py ROOT [--passes 5]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from _timing import lowest  # benchmarks/_timing.py, next to this script

from loopx.collector import collector_paused
from loopx.model import utcnow
from loopx.root import Layout
from loopx.status.current import clear_status_cache, load_status
from loopx.status.document import status_bytes
from loopx.status.view import json_bytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--passes", type=int, default=5)
    args = parser.parse_args()
    layout = Layout.at(args.root)
    clear_status_cache(layout)
    projection = load_status(layout, now=utcnow())
    whole = json_bytes(projection, indent=2) + b"\n"
    if status_bytes(projection) != whole:
        raise SystemExit("the assembled document differs from the whole one")
    with collector_paused():  # as status_document builds it
        old = lowest(args.passes, lambda: json_bytes(projection, indent=2) + b"\n")
        new = lowest(args.passes, lambda: status_bytes(projection))
    print(
        f"goals {len(projection.goals)}  document {len(whole) / 1e6:.1f} MB  "
        f"whole {old:.4f} s  assembled {new:.4f} s"
    )


if __name__ == "__main__":
    main()
