"""The runtime root: where it is (resolution) and what lives in it (layout).

What every layer above writes through it has a module here: ``settings``
(``registry.json``), ``held`` (the root held by directory descriptor), ``hints``
(the change-hint log), ``goallock`` (a goal's lock) and ``dropbox`` (where a host
writes its result, outside the root).
"""

from __future__ import annotations

import functools
import json
import os
import stat
from collections import namedtuple
from enum import StrEnum
from pathlib import Path

from loopx import environ
from loopx.errors import RootError, UnsafePathError
from loopx.ids import validate_goal_id
from loopx.storage.dirs import checked_dirs, ensure_dir, note_root
from loopx.storage.files import read_bytes

TYPE_CHECKING = False  # not `typing`: a warm `quota should-run` must not pay for its import
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Final, NamedTuple

REGISTRY_NAME: Final = "registry.json"
GOALS_NAME: Final = "goals"


class RootSource(StrEnum):
    """Which rule chose the runtime root."""

    FLAG = "flag"  # --root / --runtime-root
    ENV = "env"  # LOOPX_ROOT
    REGISTRY = "registry"  # common_runtime_root of --registry FILE
    DEFAULT = "default"  # $XDG_STATE_HOME/loopx or ~/.local/state/loopx


# Immutable records compared and hashed by their fields: namedtuples, not dataclasses
# (`import dataclasses` pulls in `inspect`: about 10 ms of a warm CLI answer), nor
# typing.NamedTuple (importing `typing` costs a warm answer too); the checker is shown the same.
if TYPE_CHECKING:

    class _ResolvedFields(NamedTuple):
        root: Path
        registry: Path
        source: RootSource

    class _LayoutFields(NamedTuple):
        root: Path
        registry: Path

else:
    _ResolvedFields = namedtuple("_ResolvedFields", ("root", "registry", "source"))  # noqa: PYI024 - see above
    _LayoutFields = namedtuple("_LayoutFields", ("root", "registry"))  # noqa: PYI024 - see above


class ResolvedRoot(_ResolvedFields):
    """Where the runtime root is, which registry file it uses, and why."""

    __slots__ = ()


def _registry_common_root(registry: Path) -> Path | None:
    try:
        data = json.loads(read_bytes(registry))
    except FileNotFoundError:
        return None
    except ValueError as e:
        raise RootError(
            f"{registry} is not valid JSON, so its common_runtime_root cannot be read: {e}",
            hint="fix the registry file or pass --root DIR",
        ) from e
    value = data.get("common_runtime_root") if isinstance(data, dict) else None
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise RootError(
            f"{registry}: common_runtime_root must be a non-empty string, got {value!r}",
            hint="set it to a directory path (relative to the registry file) or pass --root DIR",
        )
    return (registry.parent / value).resolve()


def resolve_root(
    *,
    flag: str | os.PathLike[str] | None,
    registry: str | os.PathLike[str] | None,
    env: Mapping[str, str] | None = None,
    home: Path | None = None,
) -> ResolvedRoot:
    """Resolve the runtime root by DESIGN.md's rule (``env``: os.environ, ``home``: ~ by default).

    ``--root``, else ``LOOPX_ROOT``, else the ``common_runtime_root`` of the
    ``--registry`` file (relative to that file), else ``$XDG_STATE_HOME/loopx``
    (``~/.local/state/loopx``). The registry is ``--registry`` if given, else
    ``<root>/registry.json``. A relative ``--root`` is relative to the current
    directory, like any path argument; a relative ``LOOPX_ROOT`` is refused.

    Raises:
        RootError: ``LOOPX_ROOT`` is relative, or ``--registry`` names no usable
            root and nothing else does.
    """
    env = os.environ if env is None else env
    home = Path.home() if home is None else home
    registry_path = Path(registry).expanduser().resolve() if registry is not None else None
    if flag is not None and str(flag) != "":
        root, source = Path(flag).expanduser(), RootSource.FLAG
    elif env.get(environ.ROOT):
        root, source = Path(env[environ.ROOT]).expanduser(), RootSource.ENV
        if not root.is_absolute():
            # An environment variable outlives the directory it was set in: a relative
            # one would name a different root in every directory a command runs from.
            raise RootError(
                f"{environ.ROOT}={env[environ.ROOT]} is a relative path",
                hint=f"set it to an absolute path, e.g. `export {environ.ROOT}=$PWD/{env[environ.ROOT]}`",
            )
    elif registry_path is not None and (common := _registry_common_root(registry_path)):
        root, source = common, RootSource.REGISTRY
    else:
        xdg = env.get("XDG_STATE_HOME")
        base = Path(xdg) if xdg and Path(xdg).is_absolute() else home / ".local" / "state"
        root, source = base / "loopx", RootSource.DEFAULT
    root = root.resolve()
    return ResolvedRoot(root, registry_path or root / REGISTRY_NAME, source)


