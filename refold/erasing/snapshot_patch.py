"""The erasure refold, decremental: patch the newest snapshot to drop the erased events.

The erasure procedure purges derived stores one by one; :class:`SnapshotPatcher` is the first of
them, so it runs after the tombstones landed and before the extraction cache loses the erased
events' rows (the patch needs them: their fact and rejection counts, and their surface forms):

    newest snapshot of the current spec that holds an erased event
      → load only the REGION the erased events touched, with Arrow filters over its columns: the
        merged edges of every (subject, relation) key an erased event sourced or ended, all merged
        edges of those subjects, their roll-up partners, the derived edges built from them, and
        the end nodes of all of these
      → :func:`refold.fold.decremental.remove_events` on that region (surviving events from the log,
        their extractions from the cache)
      → splice the region back into the snapshot's tables and write the patched snapshot in place
        (same position: the link at ``last_seq`` survives tombstones)

The snapshot purge that follows removes every other snapshot holding an erased event, and the
refold step resumes from the patched one, so the erasure refold costs what the erased events
touched, wherever in the log they are. When the patch cannot be made (shred mode: the log must
be decrypted to read it; a store on object storage, whose snapshots are objects, not folders to
patch in place; a model request that spanned erased and surviving events: that surviving event
must be extracted again; a missing input; no snapshot) the snapshot is left to the purge and the
refold resumes from an older snapshot or the start, as before.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from refold.fold.decremental import Inputs, NotDecremental, Patch, remove_events
from refold.fold.errors import RefoldError
from refold.fold.graph_objects import paused_gc
from refold.fold.incremental import LiveFold
from refold.fold.snapshot_codec import stats_from_json
from refold.fold.spec import FoldSpec
from refold.storage.cache import PurgeResult
from refold.storage.schema import table_to_events
from refold.storage.snapshot_files import read_file
from refold.storage.snapshots import (Prepared, SnapshotInfo, SnapshotStore, TableRead, edge_bucket_count, io_worker,
                                     prepare_contained)
from .region import Region

if TYPE_CHECKING:
    from refold.memory import Memory

__all__ = ["SnapshotPatcher"]

STORE = "snapshot patch"


def _current_spec(mem: "Memory") -> FoldSpec:
    """What :meth:`Memory.current_spec` returns (the newest spec recorded in the log, or the
    default), read through the log's shared reader only: ``current_spec`` first brings the log
    object's own table up to date (a reload after the erasure cleaned up the log, ~6 ms) for
    its cache key, which the patch does not need."""
    from refold.folding import newest_spec, recorded_specs

    return newest_spec(recorded_specs(mem))


def _from_log(mem: "Memory") -> tuple[FoldSpec, list]:
    """(the current spec, every retraction event) in one read of the log's rows of both kinds
    (:meth:`~refold.storage.log_reader.LogReader.rows_of_kinds`). The spec is what
    :func:`_current_spec` returns: the newest spec recorded, or the default."""
    from refold.folding import newest_spec, specs_from

    rows = mem.log_store.rows_of_kinds(["retraction", "spec_changed"])
    if rows is None:
        return FoldSpec(), []
    specs = specs_from(rows.filter(pc.equal(rows["kind"], "spec_changed"))["content"].to_pylist())
    retractions = list(table_to_events(rows.filter(pc.equal(rows["kind"], "retraction"))))
    return newest_spec(specs), retractions


def _edge_files_of(info: SnapshotInfo) -> list[str]:
    """The edge bucket file names of ``info`` by bucket number."""
    return sorted(n for n in info.files if n.startswith("edges-"))


def _held_buckets(contained: pa.Table, held: list[str]) -> set[int]:
    """The buckets of the merged edges the erased (held) events are a source of or ended, from
    an indexed snapshot's contained ids."""
    rows = contained.filter(pc.is_in(contained["event_id"], value_set=pa.array(held, pa.string())))
    return {b for b in pc.list_flatten(rows["buckets"]).to_pylist() if b is not None}


