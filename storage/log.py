"""The event log: an append-only Delta table with a total order and a hash chain.

Concurrency design (compare-and-append). delta-rs rebases blind appends from racing writers
silently, which would fork ``seq`` and the chain. So every append:

1. loads the table at its newest version ``v`` and reads the head (last seq, link, record time)
   from the commit metadata refold writes with each commit (falling back to the rows);
2. assigns ``seq = head.seq + 1 …``, ``table_version = v + 1`` and seals each event into the chain;
3. commits with ``max_commit_retries=0`` against version ``v``: if any other commit landed after
   ``v``, delta-rs raises ``CommitFailedError`` instead of rebasing, and we go back to 1.

So a commit lands only on top of the head it was computed from: no fork, no gap, for threads and
processes alike. Idempotency: an ``event_id`` already in the log returns its original seq and
writes nothing (the same id with different content raises :class:`ConflictError`). An error raised
after the commit may have landed (an *ambiguous* commit) is resolved by re-reading the table: if
the batch's ids are there, the append succeeded; a caller that retries anyway gets the same seqs.

After each commit the new head is published under ``receipts/heads/`` so ``verify`` can detect a
truncated tail (a removed newest commit).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError, TableNotFoundError

from refold.fold.chain import GENESIS, new_salt, seal
from refold.fold.errors import ConflictError, StoreError
from refold.fold.events import Event, NewEvent
from .layout import Layout, atomic_write_json
from .delta_io import read_arrow
from .schema import EVENTS_SCHEMA, TABLE_CONFIGURATION, events_to_table, table_to_events

HEAD_KEY = "refold.head"
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class Head:
    """The newest position of the log: last seq (-1 when empty), its link, record time and table version."""

    seq: int
    link: str
    recorded_at: datetime
    table_version: int

    def as_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "link": self.link,
            "recorded_at": self.recorded_at.isoformat(),
            "table_version": self.table_version,
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> "Head":
        return cls(
            seq=int(value["seq"]),
            link=str(value["link"]),
            recorded_at=datetime.fromisoformat(value["recorded_at"]),
            table_version=int(value["table_version"]),
        )


#: Turns a validated event into stored column overrides (shred mode encrypts content here).
Protector = Callable[[NewEvent], dict[str, Any]]


def _plain(_: NewEvent) -> dict[str, Any]:
    return {}


class EventLog:
    """One store's log. Cheap to construct; safe to use from several threads and processes."""

    def __init__(self, layout: Layout, *, storage_options: dict[str, str] | None = None,
                 protector: Protector = _plain):
        self.layout = layout
        self.storage_options = storage_options
        self.protector = protector
        self._ids: dict[str, int] = {}
        self._ids_version = -1
        try:
            self._table()
        except TableNotFoundError:
            raise StoreError(
                f"no event log at {layout.events}; create the store with `refold init {layout.root}`"
            ) from None

    # -- creation -------------------------------------------------------------------------------

    @staticmethod
    def create(layout: Layout, *, storage_options: dict[str, str] | None = None) -> None:
        """Create an empty log table (version 0). Fails if one exists."""
        try:
            DeltaTable(layout.events, storage_options=storage_options)
        except TableNotFoundError:
            DeltaTable.create(
                layout.events, EVENTS_SCHEMA, configuration=TABLE_CONFIGURATION,
                storage_options=storage_options, name="refold_events",
                description="refold event log: the only source of truth; append through refold only",
            )
            return
        raise StoreError(f"{layout.events} already holds an event log")

    # -- reading --------------------------------------------------------------------------------

    def _table(self, version: int | None = None) -> DeltaTable:
        return DeltaTable(self.layout.events, version=version, storage_options=self.storage_options)

    def head(self, dt: DeltaTable | None = None) -> Head:
        """The current head, from the newest commit's metadata (or the rows when it has none)."""
        dt = dt or self._table()
        version = dt.version()
        for entry in dt.history(1):
            if HEAD_KEY in entry:
                head = Head.from_json(json.loads(entry[HEAD_KEY]))
                return Head(head.seq, head.link, head.recorded_at, version)
        return self._head_from_rows(dt)

    def _head_from_rows(self, dt: DeltaTable) -> Head:
        data = read_arrow(dt, EVENTS_SCHEMA, columns=["seq", "link", "recorded_at"])
        if data.num_rows == 0:
            return Head(-1, GENESIS, _EPOCH, dt.version())
        i = pc.index(data["seq"], pc.max(data["seq"])).as_py()
        row = data.slice(i, 1).to_pylist()[0]
        return Head(row["seq"], row["link"], row["recorded_at"].astimezone(timezone.utc), dt.version())

    def arrow(self, *, columns: Sequence[str] | None = None, filter: pc.Expression | None = None,
              version: int | None = None) -> pa.Table:
        """Raw rows sorted by seq (refold's internal reader)."""
        wanted = list(columns) if columns else None
        if wanted is not None and "seq" not in wanted:
            wanted.append("seq")  # needed for the order; callers may ignore it
        return read_arrow(self._table(version), EVENTS_SCHEMA, columns=wanted, filter=filter).sort_by("seq")

    def read(self, *, since: int | None = None, until: int | None = None,
             as_of: int | str | datetime | None = None) -> pl.DataFrame:
        """Events as a polars DataFrame ordered by seq.

        ``since`` (inclusive) and ``until`` (exclusive) bound seq. ``as_of`` is record time: a table
        version (int) or a timezone-aware time; the answer is the log as it stood then (erasures
        that happened since stay applied).
        """
        return pl.from_arrow(self.arrow(filter=self._filter(since, until, as_of)))  # type: ignore[return-value]

    def events(self, *, since: int | None = None, until: int | None = None,
               as_of: int | str | datetime | None = None) -> list[Event]:
        """Events as frozen values ordered by seq (same bounds as :meth:`read`)."""
        return list(table_to_events(self.arrow(filter=self._filter(since, until, as_of))))

    @staticmethod
    def _filter(since, until, as_of) -> pc.Expression | None:
        from refold.fold.timeutil import as_of_filter

        parts = []
        if since is not None:
            parts.append(pc.field("seq") >= since)
        if until is not None:
            parts.append(pc.field("seq") < until)
        if as_of is not None:
            parts.append(as_of_filter(as_of))
        if not parts:
            return None
        expr = parts[0]
        for part in parts[1:]:
            expr = expr & part
        return expr

    def _known_ids(self, dt: DeltaTable) -> dict[str, int]:
        """event_id → seq for every row, refreshed incrementally by table version."""
        version = dt.version()
        if version != self._ids_version:
            flt = pc.field("table_version") > self._ids_version if self._ids_version >= 0 else None
            rows = read_arrow(dt, EVENTS_SCHEMA, columns=["event_id", "seq"], filter=flt)
            self._ids.update(zip(rows["event_id"].to_pylist(), rows["seq"].to_pylist()))
            self._ids_version = version
        return self._ids

    # -- appending ------------------------------------------------------------------------------

    def append(self, batch: Sequence[NewEvent], *, max_attempts: int = 200, protect: bool = True) -> list[int]:
        """Append ``batch`` atomically in order; return each event's seq.

        Events whose id is already in the log keep their original seq and are not written again.
        ``protect=False`` stores the batch in clear even in shred mode (refold's own system events,
        which carry no personal data).
        """
        if not batch:
            return []
        for attempt in range(max_attempts):
            dt = self._table()
            existing = self._check_existing(dt, batch)
            fresh = [e for e in batch if e.event_id not in existing]
            if not fresh:
                return [existing[e.event_id] for e in batch]
            head = self.head(dt)
            rows = self._seal(fresh, head, dt.version() + 1, protect=protect)
            new_head = Head(rows[-1].seq, rows[-1].link, rows[-1].recorded_at, dt.version() + 1)
            props = CommitProperties(
                max_commit_retries=0, custom_metadata={HEAD_KEY: json.dumps(new_head.as_json())}
            )
            try:
                self._write(dt, events_to_table(rows), props)
            except CommitFailedError:
                # Another writer landed first: re-read the head and try again, with jitter so
                # racing writers spread out.
                time.sleep(random.uniform(0, min(0.05 * (attempt + 1), 0.5)))
                continue
            except Exception as exc:  # ambiguous: the commit may have landed before the error
                landed = self._check_existing(self._table(), batch)
                if all(e.event_id in landed for e in batch):
                    self._publish_head(new_head)
                    return [landed[e.event_id] for e in batch]
                raise StoreError(
                    f"append failed and the batch did not land ({exc}); it is safe to retry"
                ) from exc
            self._publish_head(new_head)
            by_id = {r.event_id: r.seq for r in rows} | existing
            return [by_id[e.event_id] for e in batch]
        raise StoreError(f"append gave up after {max_attempts} commit conflicts; retry later")

    # a seam for fault-injection tests (an error after the commit landed)
    def _write(self, dt: DeltaTable, table: pa.Table, props: CommitProperties) -> None:
        write_deltalake(dt, table, mode="append", commit_properties=props,
                        storage_options=self.storage_options)

    def _check_existing(self, dt: DeltaTable, batch: Sequence[NewEvent]) -> dict[str, int]:
        known = self._known_ids(dt)
        existing = {e.event_id: known[e.event_id] for e in batch if e.event_id in known}
        if existing:
            stored = {ev.event_id: ev for ev in self.events_by_id(dt, list(existing))}
            for e in batch:
                old = stored.get(e.event_id)
                if old is not None and not old.is_tombstone and not self._same(e, old):
                    raise ConflictError(
                        f"event_id {e.event_id} is already in the log (seq {old.seq}) with different "
                        "content; use a new event_id for a new event"
                    )
        return existing

    def _same(self, new: NewEvent, old: Event) -> bool:
        if old.cipher:  # shred mode: compare what we can without decrypting
            return (new.kind, new.source, new.tenant) == (old.kind, old.source, old.tenant)
        return new.same_input(old)

    def events_by_id(self, dt: DeltaTable | None, ids: list[str]) -> list[Event]:
        dt = dt or self._table()
        table = read_arrow(dt, EVENTS_SCHEMA, filter=pc.field("event_id").isin(ids))
        return list(table_to_events(table))

    def _seal(self, fresh: Sequence[NewEvent], head: Head, version: int, *, protect: bool = True) -> list[Event]:
        now = datetime.now(timezone.utc)
        # record time never runs backwards along seq, even if clocks differ between writers
        recorded_at = max(now, head.recorded_at)
        prev, rows = head.link, []
        for offset, e in enumerate(fresh):
            event = Event(
                seq=head.seq + 1 + offset, event_id=e.event_id, recorded_at=recorded_at,
                table_version=version, kind=e.kind, tenant=e.tenant, source=e.source,
                content=e.content, subjects=e.subjects, principals=e.principals,
                trace_id=e.trace_id, justification=e.justification, valid_from=e.valid_from,
                valid_to=e.valid_to, ingestion_run=e.ingestion_run, fact=e.fact, salt=new_salt(),
            )
            overrides = self.protector(e) if protect else None
            if overrides:
                event = event.with_(**overrides)
            event = seal(event, prev)
            prev = event.link
            rows.append(event)
        return rows

    # -- published heads ------------------------------------------------------------------------

    def _publish_head(self, head: Head, keep: int = 16) -> None:
        if not self.layout.is_local:
            return
        folder = Path(self.layout.heads)
        atomic_write_json(folder / f"{head.table_version:020d}.json", head.as_json())
        olds = sorted(folder.glob("*.json"))[:-keep]
        for old in olds:
            old.unlink(missing_ok=True)

    def published_head(self) -> Head | None:
        """The newest head published under receipts/heads (None when none was published)."""
        folder = Path(self.layout.heads)
        files = sorted(folder.glob("*.json")) if folder.exists() else []
        for path in reversed(files):
            try:
                return Head.from_json(json.loads(path.read_text()))
            except (OSError, ValueError, KeyError):
                continue
        return None
