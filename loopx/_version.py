"""The package version, without importlib.metadata (which costs more than `loopx --help`).

Kept equal to ``pyproject.toml``'s ``version`` by ``tests/test_cli_start.py``.
"""

VERSION = "0.1.0"