def _region(info: SnapshotInfo, read: TableRead) -> Region:
    """The patch's :class:`Region` over what ``read`` read: an indexed snapshot's nodes, index and
    first buckets (more are read on this thread as the region asks), or every table of an older
    one."""
    if info.indexed:
        tables = read.tables()
        files = _edge_files_of(info)
        number = {name: b for b, name in enumerate(files)}

        def load(buckets: set[int]) -> dict[int, pa.Table]:
            return {b: read_file(info, files[b], "edges", for_decode=True) for b in buckets}

        return Region(tables["nodes"], {number[n]: t for n, t in tables.items() if n in number},
                      count=len(files), total=info.edges, index=tables["index"], load=load)
    tables = read.result()
    if edge_bucket_count(info) == 1 and "edges" in info.files:  # the older single file
        return Region(tables["nodes"], tables["edges"])
    rows = tables["edge_rows"]["rows"].to_pylist()
    starts = [0, *itertools.accumulate(rows)]
    return Region(tables["nodes"], {b: tables["edges"].slice(starts[b], rows[b]) for b in range(len(rows))},
                  count=len(rows))


@dataclass(frozen=True)
class _Found:
    """What the patch finds in the snapshot before it needs the cache: the region, the seqs of
    the region's merged edges' sources and of the first surviving mentions of the nodes an erased
    event mentioned (see :meth:`Region.first_mentions`), the region's graph, and the erased ids the
    snapshot holds."""

    region: Region
    seq_of: dict[str, int]
    graph: object
    held: list[str]


def _held(store: SnapshotStore, info: SnapshotInfo, erased: set[str]) -> tuple[SnapshotInfo, pa.Table, list[str]] | None:
    """(``info``, its contained ids (``event_id``, and in an indexed snapshot ``buckets``), the
    erased ones among them, sorted), or None when it holds none or they cannot be read."""
    try:
        # (Arrow: 15k ids at 20k events, no Python set)
        contained = (store.contained_table(info) if info.indexed
                     else pa.table({"event_id": store.contained_array(info)}))
        ids = contained["event_id"]
        held = ids.filter(pc.is_in(ids, value_set=pa.array(sorted(erased), pa.string())))
    except (OSError, pa.ArrowException, RefoldError):
        return None  # unreadable or damaged: the snapshot purge deals with it
    return (info, contained, held.to_pylist()) if len(held) else None


def _find(store: SnapshotStore, info: SnapshotInfo, erased: set[str], held_ready: Future) -> "_Found | None":
    """The region of ``info`` that the erased events it holds touched, or None when it holds
    none (runs on the snapshot worker while the patch reads the cache). ``held_ready`` gets
    :func:`_held`'s answer as soon as it is known."""
    try:
        target = _held(store, info, erased)
    except BaseException as exc:  # (the patch waits on held_ready: it must hear of a failure too)
        held_ready.set_exception(exc)
        raise
    held_ready.set_result(target)
    if target is None:
        return None
    _, contained, held = target
    if info.indexed:
        files = _edge_files_of(info)
        names = ["nodes", "index", *(files[b] for b in sorted(_held_buckets(contained, held)))]
        read = TableRead(info, for_decode=True, use_threads=False, names=names)
    else:
        read = TableRead(info, contained=False, for_decode=True, use_threads=False)
    region = _region(info, read)
    hit = region.hits(pa.array(held, pa.string()))
    erased_held = set(held)
    edges = region.load(hit, erased_held)
    mentioned = {n for u, v, sources in zip(hit["subject"].to_pylist(), hit["object"].to_pylist(),
                                            hit["sources"].to_pylist())
                 if not erased_held.isdisjoint(sources) for n in (u, v)}
    keys = set(zip(hit["subject"].to_pylist(), hit["relation"].to_pylist()))
    firsts = dict(region.first_mentions(mentioned, erased_held))
    seq_of: dict[str, int] = {}
    for u, v, r, sources, seqs, kind in zip(
            edges["subject"].to_pylist(), edges["object"].to_pylist(), edges["relation"].to_pylist(),
            edges["sources"].to_pylist(), edges["source_seqs"].to_pylist(), edges["derivation"].to_pylist()):
        if kind != "extracted":
            continue
        if (u, r) in keys:
            seq_of.update(zip(sources, seqs))
        for n in (u, v):
            if n in mentioned:
                alive = [(q, i) for q, i in zip(seqs, sources) if i not in erased_held]
                if alive and (n not in firsts or min(alive) < firsts[n]):
                    firsts[n] = min(alive)
    seq_of.update((eid, seq) for seq, eid in firsts.values())
    return _Found(region, seq_of, region.graph(edges, mentioned), held)


