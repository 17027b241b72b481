"""The status cache's one store: an SQLite database in this host's cache directory.

``<host cache dir>/status.db`` (:func:`loopx.memo.host_cache_dir`: keyed by
the root's real path, device and inode, ``0700``; the file ``0600``), never
under the root, which may be a filesystem shared between machines where
SQLite's locking is unsound. It holds:

* ``goals``: one row per cached goal: its fingerprint, its view as the bytes
  it has in ``loopx status --json`` (indented for its place there), its
  history counts, its highest epoch, when its view expires by time, and the
  two fields of the view a refresh needs (whether it holds a lease, its
  probe), so that a holder that keeps no views (the supervisor) loads none;
* ``meta``: one row, the :class:`~loopx.status.refresh.StatusIndex` (when the
  sources were checked, the shared sources' fingerprints, the fleet, the
  hint cursor).

A refresh writes the goals that changed and the meta row in one
transaction. It is a cache: a missing database, one of another schema or a
damaged one is rebuilt from the goal files (a damaged file is set aside as
``status.db.damaged``, never trusted), and ``loopx doctor`` checks it.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import zlib
from array import array
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Final

from pydantic import ValidationError

from loopx.history.reader import HistoryCounts
from loopx.log import get_logger
from loopx.memo import host_cache_dir
from loopx.model import model_shape
from loopx.root import Layout
from loopx.status.refresh import CachedGoal, StatusIndex
from loopx.status.sources import NO_COUNTS
from loopx.status.view import GoalStatusView, ProbeObservation, share_values
from loopx.status.warm import STORE_NAME, store_path

# How the rows encode what they hold, where the tables' text does not show it (5: the
# fingerprint as packed integers); raise it when that changes.
_ENCODING: Final = 7
_SCHEMA: Final = """
CREATE TABLE meta (id INTEGER PRIMARY KEY CHECK (id = 1), status_index TEXT NOT NULL);
CREATE TABLE goals (
    goal_id TEXT PRIMARY KEY,
    fingerprint BLOB NOT NULL,  -- the numbers as int64 in this host's byte order
    history TEXT NOT NULL,
    epoch INTEGER NOT NULL,
    recheck_ts REAL,
    leased INTEGER NOT NULL,  -- the view holds a lease
    probe TEXT,  -- the view's probe observation, JSON
    view BLOB NOT NULL
);
"""
# PRAGMA user_version of a database this code wrote: it changes with the tables, the
# encoding and every field of the stored views, so a view with a new field is never
# read from rows written without it (the database is rebuilt instead).
SCHEMA_VERSION: Final = (
    zlib.crc32(f"{_ENCODING}\n{_SCHEMA}\n{model_shape(GoalStatusView)}".encode()) & 0x7FFFFFFF
)
_NO_COUNTS_JSON: Final = "{}"

log = get_logger(__name__)


def store_dir(layout: Layout) -> Path:
    """The private cache directory of the root on this host."""
    return Path(host_cache_dir(layout.root))


def store_file(layout: Layout) -> Path:
    """``<host cache dir>/status.db``."""
    return Path(store_path(layout))


class Loaded:
    """What a usable database holds: the index, every goal's entry, and the rows' view bytes."""

    __slots__ = ("goals", "index")

    def __init__(self, index: StatusIndex, goals: dict[str, CachedGoal]) -> None:
        self.index, self.goals = index, goals


class StatusStore:
    """The database of one root on this host."""

    def __init__(self, layout: Layout) -> None:
        self.path = store_file(layout)
        self.lock_path = self.path  # `locked` adds its ".lock"

    @contextlib.contextmanager
    def _connect(self, *, create: bool) -> Iterator[sqlite3.Connection]:
        if not create and not self.path.exists():
            raise FileNotFoundError(self.path)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        os.close(fd)
        db = sqlite3.connect(self.path, isolation_level=None)
        try:
            # The rollback journal, not WAL: a commit moves the database file itself,
            # whose fingerprint the warm memo holds (loopx.memo).
            db.execute("PRAGMA journal_mode=DELETE")
            db.execute("PRAGMA synchronous=OFF")  # a cache: a torn one is rebuilt
            yield db
        finally:
            db.close()

    def _set_aside(self, error: Exception) -> None:
        """Move a damaged database out of the way; the next refresh rebuilds it."""
        log.warning("status_store_damaged", path=str(self.path), error=str(error))
        with contextlib.suppress(OSError):
            self.path.replace(self.path.with_name(STORE_NAME + ".damaged"))
        with contextlib.suppress(FileNotFoundError):
            self.path.with_name(STORE_NAME + "-journal").unlink()

    def read_index(self) -> StatusIndex | None:
        """The meta row alone (another writer's generation); None when there is none to trust."""
        try:
            with self._connect(create=False) as db:
                row = db.execute("SELECT status_index FROM meta").fetchone()
                version = db.execute("PRAGMA user_version").fetchone()[0]
        except FileNotFoundError:
            return None
        except sqlite3.DatabaseError:
            return None  # load() sets it aside
        if row is None or version != SCHEMA_VERSION:
            return None
        try:
            return StatusIndex.model_validate_json(row[0])
        except ValidationError:
            return None

    def load(self, *, views: bool = True) -> Loaded | None:
        """Every row; None when the database is missing, of another schema, or damaged (set aside).

        Without ``views`` the entries hold none (their bytes stay in the rows).
        """
        try:
            with self._connect(create=False) as db:
                if db.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
                    return None
                meta = db.execute("SELECT status_index FROM meta").fetchone()
                if meta is None:
                    return None
                index = StatusIndex.model_validate_json(meta[0])
                columns = "goal_id, fingerprint, history, epoch, recheck_ts, leased, probe, "
                columns += "view" if views else "NULL"
                rows = db.execute(f"SELECT {columns} FROM goals").fetchall()  # noqa: S608 - ours
        except FileNotFoundError:
            return None
        except (sqlite3.DatabaseError, ValidationError, ValueError) as e:
            self._set_aside(e)
            return None
        try:
            goals = {row[0]: _entry(row[1:]) for row in rows}
        except (ValidationError, ValueError, TypeError) as e:  # TypeError: a column's type
            self._set_aside(e)
            return None
        return Loaded(index, goals)

    def views(self, goal_ids: Iterable[str] | None = None) -> dict[str, bytes]:
        """The stored view bytes of ``goal_ids`` (all rows with None)."""
        with self._connect(create=False) as db:
            if goal_ids is None:
                return dict(db.execute("SELECT goal_id, view FROM goals"))
            wanted = list(goal_ids)
            out: dict[str, bytes] = {}
            for at in range(0, len(wanted), 500):
                chunk = wanted[at : at + 500]
                marks = ",".join("?" * len(chunk))
                query = f"SELECT goal_id, view FROM goals WHERE goal_id IN ({marks})"  # noqa: S608 - placeholders only
                out.update(db.execute(query, chunk))
            return out

    def write(
        self,
        index: StatusIndex,
        *,
        changed: Mapping[str, tuple[CachedGoal, bytes]],
        removed: Iterable[str],
        replace_all: bool,
    ) -> None:
        """One transaction: the changed goals' rows, the removed goals gone, the meta row.

        ``replace_all`` starts from an empty database (a rebuild).
        """
        if replace_all:
            self.remove()
        with self._connect(create=True) as db:
            if db.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
                db.executescript(
                    # Large pages: most rows are a view of about a kilobyte.
                    "PRAGMA page_size=16384; DROP TABLE IF EXISTS meta; DROP TABLE IF EXISTS goals;"
                    f"{_SCHEMA}PRAGMA user_version={SCHEMA_VERSION};"
                )
            db.execute("BEGIN IMMEDIATE")
            try:
                db.executemany("DELETE FROM goals WHERE goal_id = ?", ((g,) for g in removed))
                db.executemany(
                    "INSERT OR REPLACE INTO goals VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (_row(goal_id, entry, view) for goal_id, (entry, view) in changed.items()),
                )
                db.execute("INSERT OR REPLACE INTO meta VALUES (1, ?)", (index.model_dump_json(),))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def remove(self) -> None:
        """Delete the database and its journal (``--clear-cache``, a rebuild)."""
        for name in (STORE_NAME, STORE_NAME + "-journal"):
            with contextlib.suppress(FileNotFoundError):
                (self.path.parent / name).unlink()

    def problem(self) -> str | None:
        """What is wrong with the database (``loopx doctor``), or None: missing is fine."""
        if not self.path.exists():
            return None
        try:
            with self._connect(create=False) as db:
                verdict = db.execute("PRAGMA integrity_check").fetchone()[0]
                version = db.execute("PRAGMA user_version").fetchone()[0]
        except sqlite3.DatabaseError as e:
            return f"not a usable SQLite database: {e}"
        if verdict != "ok":
            return f"damaged: {verdict}"
        if version != SCHEMA_VERSION:
            return f"schema {version}, this LoopX writes {SCHEMA_VERSION}"
        return None


_EMPTY_COUNTS: Final = NO_COUNTS  # the instance every entry without history shares


def _row(goal_id: str, entry: CachedGoal, view: bytes) -> tuple[object, ...]:
    history = entry.history
    empty = history is _EMPTY_COUNTS or history == _EMPTY_COUNTS
    counts = _NO_COUNTS_JSON if empty else history.model_dump_json()
    fingerprint = array("q", entry.fingerprint).tobytes()
    probe = entry.probe.model_dump_json() if entry.probe is not None else None
    return (goal_id, fingerprint, counts, entry.epoch, entry.recheck_ts, entry.leased, probe, view)


def _entry(
    row: tuple[bytes, str, int, float | None, int, str | None, bytes | None],
) -> CachedGoal:
    """A row's entry (its columns after the goal id); the view None when not selected."""
    fingerprint, history, epoch, recheck_ts, leased, probe, view = row
    counts = (
        _EMPTY_COUNTS if history == _NO_COUNTS_JSON else HistoryCounts.model_validate_json(history)
    )
    fp = tuple(array("q", fingerprint))  # ValueError if damaged (not a whole number of them)
    view_record = (
        share_values(GoalStatusView.model_validate_json(view)) if view is not None else None
    )
    return CachedGoal(
        fingerprint=fp,
        view=view_record,
        history=counts,
        epoch=int(epoch),
        recheck_ts=recheck_ts,
        leased=bool(leased),
        probe=ProbeObservation.model_validate_json(probe) if probe is not None else None,
    )


__all__ = ["STORE_NAME", "Loaded", "StatusStore", "store_dir", "store_file"]
