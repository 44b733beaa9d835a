"""Rows for new events, numbered after the head and sealed into the hash chain (see fold/chain.py).

Every append seals its events here, so plain events are sealed column by column: their fields
become Arrow arrays once (storage/event_columns.py; the arrays the row table is made of), the
canonical header of every row is prepared from those arrays as parts (constant text between
columns; Arrow string kernels only where a value needs JSON escaping), and the three SHA-256 per
event (content digest, commitment, link) run over the Arrow buffers (storage/batch_hashing.py):
from 512 events on, a native thread hashes one slice while this thread makes the columns
without hashes and the add action's statistics, then hashes its own. A protector that changes
stored fields (shred mode encrypts content), and a batch too small to repay the kernel calls,
take the general path: one ``Event`` per row, sealed with :func:`~refold.fold.chain.seal`. Both
give the same bytes for the same input (tests compare them on random events, escapes and all).
"""

from __future__ import annotations

import binascii
import json
import os
from collections.abc import Callable, Sequence
from datetime import datetime
from json.encoder import encode_basestring as _enc  # the C escaper json.dumps uses
from typing import Any, NamedTuple, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refold.fold.chain import HEADER_FIELDS, canonical_time, seal
from refold.fold.events import Event, NewEvent
from . import batch_hashing as hashing
from .datafiles import column_bounds, stats_json
from .event_columns import LISTS, STRINGS, TIMES, TYPES, Columns, Shared, all_none, user_columns
from .schema import EVENTS_SCHEMA, STATS_COLUMNS, events_to_table

#: bytes that a JSON string keeps as they are: ``encode_basestring`` escapes only the control
#: characters, the quote and the backslash (UTF-8 continuation bytes are all >= 0x80)
_KEPT = bytes(b for b in range(0x20, 0x100) if b not in b'"\\')
#: below this many events the fixed cost of ~30 Arrow kernel calls exceeds sealing one by one
#: (measured between Delta commits, caches cold: 10 events 1.0 vs 0.7 ms, 32 events 1.3 vs 1.6)
COLUMN_WISE_FROM = 16


class Sealed(NamedTuple):
    """Sealed rows: the table, the last row's link, and the add action's statistics of the table's
    stats columns (:func:`~.datafiles.add_stats`) when the sealer made them (``None``: not made)."""

    table: pa.Table
    link: str
    stats: str | None = None


def seal_rows(fresh: Sequence[NewEvent], *, first_seq: int, prev_link: str, recorded_at: datetime,
              table_version: int, protector: Callable[[NewEvent], dict[str, Any]] | None = None,
              ) -> Sealed:
    """The rows of ``fresh`` as seqs ``first_seq…``, chained after ``prev_link`` (a :class:`Sealed`).

    Each event gets 16 fresh random bytes of salt. ``protector`` (when given) returns stored
    column overrides per event. Timestamps must be timezone-aware (validation makes them so).
    """
    n = len(fresh)
    salts = os.urandom(16 * n)
    if protector is not None or n < COLUMN_WISE_FROM:
        rows, prev = [], prev_link
        for i, e in enumerate(fresh):
            event = Event(
                seq=first_seq + i, event_id=e.event_id, recorded_at=recorded_at,
                table_version=table_version, kind=e.kind, tenant=e.tenant, source=e.source,
                content=e.content, subjects=e.subjects, principals=e.principals,
                trace_id=e.trace_id, justification=e.justification, valid_from=e.valid_from,
                valid_to=e.valid_to, ingestion_run=e.ingestion_run, fact=e.fact,
                salt=salts[16 * i: 16 * i + 16].hex(),
            )
            overrides = protector(e) if protector is not None else None
            event = seal(event.with_(**overrides) if overrides else event, prev)
            prev = event.link
            rows.append(event)
        return Sealed(events_to_table(rows), prev)
    return _seal_plain(fresh, first_seq=first_seq, prev_link=prev_link, recorded_at=recorded_at,
                       table_version=table_version, salts=salts)


