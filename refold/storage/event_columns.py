"""The user-supplied fields of validated events as Arrow arrays: the columns an append starts from.

Sealing (storage/sealing.py) builds every row's header and the stored table from these arrays, so
this conversion is the first thing an append does and nothing can overlap it: at 1k events it was
~0.5 ms of Python (an attribute load per value, then pyarrow converting each list). Where the
native helper was built (storage/_columns.c), string and list-of-string fields are read into
Arrow buffers in C (~10 us per 1k values instead of ~65); a field it cannot take (a value of an
unexpected type, text without UTF-8) is converted by pyarrow as before, so both ways give the
same arrays, or the same error. Tests compare them on random events.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import pyarrow as pa

from refold.fold.events import NewEvent
from .schema import EVENTS_SCHEMA

try:  # built at install from storage/_columns.c when a C compiler is there
    from . import _columns
except ImportError:  # pragma: no cover - exercised by forcing the fallback in tests
    _columns = None

TYPES = {f.name: f.type for f in EVENTS_SCHEMA}
#: string columns stored exactly as the NewEvent holds them (all but content are in the header)
STRINGS = ("event_id", "kind", "tenant", "source", "content", "trace_id", "justification",
           "ingestion_run")
LISTS = ("subjects", "principals")
TIMES = ("valid_from", "valid_to")
#: fields a batch mostly holds one value of (one writer's kind, one tenant, one ingestion run)
USUALLY_CONSTANT = ("kind", "tenant", "ingestion_run")
#: fields whose least and greatest value the native reader notes as it goes (the add action's
#: statistics need them; a scan of the array afterwards cost ~60 us in an append)
BOUNDED = ("event_id",)

Columns = dict[str, pa.Array]
#: the value of each of :data:`USUALLY_CONSTANT` that every event of a batch shares
Shared = dict[str, "str | None"]


class EventColumns(NamedTuple):
    """The arrays, per field; the value of each of :data:`USUALLY_CONSTANT` that every event
    shares (the header takes it as constant text); and ``(least, greatest)`` of the fields of
    :data:`BOUNDED` that were found while reading (absent: not found, scan the array)."""

    columns: Columns
    shared: Shared
    bounds: dict[str, tuple["str | None", "str | None"]]


def user_columns(fresh: Sequence[NewEvent]) -> EventColumns:
    """The user-supplied fields of ``fresh`` (but the fact) as Arrow arrays of the log's types."""
    if _columns is None:
        return python_columns(fresh)
    n = len(fresh)
    columns: Columns = {}
    shared: Shared = {}
    bounds = {}
    for name in STRINGS:
        got = _columns.strings(fresh, name, name in BOUNDED)
        if got is None:  # a value only pyarrow may judge
            _by_pyarrow(fresh, name, columns, shared)
            continue
        validity, offsets, data, nulls, same = got[:5]
        columns[name] = pa.Array.from_buffers(
            pa.string(), n, [None if validity is None else pa.py_buffer(validity), pa.py_buffer(offsets),
                             pa.py_buffer(data)], null_count=nulls)
        if same and n and name in USUALLY_CONSTANT:
            shared[name] = getattr(fresh[0], name)
        if name in BOUNDED:
            bounds[name] = got[5:]
    for name in LISTS:
        got = _columns.string_lists(fresh, name)
        if got is None:
            _by_pyarrow(fresh, name, columns, shared)
            continue
        list_offsets, item_offsets, data = got
        items = pa.Array.from_buffers(pa.string(), len(item_offsets) // 4 - 1,
                                      [None, pa.py_buffer(item_offsets), pa.py_buffer(data)])
        columns[name] = pa.Array.from_buffers(TYPES[name], n, [None, pa.py_buffer(list_offsets)],
                                              children=[items])
    for name in TIMES:
        if _columns.nones(fresh, name) == n:  # the usual case
            columns[name] = pa.nulls(n, TYPES[name])
        else:
            _by_pyarrow(fresh, name, columns, shared)
    return EventColumns(columns, shared, bounds)


def all_none(fresh: Sequence[NewEvent], name: str) -> bool:
    """Whether every event of ``fresh`` holds None in field ``name``."""
    if _columns is not None:
        return _columns.nones(fresh, name) == len(fresh)
    return all(getattr(e, name) is None for e in fresh)


def _by_pyarrow(fresh: Sequence[NewEvent], name: str, columns: Columns, shared: Shared) -> None:
    """One field converted by pyarrow from a list of its values (into ``columns``, ``shared``)."""
    values = [getattr(e, name) for e in fresh]
    columns[name] = pa.array(values, TYPES[name])
    if name in USUALLY_CONSTANT and values and values.count(values[0]) == len(values):
        shared[name] = values[0]


def python_columns(fresh: Sequence[NewEvent]) -> EventColumns:
    """:func:`user_columns` without the native helper.

    Attribute access written out per field: a getattr call per value costs twice as much. A
    shared value becomes a repeated scalar: one ``list.count`` pass instead of converting every
    value (a 1k column ~10-20 us instead of ~40).
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
        else:
            columns[name] = pa.array(values, TYPES[name])
    return EventColumns(columns, shared, {})
