"""How an append turns its sealed rows into a data file and a Delta commit.

Two ways, one result (the same rows, stats on the same columns, the same compare-and-append):

- local tables (:mod:`refold.storage.delta_commit` allows it for every table refold creates):
  pyarrow encodes the Parquet file with :data:`PARQUET_OPTIONS` (:func:`encode_file`,
  :class:`StagedFiles`; :func:`refold.storage.delta_commit.commit_rows` does both), and refold writes the commit file with its add action itself, whose
  statistics (:func:`add_stats`) cover only the table's stats columns. delta-rs compresses every
  column with one codec, so it spends ~5 ms of a 10k-event write snappy-compressing the four hex
  columns (salt, commitment, links: random, incompressible); pyarrow can leave just those
  uncompressed.
- through delta-rs, ``write_deltalake(dt, rows, mode="append")`` with :data:`WRITER_PROPERTIES`
  (:func:`write_rows`): object stores, and local tables whose protocol refold does not write.

Either way another writer's commit at the same version makes the commit fail with
``CommitFailedError`` instead of being rebased. A local file whose commit failed is removed at
once, so the rows of a lost race do not linger in the table folder.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import ColumnProperties, CommitProperties, DeltaTable, WriterProperties, write_deltalake

from .filemodes import file_mode
from .schema import EVENTS_SCHEMA, STATS_COLUMNS

#: columns whose every value differs (seq, ids, text, random salt, hashes): a dictionary page for
#: them is work the encoder throws away
_UNIQUE_COLUMNS = ("seq", "event_id", "content", "salt", "commitment", "prev_link", "link")
#: random bytes as hex: snappy finds nothing to compress in them
_HEX_COLUMNS = ("salt", "commitment", "prev_link", "link")

#: delta-rs's writer: snappy (as its default; a WriterProperties without a codec means
#: uncompressed), no dictionary for the unique columns, Parquet statistics only on the stats
#: columns (the add action's stats are taken from them, and nothing filters on the others). A
#: 10k-event file: ~15 ms to write instead of ~21, and no larger.
WRITER_PROPERTIES = WriterProperties(compression="SNAPPY", column_properties={
    name: ColumnProperties(dictionary_enabled=name not in _UNIQUE_COLUMNS,
                           statistics_enabled="PAGE" if name in STATS_COLUMNS else "NONE")
    for name in EVENTS_SCHEMA.names
})

#: pyarrow's writer for local files (one file per append; compaction rewrites them through
#: delta-rs with :data:`WRITER_PROPERTIES`): the hex columns uncompressed; no dictionary pages at
#: all (within one append the repetitive columns, kind, tenant, record time, are near-constant
#: and snappy shrinks their plain pages as well, so a dictionary only costs encoding time: 1k
#: events 0.88 -> 0.77 ms, 300.7 -> 297.3 KB); seq delta-encoded (consecutive numbers: a few
#: bytes a page) and so not compressed.
PARQUET_OPTIONS = {
    "compression": {name: "none" if name in _HEX_COLUMNS or name == "seq" else "snappy"
                    for name in EVENTS_SCHEMA.names},
    "use_dictionary": False,
    "column_encoding": {"seq": "DELTA_BINARY_PACKED"},
    "write_statistics": list(STATS_COLUMNS),
}


def write_rows(dt: DeltaTable, rows: pa.Table, props: CommitProperties, *,
               storage_options: dict[str, str] | None = None) -> None:
    """Append ``rows`` to ``dt`` through delta-rs as one data file and one commit.

    ``dt`` holds the new version afterwards. Raises ``CommitFailedError`` when another commit
    landed after ``dt``'s version (``props`` must say ``max_commit_retries=0``).
    """
    write_deltalake(dt, rows, mode="append", commit_properties=props,
                    writer_properties=WRITER_PROPERTIES, storage_options=storage_options)


def encode_file(rows: pa.Table, *, name: str, options: dict | None = None,
                stats_columns: Sequence[str] = STATS_COLUMNS, stats: str | None = None) -> tuple[dict, pa.Buffer]:
    """``rows`` encoded as a Parquet file, and the ``add`` action naming it ``name``.

    ``stats``: the action's statistics when the caller made them already (``add_stats(rows,
    stats_columns)``'s text; the sealer makes them while the hashes run), else computed here.

    Nothing is written: :meth:`StagedFiles.store` puts the bytes in the table folder, which must
    happen before a commit holding the action lands.
    """
    # encoded in memory, then one write: pyarrow writing to a path resolves a file system and
    # issues a write per page (~0.5 ms of a 1k-event append here)
    sink = pa.BufferOutputStream()
    pq.write_table(rows, sink, **(PARQUET_OPTIONS if options is None else options))
    data = sink.getvalue()
    add = {"path": name, "partitionValues": {}, "size": data.size,
           "modificationTime": time.time_ns() // 1_000_000, "dataChange": True,
           "stats": add_stats(rows, stats_columns) if stats is None else stats}
    return add, data


_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL  # O_EXCL: a name clash never touches another file


class StagedFiles:
    """The two files of one local commit, created empty on the store thread from construction on.

    Creating a file is the slow part of writing a small one on this machine's ext4 (0.02-0.5 ms,
    the upper end while other writers keep its journal busy), and a commit needs two: its Parquet
    data file ``folder/data_name`` and its staged commit file ``commit_path`` in ``_delta_log``.
    Made before the rows are encoded, both exist by the time their contents do.

    Each file's descriptor passes on once: :meth:`store` closes the data file's,
    :meth:`commit_file` hands the commit file's to :func:`~.delta_commit.commit_add` (which
    closes and removes it). :meth:`discard` closes what was not handed on and removes both files.
    """

    def __init__(self, folder: Path):
        self.data_name = f"part-00000-{uuid.uuid4()}-c000.parquet"  # delta-rs's pattern, without one codec in it
        self.data_path = folder / self.data_name
        self.commit_path = folder / "_delta_log" / f"_commit_{uuid.uuid4()}.json.tmp"  # delta-rs's staged name
        self._handed = {"data": False, "commit": False}
        self._created = _storer().submit(self._create)

    def _create(self) -> tuple[int, int]:
        mode = file_mode(self.data_path.parent)  # private to the store's owner (see filemodes)
        data = os.open(self.data_path, _NEW, mode)
        try:
            return data, os.open(self.commit_path, _NEW, mode)
        except BaseException:
            os.close(data)
            self.data_path.unlink(missing_ok=True)
            raise

    def store(self, data: pa.Buffer) -> None:
        """Write ``data`` into the data file and close it. A failed write leaves no data file.

        On the calling thread: handed to the store thread, the write waited for the GIL while
        the caller filled the commit file (1k events: started ~0.2 ms after the encoding ended,
        and the commit waited for it; 0.06-0.17 ms per append, alternating rounds).
        """
        self._handed["data"] = True
        fd = self._created.result()[0]
        try:
            written = os.write(fd, data)
            while written < data.size:  # a short write (signals, huge files): write the rest
                written += os.write(fd, memoryview(data)[written:])
        except BaseException:
            os.close(fd)
            self.data_path.unlink(missing_ok=True)  # no commit names it yet: no half-written file
            raise
        os.close(fd)

    def commit_file(self) -> tuple[Path, int]:
        """The staged commit file and its open descriptor (the receiver closes and removes it)."""
        fd = self._created.result()[1]
        self._handed["commit"] = True
        return self.commit_path, fd

    def discard(self) -> None:
        """Remove both files: for a commit that did not land (a lost race) or never started."""
        try:
            fds = self._created.result()
        except Exception:  # noqa: BLE001 - creation failed: it left nothing
            return
        for fd, kind in zip(fds, ("data", "commit")):
            if not self._handed[kind]:
                os.close(fd)
        self.data_path.unlink(missing_ok=True)
        self.commit_path.unlink(missing_ok=True)


_STORER: ThreadPoolExecutor | None = None
_STORER_LOCK = threading.Lock()


def _storer() -> ThreadPoolExecutor:
    global _STORER
    with _STORER_LOCK:
        if _STORER is None:
            _STORER = ThreadPoolExecutor(max_workers=2, thread_name_prefix="refold-store")
        return _STORER


def add_stats(rows: pa.Table, stats_columns: Sequence[str] = STATS_COLUMNS) -> str:
    """The add action's ``stats`` JSON: row count, and min, max and null count of ``stats_columns``.

    Exact values: timestamps to the microsecond (delta-rs cuts them to the millisecond, which
    makes its maximum smaller than the real one), strings uncut.
    """
    return stats_json(rows.num_rows, {name: column_bounds(rows[name]) for name in stats_columns})


def column_bounds(column: pa.Array | pa.ChunkedArray) -> tuple[Any, Any, int]:
    """``(min, max, null count)`` of ``column``, as :func:`stats_json` takes them."""
    low_high = pc.min_max(column)
    return low_high["min"].as_py(), low_high["max"].as_py(), column.null_count


def stats_json(num_records: int, bounds: dict[str, tuple[Any, Any, int]]) -> str:
    """:func:`add_stats`'s text from each stats column's ``(min, max, null count)`` (in column
    order; ``min is None``: every value null), for a writer that knows them without a scan."""
    mins: dict[str, object] = {}
    maxs: dict[str, object] = {}
    nulls: dict[str, int] = {}
    for name, (low, high, null_count) in bounds.items():
        nulls[name] = null_count
        if low is None:  # every value null: no bounds to state
            continue
        if isinstance(low, datetime):
            low, high = _json_time(low), _json_time(high)
        mins[name], maxs[name] = low, high
    return json.dumps({"numRecords": num_records, "minValues": mins, "maxValues": maxs,
                       "nullCount": nulls})


def _json_time(value) -> str:
    return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
