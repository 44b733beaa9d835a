"""Incremental projection against a store: resume from the newest valid state, apply only the rest.

    candidates (newest first): the in-process LiveFold of this Memory, then snapshots on disk
      → the first VALID one: the log still has its link at its last_seq, and none of the events
        it contains has been erased since (a tombstone, or content that can no longer be read)
      → read the events after it, extract the ones with no cached extraction, merge them in log
        order, refresh roll-ups for what changed
      → write snapshots at multiples of ``snapshot_every`` reached on the way (only the newest
        ``keep``; older ones are pruned)

With no valid candidate (or ``full=True``) the fold starts from the beginning of the log and the
cache: the old, always-correct path. An erasure refold is the same call: the erasure purged every
snapshot holding the subject's events, so the newest valid one lies before the first erased event,
and the surviving events after it are re-merged from the cache (no extraction call, unless an
extraction's own inputs were erased and its cache row purged).
"""

from __future__ import annotations

import bisect
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow.compute as pc

from refold.fold.errors import ExtractionError
from refold.fold.events import Event
from refold.fold.extract import Extraction, Extractor
from refold.fold.graph_objects import paused_gc
from refold.fold.incremental import LiveFold
from refold.fold.spec import FoldSpec
from refold.folding import extract_missing, needs_extraction
from refold.storage.delta_io import read_files
from refold.storage.erased_ids import is_pseudonym, pseudonyms
from refold.storage.log_range import check_range, last_seq
from refold.storage.table_handles import shared_table
from refold.storage.schema import EVENTS_SCHEMA, table_to_events
from refold.storage.snapshots import SnapshotInfo, SnapshotStore

if TYPE_CHECKING:
    from refold.memory import Memory

__all__ = ["Projection", "project", "ListSource", "DeltaSource"]

#: Tails up to this many extractable events read their cached extractions with one filtered read.
SMALL_TAIL = 5000


class ListSource:
    """Log events held in memory (a prefix for ``as_of``, or a decrypted shred-mode log)."""

    def __init__(self, events: Sequence[Event], *, root: str | None = None):
        """``root``: the store's root (its erased-id key: see :func:`_touches`)."""
        self.events = list(events)
        self.root = root
        self._seqs = [e.seq for e in self.events]
        self._erased = [(e.seq, e.event_id) for e in self.events if e.content is None or e.is_tombstone]

    @property
    def last_seq(self) -> int:
        return self._seqs[-1] if self._seqs else -1

    def window(self, start: int) -> tuple[list[Event], set[str]]:
        """(events with seq >= start, ids of erased events with seq < start)."""
        i = bisect.bisect_left(self._seqs, start)
        return self.events[i:], {eid for seq, eid in self._erased if seq < start}


class DeltaSource:
    """The log's head read straight from Delta, only from a start position (delete mode: an erased
    event is a tombstone row, so the erased ids before the start come from one narrow read)."""

    def __init__(self, log, *, erased: bool = True):
        """``erased`` False: the caller uses only the events of a window, not the erased ids
        before it; then only the files that can hold the window are read (an erasure's
        tombstones lie all over the log, so the narrow read of them opens every file)."""
        self.log = log
        self.root = log.layout.root
        self.erased = erased
        self._cached: tuple[int, list[Event], list[tuple[int, str]]] | None = None

    def window(self, start: int) -> tuple[list[Event], set[str]]:
        if self._cached is None or start < self._cached[0]:
            start_read = max(start, 0)
            # only the data files that can hold such rows are read (Delta statistics on seq and kind),
            # through a view of this process's open handle of the log table (the appends since it
            # was loaded are read from their commit files: no commit-log replay per fold), file by
            # file on this thread (a tail is one or a few files: a dataset scan's set-up and
            # its expression filter cost ~1 ms more than the read)
            with shared_table(self.log.layout.events, self.log.storage_options).view() as dt:
                prune = [{"seq": (start_read, None)}] + ([{"kind": ("tombstone", "tombstone")}] if self.erased else [])
                rows = read_files(dt, EVENTS_SCHEMA, prune=prune).sort_by("seq")
                end = last_seq(dt)
            before = pc.sum(pc.less(rows["seq"], start_read)).as_py() or 0  # rows are sorted by seq
            tail_rows, tombs = rows.slice(before), rows.slice(0, before)
            # the pruning trusted the files' statistics: the tail must be every seq from start_read
            # to the end, once each, or the fold would silently lack events
            check_range(tail_rows["seq"], start_read, end, store=self.log.layout.root)
            self._cached = (start_read, list(table_to_events(tail_rows)),
                            list(zip(tombs["seq"].to_pylist(), tombs["event_id"].to_pylist())))
        first, events, tombs = self._cached
        i = bisect.bisect_left([e.seq for e in events], start)
        erased = {eid for seq, eid in tombs if seq < start}
        erased.update(e.event_id for e in events[:i] if e.is_tombstone or e.content is None)
        return events[i:], erased


