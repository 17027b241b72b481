"""The package's dependency directions, the thin CLI, and one spelling per LOOPX_* name.

Layers: the kernel (``loopx/`` minus the six below), ``loopx.agents``,
``loopx.supervisor``, ``loopx.api``, ``loopx.cli``, ``loopx.web`` and
``loopx.testing``. The kernel imports no other layer; agents and supervisor
import only the kernel (the supervisor starts agents as ``python -m
loopx.agents``, a process boundary, and the Ray back-end gets the agent loop
injected by the API); only ``loopx.api`` (the composition root) imports both,
and the package's ``__init__`` exports the API lazily. The web front end
(``loopx serve``) is an outer ring beside them: it imports only the kernel,
and only the API imports it, handing it the calls its actions make. The CLI
is a client of the API: it imports the API, the errors, the exit codes and
the output models, nothing else; nothing but ``loopx/__main__.py`` imports
the CLI. Every import counts, also one inside a function or under
``TYPE_CHECKING``.

Inside the kernel the packages (and top-level modules) stand in one order,
``KERNEL_ORDER``, bottom to top: each imports only those below it, so no
package cycle can form. Every module is walked, once, under the one name Python
imports it by: the top-level ``supervisor`` and ``agents`` are links into
``loopx/``, and nothing inside ``loopx/`` is a link.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Final

import pytest

PACKAGE: Final = Path(__file__).resolve().parent.parent / "loopx"
LAYERS: Final = ("agents", "supervisor", "api", "cli", "web", "testing")
# What each layer may import besides itself.
ALLOWED: Final = {
    "kernel": {"kernel"},
    "agents": {"kernel", "agents"},
    "supervisor": {"kernel", "supervisor"},
    "testing": {"kernel", "testing"},
    # The HTTP front end: it reads the kernel; its actions' calls come from the API, handed in.
    "web": {"kernel", "web"},
    "api": {"kernel", "agents", "supervisor", "web", "api"},
    "cli": {"kernel", "api", "cli"},  # and of the kernel only what the test at the end allows
    "main": {"kernel", "cli"},
    # `import loopx` exports the kernel's names and the Python API, lazily.
    "facade": {"kernel", "api"},
}
# A CLI module parses, calls the library, prints and exits; file work is the library's.
TOP_LEVEL_MAX_MODULES: Final = 20  # __init__, __main__ and _version included
MODULE_MAX_LINES: Final = 500
# The turn's path, claim to release: the packages and modules its steps run in, held to a
# tighter size, since every new capability of a turn lands there.
TURN_PATH: Final = (
    "turn",
    "agents",
    "quota",
    "accounts",
    "worktree",
    "schedule",
    "storage",
    "root",
    "state",
    "clock",
)
TURN_PATH_MODULE_MAX_LINES: Final = 400
TURN_PATH_FUNCTION_MAX_LINES: Final = 60
CLI_MODULE_MAX_LINES: Final = 350
CLI_FUNCTION_MAX_LINES: Final = 50  # argparse declarations (register, *_options) aside
FILE_METHODS: Final = frozenset(
    {"open", "read_text", "write_text", "read_bytes", "write_bytes", "unlink", "mkdir", "touch"}
)
API_GROUPS: Final = frozenset(
    {"goals", "gates", "status", "quota", "turns", "fleet", "retention", "accounts", "hosts"}
)
ENV_NAME: Final = re.compile(r"LOOPX_[A-Z0-9_]*")
# The kernel's packages and top-level modules, bottom to top: each may import only
# those before it. A new one must be placed here.
KERNEL_ORDER: Final = (
    # mechanism: errors, ids, the environment, processes, faults, logging, files, models
    "_version",
    "exitcodes",
    "errors",
    "ids",
    "environ",
    "process",  # pids, process trees, signals; the cyclic collector paused
    "faults",
    "secrets",
    "log",  # structlog configured once, and the log files it writes, rotated by size
    "tracing",  # OTLP spans of a turn and its steps, only when an endpoint is configured
    "memo",
    "storage",  # atomic files, locks, resource faults, a long-running loop's duties
    "model",
    "usage",  # what a turn or a check spent: journals, ledgers and done-checks record it
    "sandbox",  # a sandbox's policy (goal, account, root default), whether bwrap can run here
    "git",  # the git CLI, one function per question; who holds a repository
    # the root (settings, layout, the held directory, change hints, goal locks, the drop box)
    "root",
    "donecheck",  # a goal's done-check and its last result: the goal, its state and journals hold it
    "state",
    "fleet",
    # the durable layers, each over the ones it reads
    "registry",
    "quota",
    "accounts",  # provider accounts: their limits and budgets park goals before a turn plans
    "hostcanary",  # host kinds the canary quarantined (hosts.json): their goals wait
    "turn",
    "history",  # a goal's turns and the logs under the root, read across their rotation
    "clock",
    "batch",
    "retention",  # archives goals, folds turns (replay, registry), holds turns for space
    "worktree",  # makes a goal's worktree at its claim (fenced by the lease) and merges it
    # the readers of many layers, and the list of the kernel's file kinds
    "status",
    "notify",  # notifications of what the status projection shows, each sent once
    "schedule",
    # the turn as a table of steps, claim to release: it reads layers above `turn` (the
    # worktree, the schedule's goal cache), so it ranks above them though it lives in turn/
    "turn.steps",
    "doctor",
    "schemas",
)


def layer_of(module: str) -> str:
    """The layer of a dotted module name inside ``loopx``."""
    parts = module.split(".")
    if module == "loopx.__main__":
        return "main"
    if len(parts) > 1 and parts[1] in LAYERS:
        return parts[1]
    return "kernel"


def module_name(path: Path) -> str:
    """The dotted name of a file of the package."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts).removesuffix(".__init__")


