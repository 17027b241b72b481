"""One sandboxed turn: its scratch, its proxy, and how its host and check are wrapped.

:class:`TurnSandbox` is opened by the turn's ``sandbox`` step (through
:class:`loopx.agents.turn.AgentProcesses`) and closed at the end of the
turn. The host's and the check's runners ask it for their command line
(:meth:`TurnSandbox.wrap`) and environment (:meth:`TurnSandbox.environment`):

* the environment keeps only the system's basics, LoopX's variables, the
  account's and the adapter's settings; every credential in it is replaced
  by a placeholder, which the proxy swaps for the key on the provider route
  (the key is never inside the sandbox);
* the provider's base URL variable points at the bridge inside, and the
  proxy forwards to the real one;
* the turn's result file is written to a scratch folder bound at the result
  file's folder, and moved to its real place after the run
  (:meth:`TurnSandbox.collect`): nothing else of the root is visible.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from loopx import environ
from loopx.accounts.headers import record_headers
from loopx.agents.sandbox.bwrap import BRIDGE_PORT, INSIDE_DIR, SYSTEM_DIRS, Mounts, bwrap_argv
from loopx.agents.sandbox.proxy import NetworkProxy, Provider
from loopx.root import Layout
from loopx.sandbox import SANDBOX_FOLDER, NetworkReport, SandboxSpec
from loopx.storage.dirs import ensure_dir

_BRIDGE: Final = Path(__file__).with_name("bridge.py")
_BRIDGE_URL: Final = f"http://127.0.0.1:{BRIDGE_PORT}"
# The agent's variables a sandboxed run keeps; the rest (other accounts' keys) stays out.
_KEPT: Final = frozenset({"PATH", "LANG", "LANGUAGE", "TERM", "TZ", "USER", "LOGNAME", "SHELL"})
# Per host kind: the base URL variable, the provider's public URL, and its key variables.
_PROVIDERS: Final = {
    "claude": ("ANTHROPIC_BASE_URL", "https://api.anthropic.com", ("ANTHROPIC_API_KEY",)),
    "codex": ("OPENAI_BASE_URL", "https://api.openai.com/v1", ("OPENAI_API_KEY", "CODEX_API_KEY")),
    "gemini": (
        "GOOGLE_GEMINI_BASE_URL",
        "https://generativelanguage.googleapis.com",
        ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    ),
}
_PLACEHOLDER: Final = "loopx-sandbox-placeholder-"
_CONFIG_SUFFIXES: Final = ("_HOME", "_CONFIG_DIR")


class TurnSandbox:
    """The sandbox of one turn of one goal (host and done-check alike)."""

    def __init__(
        self,
        layout: Layout,
        goal_id: str,
        spec: SandboxSpec,
        *,
        account: str,
        host_kind: str,
    ) -> None:
        self.layout, self.goal_id, self.spec = layout, goal_id, spec
        self.account, self.host_kind = account, host_kind
        self.home = ensure_dir(layout.goal_dir(goal_id) / SANDBOX_FOLDER / "home")
        # Short: a Unix socket's path has at most 107 bytes.
        self.scratch = Path(tempfile.mkdtemp(prefix="loopx-sb-"))
        for name in ("tmp", "net", "results"):
            (self.scratch / name).mkdir(mode=0o700)
        self.proxy: NetworkProxy | None = None
        self.keys: dict[str, str] = {}  # placeholder -> key

    @property
    def socket(self) -> Path:
        """The proxy's socket, outside."""
        return self.scratch / "net" / "proxy.sock"

    def environment(self, full: Mapping[str, str], own: Mapping[str, str]) -> dict[str, str]:
        """The run's environment: the basics of ``full``, all of ``own``, keys as placeholders.

        ``full`` is what an unsandboxed run would get; ``own`` what LoopX, the
        account and the adapter set in it (kept whole).
        """
        url_var, default_url, key_vars = _PROVIDERS.get(self.host_kind, ("", "", ()))
        env = {k: v for k, v in full.items() if k in _KEPT or k.startswith(environ.PREFIX)}
        env.update({k: full[k] for k in key_vars if k in full})
        env.update(own)
        for name in [*key_vars, *_secret_names(own)]:
            if env.get(name) and not env[name].startswith(_PLACEHOLDER):
                placeholder = _PLACEHOLDER + name
                self.keys[placeholder] = env[name]
                env[name] = placeholder
        upstream = env.pop(environ.PROVIDER_URL, None) or env.get(url_var) or default_url
        if url_var:
            env[url_var] = _BRIDGE_URL
        if upstream:
            env[environ.PROVIDER_URL] = _BRIDGE_URL
        self._serve(upstream)
        proxy_url = _BRIDGE_URL
        for name in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "ALL_PROXY"):
            env[name] = proxy_url
        env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1"  # the bridge itself: the provider route
        env["HOME"] = self._home_at(full)
        env["TMPDIR"] = "/tmp"  # noqa: S108 - the sandbox's own /tmp
        return env

    def _serve(self, upstream: str | None) -> None:
        if self.proxy is not None:
            return
        # Shared, not copied: a later run of the turn adds its keys to the same dict.
        provider = Provider(upstream, self.keys) if upstream else None
        self.proxy = NetworkProxy(
            self.socket,
            list(self.spec.allow_domains),
            provider,
            on_headers=lambda seen: record_headers(self.layout, self.account, seen),
        )

    def _home_at(self, full: Mapping[str, str]) -> str:
        home = full.get("HOME") or os.path.expanduser("~")
        return home if os.path.isabs(home) and home != "/" else "/home/loopx"

    def wrap(
        self, argv: list[str], *, cwd: Path, env: Mapping[str, str], result_file: Path | None
    ) -> list[str]:
        """``argv`` as run inside the sandbox: bwrap, the bridge, then ``argv``."""
        python = os.path.realpath(sys.executable)
        readable = {sys.prefix, sys.base_prefix, os.path.dirname(python)}
        program = Path(argv[0])
        if program.is_absolute() and not _system(argv[0]):
            # Its real path: only the real folder is bound, not the links on the way to it.
            argv = [os.path.realpath(program), *argv[1:]]
            readable.add(str(_install_dir(program)))
        mounts = Mounts(
            workdir=str(cwd),
            home=str(self.home),
            home_at=env.get("HOME", "/home/loopx"),
            tmp=str(self.scratch / "tmp"),
            net=str(self.scratch / "net"),
            bridge=str(_BRIDGE),
            results=(str(self.scratch / "results"), str(result_file.parent))
            if result_file
            else None,
            writable=tuple(sorted({*_git_dirs(cwd), *_config_dirs(env)})),
            readable=tuple(sorted(p for p in readable if not _system(p) and os.path.isdir(p))),
            hidden=(str(self.layout.root),),
            files=tuple(self._named_files(argv, result_file)),
        )
        limits = [str(self.spec.max_processes), str(self.spec.max_file_mb * 1024 * 1024)]
        # -I -S: the stdlib only (site's .pth files were most of a fresh interpreter's start).
        bridge = [
            python,
            "-I",
            "-S",
            f"{INSIDE_DIR}/bridge.py",
            str(BRIDGE_PORT),
            f"{INSIDE_DIR}/net/proxy.sock",
        ]
        return [*bwrap_argv(mounts), *bridge, *limits, "--", *argv]

    def _named_files(self, argv: list[str], result_file: Path | None) -> list[str]:
        """The root's files the command names (read-only inside): codex's result schema."""
        root = self.layout.root
        return [
            arg
            for arg in argv[1:]
            if os.path.isabs(arg)
            and Path(arg) != result_file
            and root in Path(arg).parents
            and os.path.isfile(arg)
        ]

    def collect(self, result_file: Path) -> None:
        """Move the result the run wrote inside to the result file's real place."""
        written = self.scratch / "results" / result_file.name
        if written.exists() or written.is_symlink():
            ensure_dir(result_file.parent)
            shutil.move(str(written), str(result_file))

    def report(self) -> NetworkReport | None:
        """What the proxy saw since the last report."""
        return self.proxy.report() if self.proxy is not None else None

    def close(self) -> None:
        """Stop the proxy, remove the scratch (the home stays for the next turn)."""
        if self.proxy is not None:
            self.proxy.close()
            self.proxy = None
        with contextlib.suppress(OSError):
            shutil.rmtree(self.scratch)


