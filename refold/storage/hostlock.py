"""Writers of one store on one host take turns on a lock file (``ROOT/.append.lock``).

Only an optimisation of the log's compare-and-append: a losing attempt seals its batch and writes
a data file for nothing, and on a busy host most attempts would lose. Correctness rests on the
compare-and-append alone (writers on other hosts, object stores, a stuck holder): a writer that
waits longer than ``wait_s`` goes ahead without the lock. No-op where ``fcntl`` is missing
(Windows) and for object-store URIs.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # not on Windows: writers there rely on compare-and-append alone
    fcntl = None  # type: ignore[assignment]

LOCK_FILE = ".append.lock"


@contextlib.contextmanager
def host_turn(root: str, *, wait_s: float = 30.0) -> Iterator[bool]:
    """Hold the store's host lock (flock) for the ``with`` block, or go ahead after ``wait_s``.

    Yields whether the lock is held: work that is only safe with every local writer excluded
    (compaction) must check it.
    """
    if fcntl is None or "://" in root:
        yield False
        return
    try:
        fd = os.open(Path(root) / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield False
        return
    try:
        deadline = time.monotonic() + wait_s
        held = False
        while not held:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                held = True
            except BlockingIOError:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.002)
        yield held
    finally:
        os.close(fd)  # releases the lock
