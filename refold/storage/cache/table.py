"""The extraction cache: a Delta table keyed by (event_id, spec_hash).

A fold never extracts the same key twice: it asks :meth:`ExtractionCache.missing`, extracts only
those events, and :meth:`ExtractionCache.put` them. ``put`` is idempotent (a compare-and-append that
writes only keys not already present at the version it commits on), so a retried or duplicated
batch from a Ray worker adds no duplicate rows. Rows keep the raw model output, the parsed facts, rejected outputs with reasons,
the exact request, token counts, timing and which engine/host ran it. It is derived data: erasure
purges rows whose event, or whose request's events, were erased.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError

from refold.fold.errors import StoreError
from refold.fold.extract import Extraction
from refold.storage.cache.rows import (CACHE_SCHEMA, FACT_COLUMNS, CachedFacts, _row_to_extraction,  # noqa: F401 - re-exported
                         _to_table, facts_by_id)
from refold.storage.delta.io import Bounds, never_null, read_arrow, read_files, seq_spans, sql_in
from refold.storage.delta.handles import TableHandle, shared_table
from refold.storage.files.modes import apply_commit, apply_tree
from refold.storage.derived import PurgeResult
from refold.storage.layout import Layout

#: A checkpoint of the cache table every this many commits (see _CONFIG).
CHECKPOINT_EVERY = 10
#: columns with statistics in the Delta log: only keys (facts, requests and outputs quote personal data)
STATS_COLUMNS = ("event_id", "spec_hash", "seq")
_CONFIG = {
    "delta.dataSkippingStatsColumns": ",".join(STATS_COLUMNS),
    "delta.enableChangeDataFeed": "false",
    "delta.enableDeletionVectors": "false",
    # delta-rs replays every commit since the last checkpoint on each write and refresh (a fold
    # writes once): at 40 commits a write cost ~7 ms and a refresh ~4, right after a checkpoint
    # ~4 and ~1 (measured); a checkpoint (~20 ms) every 10 commits costs less than that
    "delta.checkpointInterval": str(CHECKPOINT_EVERY),
}


class ExtractionCache:
    """The cache table of one store (created on first use).

    Cheap to construct and picklable (Ray ships it): the loaded Delta table lives in this
    process's shared handle for the path (:func:`refold.storage.delta.handles.shared_table`), which is
    brought up to date before each use instead of replaying the commit log every call (readers
    its table up to date with delta-rs). Writes commit through delta-rs, as the event log's
    appends do (compare-and-append, see :meth:`put`).
    """

    def __init__(self, layout: Layout, *, storage_options: dict[str, str] | None = None):
        self.path = layout.extractions
        self.storage_options = storage_options
        #: (table object, its version, spec hash, ids) a get() found absent: a put() of those keys
        #: at that same version need not look again
        self._absent: tuple[DeltaTable, int, str, frozenset[str]] | None = None

    def __getstate__(self) -> dict:  # picklable (Ray): no table object travels
        return {"path": self.path, "storage_options": self.storage_options}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._absent = None

    @property
    def _handle(self) -> TableHandle:
        return shared_table(self.path, self.storage_options)

    def _ensure(self) -> None:
        with self._handle.view() as view:
            if view is not None:
                return
            try:
                DeltaTable.create(self.path, CACHE_SCHEMA, configuration=_CONFIG,
                                  storage_options=self.storage_options, name="refold_extractions")
            except Exception:  # noqa: BLE001 - a racing creator won; use its table
                pass
            self._apply_modes()
        with self._handle.fresh() as dt:
            if dt is None:
                raise StoreError(f"cannot create the extraction cache at {self.path}")

    def _apply_modes(self) -> None:
        """Files delta-rs wrote come out with the process umask: give them the store's modes."""
        if "://" not in self.path:
            apply_tree(self.path)

    def _read(self, *, columns: Sequence[str] | None = None, filter: pc.Expression | None = None,
              prune: list[Bounds] | None = None) -> pa.Table:
        with self._handle.view() as dt:
            if dt is None:
                table = CACHE_SCHEMA.empty_table()
                return table.select(list(columns)) if columns else table
            return read_arrow(dt, CACHE_SCHEMA, columns=columns, filter=filter, prune=prune)

    # -- reading ----------------------------------------------------------------------------------

    def keys(self, spec_hash: str) -> set[str]:
        """Event ids with a cached extraction under ``spec_hash``."""
        rows = self._read(columns=["event_id"], filter=pc.field("spec_hash") == spec_hash)
        return set(rows["event_id"].to_pylist())

    def missing(self, spec_hash: str, event_ids: Sequence[str]) -> list[str]:
        """The ids of ``event_ids`` (order kept) with no cached extraction under ``spec_hash``."""
        if not event_ids:
            return []
        rows = self._read(columns=["event_id"], filter=(pc.field("spec_hash") == spec_hash) & _ids_filter(event_ids),
                          prune=_ids_range(event_ids, spec_hash))
        have = set(rows["event_id"].to_pylist())
        return [e for e in event_ids if e not in have]

    def get(self, spec_hash: str, event_ids: Iterable[str] | None = None, *,
            seqs: Iterable[int] | None = None) -> dict[str, Extraction]:
        """Cached extractions by event id (all of the spec's, or only ``event_ids``).

        ``seqs``: the log positions of ``event_ids`` when the caller knows them; then only the
        files whose seq statistics can hold one are read (ids need not be time-ordered for that).
        Rows cached without a seq are not found this way.
        """
        if event_ids is None:
            rows = self._read(filter=pc.field("spec_hash") == spec_hash).to_pylist()
            return {r["event_id"]: _row_to_extraction(r) for r in rows}
        ids = list(event_ids)
        if not ids:
            return {}
        prune = _ids_range(ids, spec_hash)
        if seqs is not None:
            prune = [{"seq": span, "spec_hash": (spec_hash, spec_hash)} for span in seq_spans(seqs)]
        with self._handle.view() as view:
            if view is None:
                return {}
            # file by file (see read_files): a fold's look-up of its new events' ids finds a file
            # or none, and a dataset scan's set-up and filter expressions cost more than that
            rows = read_files(view, CACHE_SCHEMA, where={"spec_hash": [spec_hash], "event_id": ids},
                              prune=prune).to_pylist()
            found = {r["event_id"]: _row_to_extraction(r) for r in rows}
            if seqs is None:  # (a seq-pruned read does not see rows cached without a seq)
                self._absent = (view, view.version(), spec_hash, frozenset(ids).difference(found))
        return found

    def warm(self) -> None:
        """Load the table and its files' statistics now (a caller about to read it can do this on
        a worker thread meanwhile: loading replays the commit log, ~5-10 ms)."""
        # bounds no file's statistics allow (a file rules out on either column): none is read
        self._read(columns=["event_id"], prune=[{"seq": (-1, -1), "spec_hash": ("", "")}])

    def facts(self, spec_hash: str, event_ids: Iterable[str], *,
              seqs: Iterable[int] | None = None) -> dict[str, CachedFacts]:
        """What a fold's merge needs of the cached extractions of ``event_ids`` (their facts,
        rejections and which events their model request quoted), by event id: only those columns
        are read — a model request's prompt and raw output, the bulk of an LLM's rows, are not.
        ``seqs`` prunes files as in :meth:`get` (rows cached without a seq are then not found).
        """
        ids = list(event_ids)
        if not ids:
            return {}
        prune = ([{"seq": span, "spec_hash": (spec_hash, spec_hash)} for span in seq_spans(seqs)]
                 if seqs is not None else _ids_range(ids, spec_hash))
        with self._handle.view() as view:  # (file by file: a few rows of a few files, see read_files)
            if view is None:
                return {}
            rows = read_files(view, CACHE_SCHEMA, columns=list(FACT_COLUMNS),
                              where={"spec_hash": [spec_hash], "event_id": ids}, prune=prune)
        return facts_by_id(rows)

    def every_row_has_seq(self) -> bool:
        """Whether every cached row carries its event's seq (from the log's statistics): then a
        seq-pruned :meth:`get` or :meth:`facts` misses nothing, and a caller need not look again
        for the ids it did not find."""
        with self._handle.view() as view:
            return view is None or never_null(view, "seq")

    def frame(self):
        """The whole cache as a polars DataFrame (for audits and notebooks)."""
        import polars as pl

        return pl.from_arrow(self._read())

    # -- writing ----------------------------------------------------------------------------------

    def put(self, extractions: Sequence[Extraction], *, seqs: dict[str, int] | None = None,
            max_attempts: int = 50) -> int:
        """Insert extractions whose key is not cached yet; return the number of rows inserted
        (see :meth:`insert`)."""
        return len(self.insert(extractions, seqs=seqs, max_attempts=max_attempts))

    def insert(self, extractions: Sequence[Extraction], *, seqs: dict[str, int] | None = None,
               max_attempts: int = 50) -> list[Extraction]:
        """Insert extractions whose key is not cached yet; return those inserted. A key left out
        was cached by another writer first: the cache holds that writer's extraction, which
        every fold then uses (so a caller holding its own copies reads those keys back).

        Compare-and-append (as the event log): read which keys the table holds at version ``v``
        (a pruned read of just these ids), and create commit ``v + 1`` with the others only if no
        other writer created it meanwhile (delta-rs, ``max_commit_retries=0`` against ``v``);
        when another writer got there first the
        keys are checked again on the newer version. So a retried or duplicated batch adds no row
        twice, and no DataFusion MERGE runs (it cost a full join per write, and wrote string_view
        files).
        """
        if not extractions:
            return []
        unique = {(x.event_id, x.spec_hash): x for x in extractions}
        self._ensure()
        handle = self._handle
        reloaded = False
        for attempt in range(max_attempts):
            try:
                with handle.fresh() as dt:
                    if dt is None:
                        raise StoreError(f"the extraction cache at {self.path} disappeared; fold again")
                    fresh = self._fresh(dt, unique, seqs or {})
                    if not fresh:
                        return []
                    rows = _to_table(fresh, seqs or {})
                    write_deltalake(dt, rows, mode="append",
                                    commit_properties=CommitProperties(max_commit_retries=0),
                                    storage_options=self.storage_options)
                    _checkpoint_older_table(dt)
                    if "://" not in self.path:  # what this commit wrote, not the whole history
                        apply_commit(self.path, dt.version())
                    self._absent = None
                    return fresh
            except CommitFailedError:
                pass  # another writer landed first: check the keys again on the newer version
            except StoreError:
                raise
            except Exception as exc:  # ambiguous: the commit may have landed before the error
                handle.forget()
                if not reloaded:
                    reloaded = True
                    continue  # the next round sees whether it landed (then nothing is left)
                raise StoreError(f"extraction cache write failed ({exc}); it is safe to retry") from exc
            time.sleep(random.uniform(0, min(0.01 * (attempt + 1), 0.2)))
        raise StoreError(f"extraction cache: gave up after {max_attempts} commit conflicts; retry")

    def _fresh(self, dt: DeltaTable, unique: dict[tuple[str, str], Extraction],
               seqs: dict[str, int]) -> list[Extraction]:
        """The extractions of ``unique`` whose key ``dt`` (the newest version) does not hold."""
        absent = self._absent
        if (absent is not None and absent[0] is dt and absent[1] == dt.version()
                and all(spec == absent[2] and eid in absent[3] for eid, spec in unique)):
            return list(unique.values())  # get() just saw none of them at this version
        present = _present(dt, unique, seqs)
        return [x for key, x in unique.items() if key not in present]

    def purge(self, event_ids: Iterable[str]) -> PurgeResult:
        """Delete rows built from any of ``event_ids`` (as the key or inside the request)."""
        ids = sorted(set(event_ids))
        if not ids:
            return PurgeResult("extractions", 0)
        handle = self._handle
        data = self._read(columns=["event_id", "request_event_ids"])
        hit = set(data["event_id"].filter(built_from(data, ids)).to_pylist())
        if not hit:
            return PurgeResult("extractions", 0)
        for attempt in range(50):
            with handle.fresh() as dt:
                if dt is None:
                    return PurgeResult("extractions", 0)
                try:
                    metrics = dt.delete(sql_in("event_id", hit))
                    self._apply_modes()
                    return PurgeResult("extractions", int(metrics.get("num_deleted_rows", 0)))
                except CommitFailedError:
                    handle.forget()
            time.sleep(random.uniform(0, 0.2))
        raise StoreError("extraction cache purge kept conflicting with writers; retry the erasure")


