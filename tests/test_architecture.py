"""The kernel never imports the supervisor or agents packages."""

from __future__ import annotations

import ast
from pathlib import Path

KERNEL = Path(__file__).resolve().parent.parent / "loopx"


def test_kernel_does_not_import_supervisor_or_agents() -> None:
    """No kernel module (outside cli, supervisor, agents, testing) imports loopx.agents or loopx.supervisor."""
    offenders = []
    for path in KERNEL.rglob("*.py"):
        if path.relative_to(KERNEL).parts[0] in {"cli", "supervisor", "agents", "testing"}:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [
                f"{path.name}: {n}"
                for n in names
                if n.startswith(("loopx.agents", "loopx.supervisor"))
            ]
    assert offenders == []


def test_lazy_exports_match_all() -> None:
    """Every name in loopx.__all__ resolves lazily, and nothing else is exported."""
    import loopx

    assert set(loopx.__all__) == {*loopx._EXPORTS, "__version__"}
    for name in loopx.__all__:
        assert getattr(loopx, name) is not None
