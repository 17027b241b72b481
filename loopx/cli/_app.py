"""Parse, dispatch, and turn a LoopxError into one line, a hint and an exit code.

Only the chosen subcommand's module is imported: ``loopx --help`` and
``loopx --version`` start about as fast as Python itself, and each command
pays only for what it uses. The table below is the CLI's surface;
``tests/test_cli_start.py`` checks it against what the modules register.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from loopx.cli._common import Parser, common_options, configure_logging

# Not `typing`/`collections.abc`: `loopx --help` imports only argparse, to start fast.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from loopx.errors import LoopxError


class Command:
    """A subcommand: the module that registers it, its one-line help, its aliases."""

    __slots__ = ("aliases", "help", "module")

    def __init__(self, module: str, help: str, aliases: tuple[str, ...] = ()) -> None:  # noqa: A002
        self.module, self.help, self.aliases = module, help, aliases


COMMANDS = {
    "init": Command("_init", "create the runtime root and an empty registry"),
    "goal": Command("_goal", "register and manage goals"),
    "gate": Command("_gate", "open or resolve a human gate on a goal"),
    "quota": Command("_quota", "inspect a goal's compute quota"),
    "account": Command("_account", "provider accounts: credentials, usage limits and budgets"),
    "schema": Command("_schema", "print the JSON Schema of a file kind or a --json output"),
    "agent": Command("_agent", "run an agent worker (the supervisor starts these)"),
    "supervisor": Command(
        "_supervisor", "run and control the agent fleet of a root", aliases=("daemon",)
    ),
    "batch": Command("_batch", "headless batch runs"),
    "status": Command("_status", "who must act next on each goal, and why"),
    "refresh": Command("_status", "refresh the cached status projection now"),
    "serve": Command("_serve", "serve the dashboard, status, goals and metrics over HTTP"),
    "notify": Command("_notify", "send gates, failures and other events to chat, mail or webhooks"),
    "hosts": Command("_hosts", "host CLIs: versions, the canary's verdicts, probing again"),
    "archive": Command("_archive", "move a goal's files aside and mark it archived"),
    "probe": Command("_probe", "run a goal's read-only next_probe command"),
    "turn": Command("_turn", "run turns by hand"),
    "journal": Command("_journal", "list and inspect turn journals"),
    "logs": Command("_logs", "read and follow the agents' and supervisor's logs"),
    "recover": Command("_recover", "finish interrupted turns from their journals"),
    "demo": Command(
        "_demo", "run demo goals on a fresh root with a headless fleet, then show the status"
    ),
    "replay": Command(
        "_replay", "rebuild a goal's state, history and quota ledger from its journals"
    ),
    "retention": Command("_retention", "what the root keeps of its goals' past, and disk limits"),
    "gc": Command("_retention", "fold old turns into checkpoints and remove what they replace"),
    "doctor": Command(
        "_doctor", "check permissions, file schemas, leases, journals, quarantine, fleet"
    ),
}
_BY_NAME = {alias: name for name, command in COMMANDS.items() for alias in (name, *command.aliases)}
_VALUED_OPTIONS = frozenset({"--root", "--runtime-root", "--registry", "--log-level"})


def chosen_command(argv: Sequence[str]) -> str | None:
    """The subcommand named on the command line (after the common options), or None."""
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in _VALUED_OPTIONS:
            skip = True
        elif arg == "--" or not arg.startswith("-"):
            return _BY_NAME.get(arg)
    return None


def command_module(name: str) -> object:
    """Import the module that registers subcommand ``name``."""
    return importlib.import_module(f"loopx.cli.{COMMANDS[name].module}")


def _version() -> str:
    import loopx  # noqa: PLC0415 - the version is read lazily from the package metadata

    return f"loopx {loopx.__version__}"


class _VersionAction(argparse.Action):
    def __call__(self, parser: argparse.ArgumentParser, *_: object, **__: object) -> None:
        sys.stdout.write(_version() + "\n")
        parser.exit()


def build_parser(argv: Sequence[str] | None = None) -> Parser:
    """The `loopx` parser; only the command ``argv`` chooses (if any) is fully registered.

    Without ``argv`` every command is registered in full.
    """
    parser = Parser(
        prog="loopx",
        description="Run long-lived AI agent work unattended, crash-safe by journal.",
        parents=[common_options(top=True)],
    )
    parser.add_argument("--version", nargs=0, action=_VersionAction, help="print the version")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    chosen = chosen_command(argv) if argv is not None else None
    full = COMMANDS if argv is None else ([chosen] if chosen else [])
    for name in full:
        module = command_module(name)
        if name not in sub.choices:
            module.register(sub)  # type: ignore[attr-defined]  # every command module has it
    for name, command in COMMANDS.items():
        if name not in sub.choices:
            # A stub for the help listing; choosing it registers the real one (above).
            sub.add_parser(name, help=command.help, aliases=list(command.aliases))
    return parser


# Options whose value may itself start with "-": a host's own flags (`--host '--fail'`).
_DASH_VALUED = frozenset({"--host", "--next-probe"})


def dash_values(argv: list[str]) -> list[str]:
    """``--host -x`` as ``--host=-x``: argparse takes a lone ``-x`` for an option. Pure.

    (`--host '--fail'` was refused with "expected one argument".)
    """
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return out + argv[i:]
        if arg in _DASH_VALUED and i + 1 < len(argv) and argv[i + 1].startswith("-"):
            out.append(f"{arg}={argv[i + 1]}")
            i += 2
            continue
        out.append(arg)
        i += 1
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `loopx` console script; returns the exit code."""
    words = list(sys.argv[1:] if argv is None else argv)
    args_in = dash_values(words)
    args: argparse.Namespace | None = None
    try:
        parser = build_parser(args_in)
        args = parser.parse_args(args_in)
        if not getattr(args, "configures_logging", False):
            configure_logging(args)
        code: int = args.func(args)
        if getattr(args, "warm", None):
            from loopx.api import remember_answer  # noqa: PLC0415 - only for a warm command

            # The same words try the same memo next time, before argparse (loopx.cli.run).
            call, arguments = args.warm
            remember_answer(words, call, **arguments)
    except KeyboardInterrupt:
        return _interrupted()
    except Exception as e:  # noqa: BLE001 - _failed re-raises what it does not handle
        if _caused_by_interrupt(e):
            # A Ctrl-C inside an import can reach us wrapped (pydantic's class set-up
            # raises a RuntimeError from it): still the interruption, not an error.
            return _interrupted()
        return _failed(e, args)
    return code


