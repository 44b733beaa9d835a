"""The erasure's rewrite of the event log: the erasure record, then the tombstones.

:func:`record_for` builds the content of the ``erasure`` event appended before anything is
tombstoned (the pure record is :mod:`refold.fold.erasure_record`): it names every event the
erasure tombstones, as it stands before its tombstone, so ``verify`` can tell a legitimate
tombstone from a forged one.

Then the erased rows are replaced by their tombstones, file by file, in one commit. An erasure knows the seqs it erases. :func:`stage` finds the data files whose seq statistics say
they may hold any of them, reads them whole, puts each erased row's tombstone in its place (the
other rows unchanged, in seq order), writes the result as new files next to them, and returns the ``add`` and ``remove`` actions that swap the files. The caller
commits them in ONE Delta transaction through delta-rs
(``DeltaTable.create_write_transaction``); a commit that lost a race is :meth:`Staged.discard`-ed
and staged again.

Why not an overwrite with a predicate naming the seqs: its cost grows with the number of OR terms,
one per run of consecutive seqs, and one speaker's turns of a conversation alternate with the
other's — hundreds of terms for a few hundred turns. The files to rewrite are the same either way.

A tombstone keeps ``seq``, ``recorded_at``, ``table_version``, ``commitment``, ``prev_link`` and
``link`` (the chain still verifies), gets ``kind="tombstone"``, the ``erasure_id``, and the
pseudonym of its event id (:mod:`refold.storage.erased_ids`) instead of the id; every other column
is NULL or empty. The new files' statistics are computed from their rows, so no statistic names
an erased id or value.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from datetime import datetime, timedelta, timezone
from pathlib import Path
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.transaction import AddAction, RemoveAction

from refold.fold.erasure_record import Erased, ErasureRecord
from refold.fold.errors import ErasureError
from refold.fold.events import Event
from refold.storage.log.datafiles import FILE_TARGET_BYTES, ROW_GROUP_ROWS
from refold.storage.delta.io import parquet_dataset, seq_spans
from refold.storage.files.options import arrow_filesystem, arrow_paths
from refold.storage.log.schema import EVENTS_SCHEMA, STATS_COLUMNS, events_to_table, table_to_events

__all__ = ["Staged", "kept_rows", "record_for", "stage", "tombstone"]


# -- the erasure record --------------------------------------------------------------------------

_KEPT = ["seq", "event_id", "commitment", "recorded_at", "table_version"]


def kept_rows(log, seqs: Iterable[int]) -> dict[int, dict[str, Any]]:
    """seq → the log row (the columns an erasure record keeps) of each of ``seqs`` still in the
    log, read only from the data files that can hold them."""
    wanted = sorted(set(seqs))
    if not wanted:
        return {}
    rows = log.arrow(columns=_KEPT, filter=pc.field("seq").isin(wanted),
                     prune=[{"seq": span} for span in seq_spans(wanted)]).to_pylist()
    return {r["seq"]: r for r in rows}


def record_for(log, erasure_id: str, seqs: Iterable[int],
               planned: Mapping[int, str] | None = None, *,
               pseudonym: Callable[[str], str] | None = None,
               shredded: Iterable[int] = (), rows: Mapping[int, Mapping[str, Any]] | None = None
               ) -> ErasureRecord:
    """The record naming the events at ``seqs`` as they stand now (before their tombstones).

    ``planned``: seq → commitment the erasure was planned with; a row that differs (or is gone)
    stops the erasure, as the tombstone commit would. ``pseudonym`` maps an event id to what its
    tombstone will hold (:mod:`refold.storage.erased_ids`); the record then never holds the id.
    ``shredded``: seqs of events the erasure makes unreadable without a tombstone (shred mode),
    named by their planned commitments. ``rows``: :func:`kept_rows` of (at least) ``seqs``, read
    once by a caller recording many erasures.
    """
    wanted = sorted(set(seqs))
    gone = [(s, (planned or {}).get(s)) for s in sorted(set(shredded) - set(wanted))]
    gone = [(s, c) for s, c in gone if c is not None]
    if not wanted:
        return ErasureRecord.build(erasure_id, (), gone)
    found = kept_rows(log, wanted) if rows is None else rows
    erased = []
    for seq in wanted:
        row = found.get(seq)
        if row is None or (planned is not None and planned.get(seq) not in (None, row["commitment"])):
            raise ErasureError(f"seq {seq} changed since the erasure was planned; run `refold verify`")
        event_id = row["event_id"] if pseudonym is None else pseudonym(row["event_id"])
        erased.append(Erased.of(seq, event_id, row["commitment"], row["recorded_at"], row["table_version"]))
    return ErasureRecord.build(erasure_id, erased, gone)


# -- the tombstones --------------------------------------------------------------------------------

def tombstone(event: Event, erasure_id: str, pseudonym: Callable[[str], str]) -> Event:
    """The tombstone of ``event`` (see the module docstring)."""
    return Event(
        seq=event.seq, event_id=pseudonym(event.event_id), recorded_at=event.recorded_at,
        table_version=event.table_version, kind="tombstone", tenant=None,  # type: ignore[arg-type]
        source=None, content=None, erasure_id=erasure_id, commitment=event.commitment,
        prev_link=event.prev_link, link=event.link,
    )


@dataclass
class Staged:
    """New files written for one tombstone commit, and the actions that swap them in."""

    folder: str  # the table's folder, as ``fs`` names it (a local path, or bucket/prefix)
    fs: Any = None  # the pyarrow filesystem of an object store (None: local files)
    adds: list[AddAction] = field(default_factory=list)
    removes: list[RemoveAction] = field(default_factory=list)
    #: the erased rows, as stored before (for the caller's checks)
    erased: list[Event] = field(default_factory=list)

    @property
    def actions(self) -> list[AddAction | RemoveAction]:
        return [*self.adds, *self.removes]

    @property
    def removed_paths(self) -> list[str]:
        return sorted(r.path for r in self.removes)

    def discard(self) -> None:
        """Delete the files this stage wrote (their commit did not land)."""
        for add in self.adds:
            target = f"{self.folder}/{unquote(add.path)}"
            if self.fs is None:
                Path(target).unlink(missing_ok=True)
            else:
                try:
                    self.fs.delete_file(target)
                except FileNotFoundError:
                    pass


def _candidates(dt: DeltaTable, seqs: np.ndarray) -> list[tuple[str, int]]:
    """(path, size) of the data files whose seq range may hold one of the sorted ``seqs``, in
    the order of their first seq (so the runs :func:`stage` writes back keep disjoint ranges)."""
    actions = pa.table(dt.get_add_actions(flatten=True))
    if actions.num_rows == 0:
        return []
    paths = actions["path"].to_pylist()
    sizes = actions["size_bytes"].to_pylist()
    names = actions.column_names
    if "min.seq" not in names or "max.seq" not in names:
        return list(zip(paths, sizes))
    lows, highs = actions["min.seq"].to_pylist(), actions["max.seq"].to_pylist()
    out = []
    for path, size, low, high in sorted(zip(paths, sizes, lows, highs), key=lambda a: (a[2] is None, a[2] or 0)):
        if low is None or high is None:  # no statistics: the rows decide
            out.append((path, size))
            continue
        i = int(np.searchsorted(seqs, low))  # the first erased seq >= low
        if i < len(seqs) and seqs[i] <= high:
            out.append((path, size))
    return out


def _groups(candidates: list[tuple[str, int]], target: int) -> list[list[tuple[str, int]]]:
    """``candidates`` (in seq order) in runs whose files add up to about ``target`` bytes: a
    file of the log's size stays a file of its own, small ones (the tail not yet compacted, or
    one speaker's turns over many small files) are written back as one."""
    groups: list[list[tuple[str, int]]] = []
    size = 0
    for path, nbytes in candidates:
        if not groups or size + nbytes > target:
            groups.append([])
            size = 0
        groups[-1].append((path, nbytes))
        size += nbytes
    return groups