def _seal_plain(fresh: Sequence[NewEvent], *, first_seq: int, prev_link: str,
                recorded_at: datetime, table_version: int, salts: bytes) -> Sealed:
    """Column-wise :func:`seal_rows` for events stored as they are (no cipher, key ids, erasure id)."""
    n = len(fresh)
    cols, shared, bounds = user_columns(fresh)
    cols["seq"] = pa.array(np.arange(first_seq, first_seq + n, dtype=np.int64))
    fact_header: _Json = "null"
    cols["fact"] = pa.nulls(n, pa.string())
    if not all_none(fresh, "fact"):
        facts = [e.fact for e in fresh]
        cols["fact"] = pa.array([None if f is None else json.dumps(f.as_dict(), sort_keys=True)
                                 for f in facts], pa.string())
        fact_header = ("", pa.array([
            "null" if f is None else '{"object":' + _enc(f.object) + ',"relation":'
            + _enc(f.relation) + ',"subject":' + _enc(f.subject) + "}" for f in facts
        ], pa.string()), "")

    # the canonical header of every row (fold/chain.py canonical_header, column by column)
    values: dict[str, _Json] = {
        "cipher": "null", "erasure_id": "null", "key_ids": "[]", "fact": fact_header,
        "recorded_at": _enc(canonical_time(recorded_at)),
        "seq": ("", cols["seq"], ""), "table_version": str(int(table_version)),  # int64: see _header
    }
    for name in STRINGS:
        if name in shared:  # one value for every row: constant text, as json.dumps writes it
            values[name] = "null" if shared[name] is None else _enc(shared[name])
        elif name != "content":
            values[name] = _json_strings(cols[name])
    for name in LISTS:
        values[name] = _json_string_lists(cols[name])
    for name in TIMES:  # canonical_time: UTC, ISO-8601, microseconds (Arrow holds them in UTC)
        times = cols[name]
        values[name] = "null" if times.null_count == n else _json_strings(
            pc.strftime(times, format="%Y-%m-%dT%H:%M:%S+00:00"))
    header = _header(values)

    # the hashes start on native threads while this thread makes the columns that do not hold
    # them and their add-action statistics (batch_hashing.py: then it hashes its own slice)
    hashes = hashing.hash_in_background(salts, cols["content"], header, bytes.fromhex(prev_link))
    cols.update(
        recorded_at=pa.repeat(pa.scalar(recorded_at, TYPES["recorded_at"]), n),
        table_version=pa.repeat(pa.scalar(table_version, pa.int64()), n),
        salt=_hex(salts, n), cipher=pa.nulls(n, pa.string()), erasure_id=pa.nulls(n, pa.string()),
        key_ids=pa.ListArray.from_arrays(pa.repeat(pa.scalar(0, pa.int32()), n + 1), pa.array([], pa.string())),
    )
    stats = _stats(cols, shared, bounds, first_seq=first_seq, recorded_at=recorded_at, table_version=table_version)
    commitments, chain = hashes()
    links = _hex(chain, n + 1)
    cols.update(commitment=_hex(commitments, n), prev_link=links.slice(0, n), link=links.slice(1, n))
    table = pa.table([cols[name] for name in EVENTS_SCHEMA.names], schema=EVENTS_SCHEMA)
    return Sealed(table, chain[-32:].hex(), stats)


def _stats(cols: Columns, shared: Shared, bounds: dict[str, tuple[Any, Any]], *, first_seq: int,
           recorded_at: datetime, table_version: int) -> str:
    """:func:`~.datafiles.add_stats` of the sealed rows, from what the sealer knows: the seqs are
    consecutive, every row has the batch's record time and table version, a shared kind is one
    value, and ``bounds`` holds what reading the events found (the event ids' least and
    greatest); only the other columns are scanned."""
    n = len(cols["seq"])
    known: dict[str, tuple[Any, Any, int]] = {
        "seq": (first_seq, first_seq + n - 1, 0), "recorded_at": (recorded_at, recorded_at, 0),
        "table_version": (table_version, table_version, 0),
    }
    if "kind" in shared:
        kind = shared["kind"]
        known["kind"] = (kind, kind, 0) if kind is not None else (None, None, n)
    for name, (low, high) in bounds.items():
        known[name] = (low, high, cols[name].null_count)
    return stats_json(n, {name: known[name] if name in known else column_bounds(cols[name])
                          for name in STATS_COLUMNS})


