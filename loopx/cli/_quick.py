"""A warm `loopx quota should-run ID [--json]`, answered before argparse is imported.

The console script calls :func:`warm_should_run` first. It recognises only the
plain form of the command (the common options ``--root``/``--runtime-root``,
``--registry`` and ``--log-level``, each at most once, anywhere; ``--json``
after ``should-run``) and prints the stored decision while it holds
(``loopx.api.print_quota_snapshot``). Anything else, and any doubt, returns
None: the full CLI then parses the command line and decides (issue 14: a warm
``should-run`` within 2x of a bare Python start).
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # not `typing`: importing it costs more than the rest of this path
if TYPE_CHECKING:
    from collections.abc import Sequence

_VALUED = {"--root": "root", "--runtime-root": "root", "--registry": "registry"}
_LOG_LEVELS = frozenset({"debug", "info", "warning", "error"})
_WORDS = ("quota", "should-run")


def parse_should_run(argv: Sequence[str]) -> tuple[str, bool, dict[str, str]] | None:
    """``(goal id, --json, {"root"|"registry": value})`` of a plain `quota should-run`, or None."""
    words: list[str] = []
    options: dict[str, str] = {}
    as_json = False
    args = iter(argv)
    for arg in args:
        if not arg.startswith("-"):
            words.append(arg)
            continue
        name, eq, value = arg.partition("=")
        if arg == "--json" and not as_json and words[:2] == list(_WORDS):
            as_json = True
            continue
        if name not in (*_VALUED, "--log-level"):
            return None  # -h, abbreviations, `--`, unknown options: argparse's to judge
        if not eq:
            value = next(args, "-")
            if value.startswith("-"):
                return None
        key = _VALUED.get(name, "log_level")
        if key in options or (key == "log_level" and value not in _LOG_LEVELS):
            return None
        options[key] = value
    if len(words) != len(_WORDS) + 1 or tuple(words[:2]) != _WORDS:
        return None
    options.pop("log_level", None)  # the stored answer logs nothing
    return words[2], as_json, options


def warm_should_run(argv: Sequence[str]) -> int | None:
    """Print the stored answer of a plain `quota should-run` and return its exit code, or None."""
    parsed = parse_should_run(argv)
    if parsed is None or (sys.stdout.encoding or "").lower().replace("-", "") != "utf8":
        return None  # the stored bytes are UTF-8, as print() writes them on a UTF-8 stdout
    goal_id, as_json, options = parsed
    try:
        from loopx.api import print_quota_snapshot  # noqa: PLC0415 - standard library only

        sys.stdout.flush()
        return print_quota_snapshot(
            goal_id,
            options.get("root"),
            registry=options.get("registry"),
            as_json=as_json,
            out=sys.stdout.fileno(),
        )
    except Exception:  # noqa: BLE001 - any doubt: the full CLI decides and reports errors
        return None