def _interrupted() -> int:
    from loopx import exitcodes  # noqa: PLC0415 - not needed by --help/--version

    print("loopx: interrupted", file=sys.stderr)
    return exitcodes.INTERRUPTED


def _caused_by_interrupt(e: BaseException) -> bool:
    """Whether a KeyboardInterrupt is among ``e``'s causes."""
    seen: set[int] = set()
    cause: BaseException | None = e
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


def _failed(e: Exception, args: argparse.Namespace | None) -> int:
    """The exit code of a command that raised ``e``: one line and a hint, never a traceback.

    Raises:
        Exception: ``e`` again when it is neither a LoopxError nor an OSError.
    """
    from loopx import exitcodes  # noqa: PLC0415 - not needed by --help/--version
    from loopx.errors import LoopxError, ResourceFaultError, resource_fault  # noqa: PLC0415

    if isinstance(e, LoopxError):
        return _error(e)
    if isinstance(e, BrokenPipeError):
        # The reader went away (`loopx goal list | head`); nothing more to say.
        return exitcodes.OK
    if not isinstance(e, OSError):
        raise e
    reason = resource_fault(e)
    if reason is not None:
        command = getattr(args, "command", None) if args is not None else None
        return _error(ResourceFaultError(reason, f"finish `loopx {command or '...'}`"))
    # The last net for a file the user pointed at (a directory given as a file,
    # a path under a file, a permission): one line, never a traceback.
    where = f": {e.filename}" if e.filename else ""
    _report(
        f"{e.strerror or e}{where}",
        "check the path and its permissions; `loopx doctor` describes the root",
    )
    return exitcodes.FAILURE


def _report(message: str, hint: str | None) -> None:
    print(f"loopx: error: {message}", file=sys.stderr)
    if hint:
        print(f"hint: {hint}", file=sys.stderr)


def _error(e: LoopxError) -> int:
    """Print the error's one line and hint; return its exit code."""
    _report(e.message, e.hint)
    return e.exit_code


def run() -> None:
    """Console-script wrapper: exit with :func:`main`'s code."""
    sys.exit(main())
