"""Delta tables kept open per process, and views of them for readers.

Loading a ``DeltaTable`` replays its commit log (10–30 ms for a few dozen commits), so
:func:`shared_table` keeps one :class:`TableHandle` per table path in the process and refreshes it
incrementally; callers hold its lock while using it. Readers of a local table take a
:class:`TableView` instead: the loaded table plus the files that the append commits after its
version added, read straight from those commit files (a few hundred bytes each). delta-rs's own
catch-up (``update_incremental``, 5–10 ms however small the commit, as it replays the log since
the last checkpoint) then runs only once every :data:`MAX_PENDING` commits, or when a commit does
anything but add files. Reading rows from either: :mod:`refold.storage.delta_io`.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from refold.fold.errors import StoreError

__all__ = ["MAX_PENDING", "TableHandle", "TableView", "shared_table"]


class TableView:
    """One version of a table: a loaded ``DeltaTable`` at version ``base`` plus the files that
    the (append-only) commits ``base + 1 … version()`` added, as (path, parsed stats) pairs.

    What a reader needs of a table (``version()``, ``file_uris()``, ``table_uri``, the add
    actions' statistics for pruning); :func:`~refold.storage.delta_io.read_arrow` takes it wherever it takes a DeltaTable.
    Do not commit through ``dt``: it may be behind ``version()``; and use a view only while
    holding its handle's lock (a commit through the handle's table makes the view unusable).
    """

    __slots__ = ("dt", "base", "adds", "_version", "_uris", "_stats")

    def __init__(self, dt: DeltaTable, version: int, adds: tuple[tuple[str, dict], ...] = ()):
        self.dt, self.base, self.adds, self._version = dt, dt.version(), adds, version
        self._uris: list[str] | None = None
        self._stats: Any = None  # the add actions' statistics, once a pruned read needed them

    def version(self) -> int:
        return self._version

    @property
    def table_uri(self) -> str:
        return self.dt.table_uri

    def _check(self) -> None:
        if self.dt.version() != self.base:  # a commit through dt moved it: use a new view
            raise StoreError(f"a view of {self.dt.table_uri} at version {self._version} was used after its table "
                             "moved; take a new view (internal error)")

    def file_uris(self) -> list[str]:
        self._check()
        if self._uris is None:
            prefix = self.dt.table_uri.removeprefix("file://")
            prefix = prefix if prefix.endswith("/") else prefix + "/"
            self._uris = self.dt.file_uris() + [prefix + path for path, _ in self.adds]
        return list(self._uris)


def _appended(text: bytes) -> list[tuple[str, dict]] | None:
    """The files a commit file adds, or None when it does anything else (remove files, change
    the metadata or protocol, use deletion vectors or partitions...): then only delta-rs's own
    replay knows the table state."""
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        action = json.loads(line)
        if "commitInfo" in action and len(action) == 1:
            continue
        add = action.get("add")
        if len(action) != 1 or add is None or add.get("deletionVector") or add.get("partitionValues"):
            return None
        stats = add.get("stats")
        out.append((unquote(add["path"]), json.loads(stats) if stats else {}))
    return out


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
        self._view: TableView | None = None  # the newest view handed out (its base is _dt)
        #: what callers worked out from a loaded table, by their own key; each value starts with
        #: the DeltaTable object and the version it holds for (so a reload invalidates it)
        self.memo: dict[str, tuple] = {}

    @contextlib.contextmanager
    def fresh(self) -> Iterator[DeltaTable | None]:
        """The table at its newest version (a ``DeltaTable`` one may commit through)."""
        with self.lock:
            yield self._refresh()

    @contextlib.contextmanager
    def view(self) -> Iterator[TableView | None]:
        """The table at its newest version, for reading (see :class:`TableView`); None while it
        does not exist. Local tables: the commits after the loaded version are read from their
        files when they only add files; object stores: the table is caught up as by :meth:`fresh`."""
        with self.lock:
            yield self._current_view()

    def forget(self) -> None:
        """Drop the loaded table (its state is unknown after a failed commit): load it afresh."""
        with self.lock:
            self._dt, self._stamp, self._view = None, None, None

    def _current_view(self) -> TableView | None:
        view, dt = self._view, self._dt
        if (view is None or dt is None or view.dt is not dt or view.base != dt.version() or "://" in self.path
                or self._stamp is None or self._stamp[0] != view.base
                or self._commit_stamp(view.base) != self._stamp[1]):
            # nothing loaded, moved by a commit through it, an object store, or its own commit file
            # gone or replaced (a new table, a cleaned-up log): the careful path
            dt = self._refresh()
            self._view = None if dt is None else TableView(dt, dt.version())
            return self._view
        version, adds = view.version(), list(view.adds)
        log = Path(self.path) / "_delta_log"
        while True:
            try:
                text = (log / f"{version + 1:020d}.json").read_bytes()  # commit files appear whole
            except FileNotFoundError:
                break
            added = _appended(text)
            if added is None or version + 1 - view.base > MAX_PENDING:
                dt = self._refresh()  # delta-rs catches up (and the view starts again from there)
                self._view = None if dt is None else TableView(dt, dt.version())
                return self._view
            adds.extend(added)
            version += 1
        if version != view.version():
            view = self._view = TableView(dt, version, tuple(adds))
        return view

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
        """"current", "behind" (newer commits exist) or "reload" (the table was replaced)."""
        if "://" in self.path:
            return "behind"  # object store: no cheap check; the incremental update asks the store
        version = dt.version()
        stamp = self._commit_stamp(version)
        if self._stamp is not None and self._stamp[0] != version and stamp is not None:
            self._stamp = (version, stamp)  # moved by a commit of our own through this handle
        elif stamp is None or self._stamp is None or stamp != self._stamp[1]:
            return "reload"  # our commit file is gone or is another one: a new table, or cleaned up
        log = Path(self.path) / "_delta_log"
        return "behind" if (log / f"{version + 1:020d}.json").exists() else "current"

    def _commit_stamp(self, version: int) -> tuple[int, int, int] | None:
        if "://" in self.path:
            return None
        try:
            st = os.stat(Path(self.path) / "_delta_log" / f"{version:020d}.json")
        except OSError:
            return None
        return st.st_ino, st.st_size, st.st_mtime_ns


#: A view reads at most this many commits past its loaded table before delta-rs catches the
#: table up (each read of a view lists their added files; the catch-up costs the same for 1 or 64).
MAX_PENDING = 64

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
