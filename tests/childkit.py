"""Helpers for tests of forked children (loopx.forked): has one exited, was it reaped."""

from __future__ import annotations

import os

import psutil


def exited(pid: int) -> bool:
    """Whether child ``pid`` has exited and waits to be reaped (a zombie)."""
    return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def reaped(pid: int) -> bool:
    """Whether child ``pid`` is gone: reaped, no longer this process's child."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False