def _secret_names(own: Mapping[str, str]) -> list[str]:
    """Variables that look like credentials: the env file's keys, tokens, passwords."""
    words = ("KEY", "TOKEN", "SECRET", "PASSWORD")
    return [
        k for k in own if any(w in k.upper() for w in words) and not k.startswith(environ.PREFIX)
    ]


def _system(path: str) -> bool:
    return any(path == d or path.startswith(d + "/") for d in SYSTEM_DIRS)


def _install_dir(program: Path) -> Path:
    """What a program outside the system needs visible: its package's folder, or its own."""
    real = program.resolve()
    for parent in real.parents:
        if parent.name == "node_modules":
            return parent.parent
    return real.parent


def _git_dirs(cwd: Path) -> list[str]:
    """A worktree's repository git folder (its ``.git`` is a file naming it)."""
    dot = cwd / ".git"
    try:
        text = dot.read_text() if dot.is_file() else ""
    except OSError:
        return []
    if not text.startswith("gitdir:"):
        return []
    gitdir = (cwd / text.removeprefix("gitdir:").strip()).resolve()
    common = gitdir / "commondir"
    try:
        return [str((gitdir / common.read_text().strip()).resolve())]
    except OSError:
        return [str(gitdir)]


def _config_dirs(env: Mapping[str, str]) -> list[str]:
    """The CLI configuration folders the environment names (CODEX_HOME, CLAUDE_CONFIG_DIR)."""
    return [
        v
        for k, v in env.items()
        if k.endswith(_CONFIG_SUFFIXES) and k != "HOME" and os.path.isabs(v) and os.path.isdir(v)
    ]


__all__ = ["TurnSandbox"]