def imported(tree: ast.AST) -> list[tuple[int, str]]:
    """Every ``loopx`` module a tree imports (also by ``importlib.import_module("loopx...")``).

    ``from loopx import environ`` counts as an import of ``loopx.environ``.
    """
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module == "loopx" and node.level == 0:
            found += [(node.lineno, f"loopx.{a.name}") for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append((node.lineno, node.args[0].value))
    return [(line, name) for line, name in found if name.split(".")[0] == "loopx"]


def package_files() -> list[Path]:
    """Every module of the package."""
    found = []
    for directory, subdirs, files in os.walk(PACKAGE):
        subdirs[:] = sorted(d for d in subdirs if d != "__pycache__")
        found += [Path(directory) / name for name in files if name.endswith(".py")]
    return sorted(found)


def kernel_unit(module: str) -> str | None:
    """The kernel unit a dotted name is in (None: not the kernel's).

    A unit is a package or top-level module of the kernel, or a subpackage
    ``KERNEL_ORDER`` names by itself (``turn.steps``).
    """
    parts = module.split(".")
    if layer_of(module) != "kernel" or len(parts) < 2 or module == "loopx.__main__":
        return None
    nested = ".".join(parts[1:3])
    return nested if nested in KERNEL_ORDER else parts[1]


def cli_files() -> list[Path]:
    """Every module of ``loopx.cli``."""
    return sorted((PACKAGE / "cli").glob("*.py"))


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_imports_follow_the_dependency_direction(layer: str) -> None:
    """No module imports a layer its own may not depend on."""
    offenders = []
    for path in package_files():
        module = module_name(path)
        if (layer_of(module) if module != "loopx" else "facade") != layer:
            continue
        for line, name in imported(ast.parse(path.read_text())):
            if layer_of(name) not in ALLOWED[layer]:
                offenders.append(f"{module}:{line} imports {name}")
    assert offenders == []


def test_every_module_is_walked() -> None:
    """The walk sees every module, under the name Python imports it by; no link in the package."""
    links = [p for p in PACKAGE.rglob("*") if p.is_symlink()]
    assert links == [], f"links inside the package give a module two names: {links}"
    seen = package_files()
    print(f"test_architecture sees {len(seen)} modules")
    assert len(seen) == len(list(PACKAGE.rglob("*.py")))
    assert {module_name(p) for p in seen} >= {"loopx.supervisor.supervisor", "loopx.agents.loop"}


def test_the_top_level_shows_the_design_cards_parts_as_links_into_the_package() -> None:
    """``supervisor`` and ``agents`` at the top are links to the code under ``loopx/``."""
    top = PACKAGE.parent
    for name in ("supervisor", "agents"):
        link = top / name
        assert link.is_symlink(), f"{link} should be a link to loopx/{name}"
        assert os.readlink(link) == f"loopx/{name}"
        assert link.resolve() == (PACKAGE / name).resolve()


@pytest.mark.parametrize("name", ["agents", "supervisor"])
def test_the_repository_roots_links_never_load_a_second_copy(name: str) -> None:
    """``import agents`` from the repository root refuses, naming the real package."""
    proc = subprocess.run(
        [sys.executable, "-c", f"import {name}"],
        cwd=PACKAGE.parent,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode != 0
    assert f"import loopx.{name}" in proc.stderr
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import loopx.{name}, sys; print(sorted(m for m in sys.modules if m.split('.')[0] == {name!r}))",
        ],
        cwd=PACKAGE.parent,
        capture_output=True,
        text=True,
        check=True,
    )
    assert proc.stdout.strip() == "[]"