@dataclass
class Projection:
    """What :func:`project` did."""

    live: LiveFold
    extraction_calls: int
    rejected: int
    applied: int
    resumed_from: int  # seq of the state resumed from (-1: the beginning of the log)
    snapshots_written: tuple[int, ...] = ()
    #: ``read_only`` projections: the events from the first one with no cached extraction on,
    #: not applied (a read answers them through refold.read_overlay)
    rest: tuple[Event, ...] = ()
    #: seconds per phase (resume, extract, cache_read, merge, snapshot_write, rollups)
    timings: dict[str, float] = field(default_factory=dict)


#: pseudonyms a snapshot (path, contained digest) was found not to contain, in this process
_CLEAN: dict[tuple[str, str], frozenset[str]] = {}


def _touches(erased: set[str], contained: Callable[[], set[str]], root: str | None,
             cand: "LiveFold | SnapshotInfo | None" = None) -> bool:
    """Whether a state containing ``contained()`` holds any of the ``erased`` ids. A tombstone
    names its event by the id's pseudonym (refold.storage.erased_ids), so those are compared with
    the pseudonyms of the contained ids; without the store's key (``root`` None or no key file)
    a pseudonym counts as a hit: the state is not trusted.

    Hashing every contained id costs ~2.5 us each (0.75 s for a 300k-event fold), so the
    pseudonyms found absent are remembered per candidate (``cand``): a live fold only grows by
    events read after the check, which are never erased ones (the fold skips tombstones), and a
    snapshot never changes; a new erasure brings new pseudonyms, which are checked."""
    if not erased:
        return False
    ids = contained()
    if not erased.isdisjoint(ids):
        return True
    hashed = frozenset(e for e in erased if is_pseudonym(e))
    if not hashed:
        return False
    memo = (cand.path, cand.contained_sha256) if isinstance(cand, SnapshotInfo) else None
    clean = _CLEAN.get(memo, frozenset()) if memo else getattr(cand, "_erased_clean", frozenset())
    todo = hashed - clean
    if not todo:
        return False
    key = pseudonyms(root) if root else None
    if key is None or not todo.isdisjoint(map(key, ids)):
        return True
    if memo:
        _CLEAN[memo] = clean | hashed
    elif cand is not None:
        cand._erased_clean = clean | hashed  # type: ignore[union-attr]
    return False


def _valid(candidate_seq: int, link: str, contained: Callable[[], set[str]],
           events: list[Event], erased: set[str], root: str | None = None, cand=None) -> bool:
    """Whether the state at ``candidate_seq`` (``link``) still describes the log: ``events`` start
    at that seq, ``erased`` are the ids of erased events before it."""
    if not events or events[0].seq != candidate_seq or events[0].link != link:
        return False  # the log no longer has this position (rewritten, truncated, or another log)
    if events[0].content is None or events[0].is_tombstone:
        erased = erased | {events[0].event_id}
    return not _touches(erased, contained, root, cand)


def resume(spec: FoldSpec, source, *, live: LiveFold | None, store: SnapshotStore | None,
           at_most: int) -> tuple[LiveFold, list[Event]]:
    """The newest valid state at or before ``at_most`` and the events after it."""
    candidates: list[tuple[int, int, LiveFold | SnapshotInfo]] = []
    if live is not None and live.spec.hash == spec.hash and live.last_seq <= at_most:
        candidates.append((live.last_seq, 1, live))
    if store is not None and store.enabled:
        candidates += [(s.last_seq, 0, s) for s in store.newest(spec.hash, at_most=at_most)]
    candidates.sort(key=lambda c: (c[0], c[1]), reverse=True)
    root = getattr(source, "root", None)
    for seq, _, cand in candidates:
        if seq < 0:
            continue
        contained = (lambda: cand.contained) if isinstance(cand, LiveFold) else (lambda: store.contained_ids(cand))
        # the events after the candidate, whose first one names the candidate's link as its
        # prev_link (the chain, which verify checks): the row at seq itself, and the data file
        # holding it, need not be read (one file of the previous append, a third of a small fold)
        tail, erased = source.window(seq + 1)
        if tail and tail[0].prev_link:
            if tail[0].seq != seq + 1 or tail[0].prev_link != cand.link or _touches(erased, contained, root, cand):
                continue
        else:  # nothing after it (or no chain to check): the row at seq itself
            events, erased = source.window(seq)
            if not _valid(seq, cand.link, contained, events, erased, root, cand):
                continue
            tail = events[1:]
        if isinstance(cand, LiveFold):
            cand.started_from = seq
            return cand, tail
        try:
            return store.load(cand, spec), tail
        except Exception:  # noqa: BLE001 - a damaged snapshot is skipped, never trusted
            continue
    events, _ = source.window(0)
    return LiveFold.empty(spec), events


