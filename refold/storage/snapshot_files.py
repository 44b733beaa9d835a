"""A snapshot's files: reading, checking and decoding them (:class:`TableRead`), how they are
encoded (which columns get Parquet dictionary pages, the contained ids as a sorted Arrow array and
their digest), and the process's one worker thread for that work (:func:`io_worker`). The
snapshot store (:mod:`refold.storage.snapshots`) and the erasure patch use these; see there for the
format.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from refold.fold.errors import StoreError
from refold.fold.snapshot_codec import DICTIONARY_COLUMNS

if TYPE_CHECKING:
    from .snapshot_info import SnapshotInfo

__all__ = ["Prepared", "TableRead", "file_kind", "io_worker", "prepare_contained", "read_file"]


def _edge_files(info: "SnapshotInfo") -> list[str]:
    """The manifest's edge file names in bucket order ("edges" alone in older snapshots)."""
    return sorted(n for n in info.files if n == "edges" or n.startswith("edges-"))


_WORKER: ThreadPoolExecutor | None = None
_WORKER_LOCK = threading.Lock()


def io_worker() -> ThreadPoolExecutor:
    """This process's one worker thread for snapshot file work that releases the GIL for long
    stretches (decoding and encoding Parquet): a writer encodes its largest file there while it
    encodes the others, and the erasure patch decodes the snapshot there while it reads the log
    and the cache. Kept for the process: a new thread per snapshot started with cold allocator
    pages (its first encode paid ~10-20 ms of page faults). Never wait on it from a task running
    on it (the writer checks)."""
    global _WORKER
    with _WORKER_LOCK:
        if _WORKER is None:
            _WORKER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="refold-snapshot-io")
        return _WORKER


def _forget_worker() -> None:
    global _WORKER
    _WORKER = None  # a forked child has no such thread (its parent's executor would never run)


os.register_at_fork(after_in_child=_forget_worker)


def _on_worker() -> bool:
    return threading.current_thread().name.startswith("refold-snapshot-io")


def _dictionary_columns(name: str) -> list[str]:
    """The columns of snapshot file ``name`` worth Parquet dictionary pages: the repetitive ones
    (the same a decoding reader asks for as dictionaries). Ids, names and lists are nearly all
    distinct: a dictionary page there was pure cost (an edge bucket encoded in 7.1 ms instead of
    8.2, nodes 2.0 instead of 2.5, the contained ids 0.7 instead of 1.3 at half the size; reads
    ~5-30% faster too)."""
    kind = "edges" if name.startswith("edges") else name
    return list(DICTIONARY_COLUMNS.get(kind, ()))


def _sorted_ids(ids: pa.Array | pa.ChunkedArray | Iterable[str]) -> pa.Array:
    """``ids`` as a sorted Arrow string array (a snapshot's contained ids are sorted already:
    checked, not sorted again). Arrow orders strings by their UTF-8 bytes, which is Python's
    code point order."""
    if isinstance(ids, pa.ChunkedArray):
        ids = ids.combine_chunks()
    if not isinstance(ids, pa.Array):
        ids = pa.array(list(ids), pa.string())
    ids = ids.cast(pa.string())
    if len(ids) > 1 and not pc.all(pc.greater_equal(ids.slice(1), ids.slice(0, len(ids) - 1))).as_py():
        ids = ids.take(pc.sort_indices(ids))
    return ids