def built_from(rows: pa.Table, ids: Iterable[str]) -> pa.Array:
    """A boolean mask of the cache ``rows`` (columns ``event_id``, ``request_event_ids``) built
    from any of ``ids``: as the key, or as one of the events their model request quoted.
    Computed with Arrow kernels (a loop over the rows took 0.8 s at 1M cached extractions)."""
    wanted = pa.array(sorted(set(ids)), pa.string())
    hit = np.asarray(pc.fill_null(pc.is_in(rows["event_id"], value_set=wanted), False))
    requests = rows["request_event_ids"].combine_chunks()
    quoted = pc.list_parent_indices(requests).filter(pc.is_in(pc.list_flatten(requests), value_set=wanted))
    hit[quoted.to_numpy()] = True
    return pa.array(hit)


def _checkpoint_older_table(dt: DeltaTable) -> None:
    """A table created before :data:`CHECKPOINT_EVERY` was configured gets its checkpoints here."""
    if dt.version() % CHECKPOINT_EVERY or "delta.checkpointInterval" in dt.metadata().configuration:
        return
    try:
        dt.create_checkpoint()
    except Exception:  # noqa: BLE001 - only speed is at stake; the commit landed
        pass


def _ids_filter(ids: Sequence[str]) -> pc.Expression:
    return pc.field("event_id").isin(list(ids))


