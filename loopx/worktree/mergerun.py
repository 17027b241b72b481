"""One run of `loopx goal merge`: its journal, its git commands, and what a killed one left.

:class:`MergeRun` holds the merge's journal as this process last wrote it.
:meth:`MergeRun.git` runs every git command that changes something as a
journaled :class:`~loopx.worktree.mergejournal.GitRun`: recorded before it
starts, then with git's pid and start time, then with its exit. A kill at any
instant therefore leaves a journal naming the git that may still run, or
that died holding a lock.

:meth:`MergeRun.settle` runs first when a merge is continued (a rerun,
`loopx recover`, `--abort`). What a killed git leaves, and what happens to it:

- the scratch worktree, half-made or locked ("initializing"), with its own
  ``index.lock``: LoopX's own, removed whole (``git worktree remove -f -f``,
  then its folder and registration) and made again by the step that needs it;
- the base checkout's ``index.lock`` (a sync killed in ``read-tree``) and the
  base ref's ``.lock`` (a move killed in ``update-ref``): removed.

Either only once the interrupted git and the merge process that ran it are
gone (by their recorded pid and start time) and no other live process holds
the repository (:mod:`loopx.git.holders`); until then it waits, at most
:data:`SETTLE_WAIT_S`, then stops naming the lock and its holder.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from loopx import git
from loopx.errors import GitError, MergeBusyError
from loopx.git.holders import gone, holders
from loopx.log import get_logger
from loopx.model import utcnow
from loopx.process import ProcessIdentity
from loopx.root import Layout
from loopx.storage.dirs import ensure_dir
from loopx.worktree.mergejournal import GitRun, MergeJournal, MergeMark, write_merge_journal

log = get_logger(__name__)

SETTLE_WAIT_S: Final = 30.0  # how long a continued merge waits for a killed merge's git to end
_POLL_S: Final = 0.05
_GIT_TIMEOUT_S: Final = 300.0
# The runs whose interruption may leave a lock outside the scratch worktree, and where.
_SYNC_ACTIONS: Final = frozenset({"sync", "unsync"})
# How git says it changed nothing because a lock file exists ("Unable to create
# '.../index.lock': File exists.", "cannot lock ref ...: Unable to create '....lock'").
_LOCK_REFUSAL: Final = re.compile(r"Unable to create '[^']*\.lock'")


@dataclass(slots=True)
class MergeRun:
    """A merge as this process runs it: the journal, written through on every change."""

    layout: Layout
    journal: MergeJournal
    me: ProcessIdentity = field(default_factory=ProcessIdentity.current)
    scratch_is_mine: bool = False  # this process made the scratch worktree as it is now
    settling: bool = False  # inside settle(): its own git runs are not retried

    def record(self, journal: MergeJournal) -> MergeJournal:
        """Write ``journal`` (dated now; a new step gets its mark) and keep it as the current one."""
        now = utcnow()
        update: dict[str, object] = {
            "updated_at": now,
            "owner_pid": self.me.pid,
            "owner_started": self.me.started_at,
        }
        if journal.step is not self.journal.step:
            update["marks"] = [*journal.marks, MergeMark(step=journal.step, at=now)]
        self.journal = journal.model_copy(update=update)
        write_merge_journal(self.layout, self.journal)
        return self.journal

    def _set_run(self, run: GitRun, *, new: bool = False) -> None:
        runs = self.journal.runs if new else self.journal.runs[:-1]
        self.record(self.journal.model_copy(update={"runs": [*runs, run]}))

    def git(
        self,
        action: str,
        where: Path,
        *args: str,
        check: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """``git -C where args...`` as a journaled run named ``action``.

        A run git refused because a lock file exists (it changed nothing) is run once more
        after :meth:`settle`: the git of a merge killed just before (its process ended, its
        git did not) may take a lock after this merge looked for leftovers.

        Raises:
            GitError: git exited non-zero (or was killed) and ``check`` is set.
            MergeBusyError: a refusal by a lock, and a live process still holds the repository.
        """
        done = self._run_git(action, where, *args, env=env)
        if done.returncode != 0 and not self.settling and _LOCK_REFUSAL.search(done.stderr):
            self.settling = True
            try:
                self.settle()
            finally:
                self.settling = False
            done = self._run_git(action, where, *args, env=env)
        if check and done.returncode != 0:
            code = done.returncode
            raise GitError(["git", *args], where, code, done.stderr or f"killed by signal {-code}")
        return done

    def _run_git(
        self, action: str, where: Path, *args: str, env: Mapping[str, str] | None
    ) -> subprocess.CompletedProcess[str]:
        run = GitRun(
            action=action,
            argv=list(args),
            where=str(where),
            owner_pid=self.me.pid,
            owner_started=self.me.started_at,
            started_at=utcnow(),
        )
        self._set_run(run, new=True)
        proc = git.start(where, *args, env=env)
        try:
            identity = ProcessIdentity.of(proc.pid)
            run = run.model_copy(
                update={"pid": proc.pid, "started": identity.started_at if identity else None}
            )
            self._set_run(run)
            out, err = proc.communicate(timeout=_GIT_TIMEOUT_S)
        finally:
            if proc.poll() is None:  # a timeout or an exception here: never leave it running
                proc.kill()
                proc.wait()
        code = proc.returncode
        self._set_run(run.model_copy(update={"ended_at": utcnow(), "exit_code": code}))
        return subprocess.CompletedProcess([git.GIT, *args], code, out, err)

    # --- continuing after a kill ----------------------------------------------------------------

    def settle(self, *, wait_s: float = SETTLE_WAIT_S) -> list[str]:
        """Before a continued merge's next step: wait for a killed run's git, remove its locks.

        Returns:
            What was removed, in words (empty when nothing was left).

        Raises:
            MergeBusyError: the interrupted git, its merge process or another process still
                holds the repository after ``wait_s``; nothing was removed.
        """
        deadline = time.monotonic() + wait_s
        last = self.journal.runs[-1] if self.journal.runs else None
        if last is not None and not last.ended:
            owner = ProcessIdentity(last.owner_pid, last.owner_started)
            child = None if last.pid is None else ProcessIdentity(last.pid, last.started or 0.0)
            mine = owner.pid == self.me.pid and owner.started_at == self.me.started_at
            while not gone(None if mine else owner, child):
                if time.monotonic() > deadline:
                    alive = child if child is not None and child.alive() else owner
                    raise MergeBusyError(self.journal.goal_id, Path(last.where), alive.pid)
                time.sleep(_POLL_S)
            self._set_run(last.model_copy(update={"ended_at": utcnow()}))  # interrupted: no exit
            log.info("merge_git_interrupted", goal_id=self.journal.goal_id, action=last.action)
        locks = self._leftover_locks()
        scratch = Path(self.journal.scratch)
        stale_scratch = not self.scratch_is_mine and self.scratch_left()
        if not locks and not stale_scratch:
            return []
        self._wait_unheld(deadline, locks[0] if locks else scratch)
        removed = []
        for lock in locks:
            with contextlib.suppress(FileNotFoundError):
                lock.unlink()
                removed.append(f"removed {lock}, left by a killed git")
        if stale_scratch:
            self.remove_scratch()
            removed.append(f"removed the scratch worktree {scratch}")
        for what in removed:
            log.info("merge_leftover_removed", goal_id=self.journal.goal_id, what=what)
        return removed

    def _wait_unheld(self, deadline: float, what: Path) -> None:
        repo = Path(self.journal.repo)
        common = git.common_dir(repo)
        folders = [repo, Path(self.journal.scratch)]
        if self.journal.checkout is not None:
            folders.append(Path(self.journal.checkout))
        while found := holders(common, folders):
            if time.monotonic() > deadline:
                raise MergeBusyError(self.journal.goal_id, what, found[0].pid, found[0].describe())
            time.sleep(_POLL_S)

    def _failed(self, actions: frozenset[str]) -> bool:
        """Whether a run among ``actions`` did not end with exit 0 (it may have left a lock)."""
        return any(r.action in actions and r.exit_code != 0 for r in self.journal.runs)

    def _leftover_locks(self) -> list[Path]:
        """The locks outside the scratch worktree that a killed run of this merge may have left."""
        repo, journal = Path(self.journal.repo), self.journal
        found: list[Path] = []
        if journal.checkout is not None and self._failed(_SYNC_ACTIONS):
            where = Path(journal.checkout)
            if where.is_dir():
                index = Path(git.output(where, "rev-parse", "--absolute-git-dir")) / "index.lock"
                found += [index] if index.exists() else []
        # The base's ref lock whoever left it (this merge's killed move, or a git killed while
        # it moved the base for another goal): removed only once no process holds the repository.
        ref = git.common_dir(repo) / "refs" / "heads" / f"{journal.base}.lock"
        found += [ref] if ref.exists() else []
        return found

    # --- the scratch worktree -------------------------------------------------------------------

    def _scratch_admin(self) -> list[Path]:
        """The scratch worktree's registrations (``.git/worktrees/<name>``), made whole or half."""
        scratch = Path(self.journal.scratch).resolve()
        admin = git.common_dir(Path(self.journal.repo)) / "worktrees"
        found = []
        for entry in sorted(admin.iterdir()) if admin.is_dir() else []:
            gitdir = entry / "gitdir"
            try:
                target = Path(gitdir.read_text().strip()).parent
            except OSError:
                continue  # a registration killed before its gitdir file: `worktree prune` takes it
            if target.resolve() == scratch:
                found.append(entry)
        return found

    def scratch_left(self) -> bool:
        """Whether the scratch worktree (its folder or a registration of it) is there."""
        return Path(self.journal.scratch).exists() or bool(self._scratch_admin())

    def remove_scratch(self) -> None:
        """Remove the scratch worktree whole: registration, locks and folder (it is never work).

        Called once :meth:`settle` proved no process holds it, or on this process's own:
        a lock git left on it ("initializing", ``index.lock``) goes with it.
        """
        repo, scratch = Path(self.journal.repo), Path(self.journal.scratch)
        if self._scratch_admin() and (scratch / ".git").is_file():
            self.git("scratch_remove", repo, "worktree", "remove", "-f", "-f", str(scratch),
                     check=False)  # fmt: skip
        if scratch.exists():
            shutil.rmtree(scratch)
        for admin in self._scratch_admin():
            shutil.rmtree(admin, ignore_errors=True)  # half-made: git cannot remove it itself
        self.git("prune", repo, "worktree", "prune")
        self.scratch_is_mine = False

    def fresh_scratch(self, commit: str) -> Path:
        """The scratch worktree, made again detached at ``commit``."""
        scratch = Path(self.journal.scratch)
        if self.scratch_left():
            self.remove_scratch()  # settled, or this process's own
        ensure_dir(scratch.parent)
        self.git("scratch_add", Path(self.journal.repo), "worktree", "add", "-q", "--detach",
                 str(scratch), commit)  # fmt: skip
        self.scratch_is_mine = True
        return scratch


__all__ = ["SETTLE_WAIT_S", "MergeRun"]