def test_the_kernel_order_names_every_kernel_package() -> None:
    """Each kernel package and top-level module has its place in ``KERNEL_ORDER``, once."""
    units = {kernel_unit(module_name(p)) for p in package_files()} - {None}
    assert len(set(KERNEL_ORDER)) == len(KERNEL_ORDER)
    assert sorted(units) == sorted(KERNEL_ORDER)


def test_at_most_twenty_modules_sit_at_the_top_of_the_package() -> None:
    """A new module joins the package of what it holds: the top stays a short list."""
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= TOP_LEVEL_MAX_MODULES, top


def test_no_module_is_over_five_hundred_lines() -> None:
    """A module a newcomer can read in one sitting: past 500 lines, it holds two concepts."""
    long = {
        module_name(p): n
        for p in package_files()
        if (n := len(p.read_text().splitlines())) > MODULE_MAX_LINES
    }
    assert long == {}


def _on_the_turn_path(path: Path) -> bool:
    parts = module_name(path).split(".")
    return len(parts) > 1 and parts[1] in TURN_PATH


def test_the_turns_path_has_short_modules_and_functions() -> None:
    """On the turn's path no module is over 400 lines and no function over 60."""
    long_modules, long_functions = {}, {}
    for path in filter(_on_the_turn_path, package_files()):
        text = path.read_text()
        if (n := len(text.splitlines())) > TURN_PATH_MODULE_MAX_LINES:
            long_modules[module_name(path)] = n
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > TURN_PATH_FUNCTION_MAX_LINES:
                    long_functions[f"{module_name(path)}.{node.name}"] = lines
    assert (long_modules, long_functions) == ({}, {})


def test_no_two_modules_share_a_file_name() -> None:
    """A file name says which module it is (the API's and the CLI's groups mirror each other)."""
    seen: dict[str, list[str]] = {}
    for path in package_files():
        inside = path.relative_to(PACKAGE).parts[0]
        if path.name in {"__init__.py", "__main__.py"} or inside in {"api", "cli"}:
            continue
        seen.setdefault(path.name, []).append(module_name(path))
    assert {name: mods for name, mods in seen.items() if len(mods) > 1} == {}


def test_only_the_api_imports_the_web_front_end() -> None:
    """Nothing but the API (and the web itself) imports ``loopx.web``: it is the outer ring.

    Not the kernel (its schema list names the kernel's documents only), the
    agents, the supervisor, the CLI (which serves through the API), the
    testing helpers or the package's ``__init__``.
    """
    allowed = {"web", "api"}
    offenders = []
    for path in package_files():
        module = module_name(path)
        if module != "loopx" and layer_of(module) in allowed:
            continue
        for line, name in imported(ast.parse(path.read_text())):
            if name == "loopx.web" or name.startswith("loopx.web."):
                offenders.append(f"{module}:{line} imports {name}")
    assert offenders == []


def test_kernel_imports_follow_the_kernel_order() -> None:
    """A kernel module imports only its own package and those below it: no package cycle."""
    rank = {unit: i for i, unit in enumerate(KERNEL_ORDER)}
    offenders = []
    for path in package_files():
        module = module_name(path)
        unit = kernel_unit(module)
        if unit is None:
            continue
        for line, name in imported(ast.parse(path.read_text())):
            target = kernel_unit(name)
            if target is not None and target in rank and rank[target] > rank[unit]:
                offenders.append(f"{module}:{line} imports {name}, above {unit}")
    assert offenders == []


def test_relative_imports_are_not_used() -> None:
    """Every import is absolute, so the direction check above sees all of them."""
    offenders = [
        f"{module_name(path)}:{node.lineno}"
        for path in package_files()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.level > 0
    ]
    assert offenders == []


def _api_call(func: ast.Attribute) -> bool:
    """``Root.open(...)`` or ``root.gates.open(...)``: the API's methods, not file operations."""
    owner = func.value
    if isinstance(owner, ast.Name):
        return owner.id == "Root"
    return isinstance(owner, ast.Attribute) and owner.attr in API_GROUPS


