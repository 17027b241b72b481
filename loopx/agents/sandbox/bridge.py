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

import contextlib
import os
import resource
import select
import signal
import socket
import subprocess
import sys
import threading

_CHUNK = 65536
_COUNT_EVERY_S = 0.02
# Exit status when the process limit killed the sandbox (128 + SIGKILL, as the shell says).
_LIMIT_EXIT = 137


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    """Copy ``src`` to ``dst`` until ``src`` ends, then end ``dst``'s writing side."""
    with contextlib.suppress(OSError):
        while data := src.recv(_CHUNK):
            dst.sendall(data)
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)


def _carry(client: socket.socket, path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        client.close()
        upstream.close()
        return
    back = threading.Thread(target=_pipe, args=(upstream, client), daemon=True)
    back.start()
    _pipe(client, upstream)
    back.join()
    client.close()
    upstream.close()


def _serve(listener: socket.socket, path: str) -> None:
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=_carry, args=(client, path), daemon=True).start()


def _processes() -> int:
    try:
        return sum(1 for name in os.listdir("/proc") if name.isdigit())
    except OSError:
        return 0


def _limit(max_file_bytes: int, max_processes: int) -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (max_file_bytes, max_file_bytes))
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NPROC, (max_processes, max_processes))
    # A file past the limit fails with EFBIG instead of killing the writer unannounced.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def _wait(child: subprocess.Popen[bytes], max_processes: int) -> int:
    """The host's exit status; every process of the sandbox killed past the process limit."""
    pidfd = os.pidfd_open(child.pid)
    while True:
        ready, _, _ = select.select([pidfd], [], [], _COUNT_EVERY_S)
        if ready:
            return child.wait()
        if _processes() > max_processes:
            os.kill(-1, signal.SIGKILL)  # every process of the namespace but us and its init
            child.wait()
            sys.stderr.write(
                f"loopx sandbox: more than {max_processes} processes: every process of the "
                "sandbox was killed (raise the goal's --max-processes)\n"
            )
            return _LIMIT_EXIT


def main(argv: list[str]) -> int:
    """Bridge, limit, run the host; its exit status (a signal re-raised on ourselves)."""
    port, path, max_processes, max_file_bytes = argv[:4]
    command = argv[5:]  # after "--"
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", int(port)))
    listener.listen(64)
    threading.Thread(target=_serve, args=(listener, path), daemon=True).start()
    _limit(int(max_file_bytes), int(max_processes))
    try:
        child = subprocess.Popen(command)  # stdin, stdout, stderr: ours, the agent's pipes
    except OSError as e:
        sys.stderr.write(f"loopx sandbox: cannot start {command[0]!r}: {e.strerror or e}\n")
        return 127
    code = _wait(child, int(max_processes))
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
