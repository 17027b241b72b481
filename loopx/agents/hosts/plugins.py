"""Host kinds as plug-ins: the ``loopx.hosts`` entry-point group.

A package adds a host kind by declaring, in its ``pyproject.toml``::

    [project.entry-points."loopx.hosts"]
    mykind = "my_package.host:MyHost"

where ``MyHost`` is a class (or zero-argument factory) whose instances
implement :class:`loopx.agents.hosts.base.Host` with ``kind = "mykind"``.
LoopX's own kinds (command, demo, codex, claude, gemini, opencode, qwen, pi, aider) are declared the
same way in its pyproject. See docs/hosts.md.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points
from typing import Final

from loopx.agents.hosts.base import Host
from loopx.errors import HostUnsupportedError, UsageError
from loopx.registry.goalrecords import HostKind
from loopx.registry.hostprogram import HOST_ENTRY_POINTS

ENTRY_POINT_GROUP: Final = HOST_ENTRY_POINTS


class PluginError(UsageError):
    """An installed host plug-in does not load or does not implement the adapter interface."""

    def __init__(self, kind: str, value: str, problem: str) -> None:
        super().__init__(
            f"host plug-in {kind!r} ({value}) {problem}",
            hint=f"reinstall or fix the package that declares {kind!r} "
            f"in the {ENTRY_POINT_GROUP!r} entry-point group",
        )
        self.kind, self.value, self.problem = kind, value, problem

    def __reduce__(self) -> tuple[object, ...]:
        return type(self), (self.kind, self.value, self.problem)


def installed() -> dict[str, EntryPoint]:
    """The host kinds installed packages declare, by name."""
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def kind_names() -> list[str]:
    """Every host kind a goal may name: the built-ins and the installed plug-ins, sorted."""
    return sorted({*(k.value for k in HostKind), *installed()})


def require_kind(name: str) -> str:
    """``name`` if a host adapter of that kind is installed.

    Raises:
        HostUnsupportedError: none is.

    """
    known = kind_names()
    if name not in known:
        raise HostUnsupportedError(name, known)
    return name


def load(entry: EntryPoint) -> Host:
    """The adapter an entry point names, checked against the interface.

    Raises:
        PluginError: it does not import, or is no adapter of its declared kind.

    """
    try:
        target = entry.load()
        host = target() if callable(target) else target
    except Exception as e:
        raise PluginError(entry.name, entry.value, f"cannot be loaded: {e!r}") from e
    for method in ("prepare", "interpret"):
        if not callable(getattr(host, method, None)):
            raise PluginError(entry.name, entry.value, f"has no {method}() method")
    if getattr(host, "kind", None) != entry.name:
        raise PluginError(
            entry.name, entry.value, f"says its kind is {getattr(host, 'kind', None)!r}"
        )
    return host  # type: ignore[no-any-return]
