"""Arrow schema of the event log and conversions between rows and :class:`Event` values."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timezone

import pyarrow as pa

from refold.fold.events import Event, Fact

TS = pa.timestamp("us", tz="UTC")
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


def _utc(value):
    return None if value is None else value.astimezone(timezone.utc)


def table_to_events(table: pa.Table) -> Iterator[Event]:
    """Events for the rows of ``table`` (any column order, as read back from Delta)."""
    for row in table.to_pylist():
        fact = row.get("fact")
        yield Event(
            seq=row["seq"],
            event_id=row["event_id"],
            recorded_at=_utc(row["recorded_at"]),
            table_version=row["table_version"],
            kind=row["kind"],
            tenant=row["tenant"],
            source=row["source"],
            content=row["content"],
            subjects=tuple(row["subjects"] or ()),
            principals=tuple(row["principals"] or ()),
            trace_id=row["trace_id"],
            justification=row["justification"],
            valid_from=_utc(row["valid_from"]),
            valid_to=_utc(row["valid_to"]),
            ingestion_run=row["ingestion_run"],
            fact=Fact(**json.loads(fact)) if fact else None,
            salt=row["salt"],
            cipher=row["cipher"],
            key_ids=tuple(row["key_ids"] or ()),
            erasure_id=row["erasure_id"],
            commitment=row["commitment"],
            prev_link=row["prev_link"],
            link=row["link"],
        )
