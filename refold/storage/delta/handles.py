"""Delta tables kept open per process.

Loading a ``DeltaTable`` replays its commit log (10–30 ms for a few dozen commits), so
:func:`shared_table` keeps one :class:`TableHandle` per table path in the process and brings it
up to date with delta-rs's own ``update_incremental`` before each use; callers hold its lock
while using it. Whether anything landed since is asked of delta-rs too, except on a local
folder, where the absence of the next version's commit file (one ``stat``) says that nothing did.
Reading rows from a handle's table: :mod:`refold.storage.delta.io`.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path

from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

__all__ = ["TableHandle", "commit_file", "shared_table"]


def commit_file(folder: str | os.PathLike, version: int) -> Path:
    """Where a local Delta table at ``folder`` keeps commit ``version`` (the protocol's name)."""
    return Path(folder) / "_delta_log" / f"{version:020d}.json"


class TableHandle:
    """One Delta table kept loaded and brought up to date cheaply before each use.

    Use it inside ``with handle.fresh() as dt:`` — the lock is held meanwhile, so another thread
    cannot move ``dt`` to a newer version between a read and a commit computed from it (a
    compare-and-append relies on that). ``dt`` is None while the table does not exist.
    """

    def __init__(self, path: str, storage_options: dict[str, str] | None = None):
        self.path = path
        self.storage_options = storage_options
        self.lock = threading.RLock()
        self._dt: DeltaTable | None = None
        #: (version, identity of that version's commit file) when last checked
        self._stamp: tuple[int, tuple[int, int, int] | None] | None = None
        #: what callers worked out from a loaded table, by their own key; each value starts with
        #: the DeltaTable object and the version it holds for (so a reload invalidates it)
        self.memo: dict[str, tuple] = {}

    @contextlib.contextmanager
    def fresh(self) -> Iterator[DeltaTable | None]:
        """The table at its newest version (a ``DeltaTable`` one may commit through)."""
        with self.lock:
            yield self._refresh()

    #: the same for readers (kept as its own name: readers must not commit through it)
    view = fresh

    def forget(self) -> None:
        """Drop the loaded table (its state is unknown after a failed commit): load it afresh."""
        with self.lock:
            self._dt, self._stamp = None, None

    def _refresh(self) -> DeltaTable | None:
        dt = self._dt
        if dt is not None:
            try:
                state = self._state(dt)
                if state == "current":
                    return dt
                if state == "behind":
                    dt.update_incremental()
                    self._stamp = (dt.version(), self._commit_stamp(dt.version()))
                    return dt
            except Exception:  # noqa: BLE001 - commits we never saw were cleaned up: reload
                pass
        try:
            self._dt = DeltaTable(self.path, storage_options=self.storage_options)
        except TableNotFoundError:
            self._dt, self._stamp = None, None
            return None
        self._stamp = (self._dt.version(), self._commit_stamp(self._dt.version()))
        return self._dt

    def _state(self, dt: DeltaTable) -> str:
        """"current", "behind" (newer commits may exist) or "reload" (the table was replaced)."""
        if "://" in self.path:
            return "behind"  # object store: no cheap check; the incremental update asks the store
        version = dt.version()
        stamp = self._commit_stamp(version)
        if self._stamp is not None and self._stamp[0] != version and stamp is not None:
            self._stamp = (version, stamp)  # moved by a commit of our own through this handle
        elif stamp is None or self._stamp is None or stamp != self._stamp[1]:
            return "reload"  # our commit file is gone or is another one: a new table, or cleaned up
        return "behind" if commit_file(self.path, version + 1).exists() else "current"

    def _commit_stamp(self, version: int) -> tuple[int, int, int] | None:
        if "://" in self.path:
            return None
        try:
            st = os.stat(commit_file(self.path, version))
        except OSError:
            return None
        return st.st_ino, st.st_size, st.st_mtime_ns


_HANDLES: OrderedDict[tuple, TableHandle] = OrderedDict()
_HANDLES_LOCK = threading.Lock()
#: Tables kept open per process (the least recently used beyond this are dropped).
MAX_HANDLES = 32


def shared_table(path: str, storage_options: dict[str, str] | None = None) -> TableHandle:
    """This process's :class:`TableHandle` for the table at ``path``."""
    key = (str(path), tuple(sorted((storage_options or {}).items())))
    with _HANDLES_LOCK:
        handle = _HANDLES.get(key)
        if handle is None:
            handle = _HANDLES[key] = TableHandle(str(path), storage_options)
        _HANDLES.move_to_end(key)
        while len(_HANDLES) > MAX_HANDLES:
            _HANDLES.popitem(last=False)
        return handle