def _ids_digest(ids: pa.Array) -> str:
    """:func:`~.snapshot_info.contained_digest` of sorted ``ids``, joined in Arrow (no Python string per id)."""
    joined = pc.binary_join(pa.ListArray.from_arrays(pa.array([0, len(ids)], pa.int32()), ids), "\n")
    return hashlib.sha256((joined[0].as_py() or "").encode()).hexdigest()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class TableRead:
    """One snapshot's files read, checked against the manifest and decoded (see
    :meth:`SnapshotStore.read_tables`) by whichever threads call :meth:`work`: each takes the next
    file nobody took yet. A caller starts it on a worker thread, does its own work, and then calls
    :meth:`result`, which decodes what is left on the calling thread and waits for the rest (an
    erasure patch decodes a bucket itself instead of waiting idle for the worker)."""

    def __init__(self, info: SnapshotInfo, *, for_decode: bool = False, contained: bool = True,
                 use_threads: bool = True, names: Iterable[str] | None = None):
        """``names``: read only these files (e.g. ``nodes``, ``index``, ``edges-003``), each
        checked against its digest; :meth:`tables` then has them by name (a patch reads the
        buckets its region lies in, :meth:`result` wants them all)."""
        self.info, self.for_decode, self.use_threads = info, for_decode, use_threads
        self.edge_files = _edge_files(info)
        # the buckets first (the most work), then the nodes, then the contained ids (None: only
        # checked against their digest)
        if names is None:
            self.kinds: dict[str, str | None] = {**{name: "edges" for name in self.edge_files}, "nodes": "nodes",
                                                 "contained": "contained" if contained else None}
        else:
            self.kinds = {name: file_kind(name) for name in names}
        self._todo = list(self.kinds)
        self._done: dict[str, pa.Table | None] = {}
        self._busy = 0
        self._error: BaseException | None = None
        self._cond = threading.Condition()

    def work(self) -> None:
        """Read files until none is left to take (or one failed)."""
        while True:
            with self._cond:
                if not self._todo or self._error is not None:
                    return
                name = self._todo.pop(0)
                self._busy += 1
            try:
                table, error = self._read(name), None
            except BaseException as exc:  # noqa: BLE001 - handed to result()
                table, error = None, exc
            with self._cond:
                self._busy -= 1
                self._done[name] = table
                if error is not None and self._error is None:
                    self._error = error
                self._cond.notify_all()

    def tables(self) -> dict[str, pa.Table | None]:
        """Every file's table by name, after reading the files left on this thread and waiting for
        those in progress elsewhere."""
        self.work()
        with self._cond:
            self._cond.wait_for(lambda: self._busy == 0)
            error = self._error
        if error is not None:
            if isinstance(error, StoreError):
                raise error
            raise StoreError(f"cannot read snapshot {self.info.path} ({error}); delete the folder or fold with "
                             "--full") from error
        if len(self._done) < len(self.kinds):
            raise StoreError(f"the read of snapshot {self.info.path} was closed before it was done (internal error)")
        return dict(self._done)

    def result(self) -> dict[str, pa.Table]:
        """The tables (as :meth:`SnapshotStore.read_tables` returns them), after reading the files
        left on this thread and waiting for those in progress elsewhere."""
        self.tables()
        if not self.edge_files:
            raise StoreError(f"cannot read snapshot {self.info.path} (no edge file in its manifest); delete the "
                             "folder or fold with --full")
        buckets = [self._done[name] for name in self.edge_files]
        out = {"nodes": self._done["nodes"],
               "edges": buckets[0] if len(buckets) == 1 else pa.concat_tables(buckets),
               "edge_rows": pa.table({"rows": pa.array([t.num_rows for t in buckets], pa.int64())})}
        if self._done["contained"] is not None:
            out["contained"] = self._done["contained"]
        return out

    def close(self) -> None:
        """Take no more files and wait for those in progress (for a caller that no longer needs
        the tables)."""
        with self._cond:
            self._todo.clear()
            self._cond.wait_for(lambda: self._busy == 0)

    def _read(self, name: str) -> pa.Table | None:
        return read_file(self.info, name, self.kinds[name], for_decode=self.for_decode,
                         use_threads=self.use_threads)


def file_kind(name: str) -> str:
    """What snapshot file ``name`` holds: edges (a bucket, or the older single file), nodes,
    contained or index."""
    return "edges" if name == "edges" or name.startswith("edges-") else name