@functools.lru_cache(maxsize=8192)
def _goal_path(root: Path, goal_id: str, names: tuple[str, ...]) -> Path:
    """``<root>/goals/<id>/<names...>``, the id checked.

    Remembered: a turn asks for the same few paths of its goal dozens of times,
    and an id once checked stays valid.
    """
    # One join, not one per segment: a status refresh builds these for every goal that ran.
    return root.joinpath(GOALS_NAME, validate_goal_id(goal_id), *names)


class Layout(_LayoutFields):
    """Every path under a runtime root. Goal paths validate the id first."""

    __slots__ = ()

    @classmethod
    def of(cls, resolved: ResolvedRoot) -> Layout:
        """The layout of a resolved root."""
        return cls(resolved.root, resolved.registry)

    @classmethod
    def at(cls, root: Path) -> Layout:
        """The layout of ``root`` with its own ``registry.json``."""
        root = root.resolve()
        return cls(root, root / REGISTRY_NAME)

    # shared files
    @property
    def goals_dir(self) -> Path:
        """``goals/``."""
        return self.root / GOALS_NAME

    @property
    def agents_dir(self) -> Path:
        """``agents/``: one heartbeat file per agent."""
        return self.root / "agents"

    @property
    def projections_dir(self) -> Path:
        """``projections/``: caches derived from the durable layers."""
        return self.root / "projections"

    @property
    def quarantine_dir(self) -> Path:
        """``quarantine/``: invalid files moved aside for a human."""
        return self.root / "quarantine"

    @property
    def archive_dir(self) -> Path:
        """``archived-goals/``."""
        return self.root / "archived-goals"

    @property
    def logs_dir(self) -> Path:
        """``logs/``."""
        return self.root / "logs"

    @property
    def supervisor_file(self) -> Path:
        """``supervisor.json``: the running supervisor's record."""
        return self.root / "supervisor.json"

    @property
    def supervisor_lock(self) -> Path:
        """``supervisor.lock``: one supervisor per root."""
        return self.root / "supervisor.lock"

    @property
    def goal_index_file(self) -> Path:
        """``projections/goals.json``: the derived index of every goal's policy."""
        return self.projections_dir / "goals.json"

    def agent_file(self, agent_id: str) -> Path:
        """``agents/<agent_id>.json``."""
        return self.agents_dir / f"{validate_goal_id(agent_id)}.json"

    # per goal
    def goal_dir(self, goal_id: str) -> Path:
        """``goals/<id>/``."""
        return self._in_goal(goal_id)

    def _in_goal(self, goal_id: str, *names: str) -> Path:
        if not isinstance(goal_id, str):
            validate_goal_id(goal_id)  # raises: a path is never built from it
        return _goal_path(self.root, goal_id, names)

    def goal_file(self, goal_id: str) -> Path:
        """``goals/<id>/goal.json``: the goal's policy."""
        return self._in_goal(goal_id, "goal.json")

    def state_file(self, goal_id: str) -> Path:
        """``goals/<id>/state.json``."""
        return self._in_goal(goal_id, "state.json")

    def runs_dir(self, goal_id: str) -> Path:
        """``goals/<id>/runs/``: one report per turn."""
        return self._in_goal(goal_id, "runs")

    def history_file(self, goal_id: str) -> Path:
        """``goals/<id>/history.jsonl``."""
        return self._in_goal(goal_id, "history.jsonl")

    def quota_file(self, goal_id: str) -> Path:
        """``goals/<id>/quota.jsonl``: the spend ledger."""
        return self._in_goal(goal_id, "quota.jsonl")

    def quota_aggregate_file(self, goal_id: str) -> Path:
        """``goals/<id>/quota.agg.json``: a rebuildable cache of the ledger's recent spend."""
        return self._in_goal(goal_id, "quota.agg.json")

    def turns_dir(self, goal_id: str) -> Path:
        """``goals/<id>/turns/``: the turn journals."""
        return self._in_goal(goal_id, "turns")

    def lease_file(self, goal_id: str) -> Path:
        """``goals/<id>/lease.json``."""
        return self._in_goal(goal_id, "lease.json")

    def epoch_file(self, goal_id: str) -> Path:
        """``goals/<id>/epoch``: the monotonic fencing counter."""
        return self._in_goal(goal_id, "epoch")

    def ensure_goal_dirs(self, goal_id: str) -> Path:
        """Create a goal's directory tree (0700) and return the goal directory.

        Every lock of the goal calls this: once the three directories were
        checked (since the last claim or host run, :mod:`loopx.storage.files`),
        they are not looked at again.
        """
        goal, runs, turns = self.goal_dir(goal_id), self.runs_dir(goal_id), self.turns_dir(goal_id)
        if not checked_dirs(goal, runs, turns):
            ensure_dir(goal)
            ensure_dir(runs)
            ensure_dir(turns)
        return goal