def snapshot_points(after: int, until: int, *, every: int, keep: int) -> set[int]:
    """Seqs in (after, until] that end a block of ``every`` events (the newest ``keep`` of them)."""
    if every <= 0 or keep <= 0 or until <= after:
        return set()
    last = (until + 1) // every * every - 1
    points = []
    seq = last
    while seq > after and len(points) < keep:
        points.append(seq)
        seq -= every
    return set(points)


def project(mem: "Memory", spec: FoldSpec, *, extractor: Extractor | None, full: bool = False,
            source=None, live: LiveFold | None = None, at_most: int | None = None,
            progress: bool = False, runner=None, snapshot_every: int = 0, keep: int = 4,
            batch_size: int = 16, read_only: bool = False) -> Projection:
    """Bring a fold of ``spec`` up to ``at_most`` (default: the end of ``source``).

    ``source``: a :class:`ListSource` or :class:`DeltaSource` (default: the log's head).
    ``extractor`` None means every needed extraction must already be cached (else ExtractionError),
    unless ``read_only``: then the fold stops before the first event with no cached extraction and
    the events from it on are returned as ``rest`` (nothing is extracted or written).
    """
    return _project(mem, spec, extractor=extractor, full=full, source=source, live=live,
                    at_most=at_most, progress=progress, runner=runner, snapshot_every=snapshot_every,
                    keep=keep, batch_size=batch_size, read_only=read_only)


def _project(mem, spec, *, extractor, full, source, live, at_most, progress, runner, snapshot_every, keep,
             batch_size, read_only=False) -> Projection:
    clock = _Clock()
    store = SnapshotStore(mem.layout, storage_options=mem.storage_options)
    if source is None:
        source = DeltaSource(mem.log_store) if mem.mode != "shred" else ListSource(mem.events(), root=mem.layout.root)
    if at_most is None:
        at_most = 1 << 62
    if full:
        current, tail = LiveFold.empty(spec), source.window(0)[0]
    else:
        current, tail = resume(spec, source, live=live, store=store, at_most=at_most)
    tail = [e for e in tail if e.seq <= at_most]
    resumed_from = current.last_seq
    clock.lap("resume")
    calls = rejected = 0
    rest: list[Event] = []
    wanted = [e.event_id for e in tail if needs_extraction(e)]
    extractions: dict[str, Extraction] = {}
    known = None
    cache = mem.cache  # one object for the fold: its put() knows what its get() found absent
    if wanted and resumed_from >= 0 and len(wanted) <= SMALL_TAIL:
        # a short tail: one filtered read gives both what is cached and the cached rows themselves
        extractions = cache.get(spec.hash, wanted)
        known = set(extractions)
    if extractor is not None and tail:
        calls, rejected = extract_missing(tail, spec=spec, extractor=extractor, cache=cache,
                                          batch_size=batch_size, progress=progress, runner=runner,
                                          collect=extractions, cached=known)
    if extractor is None and wanted:
        missing = [i for i in wanted if i not in extractions] if known is not None else \
            cache.missing(spec.hash, wanted)
        if missing and read_only:
            absent = set(missing)
            cut = next(i for i, e in enumerate(tail) if e.event_id in absent)
            tail, rest = tail[:cut], tail[cut:]
            wanted = [e.event_id for e in tail if needs_extraction(e)]
        elif missing:
            raise ExtractionError(
                f"{len(missing)} event(s) have no {spec.extractor} extraction yet; run `refold fold "
                f"{mem.root} --extractor {spec.extractor}` first"
            )
    clock.lap("extract")
    # a long tail builds many objects: pause the cyclic collector (for a short one, pausing made
    # no consistent difference: measured in alternating rounds)
    with paused_gc() if len(tail) >= 1000 else contextlib.nullcontext():
        cached = [i for i in wanted if i not in extractions]  # the rest were just extracted
        if cached:
            extractions.update(cache.get(spec.hash, None if resumed_from < 0 else cached))
        clock.lap("cache_read")
        points = snapshot_points(current.last_seq, tail[-1].seq, every=snapshot_every, keep=keep) if tail else set()
        written = []
        for event in tail:
            current.apply(event, extractions.get(event.event_id))
            if event.seq in points:
                clock.lap("merge")
                if store.write(current) is not None:
                    written.append(event.seq)
                clock.lap("snapshot_write")
        clock.lap("merge")
        current.refresh()
    clock.lap("rollups")
    if written:
        store.prune(spec.hash, keep=keep)
    return Projection(live=current, extraction_calls=calls, rejected=rejected, applied=len(tail),
                      resumed_from=resumed_from, snapshots_written=tuple(written), timings=clock.laps,
                      rest=tuple(rest))


class _Clock:
    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = self.laps.get(name, 0.0) + now - self._last
        self._last = now
