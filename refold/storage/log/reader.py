"""Reading the event log: heads, rows by seq / record time / id (the appending side is
:mod:`refold.storage.log.eventlog`, which extends :class:`LogReader`)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from refold.fold.chain import GENESIS
from refold.fold.errors import IntegrityError
from refold.fold.events import Event
from refold.storage.delta.io import Bounds, parquet_dataset, read_arrow, read_files, seq_spans
from refold.storage.delta.handles import shared_table
from refold.storage.log.heads import Head, read_published_head
from refold.storage.layout import Layout
from refold.storage.log.schema import EVENTS_SCHEMA, table_to_events

__all__ = ["HEAD_KEY", "LogReader", "recorded_head"]

#: commit metadata key holding the chain head the commit produced
HEAD_KEY = "refold.head"
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def recorded_head(dt: DeltaTable) -> Head | None:
    """The head that ``dt``'s newest commit recorded in its metadata, if it recorded one for
    that very version (None otherwise). Not trusted by itself: see :meth:`LogReader.head`."""
    for entry in dt.history(1):
        if HEAD_KEY in entry:
            try:
                head = Head.from_json(json.loads(entry[HEAD_KEY]))
            except (ValueError, KeyError, TypeError):
                raise IntegrityError(f"the head recorded in commit {dt.version()} of {dt.table_uri} is "
                                     "malformed: the commit metadata was edited; run `refold verify`") from None
            return head if head.table_version == dt.version() else None
    return None


def _prefix_end(seqs: pa.ChunkedArray) -> int | None:
    """The last of ``seqs`` when they are 0..last (-1: none), else None."""
    if len(seqs) == 0:
        return -1
    last = pc.max(seqs).as_py()
    return last if last + 1 == len(seqs) else None


def _with_seq(columns: Sequence[str] | None) -> list[str] | None:
    """``columns`` (None: all) plus ``seq``, which orders the rows (callers may ignore it)."""
    if not columns:
        return None
    return list(columns) if "seq" in columns else [*columns, "seq"]


class LogReader:
    """The read side of one store's log (needs ``layout``, ``storage_options`` and
    ``_prefix_ends``, the answers :meth:`prefix_end` keeps)."""

    layout: Layout
    storage_options: dict[str, str] | None
    _prefix_ends: dict[int, int]

    def table(self, version: int | None = None) -> DeltaTable:
        """A new handle on the log's Delta table at ``version`` (default: the newest), for code that
        needs delta-rs itself: the file list, the commit history, a write transaction."""
        return DeltaTable(self.layout.events, version=version, storage_options=self.storage_options)


    def version(self) -> int:
        """The newest table version (a writer keeps its own handle: see ``EventLog.version``)."""
        return self.table().version()

    def head(self, dt: DeltaTable | None = None) -> Head:
        """The current head, read from the rows and checked against the head that the newest
        commit recorded in its metadata.

        A head in commit metadata is not trusted by itself (anyone who can write ``_delta_log``
        can edit it, and an appender that believed it would write a second row at an existing
        seq). Raises :class:`IntegrityError` when the recorded head, the data files' statistics
        and the rows disagree: nothing should be appended to such a log before ``refold verify``
        has been run. A recorded head counts only if it was written for the version it landed
        at: delta-rs rebases an OPTIMIZE over commits that landed meanwhile
        (``max_commit_retries=0`` does not stop it), and the head it carries is then stale.
        """
        dt = dt or self.table()
        actual = self._head_from_rows(dt)
        recorded = recorded_head(dt)
        if recorded is not None and (recorded.seq, recorded.link) != (actual.seq, actual.link):
            raise IntegrityError(
                f"the head recorded in commit {dt.version()} of {self.layout.events} (seq {recorded.seq}) does "
                f"not match the rows (last seq {actual.seq}, or a different link): the commit metadata or the "
                "rows were changed; nothing was appended. Run `refold verify` and restore the log from a copy",
                first_bad_seq=min(recorded.seq, actual.seq) + 1)
        return actual

    def _head_from_rows(self, dt: DeltaTable) -> Head:
        """The last row's seq, link and record time, opening one data file.

        The file whose ``seq`` statistics reach highest holds the last row; the files' row counts
        must add up to that seq + 1 (seqs are contiguous from 0, and erasure keeps a tombstone row
        per erased event), and the file's own rows must end where its statistics say. So edited
        statistics that hide rows, or show rows that are not there, are found here too. Without
        statistics (a file written by another engine), every file's seq and link are read.
        """
        actions = pa.table(dt.get_add_actions(flatten=True))
        if actions.num_rows == 0:
            return Head(-1, GENESIS, _EPOCH, dt.version())
        names = actions.column_names
        if "max.seq" not in names or "num_records" not in names or \
                actions["max.seq"].null_count or actions["num_records"].null_count:
            data = read_arrow(dt, EVENTS_SCHEMA, columns=["seq", "link", "recorded_at"])
            return self._last_row(dt, data, data.num_rows, None)
        i = pc.index(actions["max.seq"], pc.max(actions["max.seq"])).as_py()
        path = actions["path"][i].as_py()
        uri = next((u for u in dt.file_uris() if u.replace("\\", "/").endswith("/" + path)), None)
        if uri is None:
            data = read_arrow(dt, EVENTS_SCHEMA, columns=["seq", "link", "recorded_at"])
            return self._last_row(dt, data, data.num_rows, None)
        data = parquet_dataset(dt, [uri], EVENTS_SCHEMA).to_table(
            columns=["seq", "link", "recorded_at"])
        return self._last_row(dt, data, pc.sum(actions["num_records"]).as_py(),
                              (path, actions["max.seq"][i].as_py()))

    def _last_row(self, dt: DeltaTable, data: pa.Table, rows: int, stated: tuple[str, int] | None) -> Head:
        """The head at ``data``'s highest seq, checked: the log holds ``rows`` rows, and
        ``stated`` (a data file and the highest seq its statistics state) matches ``data``."""
        if data.num_rows == 0:
            raise IntegrityError(f"a data file of {self.layout.events} holds no rows although the log "
                                 "says it does; run `refold verify`")
        i = pc.index(data["seq"], pc.max(data["seq"])).as_py()
        row = data.slice(i, 1).to_pylist()[0]
        if stated is not None and stated[1] != row["seq"]:
            raise IntegrityError(
                f"the statistics of data file {stated[0]} of {self.layout.events} state seq {stated[1]} as its "
                f"highest, its rows end at seq {row['seq']}: the Delta log was edited; nothing was appended. "
                "Run `refold verify`", first_bad_seq=min(stated[1], row["seq"]) + 1)
        if rows != row["seq"] + 1:
            raise IntegrityError(
                f"{self.layout.events} holds {rows} rows but its last seq is {row['seq']}: rows were "
                "removed, inserted or copied; nothing was appended. Run `refold verify`",
                first_bad_seq=min(rows, row["seq"] + 1))
        return Head(row["seq"], row["link"], row["recorded_at"].astimezone(timezone.utc), dt.version())

    def arrow(self, *, columns: Sequence[str] | None = None, filter: pc.Expression | None = None,
              version: int | None = None, prune: Sequence[Bounds] | None = None) -> pa.Table:
        """Raw rows sorted by seq (refold's internal reader).

        ``prune``: where the wanted rows lie (see :func:`~refold.storage.delta.io.read_arrow`), e.g.
        ``[{"kind": ("retraction", "retraction")}]``; files that cannot hold them are not read.
        """
        wanted = _with_seq(columns)
        if prune is not None and version is None:
            with shared_table(self.layout.events, self.storage_options).view() as dt:
                table = read_arrow(dt, EVENTS_SCHEMA, columns=wanted, filter=filter, prune=prune)
            return table.sort_by("seq")
        return read_arrow(self.table(version), EVENTS_SCHEMA, columns=wanted, filter=filter,
                          prune=prune).sort_by("seq")

    def prefix_end(self, as_of: int | str | datetime) -> int | None:
        """The last seq of the log as it stood at ``as_of`` (record time: a table version or a
        time): -1 when nothing was recorded by then, None when what was recorded by then is not
        a prefix of seqs (writers whose clocks disagree), so a caller reads it by filter. Reads
        the seq column only (for a version, only the files that can hold it); the answer for a
        version already written is kept."""
        from refold.fold.timeutil import as_of_filter, parse_as_of

        parsed = parse_as_of(as_of)
        if not isinstance(parsed, int):
            return _prefix_end(self.arrow(columns=["seq"], filter=as_of_filter(parsed))["seq"])
        if parsed in self._prefix_ends:
            return self._prefix_ends[parsed]
        written = self.version()  # (read before the rows are)
        end = _prefix_end(self.arrow(columns=["seq"], filter=as_of_filter(parsed),
                                     prune=[{"table_version": (None, parsed)}])["seq"])
        # the rows of a version already written never change (seq and table_version outlive
        # erasure and compaction); a version not yet written may still gain rows
        if end is not None and parsed <= written:
            if len(self._prefix_ends) >= 256:
                self._prefix_ends.pop(next(iter(self._prefix_ends)))
            self._prefix_ends[parsed] = end
        return end

    def rows_of_kinds(self, kinds: Sequence[str], *, columns: Sequence[str] | None = None) -> pa.Table | None:
        """The rows of ``kinds`` sorted by seq (None when there are none), read in two phases:
        their seqs from the seq and kind columns, then only those rows. Tombstones widen the data
        files' kind statistics, so after an erasure spread over the log nearly every file may hold
        any kind: whole rows of all of them cost ~40-70 ms at 20k events, the two phases ~5.
        Both phases read one version of the log, file by file on this thread
        (:func:`~refold.storage.delta.io.read_files`: a handful of small reads, where a dataset
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

    def events_by_id(self, dt: DeltaTable | None, ids: list[str], *,
                     seqs: Iterable[int] | None = None) -> list[Event]:
        """The events among ``ids``; ``seqs``, their log positions where the caller knows them
        (a fact's ``source_seqs``): only the files whose seq range holds one are read."""
        dt = dt or self.table()
        prune = None if seqs is None else [{"seq": span} for span in seq_spans(seqs)]
        table = read_arrow(dt, EVENTS_SCHEMA, filter=pc.field("event_id").isin(ids), prune=prune)
        return list(table_to_events(table))

    def published_head(self) -> Head | None:
        """The newest head published under receipts/heads (None when none was published)."""
        return read_published_head(self.layout.heads) if self.layout.is_local else None