def stage(dt: DeltaTable, folder: str | Path, seqs: set[int], *, erasure_id: str,
          pseudonym: Callable[[str], str], expected: Mapping[int, str],
          erasure_of: Mapping[int, str] | None = None) -> Staged:
    """Write the tombstoned copies of the files holding the not-yet-tombstoned rows of ``seqs``.

    The affected files are taken in the order of their first seq, in runs of about the log's
    file size (:data:`~refold.storage.log.datafiles.FILE_TARGET_BYTES`): each run's rows are read
    together (Arrow reads its files in parallel) and written back as one file, each row where it
    was (an erased one replaced by its tombstone). So the log keeps its layout (files over
    disjoint seq ranges, row groups of :data:`~refold.storage.log.datafiles.ROW_GROUP_ROWS`), memory
    follows one run, and one speaker's turns spread over many small files cost one write, not
    one per file. ``expected``: seq → commitment as planned; a row that differs raises
    :class:`ErasureError` (nothing staged is left behind). An empty result (no adds) means every
    row is a tombstone already. ``erasure_of``: seq → the erasure id its tombstone names, where a
    batch erases several subjects in one commit (each subject's erasure record vouches for its
    own seqs); a seq it does not name gets ``erasure_id``.
    """
    # the table's own filesystem: a local folder, or the bucket its storage options reach
    fs = arrow_filesystem(dt.table_uri, getattr(dt, "_storage_options", None))
    base = arrow_paths([str(folder)], fs)[0].rstrip("/")
    wanted = np.array(sorted(seqs), dtype=np.int64)
    staged = Staged(base, fs)
    owner = erasure_of or {}
    now = time.time_ns() // 1_000_000
    try:
        for group in _groups(_candidates(dt, wanted), FILE_TARGET_BYTES):
            rows = parquet_dataset(dt, [f"{str(folder).rstrip('/')}/{unquote(p)}" for p, _ in group],
                                   EVENTS_SCHEMA).to_table()  # (in the files' order)
            hit = np.asarray(pc.is_in(rows["seq"], value_set=pa.array(wanted)))
            hit &= np.asarray(pc.fill_null(pc.not_equal(rows["kind"], "tombstone"), True))
            if not hit.any():
                continue  # (the statistics allowed an erased seq, the rows hold none: left as it is)
            erased = list(table_to_events(rows.filter(pa.array(hit))))
            for e in erased:
                if e.commitment != expected.get(e.seq):
                    raise ErasureError(f"seq {e.seq} changed since the erasure was planned; run `refold verify`")
            tombs = events_to_table([tombstone(e, owner.get(e.seq, erasure_id), pseudonym) for e in erased])
            new = _spliced(rows, hit, tombs)
            name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
            target = f"{base}/{name}"
            pq.write_table(new, target, compression="snappy", write_statistics=list(STATS_COLUMNS),
                           row_group_size=ROW_GROUP_ROWS, filesystem=fs)
            size = Path(target).stat().st_size if fs is None else fs.get_file_info(target).size
            staged.adds.append(AddAction(path=name, size=size, partition_values={},
                                         modification_time=now, data_change=True, stats=add_stats(new)))
            staged.removes += [RemoveAction(path=path, data_change=True, deletion_timestamp=now, size=nbytes,
                                            partition_values={}) for path, nbytes in group]
            staged.erased += erased
    except BaseException:
        staged.discard()
        raise
    return staged


