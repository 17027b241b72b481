"""The base's checkout brought from one tree to another when a merge moves its branch (or back).

The checkout was clean when the merge was planned, so the plain way is
``git read-tree -m -u FROM TO``: it refuses to overwrite anything a person
changed. A ``read-tree`` killed half-way has rewritten some files but not
the index, and the plain way then refuses the merge's own half-done work
(``not uptodate``). So when the checkout differs from its index, every
difference is judged first: a path the two trees disagree on whose file holds
either tree's content (or is absent where one tree lacks it) is the killed
sync's own, and then ``git read-tree --reset -u TO`` finishes the job
losslessly. Any other difference is a person's: nothing is touched and the
merge stops naming the paths.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from loopx import git
from loopx.errors import MergeRefusedError
from loopx.worktree.mergerun import MergeRun


def bring_checkout(run: MergeRun, frm: str, to: str, *, action: str) -> bool:
    """Bring the checkout of the merge's base from commit ``frm``'s tree to ``to``'s.

    Returns:
        Whether anything had to change (False: no checkout, or it shows ``to`` already).

    Raises:
        MergeRefusedError: the checkout has changes neither tree explains; nothing changed.
        GitError: git refused.
    """
    journal = run.journal
    if journal.checkout is None or not Path(journal.checkout).is_dir():
        return False
    where = Path(journal.checkout)
    index_tree = git.output(where, "write-tree")
    changed = _changed_paths(where, frm, to)
    dirty = git.changes(where, untracked=False)
    strays = _untracked(where, changed)
    if index_tree == git.tree_of(where, to) and not dirty and not strays:
        return False
    if not dirty and not strays:
        run.git(action, where, "read-tree", "-m", "-u", index_tree, to)
        return True
    blobs = (_blobs(where, frm, changed), _blobs(where, to, changed))
    foreign = [p for p in {*dirty, *strays} if p not in changed or not _either(where, p, blobs)]
    if foreign:
        raise MergeRefusedError(
            f"goal {journal.goal_id}: the checkout of {journal.base} at {where} has changes the "
            f"merge did not make ({', '.join(sorted(foreign)[:5])}); nothing there was changed",
            hint=f"commit or discard them (`git -C {where} status`), then run the command again",
        )
    run.git(action, where, "read-tree", "--reset", "-u", to)
    for path in changed:
        if path not in blobs[1] and path in blobs[0] and _either(where, path, blobs):
            with contextlib.suppress(FileNotFoundError):
                (where / path).unlink()  # the killed sync's copy of a file ``to`` lacks
    return True


def _changed_paths(where: Path, frm: str, to: str) -> list[str]:
    text = git.output(where, "diff", "--name-only", "--no-renames", "-z", frm, to)
    return [p for p in text.split("\0") if p]


def _untracked(where: Path, paths: list[str]) -> list[str]:
    """The ``paths`` that are files in the checkout but not in its index (a killed sync's new files)."""
    present = [p for p in paths if (where / p).is_file() or (where / p).is_symlink()]
    if not present:
        return []
    literal = {"GIT_LITERAL_PATHSPECS": "1"}
    tracked = set(git.run(where, "ls-files", "-z", "--", *present, env=literal).stdout.split("\0"))
    return [p for p in present if p not in tracked]


def _blobs(where: Path, commit: str, paths: list[str]) -> dict[str, str]:
    """The blob of each of ``paths`` in ``commit`` (absent paths left out)."""
    if not paths:
        return {}
    literal = {"GIT_LITERAL_PATHSPECS": "1"}
    text = git.run(where, "ls-tree", "-r", "-z", commit, "--", *paths, env=literal).stdout
    found = {}
    for entry in text.split("\0"):
        if entry:
            meta, _, path = entry.partition("\t")
            found[path] = meta.split()[2]
    return found


def _either(where: Path, path: str, blobs: tuple[dict[str, str], dict[str, str]]) -> bool:
    """Whether the file at ``path`` holds one of the two trees' content for it (or is absent)."""
    target = where / path
    if not target.exists() and not target.is_symlink():
        return any(path not in side for side in blobs)
    digest = git.output(where, "hash-object", "--", path)
    return any(side.get(path) == digest for side in blobs)
