"""The one error hierarchy: every error says what was wrong, where, and what to do."""

from __future__ import annotations

import errno
from pathlib import Path

from loopx import exitcodes

TYPE_CHECKING = False  # not `typing`: a warm `quota should-run` must not pay for its import
if TYPE_CHECKING:
    from typing import Any, Final


def _rebuild(cls: type[LoopxError], message: str, attrs: dict[str, Any]) -> LoopxError:
    error = cls.__new__(cls)
    Exception.__init__(error, message)
    error.__dict__.update(attrs)
    return error


class LoopxError(Exception):
    """Base of every error LoopX raises on purpose.

    Attributes:
        hint: one line telling the user what to do next, or None.
        exit_code: what the CLI exits with when this error reaches it.
    """

    exit_code: int = exitcodes.FAILURE

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint

    @property
    def message(self) -> str:
        """The error's one-line message."""
        return str(self.args[0]) if self.args else ""

    def __reduce__(self) -> tuple[Any, ...]:
        # Errors cross process boundaries (agents report to the supervisor);
        # rebuild from the message and attributes, not from __init__'s signature.
        return _rebuild, (type(self), self.message, dict(self.__dict__))


class UsageError(LoopxError):
    """The command line or an argument is malformed."""

    exit_code = exitcodes.USAGE


class InvalidGoalIdError(UsageError, ValueError):
    """A goal id is not a single safe path segment.

    Also a ValueError, so that pydantic reports a bad id inside a file as a
    validation problem of that file.
    """

    def __init__(self, goal_id: str, problem: str, *, rule: str) -> None:
        super().__init__(
            f"invalid goal id {goal_id!r}: {problem}",
            hint=f"a goal id must match {rule} and may not be '.' or '..'",
        )
        self.goal_id = goal_id
        self.problem = problem


class InvalidPolicyError(UsageError):
    """A goal's policy field is out of range or of the wrong type."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(
            f"invalid value for {field}: {problem}", hint="see `loopx goal add --help`"
        )
        self.field = field
        self.problem = problem


class EnvironmentValueError(UsageError):
    """A ``LOOPX_*`` environment variable holds a value of the wrong kind."""

    def __init__(self, name: str, value: str, wanted: str) -> None:
        super().__init__(
            f"environment variable {name}={value[:40]!r} is not {wanted}",
            hint=f"fix or unset {name}",
        )
        self.name = name
        self.value = value
        self.wanted = wanted


class GoalNotFoundError(LoopxError):
    """The registry has no goal with this id."""

    def __init__(self, goal_id: str, registry: Path) -> None:
        super().__init__(
            f"goal {goal_id!r} is not in the registry {registry}",
            hint="list goals with `loopx goal list`; add one with `loopx goal add`",
        )
        self.goal_id = goal_id
        self.registry = registry


class GoalExistsError(LoopxError):
    """`goal add` named an id that is already registered."""

    def __init__(self, goal_id: str, registry: Path) -> None:
        super().__init__(
            f"goal {goal_id!r} already exists in {registry}",
            hint="pass --update to change its policy, or choose another id",
        )
        self.goal_id = goal_id
        self.registry = registry


class GoalStateError(LoopxError):
    """An operation does not fit the goal's current state (e.g. resolving a gate none is open)."""