def _check_not_shared(path: Path) -> None:
    st = path.lstat()
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePathError(path, "the runtime root is a symlink")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise RootError(
            f"runtime root {path} is writable by other users (mode {stat.S_IMODE(st.st_mode):o})",
            hint=f"run `chmod 700 {path}`; LoopX refuses a root others can write into",
        )
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise RootError(
            f"runtime root {path} belongs to uid {st.st_uid}, not to you (uid {os.getuid()})",
            hint="run LoopX as the root's owner or choose another root with --root",
        )


def _init_hint(resolved: ResolvedRoot) -> str:
    return f"create it with `loopx init --root {resolved.root}`"


def _check_root_dir(resolved: ResolvedRoot) -> None:
    """Refuse a root that is not a directory or that this user cannot write."""
    root = resolved.root
    if not root.is_dir():
        raise RootError(
            f"runtime root {root} (chosen by {resolved.source}) is not a directory",
            hint="pass --root with a directory, or move the file out of the way",
        )
    if not os.access(root, os.W_OK | os.X_OK):
        raise RootError(
            f"runtime root {root} is not writable by you",
            hint=f"fix its permissions (`chmod 700 {root}`) or choose another root with --root",
        )


def _make_dirs(layout: Layout, resolved: ResolvedRoot) -> None:
    try:
        for sub in (
            layout.goals_dir,
            layout.agents_dir,
            layout.projections_dir,
            layout.quarantine_dir,
            layout.archive_dir,
            layout.logs_dir,
        ):
            ensure_dir(sub)
    except OSError as e:
        raise RootError(
            f"cannot create {e.filename or resolved.root}: {e.strerror}",
            hint="check the root's permissions, or choose another root with --root",
        ) from e


def _initialise_registry(layout: Layout) -> None:
    # Lazy: only a new root needs pydantic. Only the settings file is written here: an
    # old single-file registry is migrated by its first reader (or `init --upgrade`).
    from loopx.root.settings import create_settings  # noqa: PLC0415

    create_settings(layout.registry, layout.root)


def open_root(resolved: ResolvedRoot, *, create: bool) -> Layout:
    """Check (and with ``create``, initialise) the runtime root; return its layout.

    One rule for every command: a root is initialised when its registry file
    exists. Only ``create`` (``loopx init``, ``demo``, ``batch run``) makes the
    directory and an empty registry; every other caller is refused an
    uninitialised root, so a mistyped ``--root`` never starts an idle fleet.

    Raises:
        RootError: the root is missing or uninitialised (without ``create``),
            not a directory, not writable, shared with other users, or owned
            by someone else.
    """
    layout = Layout.of(resolved)
    if not resolved.root.exists() and not resolved.root.is_symlink():
        if not create:
            raise RootError(
                f"runtime root {resolved.root} does not exist (chosen by {resolved.source})",
                hint=_init_hint(resolved),
            )
        try:
            ensure_dir(resolved.root)
        except OSError as e:
            raise RootError(
                f"cannot create runtime root {resolved.root}: {e.strerror}",
                hint="create its parent directory, or choose another root with --root",
            ) from e
    _check_not_shared(resolved.root)
    _check_root_dir(resolved)
    if not create and not layout.registry.exists():
        raise RootError(
            f"runtime root {resolved.root} is not initialised: it has no "
            f"{layout.registry.name} (chosen by {resolved.source})",
            hint=_init_hint(resolved),
        )
    _make_dirs(layout, resolved)
    note_root(resolved.root)
    if create:
        _initialise_registry(layout)
    return layout