#: a header field's JSON text: the same for every row, or per row ``prefix + value + suffix``
#: (an integer column's value in decimal: the native loop writes it, the fallback casts)
_Json = Union[str, tuple[str, pa.Array, str]]


def _header(values: dict[str, _Json]) -> list[str | pa.Array]:
    """The parts of ``{"cipher":…,…}`` per row, from each field's JSON text: constant text between
    columns (joined by the native hashing loop, or by one string kernel without it)."""
    pieces: list[pa.Array | str] = []
    text = "{"
    for i, name in enumerate(HEADER_FIELDS):  # sorted keys, compact separators
        text += ("," if i else "") + f'"{name}":'
        value = values[name]
        if isinstance(value, str):
            text += value
        else:
            prefix, column, suffix = value
            pieces += [text + prefix, column]
            text = suffix
    return pieces + [text + "}"]


def _json_strings(values: pa.Array) -> _Json:
    """Each value as ``json.dumps`` writes it (``ensure_ascii=False``); ``null`` for None."""
    nulls = values.null_count
    if nulls == len(values):
        return "null"
    if _needs_escaping(values):  # rare: let the encoder json.dumps uses write this column
        texts = pa.array([None if v is None else _enc(v) for v in values.to_pylist()], pa.string())
        return "", pc.fill_null(texts, "null") if nulls else texts, ""
    if not nulls:
        return '"', values, '"'  # the quotes go into the header's constant text
    return "", pc.fill_null(pc.binary_join_element_wise('"', values, '"', ""), "null"), ""


def _json_string_lists(lists: pa.Array) -> _Json:
    """Each list of strings as a compact JSON array (``[]`` when empty)."""
    items = lists.values
    if len(items) == 0:
        return "[]"
    if not items.null_count and not _needs_escaping(items):
        if hashing._sealhash is not None and not lists.null_count:  # the native loop writes ["a","b"] itself
            return "", lists, ""
        if pc.min(pc.list_value_length(lists)).as_py():
            # every list has an item and no item needs escaping: ["a","b"] is '["' + 'a","b' + '"]'
            return '["', pc.binary_join(lists, '","'), '"]'
    texts = _json_strings(items)
    if isinstance(texts, str):  # every item null
        texts = pa.repeat(pa.scalar(texts), len(items))
    elif texts[0]:
        texts = pc.binary_join_element_wise(texts[0], texts[1], texts[2], "")
    else:
        texts = texts[1]
    return "[", pc.binary_join(pa.ListArray.from_arrays(lists.offsets, texts), ","), "]"


def _needs_escaping(values: pa.Array) -> bool:
    """True when some value may hold a byte JSON escapes (exact for unsliced arrays)."""
    data = values.buffers()[2]
    if data is None:
        return False
    if hashing._sealhash is not None:
        return hashing._sealhash.needs_escaping(data)
    return bool(data.to_pybytes().translate(None, _KEPT))


def _hex(data: bytes, n: int) -> pa.Array:
    """``data`` cut into ``n`` equal parts, each as lowercase hex (a string column).

    The hex text becomes the array's data buffer as it is, with offsets every ``width`` bytes.
    """
    text = hashing._sealhash.hexlify(data) if hashing._sealhash is not None else binascii.hexlify(data)
    width = len(text) // n
    if len(text) >= 2**31:  # past int32 offsets: let Arrow say so
        return pc.cast(hashing._fixed(text, width, n), pa.string())
    offsets = np.arange(0, width * (n + 1), width, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(text)])
