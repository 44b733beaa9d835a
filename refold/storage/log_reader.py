"""Reading the event log: heads, rows by seq / record time / id (the appending side is
:mod:`refold.storage.log`, which extends :class:`LogReader`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timezone

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from refold.fold.chain import GENESIS
from refold.fold.errors import IntegrityError
from refold.fold.events import Event
from .delta_io import Bounds, read_arrow, read_files
from .table_handles import shared_table
from .heads import Head, read_published_head
from .layout import Layout
from .schema import EVENTS_SCHEMA, table_to_events

__all__ = ["HEAD_KEY", "LogReader"]

#: commit metadata key holding the chain head the commit produced
HEAD_KEY = "refold.head"
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _with_seq(columns: Sequence[str] | None) -> list[str] | None:
    """``columns`` (None: all) plus ``seq``, which orders the rows (callers may ignore it)."""
    if not columns:
        return None
    return list(columns) if "seq" in columns else [*columns, "seq"]


class LogReader:
    """The read side of one store's log (needs ``layout`` and ``storage_options``)."""

    layout: Layout
    storage_options: dict[str, str] | None

    def _table(self, version: int | None = None) -> DeltaTable:
        return DeltaTable(self.layout.events, version=version, storage_options=self.storage_options)

    def head(self, dt: DeltaTable | None = None) -> Head:
        """The current head, from the newest commit's metadata (or the rows when it has none).

        The metadata is trusted only if it was written for the version it landed at: delta-rs
        rebases an OPTIMIZE over commits that landed meanwhile (``max_commit_retries=0`` does not
        stop it), and the head it carries is then stale.
        """
        dt = dt or self._table()
        version = dt.version()
        for entry in dt.history(1):
            if HEAD_KEY in entry:
                head = Head.from_json(json.loads(entry[HEAD_KEY]))
                if head.table_version == version:
                    return head
        return self._head_from_rows(dt)

    def _head_from_rows(self, dt: DeltaTable) -> Head:
        data = read_arrow(dt, EVENTS_SCHEMA, columns=["seq", "link", "recorded_at"])
        if data.num_rows == 0:
            return Head(-1, GENESIS, _EPOCH, dt.version())
        i = pc.index(data["seq"], pc.max(data["seq"])).as_py()
        row = data.slice(i, 1).to_pylist()[0]
        return Head(row["seq"], row["link"], row["recorded_at"].astimezone(timezone.utc), dt.version())

    def arrow(self, *, columns: Sequence[str] | None = None, filter: pc.Expression | None = None,
              version: int | None = None, prune: Sequence[Bounds] | None = None) -> pa.Table:
        """Raw rows sorted by seq (refold's internal reader).

        ``prune``: where the wanted rows lie (see :func:`~refold.storage.delta_io.read_arrow`), e.g.
        ``[{"kind": ("retraction", "retraction")}]``; files that cannot hold them are not read.
        """
        wanted = _with_seq(columns)
        if prune is not None and version is None:
            with shared_table(self.layout.events, self.storage_options).view() as dt:
                table = read_arrow(dt, EVENTS_SCHEMA, columns=wanted, filter=filter, prune=prune)
            return table.sort_by("seq")
        return read_arrow(self._table(version), EVENTS_SCHEMA, columns=wanted, filter=filter,
                          prune=prune).sort_by("seq")

    def rows_of_kinds(self, kinds: Sequence[str], *, columns: Sequence[str] | None = None) -> pa.Table | None:
        """The rows of ``kinds`` sorted by seq (None when there are none), read in two phases:
        their seqs from the seq and kind columns, then only those rows. Tombstones widen the data
        files' kind statistics, so after an erasure spread over the log nearly every file may hold
        any kind: whole rows of all of them cost ~40-70 ms at 20k events, the two phases ~5.
        Both phases read one version of the log, file by file on this thread
        (:func:`~refold.storage.delta_io.read_files`: a handful of small reads, where a dataset
        scan's set-up and thread pool cost more than the rows)."""
        prune = [{"kind": (k, k)} for k in kinds]
        wanted = _with_seq(columns)
        with shared_table(self.layout.events, self.storage_options).view() as view:
            if view is None:
                return None
            seqs = read_files(view, EVENTS_SCHEMA, columns=["seq", "kind"], where={"kind": kinds}, prune=prune)["seq"]
            if len(seqs) == 0:
                return None
            found = sorted(seqs.to_pylist())
            rows = read_files(view, EVENTS_SCHEMA, columns=wanted, where={"kind": kinds, "seq": found},
                              prune=[{**p, "seq": (found[0], found[-1])} for p in prune])
        rows = rows.sort_by("seq")
        if rows["seq"].to_pylist() != found:  # both phases pruned by statistics: they must agree
            raise IntegrityError(
                f"the log's rows of kind {', '.join(kinds)} differ between two reads of one version (statistics "
                f"in the Delta log hide some); run `refold verify {self.layout.root}`")
        return rows

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

    def events_by_id(self, dt: DeltaTable | None, ids: list[str]) -> list[Event]:
        dt = dt or self._table()
        table = read_arrow(dt, EVENTS_SCHEMA, filter=pc.field("event_id").isin(ids))
        return list(table_to_events(table))

    def published_head(self) -> Head | None:
        """The newest head published under receipts/heads (None when none was published)."""
        return read_published_head(self.layout.heads) if self.layout.is_local else None
