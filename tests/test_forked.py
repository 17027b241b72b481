"""loopx.forked: work done by a forked child, read back over a pipe."""

from __future__ import annotations

import os
import pickle
import signal
import threading
import time

import psutil

from loopx.forked import Forked, can_fork
from tests.childkit import exited, reaped


def test_the_answer_comes_back_from_the_childs_memory():
    """The child sees what the parent had at the fork; a large answer crosses the pipe whole."""
    before = list(range(300_000))  # far more than a pipe holds
    child = Forked.start(lambda: (os.getpid(), before), dumps=pickle.dumps, loads=pickle.loads)
    answer = child.result()
    assert answer is not None
    pid, numbers = answer
    assert pid == child.pid != os.getpid()
    assert numbers == before
    assert reaped(child.pid)
    assert child.result() is None  # read once


def test_a_child_that_raises_gives_none():
    """An exception in the child is an exit code 1: no answer, and the caller does the work."""

    def fail() -> int:
        msg = "boom"
        raise RuntimeError(msg)

    child = Forked.start(fail, dumps=pickle.dumps, loads=pickle.loads)
    assert child.result() is None
    assert reaped(child.pid)


def test_an_undecodable_answer_gives_none():
    """A decoder that refuses the bytes: None, not an exception."""

    def refuse(data: bytes) -> int:
        raise ValueError(data)

    child = Forked.start(lambda: 1, dumps=pickle.dumps, loads=refuse)
    assert child.result() is None


def test_close_kills_an_unread_child():
    """close() stops a child still working and reaps it; idempotent."""
    gate_r, gate_w = os.pipe()

    def wait_forever() -> int:
        os.read(gate_r, 1)  # never written
        return 0

    child = Forked.start(wait_forever, dumps=pickle.dumps, loads=pickle.loads)
    child.close()
    assert reaped(child.pid)
    child.close()
    os.close(gate_r)
    os.close(gate_w)


def test_no_fork_while_another_thread_runs():
    """can_fork() is False while a second thread is alive."""
    assert can_fork()
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert not can_fork()
    finally:
        stop.set()
        thread.join()
    assert can_fork()


def test_the_child_does_not_run_the_parents_signal_handlers(tmp_path):
    """A SIGTERM handler of the parent (a supervisor's shutdown) is not the child's: it dies of it."""
    ran = tmp_path / "handler-ran"

    def handler(signum: int, frame: object) -> None:
        ran.write_text(str(os.getpid()))

    gate_r, gate_w = os.pipe()

    def wait_forever() -> int:
        os.read(gate_r, 1)  # never written
        return 0

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        child = Forked.start(wait_forever, dumps=pickle.dumps, loads=pickle.loads)
        deadline = time.monotonic() + 30
        # Until the child reached its work (its handlers reset by then): blocked in read().
        while psutil.Process(child.pid).status() != psutil.STATUS_SLEEPING:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        os.kill(child.pid, signal.SIGTERM)
        # Dead of it (a zombie, not reaped yet), or the handler ran and the child lives on.
        while not exited(child.pid) and not ran.exists():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert not ran.exists()
        assert child.result() is None
    finally:
        child.close()
        signal.signal(signal.SIGTERM, previous)
        os.close(gate_r)
        os.close(gate_w)