class CorruptFileError(LoopxError):
    """A durable file is not valid JSON or fails its schema; it is left untouched."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(
            f"{path} is damaged: {problem}",
            hint="the file was left as it is; inspect it, restore it from a backup, "
            "or run `loopx doctor` for a repair plan",
        )
        self.path = path
        self.problem = problem


class LockTimeoutError(LoopxError):
    """A file lock stayed busy past its deadline."""

    def __init__(self, lock_path: Path, waited_s: float) -> None:
        super().__init__(
            f"could not lock {lock_path} within {waited_s:.1f}s: another LoopX process holds it",
            hint="retry; if no LoopX process is running, the lock file is stale and safe to delete",
        )
        self.lock_path = lock_path
        self.waited_s = waited_s


class RootError(LoopxError):
    """The runtime root cannot be resolved, created or trusted."""


class NewerRootError(RootError):
    """The root was written by a newer LoopX whose file format this program does not know."""

    def __init__(self, path: Path, found: int, known: int) -> None:
        super().__init__(
            f"{path} has schema_version {found}; this LoopX knows up to {known}, "
            "so a newer release wrote this root",
            hint="upgrade LoopX (`pip install -U loopx`) or choose another root with --root",
        )
        self.path, self.found, self.known = path, found, known


class UnsafePathError(LoopxError):
    """A path inside the runtime root is a symlink or otherwise not what LoopX created."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(
            f"refusing to use {path}: {problem}",
            hint="LoopX never follows symlinks inside its root; remove the entry and retry",
        )
        self.path = path
        self.problem = problem


class HostMissingError(LoopxError):
    """A goal's host program is not installed or not on PATH."""

    exit_code = exitcodes.USAGE  # the same exit as a missing command program or workdir

    def __init__(self, program: str, kind: str) -> None:
        where = "is not an executable file" if "/" in program else "was not found on PATH"
        super().__init__(
            f"{kind} host program {program!r} {where}",
            hint=f"install {program} or pass --host with its full path",
        )
        self.program = program
        self.kind = kind


class SandboxUnavailableError(UsageError):
    """``--sandbox bwrap`` on a machine where bubblewrap cannot run."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(f"--sandbox bwrap refused: {problem}", hint=fix)
        self.problem = problem
        self.fix = fix


class LeaseLostError(LoopxError):
    """A newer epoch took the goal's lease; this holder must stop and write nothing more."""

    def __init__(self, goal_id: str, held: int, current: int) -> None:
        super().__init__(
            f"goal {goal_id}: lease epoch {held} superseded by {current}; "
            "turn stopped, nothing written",
            hint="another agent took the goal over after this lease expired; "
            "its journal carries on from there",
        )
        self.goal_id = goal_id
        self.held = held
        self.current = current


class JournalExistsError(LoopxError):
    """A turn journal with this turn_key already exists; a turn never reuses a key."""

    def __init__(self, path: Path) -> None:
        super().__init__(
            f"turn journal {path} already exists",
            hint="run `loopx recover` to finish or quarantine the earlier turn, then retry",
        )
        self.path = path


class HostUnsupportedError(LoopxError):
    """No host adapter is registered for a goal's host kind."""

    exit_code = exitcodes.USAGE  # a kind named on the command line, like a bad value

    def __init__(self, kind: str, known: list[str]) -> None:
        super().__init__(
            f"no host adapter for host kind {kind!r} (known: {', '.join(known) or 'none'})",
            hint=f"pass --host-kind with one of {', '.join(known) or 'none'}, or install the "
            "package whose plug-in provides it",
        )
        self.kind = kind
        self.known = known


# --- one turn per workdir, the done-check --------------------------------------------------


class CheckPendingError(LoopxError):
    """A turn's done-check is due but not recorded: only an agent may run it, not the kernel."""

    def __init__(self, goal_id: str, turn_key: str) -> None:
        super().__init__(
            f"goal {goal_id}: turn {turn_key} waits for its done-check, which was not recorded",
            hint=f"run `loopx turn run-once {goal_id}` (or start agents): the next claim "
            "runs the check, never the host again",
        )
        self.goal_id = goal_id
        self.turn_key = turn_key

    def __reduce__(self) -> tuple[object, ...]:
        return type(self), (self.goal_id, self.turn_key)


# --- resource faults: a write refused by the machine ----------------------------------------

_RESOURCE_REASONS: Final = {
    errno.ENOSPC: "disk full",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only filesystem",
    errno.EIO: "I/O error",
    # Descriptor and memory exhaustion pass like a full disk; loops wait them out
    errno.EMFILE: "too many open files in this process",
    errno.ENFILE: "too many open files on this machine",
    errno.ENOMEM: "out of memory",
}
RESOURCE_ERRNOS: Final = frozenset(_RESOURCE_REASONS)