def test_cli_modules_use_no_storage_primitives_and_touch_no_files() -> None:
    """A CLI module imports nothing of ``loopx.storage`` and calls no file operation."""
    offenders = []
    for path in cli_files():
        tree = ast.parse(path.read_text())
        offenders += [
            f"{path.name}:{line} imports {name}"
            for line, name in imported(tree)
            if name.startswith("loopx.storage")
        ]
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Name) and func.id == "open":
                offenders.append(f"{path.name}:{node.lineno} calls open()")
            elif (
                isinstance(func, ast.Attribute)
                and func.attr in FILE_METHODS
                and not _api_call(func)
            ):
                offenders.append(f"{path.name}:{node.lineno} calls .{func.attr}()")
    assert offenders == []


def test_cli_modules_and_handlers_stay_short() -> None:
    """CLI modules stay under a line budget, and so does every function but the argparse ones."""
    offenders = []
    for path in cli_files():
        text = path.read_text()
        lines = text.count("\n")
        if lines > CLI_MODULE_MAX_LINES:
            offenders.append(f"{path.name}: {lines} lines")
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            if node.name == "register" or node.name.endswith("_options"):
                continue
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > CLI_FUNCTION_MAX_LINES:
                offenders.append(f"{path.name}: {node.name}() is {length} lines")
    assert offenders == []


def test_loopx_environment_names_are_spelled_only_in_environ() -> None:
    """A ``LOOPX_*`` name appears as a bare string only in ``loopx/environ.py``."""
    offenders = [
        f"{module_name(path)}:{node.lineno} {node.value!r}"
        for path in package_files()
        if path != PACKAGE / "environ.py"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and ENV_NAME.fullmatch(node.value)
    ]
    assert offenders == []


def test_lazy_exports_match_all() -> None:
    """Every name in loopx.__all__ resolves lazily: the kernel's from their modules, the API's
    from ``loopx.api``, whose classes are all exported (its functions are the CLI's helpers)."""
    import loopx
    import loopx.api

    from_api = set(loopx.__all__) - {*loopx._EXPORTS, "__version__"}
    api_classes = {n for n in loopx.api.__all__ if isinstance(getattr(loopx.api, n), type)}
    assert from_api == api_classes
    for name in loopx.__all__:
        assert getattr(loopx, name) is not None


# What a CLI module may import whole: the public facade (`loopx.__all__`), the API,
# the errors and the exit codes; and `loopx.model`, the base of every output model
# (`Record`, and `iso_utc`, the one spelling of a time in every document).
CLI_MAY_IMPORT: Final = frozenset({"loopx", "loopx.api", "loopx.errors", "loopx.exitcodes"})


def output_model_modules() -> set[str]:
    """The modules that define the documents `loopx schema` names (files and `--json` outputs)."""
    import enum
    import typing

    from pydantic import BaseModel

    from loopx.api._schemas import SCHEMAS

    # A document's enum fields are part of it, wherever the enum is defined
    # (TurnStatus lives in loopx.turn.outcome so readers need not import the journal).
    modules = {"loopx.model"}
    seen: set[type] = set()
    todo: list[object] = list(SCHEMAS.values())
    while todo:
        tp = todo.pop()
        if isinstance(tp, type) and tp not in seen:
            seen.add(tp)
            if issubclass(tp, enum.Enum):
                modules.add(tp.__module__)
            elif issubclass(tp, BaseModel):
                modules.add(tp.__module__)
                todo.extend(f.annotation for f in tp.model_fields.values())
        todo.extend(typing.get_args(tp))
    return modules


def _cli_import_allowed(module: str, names: list[str], models: set[str]) -> bool:
    """Whether ``from module import names`` (or ``import module``) is allowed in a CLI module."""
    import enum
    import importlib

    from pydantic import BaseModel

    if module in CLI_MAY_IMPORT or module == "loopx.cli" or module.startswith("loopx.cli."):
        return True
    if module not in models:
        return False
    if module == "loopx.model":
        return True
    for name in names or ["*"]:
        value = getattr(importlib.import_module(module), name, None)
        if not (isinstance(value, type) and issubclass(value, BaseModel | enum.Enum)):
            return False
    return True


