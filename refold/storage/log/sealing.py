"""Rows for new events, numbered after the head and sealed into the hash chain (see fold/chain.py).

Every append seals its events here. Each event gets 16 random bytes of salt and three SHA-256:

    H(salt ‖ content)                                  the content digest
    commitment = H(DOMAIN ‖ canonical header ‖ digest)
    link       = H(prev_link ‖ commitment)

A batch is sealed column by column: its fields become Arrow arrays once, the canonical header of
every row is assembled from those arrays by Arrow string kernels (constant text between columns;
JSON escaping only where a value needs it), and the hashes run with :mod:`hashlib` over the
joined byte strings. Stored columns that replace what the events hold (``overrides``: shred mode's
ciphertext, cipher and key ids; an erasure record's erasure id) come as whole columns and are
sealed the same way. A batch too small to repay the kernel calls takes the general path: one
``Event`` per row, sealed with :func:`~refold.fold.chain.seal`. Both give the same bytes for the
same input (tests compare them on random events, escapes and all, and pin golden values).
"""

from __future__ import annotations

import binascii
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from datetime import datetime
from json.encoder import encode_basestring as _enc  # the C escaper json.dumps uses
from typing import Any, NamedTuple, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refold.fold.chain import DOMAIN, HEADER_FIELDS, canonical_time, seal
from refold.fold.events import Event, NewEvent
from refold.storage.log.schema import EVENTS_SCHEMA, events_to_table

__all__ = ["COLUMN_WISE_FROM", "OVERRIDABLE", "Sealed", "chain_links", "commit_digests", "seal_rows",
           "user_columns"]

#: below this many events the fixed cost of ~30 Arrow kernel calls exceeds sealing one by one
#: (measured between Delta commits, caches cold: 10 events 1.0 vs 0.7 ms, 32 events 1.3 vs 1.6)
COLUMN_WISE_FROM = 16

TYPES = {f.name: f.type for f in EVENTS_SCHEMA}
#: string columns stored exactly as the NewEvent holds them (all but content are in the header)
STRINGS = ("event_id", "kind", "tenant", "source", "content", "trace_id", "justification", "ingestion_run")
LISTS = ("subjects", "principals")
TIMES = ("valid_from", "valid_to")
#: fields a batch mostly holds one value of (one writer's kind, one tenant, one ingestion run)
USUALLY_CONSTANT = ("kind", "tenant", "ingestion_run")
#: the stored columns ``overrides`` may replace (what protecting an event changes)
OVERRIDABLE = ("content", "justification", "fact", "cipher", "key_ids", "erasure_id")

#: bytes that a JSON string keeps as they are: ``encode_basestring`` escapes only the control
#: characters, the quote and the backslash (UTF-8 continuation bytes are all >= 0x80)
_KEPT = bytes(b for b in range(0x20, 0x100) if b not in b'"\\')

Columns = dict[str, pa.Array]
#: the value of each of :data:`USUALLY_CONSTANT` that every event of a batch shares
Shared = dict[str, "str | None"]


class Sealed(NamedTuple):
    """Sealed rows: the table (in :data:`~.schema.EVENTS_SCHEMA`) and the last row's link."""

    table: pa.Table
    link: str


def seal_rows(fresh: Sequence[NewEvent], *, first_seq: int, prev_link: str, recorded_at: datetime,
              table_version: int, overrides: Mapping[str, Sequence[Any]] | None = None,
              salts: bytes | None = None) -> Sealed:
    """The rows of ``fresh`` as seqs ``first_seq…``, chained after ``prev_link`` (a :class:`Sealed`).

    Each event gets 16 fresh random bytes of salt (``salts``: 16 bytes per event given by the
    caller instead, for reproducible tests). ``overrides`` maps stored columns of
    :data:`OVERRIDABLE` to one value per event that is stored (and sealed) instead of the
    event's own: ``content`` a string, ``justification``/``cipher``/``erasure_id`` a string or
    None, ``fact`` a :class:`~refold.fold.events.Fact` or None, ``key_ids`` a sequence of
    strings. Timestamps must be timezone-aware (validation makes them so).
    """
    n = len(fresh)
    if salts is None:
        salts = os.urandom(16 * n)
    elif len(salts) != 16 * n:
        raise ValueError(f"seal_rows: {len(salts)} bytes of salt for {n} events; give 16 per event")
    overrides = dict(overrides or {})
    for name, values in overrides.items():
        if name not in OVERRIDABLE:
            raise ValueError(f"seal_rows: column {name!r} cannot be overridden; give only {', '.join(OVERRIDABLE)}")
        if len(values) != n:
            raise ValueError(f"seal_rows: {len(values)} values of {name} for {n} events; give one per event")
    if "key_ids" in overrides:
        overrides["key_ids"] = [tuple(ids) for ids in overrides["key_ids"]]
    if n < COLUMN_WISE_FROM:
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
            if overrides:
                event = event.with_(**{name: values[i] for name, values in overrides.items()})
            event = seal(event, prev)
            prev = event.link
            rows.append(event)
        return Sealed(events_to_table(rows), prev)
    return _seal_columns(fresh, first_seq=first_seq, prev_link=prev_link, recorded_at=recorded_at,
                         table_version=table_version, salts=salts, overrides=overrides)