class ResourceFaultError(LoopxError):
    """A write was refused by the machine (disk full, quota, read-only, I/O error)."""

    def __init__(self, reason: str, doing: str) -> None:
        super().__init__(
            f"could not {doing}: {reason}",
            hint="free space on the disk holding the runtime root (`df -h ROOT`) or fix "
            "the filesystem; nothing was lost, run the command again afterwards",
        )
        self.reason = reason
        self.doing = doing


def resource_fault(error: BaseException) -> str | None:
    """The reason when ``error`` is a write the machine refused, else None (ENOSPC: one statvfs).

    Such faults are weathered, not fatal: callers wait and retry (docs/reliability.md).
    """
    if isinstance(error, ResourceFaultError):
        return error.reason
    if isinstance(error, OSError) and error.errno in RESOURCE_ERRNOS:
        where = f" ({error.filename})" if error.filename else ""
        reason = _RESOURCE_REASONS[error.errno]
        if error.errno == errno.ENOSPC and _no_free_inodes(error.filename):
            reason = "no free inodes"  # ENOSPC says the same for both: name the one spent
        return f"{reason}{where}"
    return None


def loop_fault(error: BaseException) -> str | None:
    """The reason when ``error`` is a resource error a long-running loop weathers, else None.

    :func:`resource_fault`'s faults, and ``MemoryError``: an allocation the
    machine refused is as passing as a full disk, and no loop of the
    supervisor, agents or server may die of it.
    """
    if isinstance(error, MemoryError):
        return "out of memory"
    return resource_fault(error)


# A git worktree per goal and merges that wait for the check (loopx/worktree/).
class WorktreeError(UsageError):
    """A goal's git worktree cannot be made, shown or removed as asked (nothing was changed)."""


class GitError(LoopxError):
    """A `git` command LoopX ran failed; its stderr's last line is in the message."""

    def __init__(self, argv: list[str], where: Path, code: int, stderr: str) -> None:
        last = stderr.strip().splitlines()[-1] if stderr.strip() else f"exit code {code}"
        super().__init__(
            f"`{' '.join(argv)}` failed in {where}: {last}",
            hint="fix the repository (see `git status` there) and run the command again",
        )
        self.argv, self.where, self.code, self.stderr = argv, where, code, stderr


class MergeRefusedError(LoopxError):
    """A merge cannot start or go on (not a worktree goal, not done, base moved, dirty base)."""

    exit_code = exitcodes.USAGE


class MergeBusyError(LoopxError):
    """A merge a kill interrupted cannot go on yet: a process still holds its repository."""

    def __init__(self, goal_id: str, path: Path, pid: int, holder: str | None = None) -> None:
        who = holder or f"pid {pid}, started by the interrupted merge, still runs"
        super().__init__(
            f"goal {goal_id}: the interrupted merge cannot go on yet: {who} ({path}); "
            "nothing was removed",
            hint=f"wait for pid {pid} to end (or end it), then run `loopx goal merge {goal_id}` "
            f"again, or `loopx goal merge {goal_id} --abort`",
        )
        self.goal_id, self.path, self.pid, self.holder = goal_id, path, pid, holder

    def __reduce__(self) -> tuple[object, ...]:
        return type(self), (self.goal_id, self.path, self.pid, self.holder)


# --- accounts -------------------------------------------------------------------------------------


class AccountNotFoundError(UsageError):
    """A goal or command names an account the root does not have."""

    def __init__(self, name: str, root: Path) -> None:
        super().__init__(
            f"account {name!r} does not exist under {root}",
            hint="list accounts with `loopx account list`; add one with `loopx account add`",
        )
        self.name = name
        self.root = root