@pytest.mark.parametrize("path", cli_files(), ids=lambda p: p.name)
def test_cli_modules_import_only_the_api_errors_exit_codes_and_output_models(path: Path) -> None:
    """Parse, one API call, print, exit code: no kernel, supervisor or agents module is imported.

    From a module of the output models only models and their enums may be
    imported (a function of such a module is the kernel's, reached through the API).
    """
    models = output_model_modules()
    offenders = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found = [(node.module, [a.name for a in node.names])]
        elif isinstance(node, ast.Import):
            found = [(a.name, []) for a in node.names]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "import_module":
            arg = node.args[0] if node.args else None
            found = [(arg.value, [])] if isinstance(arg, ast.Constant) else []
        else:
            continue
        offenders += [
            f"{path.name}:{node.lineno} imports {module} {names}"
            for module, names in found
            if module.split(".")[0] == "loopx" and not _cli_import_allowed(module, names, models)
        ]
    assert offenders == []


# --- no tracker numbers in the product ---------------------------------------------------------

# "issue 27", "Issue 28 item 6:", "issues 14/25", "issue #5", "issue-26": a number only the
# project's tracker knows, which says which change made a line, not why it is there.
ISSUE_NUMBER: Final = re.compile(r"\b[Ii]ssues?[ -]?#?\d+")
# A bare "#27" in prose or a comment (not "&#8230;", not a colour in a style sheet).
BARE_NUMBER: Final = re.compile(r"(?<![\w/&.#-])#\d+\b")
# Another project's tracker, named with its repository, is a reference a reader can follow:
# "openai/codex#17539", "openai/codex #21073".
FOREIGN_NUMBER: Final = re.compile(r"\b[\w.-]+/[\w.-]+ ?#\d+")
# Files another change is rewriting at the moment, each still holding such numbers. The
# exemption ends with them: once a file holds none, the test below asks to drop it here.
ISSUE_NUMBER_PENDING: Final[frozenset[str]] = frozenset()


def _product_texts() -> list[Path]:
    """Every file a user or contributor reads as the product: code, web assets, docs."""
    repo = PACKAGE.parent
    files = [p for ext in ("py", "js", "html", "css") for p in PACKAGE.rglob(f"*.{ext}")]
    files += [*(repo / "docs").rglob("*.md"), repo / "README.md"]
    return sorted(files)


def _tracker_numbers(path: Path) -> list[str]:
    """``file:line: text`` for each line of ``path`` that names an issue by its number."""
    repo = PACKAGE.parent
    bare = path.suffix in {".py", ".md"}
    found = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        text = FOREIGN_NUMBER.sub("", line)
        if ISSUE_NUMBER.search(text) or (bare and BARE_NUMBER.search(text)):
            found.append(f"{path.relative_to(repo)}:{number}: {line.strip()}")
    return found


def test_no_issue_numbers_in_code_help_texts_or_docs() -> None:
    """No line of loopx/ (code, comments, help texts, messages), docs/ or README names an issue.

    A reader cannot look such a number up, and it says which change, not why: write the
    reason in the code's own terms instead (or drop the parenthetical when the sentence
    already says it). Another project's tracker is fine as ``owner/repo#N``.
    """
    repo = PACKAGE.parent
    found = [
        hit
        for path in _product_texts()
        if str(path.relative_to(repo)) not in ISSUE_NUMBER_PENDING
        for hit in _tracker_numbers(path)
    ]
    assert not found, "issue numbers; say why instead:\n" + "\n".join(found)


def test_issue_number_exemptions_are_still_needed() -> None:
    """Each exempted file exists and still holds an issue number; else drop it from the list."""
    repo = PACKAGE.parent
    stale = [
        name
        for name in sorted(ISSUE_NUMBER_PENDING)
        if not (repo / name).is_file() or not _tracker_numbers(repo / name)
    ]
    assert not stale, f"drop these from ISSUE_NUMBER_PENDING (no issue number left): {stale}"


def import_graph() -> dict[str, set[str]]:
    """Each module of the package and the modules it imports (inside functions too)."""
    modules = {module_name(p): p for p in package_files()}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for _line, name in imported(ast.parse(path.read_text())):
            target = name if name in modules else name.rpartition(".")[0]
            if target in modules and target != module and not module.startswith(target + "."):
                graph[module].add(target)
    return graph


def module_cycles() -> list[list[str]]:
    """Every cycle of modules importing each other, as its members (Tarjan's components)."""
    graph = import_graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
            if nxt in stack:
                low[node] = min(low[node], low[nxt])
        if low[node] == index[node]:
            members = stack[stack.index(node) :]
            del stack[stack.index(node) :]
            if len(members) > 1:
                cycles.append(sorted(members))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def test_no_two_modules_import_each_other() -> None:
    """No module cycle, through any number of modules: each can be read after what it imports."""
    assert module_cycles() == []