def _seal_columns(fresh: Sequence[NewEvent], *, first_seq: int, prev_link: str, recorded_at: datetime,
                  table_version: int, salts: bytes, overrides: Mapping[str, Sequence[Any]]) -> Sealed:
    """Column-wise :func:`seal_rows` (``overrides`` already checked)."""
    n = len(fresh)
    cols, shared = user_columns(fresh)
    cols["seq"] = pa.array(np.arange(first_seq, first_seq + n, dtype=np.int64))
    for name in ("content", "justification"):
        if name in overrides:
            cols[name] = pa.array(overrides[name], pa.string())
    fact_header: _Json = "null"
    cols["fact"] = pa.nulls(n, pa.string())
    facts = overrides["fact"] if "fact" in overrides else [e.fact for e in fresh]
    if any(f is not None for f in facts):
        cols["fact"] = pa.array([None if f is None else json.dumps(f.as_dict(), sort_keys=True)
                                 for f in facts], pa.string())
        fact_header = ("", pa.array([
            "null" if f is None else '{"object":' + _enc(f.object) + ',"relation":'
            + _enc(f.relation) + ',"subject":' + _enc(f.subject) + "}" for f in facts
        ], pa.string()), "")
    # what protection sets: absent (null, null, []) unless overridden
    for name in ("cipher", "erasure_id"):
        cols[name] = pa.array(overrides[name], pa.string()) if name in overrides else pa.nulls(n, pa.string())
    cols["key_ids"] = (pa.array(overrides["key_ids"], TYPES["key_ids"]) if "key_ids" in overrides else
                       pa.ListArray.from_arrays(pa.repeat(pa.scalar(0, pa.int32()), n + 1), pa.array([], pa.string())))

    # the canonical header of every row (fold/chain.py canonical_header, column by column)
    values: dict[str, _Json] = {
        "cipher": _json_strings(cols["cipher"]), "erasure_id": _json_strings(cols["erasure_id"]),
        "key_ids": _json_string_lists(cols["key_ids"]), "fact": fact_header,
        "recorded_at": _enc(canonical_time(recorded_at)),
        "seq": ("", pc.cast(cols["seq"], pa.string()), ""), "table_version": str(int(table_version)),
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

    commitments = commit_digests(salts, cols["content"], _header(values))
    chain = chain_links(bytes.fromhex(prev_link), commitments)
    links = _hex(chain, n + 1)
    cols.update(
        recorded_at=pa.repeat(pa.scalar(recorded_at, TYPES["recorded_at"]), n),
        table_version=pa.repeat(pa.scalar(table_version, pa.int64()), n),
        salt=_hex(salts, n), commitment=_hex(commitments, n), prev_link=links.slice(0, n), link=links.slice(1, n),
    )
    table = pa.table([cols[name] for name in EVENTS_SCHEMA.names], schema=EVENTS_SCHEMA)
    return Sealed(table, chain[-32:].hex())


def user_columns(fresh: Sequence[NewEvent]) -> tuple[Columns, Shared]:
    """The user-supplied fields of ``fresh`` (but the fact) as Arrow arrays of the log's types,
    and the value of each of :data:`USUALLY_CONSTANT` that every event shares (the header takes
    it as constant text).

    Attribute access written out per field: a getattr call per value costs twice as much. A
    shared value becomes a repeated scalar: one ``list.count`` pass instead of converting every
    value.
    """
    columns: Columns = {}
    shared: Shared = {}
    for name, values in (
        ("event_id", [e.event_id for e in fresh]), ("kind", [e.kind for e in fresh]),
        ("tenant", [e.tenant for e in fresh]), ("source", [e.source for e in fresh]),
        ("content", [e.content for e in fresh]), ("trace_id", [e.trace_id for e in fresh]),
        ("justification", [e.justification for e in fresh]),
        ("ingestion_run", [e.ingestion_run for e in fresh]),
        ("subjects", [e.subjects for e in fresh]), ("principals", [e.principals for e in fresh]),
        ("valid_from", [e.valid_from for e in fresh]), ("valid_to", [e.valid_to for e in fresh]),
    ):
        if name in USUALLY_CONSTANT and values and values.count(values[0]) == len(values):
            shared[name] = values[0]
            columns[name] = pa.repeat(pa.scalar(values[0], TYPES[name]), len(values))
        elif name in TIMES and values.count(None) == len(values):  # the usual case
            columns[name] = pa.nulls(len(values), TYPES[name])
        else:
            columns[name] = pa.array(values, TYPES[name])
    return columns, shared


# -- the canonical header, column by column ---------------------------------------------------------

#: a header field's JSON text: the same for every row, or per row ``prefix + value + suffix``
_Json = Union[str, tuple[str, pa.Array, str]]


def _header(values: dict[str, _Json]) -> list[str | pa.Array]:
    """The parts of ``{"cipher":…,…}`` per row, from each field's JSON text: constant text
    between string columns (:func:`commit_digests` joins them)."""
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
    if not items.null_count and not _needs_escaping(items) and pc.min(pc.list_value_length(lists)).as_py():
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
    return data is not None and bool(data.to_pybytes().translate(None, _KEPT))


# -- the hashes --------------------------------------------------------------------------------------


def commit_digests(salts: bytes, contents: pa.Array, header: pa.Array | Sequence[str | pa.Array]) -> bytes:
    """Per row, H(DOMAIN ‖ header ‖ H(salt ‖ content)): 32 bytes each, one after the other.

    ``salts`` holds 16 bytes per row; ``contents`` is a string or binary array without nulls.
    ``header`` is an array of whole headers, or the parts every row's header is made of, in
    order: text that is the same in every row, or a string array with each row's piece (no nulls).
    """
    n = len(contents)
    parts = [header] if isinstance(header, (pa.Array, pa.ChunkedArray)) else list(header)
    if any(not isinstance(p, (str, bytes)) and p.null_count for p in [contents, *parts]):
        raise ValueError("sealing: a hashed column holds nulls")
    whole = pc.binary_join_element_wise(*parts, "") if len(parts) > 1 else parts[0]
    sha = hashlib.sha256
    digests = b"".join([sha(x).digest() for x in _concat(_fixed(salts, 16, n), contents)])
    return b"".join([sha(x).digest() for x in _concat(DOMAIN, whole, _fixed(digests, 32, n))])


def chain_links(prev: bytes, commitments: bytes) -> bytes:
    """``prev``, then each link H(link before ‖ commitment): 32 bytes each (one more than rows)."""
    sha = hashlib.sha256
    chain = [prev]
    for i in range(0, len(commitments), 32):  # sequential by design: each link covers the one before
        prev = sha(prev + commitments[i:i + 32]).digest()
        chain.append(prev)
    return b"".join(chain)


def _hex(data: bytes, n: int) -> pa.Array:
    """``data`` cut into ``n`` equal parts, each as lowercase hex (a string column).

    The hex text becomes the array's data buffer as it is, with offsets every ``width`` bytes.
    """
    text = binascii.hexlify(data)
    width = len(text) // n
    if len(text) >= 2**31:  # past int32 offsets: let Arrow say so
        return pc.cast(_fixed(text, width, n), pa.string())
    offsets = np.arange(0, width * (n + 1), width, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(text)])


def _fixed(data: bytes, width: int, n: int) -> pa.Array:
    """``n`` binary values of ``width`` bytes each, cut from ``data`` without copying."""
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), n, [None, pa.py_buffer(data)])


def _concat(*parts: pa.Array | bytes) -> list[bytes]:
    """Per row, the bytes of ``parts`` one after the other (strings as UTF-8)."""
    binary = [p if isinstance(p, bytes) else pc.cast(p, pa.binary()) for p in parts]
    return pc.binary_join_element_wise(*binary, b"").to_pylist()