def read_file(info: SnapshotInfo, name: str, kind: str | None, *, for_decode: bool = False,
              use_threads: bool = False, columns: list[str] | None = None) -> pa.Table | None:
    """One file of ``info`` checked against its manifest digest and parsed (None for ``kind``
    None: only checked). Raises :class:`StoreError` on a mismatch."""
    # each file read into memory once, hashed and parsed from there with pq.ParquetFile (no
    # dataset discovery or scanner: a dataset scan cost ~3 ms more over two buckets,
    # pq.read_table ~3 ms of fixed overhead per file); the buckets are concatenated zero-copy
    if name not in info.files:
        raise StoreError(f"snapshot {info.path} has no {name}.parquet in its manifest; delete the folder "
                         "(refold rebuilds it)")
    data = _read_buffer(Path(info.path) / f"{name}.parquet")
    if hashlib.sha256(data).hexdigest() != info.files[name]:
        raise StoreError(f"snapshot {info.path}: {name}.parquet does not match its manifest digest; "
                         "delete the folder (refold rebuilds it)")
    if kind is None:
        return None
    dictionary = DICTIONARY_COLUMNS.get(kind, ()) if for_decode else ()
    with pq.ParquetFile(pa.BufferReader(data), read_dictionary=dictionary) as fh:
        # (the contained ids: a load wants the ids, not the format-3 bucket lists)
        if columns is None and kind == "contained":
            columns = ["event_id"]
        return fh.read(columns=columns, use_threads=use_threads)


def _read_buffer(path: Path) -> pa.Buffer:
    """The file's bytes in a buffer Arrow allocated and owns.

    Not Python ``bytes``: a multi-threaded decode hands the buffer to Arrow's worker threads, and
    when one of them dropped the last reference to a Python-owned buffer during interpreter
    shutdown it needed the GIL that no longer existed, and the process aborted after its output
    was complete (``terminate called without an active exception``, exit 134).
    """
    with pa.OSFile(str(path), "rb") as fh:
        return fh.read_buffer()


@dataclass(frozen=True)
class Prepared:
    """A snapshot's contained ids ready for a write: the table (sorted by id), their count and
    digest, and, when encoded ahead, the file's bytes and SHA-256."""

    table: pa.Table
    count: int
    ids_sha256: str
    file: tuple[pa.Buffer, str] | None = None


def prepare_contained(contained: pa.Table, *, encode: bool = True) -> Prepared:
    """``contained`` (event ids, with their buckets in format 3) sorted, counted and digested, and
    with ``encode`` its file encoded: an erasure's patch does this on the snapshot worker while
    its main thread still reads the cache, so the write after the splice has one file less."""
    table = _sorted_table(contained)
    ids = table["event_id"].combine_chunks()
    return Prepared(table, len(ids), _ids_digest(ids), _encode("contained", table) if encode else None)


def _encode(name: str, table: pa.Table) -> tuple[pa.Buffer, str]:
    """Snapshot file ``name``'s bytes and their SHA-256: encoded in memory, hashed there and
    written once (hashing the file meant reading it back); no column statistics: nothing prunes
    a snapshot's files (they are read whole), and computing them took a third of a bucket's
    write."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd", write_statistics=False,
                   use_dictionary=_dictionary_columns(name))
    data = sink.getvalue()
    return data, hashlib.sha256(data).hexdigest()


def _sorted_table(contained: pa.Table) -> pa.Table:
    """``contained`` (event ids, maybe with their buckets) sorted by id, as written (checked, not
    sorted again when it is: the usual case)."""
    ids = contained["event_id"].combine_chunks()
    if len(ids) > 1 and not pc.all(pc.greater_equal(ids.slice(1), ids.slice(0, len(ids) - 1))).as_py():
        contained = contained.take(pc.sort_indices(ids))
    return contained.combine_chunks()