def _ids_range(ids: Sequence[str], spec_hash: str | None = None) -> list[Bounds]:
    """Where rows for ``ids`` lie (time-ordered ids keep this range, and so the files read, few)."""
    bounds: Bounds = {"event_id": (min(ids), max(ids))}
    return [{**bounds, "spec_hash": (spec_hash, spec_hash)} if spec_hash is not None else bounds]


def _present(dt: DeltaTable, unique: dict[tuple[str, str], Extraction],
             seqs: dict[str, int]) -> set[tuple[str, str]]:
    """Which of these (event_id, spec_hash) keys the table holds at ``dt``'s version.

    An event's row always carries the event's seq when it has one, so where ``seqs`` gives every
    id's seq and no stored row lacks one, only the files whose seq range can hold them are read:
    a fold's stream of writes reads its last few files, not every file whose id range (which
    caller-chosen ids do not keep ordered) spans theirs."""
    ids = sorted({eid for eid, _ in unique})
    prune = _ids_range(ids)
    if all(eid in seqs for eid in ids) and never_null(dt, "seq"):
        prune = [{"seq": span} for span in seq_spans(seqs[eid] for eid in ids)]
    rows = read_arrow(dt, CACHE_SCHEMA, columns=["event_id", "spec_hash"], filter=_ids_filter(ids), prune=prune)
    return set(zip(rows["event_id"].to_pylist(), rows["spec_hash"].to_pylist()))
