"""Writers of one store on one host take turns on a lock file (``ROOT/.append.lock``).

Only an optimisation of the log's compare-and-append: a losing attempt seals its batch and writes
a data file for nothing, and on a busy host most attempts would lose. Correctness rests on the
compare-and-append alone (writers on other hosts, object stores). No-op where ``fcntl`` is
missing (Windows) and for object-store URIs.

Only writers open the lock file, and only the store's owner (or its group, in a group-shared
store) can: it is created with the store's file mode (0600 by default, see
:mod:`refold.storage.filemodes`), and a lock file that others could open (left by an older
refold, 0644) is replaced by a fresh one before it is used, so a process that merely opened the
old one cannot stall appends. Readers never open it. The holder writes who it is into the file;
a writer that cannot get the lock within ``wait_s`` fails with an error naming that holder
instead of waiting forever.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from refold.fold.errors import StoreError

from .filemodes import file_mode

try:
    import fcntl
except ImportError:  # not on Windows: writers there rely on compare-and-append alone
    fcntl = None  # type: ignore[assignment]

LOCK_FILE = ".append.lock"
#: lock file path → the thread of this process holding it (dict operations are atomic)
_HOLDERS: dict[str, int] = {}


@contextlib.contextmanager
def host_turn(root: str, *, wait_s: float = 30.0) -> Iterator[bool]:
    """Hold the store's host lock (flock) for the ``with`` block.

    Yields whether the lock is held (False only where there is no lock: object stores, no
    ``fcntl``, a root that cannot hold the file); work that is only safe with every local writer
    excluded (compaction) must check it. Raises :class:`StoreError` naming the holder when the
    lock stays taken for ``wait_s`` seconds.
    """
    if fcntl is None or "://" in root:
        yield False
        return
    path = Path(root) / LOCK_FILE
    key = os.path.abspath(path)
    if _HOLDERS.get(key) == threading.get_ident():
        # this thread holds it already (a writer nested in another's turn): waiting would wait
        # for itself; go ahead unlocked, the compare-and-append keeps the order
        yield False
        return
    deadline = time.monotonic() + wait_s
    fd = _acquire(path, deadline)
    if fd is None:
        yield False
        return
    _HOLDERS[key] = threading.get_ident()
    try:
        _say_who(fd)
        yield True
    finally:
        _HOLDERS.pop(key, None)
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)  # no stale name for the next holder's waiters
        os.close(fd)  # releases the lock


def _acquire(path: Path, deadline: float) -> int | None:
    """An open descriptor holding ``path``'s exclusive lock; None when the file cannot be made."""
    while True:
        fd = _open(path)
        if fd is None:
            return None
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise StoreError(
                            f"the append lock {path} has been held for too long by {_holder(fd)}; "
                            "appends to this store wait for it. If that process is stuck, stop it "
                            "(the lock is released when it exits), then retry"
                        ) from None
                    time.sleep(0.002)
            # the file we locked must still be the one at the path (it may have been replaced,
            # see _open): a lock on an unlinked file excludes nobody
            try:
                same = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


def _open(path: Path) -> int | None:
    """Open the lock file for writing, creating it with the store's file mode; a file with a
    wider mode (others could open it) is replaced first."""
    want = file_mode(path.parent)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, want)
    except OSError:
        return None
    info = os.fstat(fd)
    if stat.S_IMODE(info.st_mode) & ~want:
        os.close(fd)
        fresh = path.with_name(f"{LOCK_FILE}.{os.getpid()}.tmp")
        try:
            fresh_fd = os.open(fresh, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, want)
            os.fchmod(fresh_fd, want)  # exactly, whatever the umask
            os.close(fresh_fd)
            os.replace(fresh, path)  # whoever holds the old file now holds an orphan
        except OSError:
            with contextlib.suppress(OSError):
                fresh.unlink()
            return None
        return _open(path)
    return fd


_WHO: tuple[int, bytes] | None = None  # (pid, what _say_who writes), made once per process


def _say_who(fd: int) -> None:
    """Write this holder into the lock file, for the error a waiter gives after ``wait_s``."""
    global _WHO
    if _WHO is None or _WHO[0] != os.getpid():  # (a forked child is another holder)
        who = f"pid {os.getpid()} on {socket.gethostname()} ({Path(sys.argv[0]).name or 'python'})"
        _WHO = (os.getpid(), who.encode())
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)  # a holder that was killed left its name
        os.pwrite(fd, _WHO[1], 0)


def _holder(fd: int) -> str:
    with contextlib.suppress(OSError):
        text = os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
        if text:
            return text
    return "a process that did not say who it is (not a refold writer)"
