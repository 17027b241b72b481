"""The memo: stored bytes replayed while their input files and the clock hold, or a miss."""

from __future__ import annotations

import io
import os
import time
from pathlib import Path

from loopx import memo


def stored(tmp_path: Path, **options: object) -> tuple[str, Path]:
    source = tmp_path / "input"
    source.write_text("v1")
    path = str(tmp_path / "answer.memo")
    assert memo.store(
        path, b"the answer\n", inputs=[str(source)], computed_at=time.time(), **options
    )  # type: ignore[arg-type]
    return path, source


def replayed(path: str, **options: object) -> tuple[int | None, bytes]:
    out = io.BytesIO()
    code = memo.replay(path, out, **options)  # type: ignore[arg-type]
    return code, out.getvalue()


def test_an_unchanged_input_replays_the_bytes_and_exit_code(tmp_path: Path) -> None:
    """The stored bytes and exit code come back while nothing changed."""
    path, _ = stored(tmp_path, valid_until=None, exit_code=3)
    assert replayed(path) == (3, b"the answer\n")


def test_a_rewritten_input_misses(tmp_path: Path) -> None:
    """An input replaced by the same bytes (a new inode) is a change: a miss."""
    path, source = stored(tmp_path, valid_until=None)
    tmp = source.with_name("input.tmp")
    tmp.write_text("v1")
    os.replace(tmp, source)
    assert replayed(path) == (None, b"")


def test_the_clock_bounds_a_memo(tmp_path: Path) -> None:
    """Past its valid-until time, past max_age or before it was computed, a memo misses."""
    now = time.time()
    path, _ = stored(tmp_path, valid_until=now + 60)
    assert replayed(path, now=now + 59)[0] == 0
    assert replayed(path, now=now + 61)[0] is None
    assert replayed(path, now=now + 30, max_age=10)[0] is None
    assert replayed(path, now=now - 3600)[0] is None


def test_a_key_of_another_kind_misses(tmp_path: Path) -> None:
    """A memo stored under one key (version, registry) does not answer for another."""
    path, _ = stored(tmp_path, valid_until=None, key="a")
    assert replayed(path, key="a")[0] == 0
    assert replayed(path, key="b")[0] is None


def test_holes_are_filled_at_replay(tmp_path: Path) -> None:
    """Each hole is asked of ``fill``; one it cannot fill, or no ``fill``, is a miss."""
    source = tmp_path / "input"
    source.write_text("x")
    path = str(tmp_path / "m")
    body = b"at 00:00, 5 left\n"
    holes = [(3, 8, "time"), (10, 11, "left")]
    memo.store(
        path, body, inputs=[str(source)], computed_at=time.time(), valid_until=None, holes=holes
    )
    values = {"time": b"12:34", "left": b"7"}
    assert replayed(path, fill=values.get) == (0, b"at 12:34, 7 left\n")
    assert replayed(path, fill={"time": b"1"}.get)[0] is None
    assert replayed(path)[0] is None


def test_a_damaged_memo_is_a_miss(tmp_path: Path) -> None:
    """A torn or foreign file is never an error: it is a cache."""
    path, _ = stored(tmp_path, valid_until=None)
    for damage in (b"", b"{not json\n", b"[]\n", b'{"schema_version": 1}\nbody'):
        Path(path).write_bytes(damage)
        assert replayed(path) == (None, b"")


def test_an_input_changed_while_computing_leaves_no_memo(tmp_path: Path) -> None:
    """A fingerprint taken before the answer read its input that differs after: nothing stored."""
    source = tmp_path / "input"
    source.write_text("v1")
    before = {str(source): memo.fingerprint(source)}
    source.write_text("v2, longer")
    path = str(tmp_path / "m")
    assert not memo.store(
        path, b"x", inputs=[str(source)], before=before, computed_at=time.time(), valid_until=None
    )
    assert not Path(path).exists()


def test_remembered_calls_share_a_bounded_set_of_files(tmp_path: Path) -> None:
    """Every command line a user runs is remembered, in at most CALL_SLOTS files."""
    env = {"XDG_CACHE_HOME": str(tmp_path)}
    keys = [f"v\0--root\0/r\0quota\0should-run\0g{i:05d}" for i in range(2 * memo.CALL_SLOTS)]
    for key in keys:
        assert memo.remember(key, {"line": key}, env=env)
    kept = list((tmp_path / "loopx" / "calls").iterdir())
    assert 0 < len(kept) <= memo.CALL_SLOTS
    recalled = [memo.recall(key, env=env) for key in keys]
    assert recalled[-1] == {"line": keys[-1]}  # the newest of its slot
    # A key whose slot another took since is a miss (its next run keeps it again), never the
    # other key's call.
    assert all(call in (None, {"line": key}) for key, call in zip(keys, recalled, strict=True))
    assert recalled.count(None) >= len(keys) - memo.CALL_SLOTS
