"""Fakes that ship with LoopX so tests (ours and users') need no mocks.

``install_fake_host(bin_dir, "codex")`` writes an executable named ``codex``
(or ``claude``, ``gemini``) into ``bin_dir`` that runs :mod:`loopx.testing.fake_codex`
(or :mod:`~loopx.testing.fake_claude`, :mod:`~loopx.testing.fake_gemini`) with this interpreter; put ``bin_dir``
first on PATH and LoopX drives the fake like the real CLI. The fakes print
the CLIs' documented output formats and are steered by ``FAKE_CODEX_*`` /
``FAKE_CLAUDE_*`` / ``FAKE_GEMINI_*`` environment variables (see each module).
"""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["FAKE_HOSTS", "install_fake_host"]

FAKE_HOSTS = {
    "codex": "loopx.testing.fake_codex",
    "claude": "loopx.testing.fake_claude",
    "gemini": "loopx.testing.fake_gemini",
}


def install_fake_host(bin_dir: Path, name: str) -> Path:
    """Write the executable fake ``name`` (``codex``, ``claude`` or ``gemini``) into ``bin_dir``; return it."""
    module = FAKE_HOSTS[name]
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / name
    path.write_text(f"#!{sys.executable}\nfrom {module} import main\nraise SystemExit(main())\n")
    path.chmod(0o755)
    return path