def _spliced(rows: pa.Table, hit: np.ndarray, tombs: pa.Table) -> pa.Table:
    """``rows`` with the rows where ``hit`` holds replaced by ``tombs`` (in the same order), every
    row where it was: slices of ``rows`` around the tombstones, no copy of the surviving rows.
    (Sorting them by seq instead gathered every row of the rewritten files: ~4 s of an erasure
    at 1M events, for files whose rows a compaction need not have left in seq order anyway.)"""
    pieces, start = [], 0
    for k, i in enumerate(np.flatnonzero(hit).tolist()):
        if i > start:
            pieces.append(rows.slice(start, i - start))
        pieces.append(tombs.slice(k, 1))
        start = i + 1
    if start < rows.num_rows:
        pieces.append(rows.slice(start))
    return pa.concat_tables(pieces)


def add_stats(rows: pa.Table, columns=STATS_COLUMNS) -> str:
    """The ``stats`` of an add action for ``rows``: row count, and min, max and null count of the
    table's stats ``columns`` (the same columns delta-rs keeps statistics on for this table).

    Timestamps are written to the millisecond as the protocol has them, the minimum rounded down
    and the maximum up, so a reader pruning by them never skips a row.
    """
    mins: dict[str, object] = {}
    maxs: dict[str, object] = {}
    nulls: dict[str, int] = {}
    for name in columns:
        column = rows[name]
        nulls[name] = column.null_count
        bounds = pc.min_max(column)
        low, high = bounds["min"].as_py(), bounds["max"].as_py()
        if low is None:  # every value null: no bounds to state
            continue
        if isinstance(low, datetime):
            low, high = _ms(low, up=False), _ms(high, up=True)
        mins[name], maxs[name] = low, high
    return json.dumps({"numRecords": rows.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls})


def _ms(value: datetime, *, up: bool) -> str:
    value = value.astimezone(timezone.utc)
    extra = value.microsecond % 1000
    if extra:
        value -= timedelta(microseconds=extra)
        if up:
            value += timedelta(milliseconds=1)
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"