class _Part:
    """One item of a future's tuple result, read like a future."""

    def __init__(self, future: Future, index: int):
        self.future, self.index = future, index

    def result(self):
        return self.future.result()[self.index]


class _NotCurrent(Exception):
    """The snapshot taken is not of the current spec (another spec was recorded since)."""


def _skipped(mode: str, any_erased: bool) -> PurgeResult:
    """The patcher's receipt line when it does not try: it must not claim that no snapshot holds
    the erased events (the snapshot purge that follows may well remove some)."""
    if not any_erased:
        return PurgeResult(STORE, 0, ("no erased events: nothing to patch",))
    return PurgeResult(STORE, 0, (f"not patched: {mode} mode (a patch would need the log decrypted); the "
                                  "snapshot purge removes every snapshot that holds the erased events, and "
                                  "the refold resumes from an older one",))


def _on_objects() -> PurgeResult:
    """The patcher's receipt line on object storage, where snapshots are not patched in place."""
    return PurgeResult(STORE, 0, ("not patched: the store is on object storage (snapshots are patched in place "
                                  "only on a local store); the snapshot purge removes every snapshot that holds "
                                  "the erased events, and the refold resumes from an older one",))


def _not_held(info: SnapshotInfo | None) -> PurgeResult:
    if info is None:
        return PurgeResult(STORE, 0, ("no snapshot of the current spec: nothing to patch",))
    return PurgeResult(STORE, 0, (f"the newest snapshot of the current spec ({Path(info.path).name}) holds none "
                                  "of the erased events: nothing to patch",))