class AccountExistsError(UsageError):
    """`account add` named an account that exists."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"account {name!r} already exists",
            hint=f"change it with `loopx account edit {name}`, or choose another name",
        )
        self.name = name


class AccountInUseError(UsageError):
    """`account remove` of an account that goals still name."""

    def __init__(self, name: str, goal_ids: list[str]) -> None:
        more = len(goal_ids) - 5  # at most five ids in the message
        shown = ", ".join(goal_ids[:5]) + (f" and {more} more" if more > 0 else "")
        super().__init__(
            f"account {name!r} is used by {len(goal_ids)} goal(s): {shown}; nothing was removed",
            hint="move those goals to another account (`loopx goal add ID --update --account "
            "OTHER`) or archive them first",
        )
        self.name = name
        self.goal_ids = goal_ids


class AccountEnvFileError(UsageError):
    """An account's env file is missing, unreadable, malformed or readable by others."""

    def __init__(self, path: Path | str, problem: str) -> None:
        super().__init__(
            f"account env file {path}: {problem}",
            hint=f"create it with one KEY=VALUE a line, then `chmod 600 {path}`",
        )
        self.path = str(path)
        self.problem = problem


class AccountDamagedError(CorruptFileError):
    """A file of one account cannot be read: that account's goals wait, nothing else stops.

    A :class:`CorruptFileError`, so every reader that reports damaged files
    reports it; the readers that serve the whole root (status, `account list`,
    the scheduler) catch it and show the account as ``damaged`` instead.
    """

    def __init__(self, name: str, path: Path, problem: str) -> None:
        who = "the root's budget" if name.startswith(".") else f"account {name}"
        LoopxError.__init__(
            self,
            f"{who}: {path} is damaged: {problem}",
            hint="the file was left as it is and the account's goals wait; restore it from a "
            "backup, or run `loopx doctor` for a repair",
        )
        self.name = name
        self.path = path
        self.problem = problem


class AccountMismatchError(UsageError):
    """A goal names an account of another host kind."""

    def __init__(self, goal_id: str, account: str, account_kind: str, goal_kind: str) -> None:
        super().__init__(
            f"goal {goal_id!r}: account {account!r} is for {account_kind} hosts, the goal's host "
            f"is {goal_kind}; nothing was changed",
            hint=f"name an account of host kind {goal_kind} (`loopx account list`)",
        )
        self.goal_id = goal_id
        self.account = account


def _no_free_inodes(filename: object) -> bool:
    """Whether the filesystem of ``filename`` (or of its directory) has no inode left."""
    import os  # noqa: PLC0415 - only on this rare path; the module stays light

    if not isinstance(filename, (str, bytes, os.PathLike)):
        return False
    path = os.fsdecode(filename)
    for candidate in (path, os.path.dirname(path)):
        try:
            st = os.statvfs(candidate or ".")
        except OSError:
            continue
        return bool(st.f_files) and st.f_favail == 0
    return False


# --- hostile files: what a host can leave where LoopX reads ---------------------------------


class NotRegularFileError(UnsafePathError):
    """A path LoopX reads holds something other than a regular file (a FIFO, a device, ...)."""

    def __init__(self, path: Path, kind: str) -> None:
        super().__init__(path, f"it is {kind}, not a regular file")
        self.kind = kind


class FileTooLargeError(LoopxError):
    """A file is larger than any file LoopX writes there could be (a sparse or planted file)."""

    def __init__(self, path: Path, size: int, cap: int) -> None:
        super().__init__(
            f"refusing to read {path}: it holds {size} bytes, more than the {cap} "
            "LoopX reads of one file",
            hint="a file this large was not written by LoopX; move it away and retry",
        )
        self.path = path
        self.size = size
        self.cap = cap


class RootMovedError(RootError):
    """The runtime root this process opened is gone from its path (moved, removed, swapped)."""

    def __init__(self, root: Path, wanted: Path) -> None:
        super().__init__(
            f"the runtime root {root} is gone from its path (moved or removed while LoopX "
            f"ran); refusing to recreate it to make {wanted}",
            hint="move the root back to its path, or start LoopX again with --root at its "
            "new place",
        )
        self.root = root
        self.wanted = wanted
