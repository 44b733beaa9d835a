"""Arrow schema of the event log and conversions between rows and :class:`Event` values."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.compute as pc

from refold.fold.events import MAX_TIME, MIN_TIME, Event, Fact

TS = pa.timestamp("us", tz="UTC")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
STR_LIST = pa.list_(pa.string())

EVENTS_SCHEMA = pa.schema(
    [
        ("seq", pa.int64()),
        ("event_id", pa.string()),
        ("recorded_at", TS),
        ("table_version", pa.int64()),
        ("kind", pa.string()),
        ("tenant", pa.string()),
        ("source", pa.string()),
        ("content", pa.string()),
        ("subjects", STR_LIST),
        ("principals", STR_LIST),
        ("trace_id", pa.string()),
        ("justification", pa.string()),
        ("valid_from", TS),
        ("valid_to", TS),
        ("ingestion_run", pa.string()),
        ("fact", pa.string()),
        ("salt", pa.string()),
        ("cipher", pa.string()),
        ("key_ids", STR_LIST),
        ("erasure_id", pa.string()),
        ("commitment", pa.string()),
        ("prev_link", pa.string()),
        ("link", pa.string()),
    ]
)

#: Only these columns get min/max statistics in the Delta log. Content-bearing columns (content,
#: source, justification, fact, subjects, ...) must not: their values would be copied into
#: ``_delta_log/*.json`` and survive an erasure of the data files.
STATS_COLUMNS = ("seq", "event_id", "recorded_at", "table_version", "kind")

TABLE_CONFIGURATION = {
    "delta.dataSkippingStatsColumns": ",".join(STATS_COLUMNS),
    "delta.enableChangeDataFeed": "false",
    "delta.enableDeletionVectors": "false",
    # delta-rs replays the commits since the last checkpoint on every commit: a checkpoint every
    # 10 appends (~20 ms) costs less than replaying up to 100 (as for the extraction cache)
    "delta.checkpointInterval": "10",
}


def events_to_table(events: list[Event]) -> pa.Table:
    """Rows for ``events`` in :data:`EVENTS_SCHEMA` order."""
    columns: dict[str, list] = {name: [] for name in EVENTS_SCHEMA.names}
    for e in events:
        for name in EVENTS_SCHEMA.names:
            value = getattr(e, name)
            if name == "fact":
                value = json.dumps(value.as_dict(), sort_keys=True) if value else None
            elif isinstance(value, tuple):
                value = list(value)
            columns[name].append(value)
    return pa.table(columns, schema=EVENTS_SCHEMA)


def _utc_times(column: pa.ChunkedArray | pa.Array) -> list[datetime | None]:
    """A timestamp column's values as timezone-aware UTC datetimes (None for null).

    Each distinct value is converted once: pyarrow makes a ``zoneinfo`` datetime per value (~5 µs
    each: two thirds of reading a row back), and a log's rows share a few record times, one per
    append.
    """
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    encoded = pc.dictionary_encode(column)
    dictionary = _readable_times(encoded.dictionary)
    distinct = [None if v is None else v.replace(tzinfo=timezone.utc)
                for v in pc.cast(dictionary, pa.timestamp("us")).to_pylist()]  # naive UTC
    return [None if i is None else distinct[i] for i in encoded.indices.to_pylist()]


_MIN_US = (MIN_TIME - _EPOCH) // timedelta(microseconds=1)
_MAX_US = (MAX_TIME - _EPOCH) // timedelta(microseconds=1)


def _readable_times(times: pa.Array) -> pa.Array:
    """``times`` with values outside [MIN_TIME, MAX_TIME] clamped to the range, with a warning.

    Validation keeps such values out of the log, but an older refold stored them unchecked (its
    batch sealer took any time Arrow holds), and Python's datetime cannot hold them: reading them
    as they are made every read crash. Clamped, the event folds (a time before year 1 or after
    9999 means the same to the merge as one at the edge) and can be erased; ``verify`` checks the
    chain against the stored value itself (:func:`stored_time_texts`).
    """
    micros = pc.cast(times, pa.int64())
    low, high = pc.min(micros).as_py(), pc.max(micros).as_py()
    if low is None or (low >= _MIN_US and high <= _MAX_US):
        return times
    outside = pc.filter(times, pc.or_(pc.less(micros, _MIN_US), pc.greater(micros, _MAX_US)))
    warnings.warn(
        f"refold: the log holds a time outside {MIN_TIME.date()} .. {MAX_TIME.date()} UTC "
        f"({stored_time_texts(outside)[0]}), stored by an older refold that did not check; it is "
        "read as the nearest time inside the range. Erase that event to remove it.",
        RuntimeWarning, stacklevel=4,
    )
    clamped = pc.max_element_wise(pc.min_element_wise(micros, _MAX_US), _MIN_US)
    return pc.cast(clamped, times.type)


def stored_time_texts(times: pa.Array | pa.ChunkedArray) -> list[str | None]:
    """The chain's canonical text of each stored time (UTC, ISO-8601, microseconds), computed by
    Arrow, so it works for any time Arrow holds, also those Python's datetime cannot."""
    return pc.strftime(times, format="%Y-%m-%dT%H:%M:%S+00:00").to_pylist()


def table_to_events(table: pa.Table) -> Iterator[Event]:
    """Events for the rows of ``table`` (any column order, as read back from Delta).

    Column by column (one ``to_pylist`` per column, then zip): a dict per row cost ~3x more.
    """
    n = table.num_rows
    if n == 0:
        return
    names = set(table.column_names)

    def col(name: str) -> list:
        return table[name].to_pylist() if name in names else [None] * n

    def times(name: str) -> list:
        return _utc_times(table[name]) if name in names else [None] * n

    facts = [Fact(**json.loads(f)) if f else None for f in col("fact")]
    for (seq, eid, rec, version, kind, tenant, source, content, subjects, principals, trace, just, vf, vt, run,
         fact, salt, cipher, key_ids, erasure_id, commitment, prev_link, link) in zip(
            col("seq"), col("event_id"), times("recorded_at"), col("table_version"), col("kind"),
            col("tenant"), col("source"), col("content"), col("subjects"), col("principals"),
            col("trace_id"), col("justification"), times("valid_from"), times("valid_to"),
            col("ingestion_run"), facts, col("salt"), col("cipher"), col("key_ids"), col("erasure_id"),
            col("commitment"), col("prev_link"), col("link")):
        yield Event(
            seq=seq, event_id=eid, recorded_at=rec, table_version=version, kind=kind, tenant=tenant,
            source=source, content=content, subjects=tuple(subjects or ()), principals=tuple(principals or ()),
            trace_id=trace, justification=just, valid_from=vf, valid_to=vt, ingestion_run=run,
            fact=fact, salt=salt, cipher=cipher, key_ids=tuple(key_ids or ()), erasure_id=erasure_id,
            commitment=commitment, prev_link=prev_link, link=link,
        )
