"""A process clock moved with libfaketime, preloaded directly rather than through `faketime`.

The `faketime` wrapper names a semaphore and a shared-memory object after its own pid
(``/dev/shm/sem.faketime_sem_<pid>``) and creates them exclusively. A wrapper killed before it
cleans up leaves them behind, and once the pid is reused the next wrapper refuses to start
("only works on platforms that support the sem_open() system call"). Preloaded directly, the
library needs neither: ``FAKETIME`` says the same as the wrapper's ``-f``.
"""

from __future__ import annotations

import glob

import pytest

# The multi-threaded build: the CLI and the supervisor run threads.
LIBFAKETIME = next(iter(sorted(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1"))), None)
needs_faketime = pytest.mark.skipif(
    LIBFAKETIME is None, reason="Debian's faketime is not installed (apt install faketime)"
)


def faketime_env(spec: str) -> dict[str, str]:
    """The variables that give a child the clock ``spec`` (faketime's ``-f``: ``-2h``, ``+1d``, a date)."""
    if LIBFAKETIME is None:
        pytest.skip("Debian's faketime is not installed (apt install faketime)")
    return {"LD_PRELOAD": LIBFAKETIME, "FAKETIME": spec}
