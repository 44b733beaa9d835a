"""Writers of one store on one host take turns on a lock file (``ROOT/.append.lock``).

Only an optimisation of the log's compare-and-append: a losing attempt seals its batch and writes
a data file for nothing, and on a busy host most attempts would lose. Correctness rests on the
compare-and-append alone (writers on other hosts, object stores). No-op for object-store URIs.
The lock is a :class:`filelock.FileLock` (``flock`` on POSIX, a file lock on Windows: writers
there take turns too).

Only writers open the lock file, and only the store's owner (or its group, in a group-shared
store) can: it is created with the store's file mode (0600 by default, see
:mod:`refold.storage.files.modes`), and a lock file that others could open (left by an older
refold, 0644) is replaced by a fresh one before it is used, so a process that merely opened the
old one cannot stall appends. Readers never open it. The holder writes who it is into the file
(filelock 3.30 and later leave it as is when a waiter tries the lock); a writer that cannot get
the lock within ``wait_s`` fails with an error naming that holder instead of waiting forever.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

from refold.fold.errors import StoreError

from refold.storage.files.modes import file_mode

LOCK_FILE = ".append.lock"
#: lock file path → the thread of this process holding it (dict operations are atomic)
_HOLDERS: dict[str, int] = {}


@contextlib.contextmanager
def host_turn(root: str, *, wait_s: float = 30.0) -> Iterator[bool]:
    """Hold the store's host lock for the ``with`` block.

    Yields whether the lock is held (False only where there is no lock: object stores, a root
    that cannot hold the file); work that is only safe with every local writer excluded
    (compaction) must check it. Raises :class:`StoreError` naming the holder when the lock stays
    taken for ``wait_s`` seconds.
    """
    from filelock import FileLock, Timeout

    if "://" in root:
        yield False
        return
    path = Path(root) / LOCK_FILE
    key = os.path.abspath(path)
    if _HOLDERS.get(key) == threading.get_ident():
        # this thread holds it already (a writer nested in another's turn): waiting would wait
        # for itself; go ahead unlocked, the compare-and-append keeps the order
        yield False
        return
    want = file_mode(path.parent)
    lent: list[int] = []  # the locked descriptor, lent by filelock until the release
    # (a new lock each turn: one made before a fork cannot be taken in the child)
    lock = FileLock(path, mode=want, on_acquired=lent.append)
    try:
        _replace_if_open_to_others(path, want)
        lock.acquire(timeout=wait_s, poll_interval=0.002)
    except Timeout:
        raise StoreError(
            f"the append lock {path} has been held for too long by {_holder(path)}; "
            "appends to this store wait for it. If that process is stuck, stop it "
            "(the lock is released when it exits), then retry"
        ) from None
    except OSError:  # the root cannot hold the file (read-only, gone): compare-and-append alone
        lent.clear()
    if not lent:
        yield False
        return
    _HOLDERS[key] = threading.get_ident()
    try:
        _say_who(lent[0])
        yield True
    finally:
        _HOLDERS.pop(key, None)
        with contextlib.suppress(OSError):
            os.ftruncate(lent[0], 0)  # no stale name for the next holder's waiters
        lock.release()


def _replace_if_open_to_others(path: Path, want: int) -> None:
    """Replace a lock file with a wider mode than ``want`` (others could open and lock it) by a
    fresh one (POSIX; Windows has no such modes)."""
    if os.name != "posix":
        return
    try:
        if not stat.S_IMODE(os.lstat(path).st_mode) & ~want:
            return
    except FileNotFoundError:
        return  # filelock creates it with the mode
    fresh = path.with_name(f"{LOCK_FILE}.{os.getpid()}.tmp")
    try:
        fd = os.open(fresh, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, want)
        os.fchmod(fd, want)  # exactly, whatever the umask
        os.close(fd)
        os.replace(fresh, path)  # whoever holds the old file now holds an orphan (filelock
        # takes a lock only on a file still at the path)
    except OSError:
        with contextlib.suppress(OSError):
            fresh.unlink()
        raise


_WHO: tuple[int, bytes] | None = None  # (pid, what _say_who writes), made once per process


def _say_who(fd: int) -> None:
    """Write this holder into the lock file, for the error a waiter gives after ``wait_s``."""
    global _WHO
    if _WHO is None or _WHO[0] != os.getpid():  # (a forked child is another holder)
        who = f"pid {os.getpid()} on {socket.gethostname()} ({Path(sys.argv[0]).name or 'python'})"
        _WHO = (os.getpid(), who.encode())
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)  # a holder that was killed left its name
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, _WHO[1])


def _holder(path: Path) -> str:
    with contextlib.suppress(OSError):
        with open(path, "rb") as fh:
            text = fh.read(200).decode("utf-8", "replace").strip()
        if text:
            return text
    return "a process that did not say who it is (not a refold writer)"