class SnapshotPatcher:
    """A derived store for the erasure procedure: ``purge(event_ids)`` patches the newest snapshot.

    Put it before the extraction cache in the procedure's list of derived stores. ``last`` keeps
    the most recent :class:`~refold.fold.decremental.Patch` and the seconds it took.
    """

    def __init__(self, mem: "Memory"):
        self.mem = mem
        self.last: tuple[Patch, float] | None = None
        self._seqs: dict[str, int] = {}  # erased event id -> seq, from the plan (see preview)

    def preview(self, event_ids: Iterable[str], *, seqs: Iterable[int] | None = None) -> PurgeResult:
        """What :meth:`purge` would do. ``seqs``: the log positions of ``event_ids`` (the plan's),
        kept for the purge that follows: its cache read of the erased events' rows then starts at
        once, on a thread, pruned by seq."""
        event_ids = list(event_ids)
        if seqs is not None:
            self._seqs = dict(zip(event_ids, seqs))
        if self.mem.mode == "shred" or not event_ids:
            return _skipped(self.mem.mode, bool(event_ids))
        if not self.mem.layout.is_local:
            return _on_objects()
        spec: Future = Future()
        spec.set_result(_current_spec(self.mem))
        info = self._snapshot(spec)
        target = None if info is None else _held(self._store(), info, set(event_ids))
        if target is None:
            return _not_held(info)
        return PurgeResult(STORE, 1, (f"patched in place: {Path(target[0].path).name} (the refold resumes "
                                      "from it)",))

    def purge(self, event_ids: Iterable[str]) -> PurgeResult:
        started = time.perf_counter()
        erased = set(event_ids)
        if self.mem.mode == "shred" or not erased:
            return _skipped(self.mem.mode, bool(erased))
        if not self.mem.layout.is_local:
            return _on_objects()
        # the current spec and every retraction: one read of the log on a thread of its own from the
        # start (the erasure rewrote and cleaned up the log, so its table is loaded again first:
        # ~5 ms of delta-rs with the GIL released, ~17 under load), which the patch needs only after
        # it found its region; the snapshot is chosen by its folder, and checked against the spec
        # before anything is written
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="refold-log-read") as pool:
            logged = pool.submit(_from_log, self.mem)  # (leaving the block waits for it: no thread left behind)
            return self._purge(erased, _Part(logged, 0), _Part(logged, 1), started)

    def _purge(self, erased: set[str], spec: "_Part", retractions: "_Part", started: float) -> PurgeResult:
        info = self._snapshot(spec) if self.mem.mode != "shred" else None
        if info is None:
            return _not_held(None)
        # The snapshot store's worker thread reads the snapshot's contained ids, the files the
        # patch needs (a few long calls that release the GIL; repetitive strings as dictionaries,
        # see .region) and finds the region there (none of it needs the cache rows), while
        # this thread reads the erased events' cache rows from the start (many short calls: on a
        # thread of their own they cost more CPU in handing the GIL back and forth than they saved
        # in time). An indexed snapshot: only the nodes, the index and the buckets of the erased
        # events' edges, then those the region asks for as it grows
        held_ready: Future = Future()
        found = io_worker().submit(_find, self._store(), info, erased, held_ready)
        try:
            early = sorted(i for i in erased if self._seqs.get(i, info.last_seq + 1) <= info.last_seq)
            erased_rows = (self.mem.cache.facts(info.spec_hash, early, seqs=[self._seqs[i] for i in early])
                           if early else {})
            target = held_ready.result()
            if target is None:
                return _not_held(info)
            # the contained ids the patched snapshot keeps, encoded here while the worker still
            # looks for the region (the region's graph holds only the erased ids of the set, all
            # remove_events looks at), so that the write after the splice has one file less
            _, contained, held = target
            remaining = contained.filter(pc.invert(pc.is_in(contained["event_id"],
                                                            value_set=pa.array(held, pa.string()))))
            remaining = prepare_contained(remaining if info.indexed else remaining.select(["event_id"]))
            if found.result() is None:
                return _not_held(info)
            with paused_gc():  # many small objects, none cyclic: a full collection would dominate
                patch = self._patch(spec, info, found.result(), erased, retractions, erased_rows, remaining)
        except _NotCurrent:
            return PurgeResult(STORE, 0, ("not patched: the newest snapshot is not of the current spec; the "
                                          "snapshot purge removes every snapshot that holds the erased events",))
        except (NotDecremental, RefoldError, OSError, pa.ArrowException) as exc:
            return PurgeResult(STORE, 0, (f"not patched ({exc}); the snapshot purge removes it and the "
                                          "refold starts from an older snapshot",))
        finally:
            wait([found])  # (nothing left running behind)
        self.last = (patch, time.perf_counter() - started)
        return PurgeResult(STORE, 1, (
            f"{Path(info.path).name}: {patch.events} erased event(s), {patch.keys} key(s) re-merged from "
            f"{patch.survivors} surviving event(s), merged edges {patch.edges_before} -> {patch.edges_after}, "
            f"{patch.nodes_removed} entit(ies) removed, {patch.nodes_renamed} renamed",))

    # -- steps ------------------------------------------------------------------------------------

    def _target(self, erased: set[str], spec: "Future | _Part") -> tuple[SnapshotInfo, pa.Table, list[str]] | None:
        """(snapshot, its contained ids (``event_id``, and in an indexed snapshot ``buckets``), the
        erased ones among them, sorted) for the newest snapshot of the current spec (``spec``'s
        result) if it holds an erased event and can be patched, else None (reads only its
        contained ids). With snapshots of one spec only, that spec's newest is taken without
        waiting for ``spec``: :meth:`_patch` refuses it (:class:`_NotCurrent`) if it is not current."""
        if self.mem.mode == "shred" or not erased:
            return None
        info = self._snapshot(spec)
        return None if info is None else _held(self._store(), info, erased)

    def _store(self) -> SnapshotStore:
        return SnapshotStore(self.mem.layout, storage_options=self.mem.storage_options)

    def _snapshot(self, spec: "Future | _Part") -> SnapshotInfo | None:
        """The newest snapshot of the current spec (see :meth:`_target`), or None."""
        store = self._store()
        if store.root is None:  # object storage: no in-place patch; the snapshot purge removes the holders
            return None
        specs = store.spec_hashes()
        snaps = store.newest(specs[0] if len(specs) == 1 else spec.result().hash, at_most=1 << 62)
        return snaps[0] if snaps else None

    def _facts(self, spec_hash: str, ids: list[str], seq_of: dict[str, int]):
        """Cached facts of ``ids``: pruned by seq where it is known, then by id for the rest (and
        for rows cached without a seq, which a seq-pruned read does not see)."""
        known = [i for i in ids if i in seq_of]
        out = self.mem.cache.facts(spec_hash, known, seqs=[seq_of[i] for i in known]) if known else {}
        rest = [i for i in ids if i not in out]
        if rest:
            out.update(self.mem.cache.facts(spec_hash, rest))
        return out

    def _patch(self, spec_future: "_Part", info: SnapshotInfo, found: "_Found", erased: set[str],
               retractions: "_Part", erased_rows: dict, remaining: Prepared) -> Patch:
        mem = self.mem
        spec_hash = info.spec_hash
        region, held = found.region, found.held
        seq_of = dict(self._seqs)  # log positions of the events named below, from the edges' source lists
        seq_of.update(found.seq_of)
        # the erased events' rows (read while the snapshot was decoded, when the plan gave their seqs),
        # then, as the patch asks, the re-merged keys' sources and the first surviving mentions it
        # must look at: reads pruned by seq (the cache keeps each row's seq, with statistics) of
        # only the columns a merge reads (facts, rejections, the request's event ids)
        memo = dict(erased_rows)
        rest = [i for i in held if i not in memo]
        if rest:
            memo.update(self._facts(spec_hash, rest, seq_of))
        cached = {i: memo[i] for i in held if i in memo}
        for x in cached.values():
            if x.request_event_ids is not None and not set(x.request_event_ids) <= erased:
                raise NotDecremental("a model request of an erased event also held surviving events")

        def extractions(ids: set[str]):
            missing = sorted(ids - memo.keys())
            if missing:
                memo.update(self._facts(spec_hash, missing, seq_of))
            return {i: memo[i] for i in ids if i in memo}

        spec = spec_future.result()
        if spec.hash != spec_hash:
            raise _NotCurrent(spec_hash)
        live = LiveFold.resume(spec, found.graph, stats_from_json(info.stats),
                               contained=held, link=info.link, started_from=info.last_seq)
        log = mem.log_store
        inputs = Inputs(
            events=lambda ids: {e.event_id: e for e in log.events_by_id(None, sorted(ids))},
            extractions=extractions,
            retractions=lambda until: [r for r in retractions.result() if r.seq <= until],
            outside_first=region.outside_first,
            outside_all=region.outside_all,
            pull_in=region.pull_in,
        )
        patch = remove_events(live, held, cached, inputs)
        live.refresh()
        # the region's state held only the erased ids of the contained set (all remove_events
        # looks at): the others stay as the snapshot listed them
        if live.contained:
            raise NotDecremental("the patch left an erased event in the state")
        # only the buckets that held a changed edge before, or hold one now, are written again
        done = region.splice(live.graph, edge_bucket_count(info))
        store = SnapshotStore(mem.layout, storage_options=mem.storage_options)
        if isinstance(done.edges, dict):
            store.replace(info, nodes=done.nodes, buckets=done.edges, edge_count=done.edge_count,
                          contained=remaining, stats=live.builder.stats, index=done.index)
        else:
            store.replace(info, nodes=done.nodes, edges=done.edges, contained=remaining, stats=live.builder.stats)
        mem.forget_live()
        return patch
