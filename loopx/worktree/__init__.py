"""A git worktree per goal and merges that wait for the done-check (docs/work.md).

Modules: ``git`` (the git CLI), ``spec`` (what `goal add --worktree` checks),
``record`` (``goals/<id>/worktree.json`` and the paths), ``creation`` (making
it on the first claim), ``gitrun`` (its git commands, journaled before they
start), ``gitlocks`` (what a killed git left, and whether its owner is gone),
``view`` (`loopx goal worktree`: show, remove),
``mergejournal``, ``mergerun`` (its journaled git commands and what a killed
one left), ``mergecheckout`` (the base's checkout brought along),
``mergegates`` (the gate a merge that did not merge opens) and ``merge``
(`loopx goal merge`, `--abort`).
"""
