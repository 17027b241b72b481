"""The `loopx` command line: thin over the library."""

import sys


def run() -> None:
    """Console-script entry: a Ctrl-C while the CLI is still importing exits 130 quietly.

    A warm `loopx quota should-run` is answered before argparse (``_quick``).
    """
    try:
        if "should-run" in sys.argv:
            from loopx.cli._quick import warm_should_run  # noqa: PLC0415 - see above

            code = warm_should_run(sys.argv[1:])
            if code is not None:
                sys.exit(code)
        from loopx.cli._app import main  # noqa: PLC0415 - inside the Ctrl-C guard
    except KeyboardInterrupt:
        print("loopx: interrupted", file=sys.stderr)
        sys.exit(130)
    sys.exit(main())


def main(argv: list[str] | None = None) -> int:
    """Run the `loopx` command line on ``argv``; returns the exit code."""
    from loopx.cli._app import main as app_main  # noqa: PLC0415 - keep import cheap

    return app_main(argv)


__all__ = ["main", "run"]
