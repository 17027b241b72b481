"""The sandbox's first process: the network bridge, the limits, then the host as its child.

Run inside bubblewrap by the sandbox's own Python (this file is bound in
read-only and imports nothing of LoopX, whose package may not be visible
there)::

    python3 bridge.py PORT SOCKET MAX_PROCESSES MAX_FILE_BYTES -- HOST ARGV...

It listens on ``127.0.0.1:PORT`` (the sandbox has no other network) and
carries every connection to LoopX's proxy over the Unix socket ``SOCKET``,
which the agent serves outside. It sets the file size and process limits,
starts the host, and exits as the host did. While the host runs it counts
the sandbox's processes (its own PID namespace, its own ``/proc``): past
``MAX_PROCESSES`` it kills every one of them and says so on stderr, because
``RLIMIT_NPROC`` binds nobody when the agent runs as root.
"""

from __future__ import annotations

# Every module imported here is start-up time of every sandboxed run: no contextlib or
# subprocess, and the C modules under socket and signal, whose Python wrappers build their
# enums at import (IntEnum._convert_: 10 ms of a 14 ms interpreter start), and _thread, not
# threading (functools and collections behind it).
import _signal  # type: ignore[import-not-found] # no stub: signal's C half
import _socket
import _thread
import os
import resource
import select
import sys

_CHUNK = 65536
_COUNT_EVERY_S = 0.02
# Exit status when the process limit killed the sandbox (128 + SIGKILL, as the shell says).
_LIMIT_EXIT = 137


def _pipe(src: _socket.socket, dst: _socket.socket) -> None:
    """Copy ``src`` to ``dst`` until ``src`` ends, then end ``dst``'s writing side."""
    try:
        while data := src.recv(_CHUNK):
            dst.sendall(data)
    except OSError:
        pass
    try:  # noqa: SIM105 - contextlib would cost start-up (see the imports)
        dst.shutdown(_socket.SHUT_WR)
    except OSError:
        pass


def _carry(client: _socket.socket, path: str) -> None:
    upstream = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        client.close()
        upstream.close()
        return
    done = _thread.allocate_lock()
    done.acquire()
    _thread.start_new_thread(_pipe_then_release, (upstream, client, done))
    _pipe(client, upstream)
    done.acquire()  # the way back ended too
    client.close()
    upstream.close()


def _pipe_then_release(src: _socket.socket, dst: _socket.socket, done: _thread.LockType) -> None:
    try:
        _pipe(src, dst)
    finally:
        done.release()


def _serve(listener: _socket.socket, path: str) -> None:
    while True:
        try:
            fd, _ = listener._accept()  # type: ignore[attr-defined]  # noqa: SLF001 - the C accept
        except OSError:
            return
        client = _socket.socket(fileno=fd)
        _thread.start_new_thread(_carry, (client, path))


def _processes() -> int:
    try:
        return sum(1 for name in os.listdir("/proc") if name.isdigit())
    except OSError:
        return 0


def _limit(max_file_bytes: int, max_processes: int) -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (max_file_bytes, max_file_bytes))
    try:  # noqa: SIM105 - as above
        resource.setrlimit(resource.RLIMIT_NPROC, (max_processes, max_processes))
    except (ValueError, OSError):
        pass  # above the hard limit: the count in _wait still holds
    # A file past the limit fails with EFBIG instead of killing the writer unannounced.
    _signal.signal(_signal.SIGXFSZ, _signal.SIG_IGN)


def _exit_code(pid: int) -> int:
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _wait(pid: int, max_processes: int) -> int:
    """The host's exit status; every process of the sandbox killed past the process limit."""
    pidfd = os.pidfd_open(pid)
    while True:
        ready, _, _ = select.select([pidfd], [], [], _COUNT_EVERY_S)
        if ready:
            return _exit_code(pid)
        if _processes() > max_processes:
            os.kill(-1, _signal.SIGKILL)  # every process of the namespace but us and its init
            _exit_code(pid)
            sys.stderr.write(
                f"loopx sandbox: more than {max_processes} processes: every process of the "
                "sandbox was killed (raise the goal's --max-processes)\n"
            )
            return _LIMIT_EXIT


def main(argv: list[str]) -> int:
    """Bridge, limit, run the host; its exit status (a signal re-raised on ourselves)."""
    port, path, max_processes, max_file_bytes = argv[:4]
    command = argv[5:]  # after "--"
    listener = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    listener.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", int(port)))
    listener.listen(64)
    _thread.start_new_thread(_serve, (listener, path))
    _limit(int(max_file_bytes), int(max_processes))
    try:  # stdin, stdout, stderr: ours, the agent's pipes (the listener is close-on-exec)
        pid = os.posix_spawnp(command[0], command, os.environ)
    except OSError as e:
        sys.stderr.write(f"loopx sandbox: cannot start {command[0]!r}: {e.strerror or e}\n")
        return 127
    code = _wait(pid, int(max_processes))
    if code < 0:
        _signal.signal(-code, _signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
