"""Reads of a log range that prune data files by their Delta statistics check what they got.

Pruning trusts the add actions' min/max of ``seq``; statistics edited in ``_delta_log`` (or rows
moved between files) make a pruned read skip events, and a fold built from it would silently
lack them. ``verify`` finds such files by reading them (:mod:`refold.storage.log.verify_stats`); the
check here is the cheap, always-on half: a read of the seqs from ``start`` on must hold each of
``start … end`` exactly once, where ``end`` is the last seq the table version must hold — the
largest of the files' seq maxima, and the head its newest commit recorded for that version
(either one alone can be lowered by an edit; lowering both hides a newest file from this check,
not from ``verify``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from refold.fold.errors import IntegrityError
from refold.fold.events import Event

from refold.storage.delta.io import _file_stats, read_files
from refold.storage.log.reader import HEAD_KEY
from refold.storage.log.schema import EVENTS_SCHEMA, table_to_events
from refold.storage.delta.handles import shared_table

__all__ = ["check_range", "events_from", "last_seq"]


def last_seq(dt: DeltaTable) -> int:
    """The last seq the table at its (view's) version must hold, -1 when it holds none."""
    out = -1
    try:
        seq = _file_stats(dt).column("seq")
    except Exception:  # noqa: BLE001 - no statistics: the commit's head alone
        seq = None
    if seq is not None:
        out = max((high for high in seq[1] if isinstance(high, int)), default=-1)
    head = _commit_head_seq(dt)
    return out if head is None else max(out, head)


def _commit_head_seq(dt: DeltaTable) -> int | None:
    """The seq of the head the table version's own commit recorded, when it recorded one for
    that version (local tables: one small file read; elsewhere None)."""
    uri = dt.table_uri
    if "://" in uri and not uri.startswith("file://"):
        return None
    version = dt.version()
    path = Path(uri.removeprefix("file://")) / "_delta_log" / f"{version:020d}.json"
    try:
        with open(path, "rb") as f:
            info = json.loads(f.readline()).get("commitInfo") or {}
        head = json.loads(info[HEAD_KEY])
        return int(head["seq"]) if int(head["table_version"]) == version else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # no head recorded for this version (a tombstone commit, a cleaned-up log)


def check_range(seqs: pa.Array | pa.ChunkedArray, start: int, end: int, *, store: str = "STORE") -> None:
    """Raise :class:`IntegrityError` unless ``seqs`` (sorted) are exactly ``start … end`` (a
    range that ends before ``start`` is empty); rows past ``end`` are allowed."""
    n = len(seqs)
    hint = (f"data file statistics in the Delta log, or the data files themselves, were changed; run "
            f"`refold verify {store}`")
    if n == 0:
        if end >= start:
            raise IntegrityError(f"a read of the log from seq {start} got no events, but the log holds seqs "
                                 f"up to {end}: {hint}", first_bad_seq=start)
        return
    first, last = seqs[0].as_py(), seqs[n - 1].as_py()
    if first != start:
        raise IntegrityError(f"a read of the log from seq {start} starts at seq {first}: seqs {start}..{first - 1} "
                             f"are missing ({hint})", first_bad_seq=start)
    if last < end:
        raise IntegrityError(f"a read of the log from seq {start} ends at seq {last}, but the log holds seqs up "
                             f"to {end}: seq {last + 1} and later are missing ({hint})", first_bad_seq=last + 1)
    if n != last - start + 1 or (n > 1 and not pc.all(pc.equal(
            pc.subtract(seqs.slice(1), seqs.slice(0, n - 1)), 1)).as_py()):
        steps = pc.subtract(seqs.slice(1), seqs.slice(0, n - 1)).to_pylist()
        i = next(i for i, step in enumerate(steps) if step != 1)
        at = seqs[i].as_py()
        what = f"seq {at} was read twice" if steps[i] == 0 else f"seqs {at + 1}..{seqs[i + 1].as_py() - 1} are missing"
        raise IntegrityError(f"a read of the log from seq {start}: {what} ({hint})",
                             first_bad_seq=at if steps[i] == 0 else at + 1)


def events_from(log, start: int) -> list[Event]:
    """The stored events of ``log`` (an :class:`~refold.storage.log.eventlog.EventLog`) from seq ``start``
    to the head, in log order, as stored (shred mode: still sealed; erased: tombstones).

    Only the data files whose statistics allow such seqs are read, through this process's open
    handle of the log table (no commit-log replay per read), and the rows are checked to be
    every seq from ``start`` to the end exactly once (:func:`check_range`): the pruning trusted
    statistics that an edit of ``_delta_log`` could lower, and a fold or read built from a
    short tail would silently lack events."""
    start = max(start, 0)
    with shared_table(log.layout.events, log.storage_options).view() as dt:
        rows = read_files(dt, EVENTS_SCHEMA, prune=[{"seq": (start, None)}]).sort_by("seq")
        end = last_seq(dt)
    check_range(rows["seq"], start, end, store=log.layout.root)
    return list(table_to_events(rows))
