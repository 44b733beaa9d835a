"""Search over folded memory: the vector index kept in step with the log, filtered before ranking.

    mem.search("where does Alice live", k=5, tenant="acme", principal="bob")
    mem.search("where did Alice live", as_of=12)          # as the log stood at version 12
    view = mem.index(embedder="hashing")                   # a Retriever: many queries, one fold

The index is derived state (see :mod:`refold.fold.embed`): the head index lives under
``index/<spec_hash>/<model>/`` and is brought up to date by difference whenever the log has moved
(only new or re-worded facts and events are embedded; a superseded fact only gets new metadata).
``as_of=T`` builds the index of the log as it stood at T — from the state tables' read as of T
(a tagged state version and the overlay of the events after it), not by filtering today's index — reusing today's vectors for unchanged texts, and keeps a few of those in
memory per (spec, model, log position).

Filters, applied to the candidate set *before* ranking:

* time: current facts only (``valid_to`` open in the state searched) unless ``valid_at`` is given
  (facts valid then) or ``history=True`` (every fact); ``as_of`` chooses the state;
* ``tenant``: only that tenant's facts and events;
* ``principal``: only items the principal may read — for a fact, *every* source event must have an
  empty principals list (the whole tenant may read it) or one that names the principal; and a
  fact closed by a fact (or retraction) the principal may not see is, for that principal, still
  open: it counts as current and its ``valid_to`` is not shown (refold.fold.scoping).

``tenant=None`` and ``principal=None`` mean "no filter" (a trusted caller such as a notebook);
agent tools always pass their context's tenant (a tool context without one is refused).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import numpy as np
import polars as pl

from refold.search.embedders import get_embedder
from refold.fold.embed import EVENT_SCHEMA, FACT_SCHEMA, Embedder, check_vectors, event_items
from refold.fold.errors import ValidationError
from refold.fold.spec import FoldSpec
from refold.storage.derived import PurgeResult
from refold.storage.index import KINDS, Candidates, Tuning, VectorIndex, events_through, generation, index_store
from refold.storage.layout import Layout
from refold.reads.tables import read_tables
from refold.store import Store, on_erasure


__all__ = ["IndexReport", "Retriever", "forget_views", "open_index", "purge_index", "search"]

Kind = Literal["facts", "events"]
EMBED_BATCH = 1024
FACT_RESULT = ["fact_id", "subject", "relation", "object", "score", "valid_from", "valid_to", "sources",
               "tenant", "derivation", "recorded_seq", "text"]
EVENT_RESULT = ["event_id", "kind", "source", "tenant", "seq", "recorded_at", "score", "text",
                "valid_from", "valid_to"]
_PAST_CACHE = 4
_CANDIDATE_CACHE = 64
_log = logging.getLogger(__name__)  # counts and seconds only: never a query or an indexed text


@dataclass(frozen=True)
class IndexReport:
    """Which index a :class:`Retriever` searches and what bringing it up to date cost."""

    spec_hash: str
    model_id: str
    backend: str
    last_seq: int
    facts: int
    events: int
    added: int = 0
    embedded: int = 0
    removed: int = 0
    as_of: str | None = None
    path: str | None = None

    def as_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _embed_batched(embedder: Embedder, texts: list[str]) -> np.ndarray:
    parts = [check_vectors(embedder.embed(texts[i:i + EMBED_BATCH]), count=len(texts[i:i + EMBED_BATCH]),
                           dim=embedder.dim, model_id=embedder.model_id)
             for i in range(0, len(texts), EMBED_BATCH)]
    return np.vstack(parts) if parts else np.zeros((0, embedder.dim), np.float32)


def _when(value: str | datetime | None) -> datetime | None:
    from refold.fold.timeutil import parse_time_or_none

    return parse_time_or_none(value)


def valid_to_for(principal: str | None, *, closers: bool = True) -> pl.Expr:
    """A fact's ``valid_to`` as ``principal`` sees it: open when the principal may not see what
    closed it (refold.fold.scoping). ``closers``: whether the metadata has the closer columns."""
    if principal is None or not closers:
        return pl.col("valid_to")
    hidden = pl.col("closer_restricted") & ~pl.col("closer_readers").list.contains(principal)
    return pl.when(hidden).then(None).otherwise(pl.col("valid_to"))


def filter_expr(kind: Kind, *, tenant: str | None, principal: str | None, valid_at: datetime | None,
                history: bool, closers: bool = False) -> pl.Expr | None:
    """The metadata predicate of a search (None when it keeps everything). ``closers``: the fact
    metadata has the closer columns (then a principal's "current" follows refold.fold.scoping)."""
    parts: list[pl.Expr] = []
    if tenant is not None:
        parts.append(pl.col("tenant") == tenant)
    if principal is not None:
        parts.append(~pl.col("restricted") | pl.col("readers").list.contains(principal))
    start = pl.col("valid_from") if kind == "facts" else pl.coalesce("valid_from", "recorded_at")
    end = valid_to_for(principal, closers=closers and kind == "facts")
    if valid_at is not None:
        parts.append((start <= valid_at) & (end.is_null() | (end > valid_at)))
    elif kind == "facts" and not history:
        parts.append(end.is_null())
    if not parts:
        return None
    expr = parts[0]
    for part in parts[1:]:
        expr = expr & part
    return expr


class Retriever:
    """A search view of memory at one log position (the head, or ``as_of``). A view returned to a
    caller never changes; reuse it for many queries (candidate sets are cached per filter)."""

    def __init__(self, *, embedder: Embedder, indexes: dict[str, VectorIndex], link: str, report: IndexReport):
        self.embedder = embedder
        self.indexes = indexes
        self.link = link
        self.report = report
        self.stored = False  # the index on disk is this one
        self.owned = False  # no caller holds it (see open_index)
        self._candidates: OrderedDict[tuple, Candidates | None] = OrderedDict()

    def moved_to(self, *, link: str, report: IndexReport) -> Retriever:
        """This view at a later log position whose events changed no indexed item (recorded reads):
        a new view over the same indexes, sharing the candidate sets the filters found."""
        moved = Retriever(embedder=self.embedder, indexes=self.indexes, link=link, report=report)
        moved._candidates = self._candidates
        moved.stored = self.stored  # same items as the one stored (if it was)
        return moved

    @property
    def last_seq(self) -> int:
        return self.report.last_seq

    @property
    def backend(self) -> str:
        return self.report.backend

    def _index(self, kind: str) -> VectorIndex:
        if kind not in KINDS:
            raise ValidationError(f"unknown search kind {kind!r}; use 'facts' or 'events'")
        return self.indexes[kind]

    def candidates(self, *, kind: Kind = "facts", tenant: str | None = None, principal: str | None = None,
                   valid_at: str | datetime | None = None, history: bool = False) -> Candidates | None:
        """The ids a search with these filters ranks among (None: every id)."""
        index = self._index(kind)
        when = _when(valid_at)
        key = (kind, tenant, principal, when, history)
        if key in self._candidates:
            self._candidates.move_to_end(key)
            return self._candidates[key]
        expr = filter_expr(kind, tenant=tenant, principal=principal, valid_at=when, history=history,
                           closers="closer_readers" in index.meta.columns)
        found = None if expr is None else Candidates(index.meta.filter(expr)["id"].to_numpy())
        self._candidates[key] = found
        if len(self._candidates) > _CANDIDATE_CACHE:
            self._candidates.popitem(last=False)
        return found

    def search(self, text: str, *, k: int = 5, kind: Kind = "facts", tenant: str | None = None,
               principal: str | None = None, valid_at: str | datetime | None = None,
               history: bool = False) -> pl.DataFrame:
        """The ``k`` items most similar to ``text`` among those the filters allow, best first."""
        return self.search_many([text], k=k, kind=kind, tenant=tenant, principal=principal,
                                valid_at=valid_at, history=history)[0]

    def search_many(self, texts: Sequence[str], *, k: int = 5, kind: Kind = "facts", tenant: str | None = None,
                    principal: str | None = None, valid_at: str | datetime | None = None,
                    history: bool = False) -> list[pl.DataFrame]:
        """:meth:`search` for several texts at once (one embedding batch)."""
        if isinstance(texts, str):
            raise ValidationError("search_many takes a list of texts; use search() for one")
        if not all(isinstance(t, str) and t.strip() for t in texts):
            raise ValidationError("search text must be a non-empty string")
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValidationError(f"k must be a positive integer, got {k!r}")
        index = self._index(kind)
        cands = self.candidates(kind=kind, tenant=tenant, principal=principal, valid_at=valid_at, history=history)
        queries = _embed_batched(self.embedder, list(texts))
        frames = [self._frame(index, kind, hits.ids, hits.scores, principal)
                  for hits in index.search(queries, k, candidates=cands)]
        if kind == "facts":
            _note_derived(frames)
        return frames

    @staticmethod
    def _frame(index: VectorIndex, kind: str, ids: np.ndarray, scores: np.ndarray,
               principal: str | None = None) -> pl.DataFrame:
        rows = index.rows(ids).with_columns(pl.Series("score", scores.astype(np.float64)))
        if kind == "facts":
            # a closing the principal may not see is not shown (refold.fold.scoping)
            rows = rows.with_columns(valid_to_for(principal, closers="closer_readers" in rows.columns)
                                     .alias("valid_to"))
            return rows.rename({"key": "fact_id"}).select(FACT_RESULT)
        return rows.rename({"key": "event_id"}).select(EVENT_RESULT)

    def __repr__(self) -> str:
        r = self.report
        return (f"Retriever(spec={r.spec_hash}, model={r.model_id!r}, backend={r.backend}, "
                f"last_seq={r.last_seq}, facts={r.facts}, events={r.events}, as_of={r.as_of!r})")


def _note_derived(frames: Sequence[pl.DataFrame]) -> None:
    """Tell a later ``why`` of a returned roll-up which subject's rows derive it
    (:func:`refold.reads.rollups.note_subjects`): the index holds no roll-up's inputs, and
    without the note ``why`` searches the inputs' join of the whole state (~5 s at 1M events)."""
    from refold.fold.entities import node_id
    from refold.reads.rollups import note_subjects

    found = {}
    for frame in frames:
        derived = frame.filter(pl.col("derivation") != "extracted")
        found.update({fid: node_id(tenant, subject) for fid, tenant, subject
                      in derived.select("fact_id", "tenant", "subject").iter_rows() if tenant is not None})
    if found:
        note_subjects(found)


class _Service:
    """Per-Memory caches: the head retriever per (spec, model), and a few past ones. Every entry
    remembers the index epoch it was built under; a purge changes the epoch and so drops them."""

    def __init__(self) -> None:
        self.head: dict[tuple[str, str], tuple[Any, Retriever]] = {}
        self.past: OrderedDict[tuple, Retriever] = OrderedDict()
        #: held by :func:`search` while it opens and searches a view it may bring up to date in place
        self.lock = threading.RLock()
        #: (key, :class:`~refold.search.rows.IndexBasis`, its fact items) of the head's state tag
        self.basis: tuple[tuple, Any, pl.DataFrame] | None = None
        #: shred mode: (markers' fingerprint, last seq read, ids of the events up to it those
        #: erased markers make unreadable), see :func:`_marked`
        self.marked: tuple[str, int, frozenset[str]] | None = None


_services: "weakref.WeakKeyDictionary[Store, _Service]" = weakref.WeakKeyDictionary()


def _service(store: Store) -> _Service:
    svc = _services.get(store)
    if svc is None:
        svc = _services[store] = _Service()
    return svc


def _empty(embedder: Embedder, backend: str, tuning: Tuning) -> dict[str, VectorIndex]:
    return {"facts": VectorIndex.empty(embedder.dim, FACT_SCHEMA, backend=backend, tuning=tuning),
            "events": VectorIndex.empty(embedder.dim, EVENT_SCHEMA, backend=backend, tuning=tuning)}


def _sync(indexes: dict[str, VectorIndex], items: dict[str, pl.DataFrame], embedder: Embedder,
          donors: dict[str, VectorIndex] | None = None) -> dict[str, int]:
    started = time.perf_counter()
    totals = {"added": 0, "embedded": 0, "removed": 0}
    for kind in KINDS:
        stats = indexes[kind].sync(items[kind], lambda texts: _embed_batched(embedder, texts),
                                   donor=(donors or {}).get(kind))
        for name in totals:
            totals[name] += getattr(stats, name)
    # INFO when the index changed; an up-to-date check (every search after an append) is DEBUG
    _log.log(logging.INFO if totals["added"] or totals["removed"] else logging.DEBUG,
             "index sync: %d vectors added (%d embedded), %d removed, %.3fs", totals["added"],
             totals["embedded"], totals["removed"], time.perf_counter() - started)
    return totals


def _table_fact_items(store: Store, tables, known: VectorIndex | None = None, svc: "_Service | None" = None
                      ) -> pl.DataFrame:
    """The fact items of the state tables' read ``tables`` ((store, tag, overlay), as
    :meth:`Memory._readable_tables` gives them): every fact row, compose roll-ups derived, in
    polars: no graph of the whole state is folded. ``known``: a facts index whose ids and text
    hashes serve for the same keys and texts. ``svc`` (the head's search): the tag's basis and
    its items are kept there, so while the tag stays (appends, no fold) only the rows of the
    subjects the read overlay touches are derived again (:mod:`refold.search.rows`)."""
    from refold.fold.partition import one_of
    from refold.search.rows import index_basis, index_delta, index_facts

    state_tables, tag, overlay = tables
    principals = store.retraction_principals()
    meta = known.meta if known is not None else None
    if svc is None:
        return _fact_items(*index_facts(*tables), principals, meta)
    key = (state_tables.root, tag.facts_version, tag.entities_version, tag.log_seq, tag.log_link)
    if svc.basis is None or svc.basis[0] != key:
        svc.basis = None  # (the old one goes before the new one is read)
        basis = index_basis(state_tables, tag)
        svc.basis = (key, basis, _fact_items(basis.frame(), basis.names, principals, meta))
    _, basis, items = svc.basis
    if overlay is None:
        return items
    delta = index_delta(basis, tag, overlay)
    if delta.rows.height == 0 and not delta.dropped:
        return items
    kept = items.filter(~one_of("key", delta.dropped))
    rows = pl.concat([delta.rows, delta.context.select(delta.rows.columns).cast(delta.rows.schema)])
    fresh = _fact_items(rows, delta.names, principals, meta)
    fresh = fresh.filter(pl.col("key").is_in(delta.rows["fact_id"].implode()))
    return pl.concat([kept, fresh]) if fresh.height else kept


def _fact_items(rows: pl.DataFrame, names: dict[str, str], principals, known: pl.DataFrame | None) -> pl.DataFrame:
    from refold.fold.embed import fact_items_of_rows

    if rows.height == 0:
        return pl.DataFrame(schema=FACT_SCHEMA)
    return fact_items_of_rows(rows, names, principals, known=known)


def _head_items(store: Store, pinned: int | None, base: tuple[dict[str, VectorIndex], int, str] | None
                ) -> tuple[dict[str, pl.DataFrame], int]:
    """(the items the head index must hold, how many events await extraction).

    ``base``: (an index, the log position it reflects, that row's link), or None. From the
    state tables where reads answer from them (no graph of the whole state is folded): every
    fact row, compose roll-ups derived, in polars (ids and text hashes of unchanged facts taken
    from ``base``); and ``base``'s events index plus the events after its position, read from
    their files only: an event's text and principals never change, and an erasure purges the
    index of the events it erases."""
    from refold.reads.overlay import log_after

    marks = store.erased_marks()  # (shred mode) before the tables, as a read does
    tables = read_tables(store, None)
    svc = _service(store)
    facts = _table_fact_items(store, tables, base[0]["facts"] if base is not None else None, svc)
    head = store.head()
    tail = None
    if base is not None and base[1] >= 0 and set(EVENT_SCHEMA) <= set(base[0]["events"].meta.columns):
        tail = log_after(store, base[1], base[2], until=head.seq) if head.seq >= base[1] else None
    if tail is None:
        events = event_items(store.events(as_of=pinned))
    else:
        known = base[0]["events"].meta.select(list(EVENT_SCHEMA)).cast(EVENT_SCHEMA)
        if marks:  # keys destroyed since the base was built: their events leave it
            known = known.filter(~pl.col("key").is_in(sorted(_marked(store, svc, marks, base[1]))))
        events = pl.concat([known, event_items(store.readable(tail, marks))])
    return {"facts": facts, "events": events}, tables[2].pending


def _marked(store: Store, svc: _Service, marks: frozenset[str], until: int) -> frozenset[str]:
    """Ids of the events up to seq ``until`` that the erased markers ``marks`` make unreadable
    (shred mode), kept per marker set and extended as the log grows (an event of a marked owner
    stays unreadable: the set only grows)."""
    from refold.storage.keys.crypto import marked_in_log
    from refold.storage.keys.port import marks_fingerprint

    name = marks_fingerprint(marks)
    kept = svc.marked
    if kept is None or kept[0] != name or kept[1] > until:
        kept = (name, -1, frozenset())
    if kept[1] < until:
        kept = (name, until, kept[2] | marked_in_log(store.log_store, marks, since=kept[1] + 1, until=until))
    svc.marked = kept
    return kept[2]


def _epoch(store: Store, spec_hash: str, model_id: str, persist: bool, erasure: str) -> Any:
    """What a cached view must have been built under: the index's purge epoch and the store's
    erasure epoch (``erasure``, read before the view's data; see refold.storage.epoch; in shred
    mode it names the erased markers too, :meth:`Memory.erasure_epoch`)."""
    if persist:
        return index_store(store.layout).epoch(spec_hash, model_id), erasure
    return ((generation(store.layout.index), None) if store.layout.is_local else None), erasure


@on_erasure
def forget_views(store: Store) -> None:
    """Drop every search view ``mem`` holds in memory (its erasure epoch changed)."""
    _services.pop(store, None)


def open_index(store: Store, *, embedder: str | Embedder | None = None, as_of: int | str | datetime | None = None,
               backend: str | None = None, persist: bool = True, tuning: Tuning | None = None,
               spec: FoldSpec | None = None, save: bool = True, _owned: bool = False) -> Retriever:
    """A :class:`Retriever` over the log's head (brought up to date) or as it stood at ``as_of``.

    ``backend`` ("flat", exact, the default for a new index; or "hnsw") rebuilds the head index
    when it differs from the stored one. ``persist=False`` keeps everything in memory (the
    default for stores on object storage: the index is kept on local disk only). ``spec`` (with
    ``as_of`` only): fold the past under this spec instead of the current one (decision replay
    answers a read under the spec it was answered with). ``save=False`` (a read: :func:`search`)
    loads the stored index but never writes it. An index over a state with events awaiting
    extraction (``FoldState.pending``) is neither stored nor kept in this process: the next fold
    adds their facts (docs/fold.md, "Reads").

    ``_owned`` (:func:`search` only, holding the service's lock and letting go of the view before
    it releases it): a view this process keeps that is at least as new as the stored index is
    brought up to date from itself (no reload of the files), in place when no caller was given
    it. A view returned to any other caller never changes. Without a stored index
    (``persist=False``) a kept view's vectors serve too.
    """
    emb = get_embedder(embedder)
    tuning = tuning or Tuning()
    erasure = store.erasure_epoch()  # before any read of the log (refold.storage.epoch)
    if as_of is not None:
        return _open_past(store, emb, as_of, backend=backend, persist=persist, tuning=tuning, erasure=erasure,
                          spec=spec)
    svc = _service(store)
    with svc.lock:  # (a view a search brings up to date in place is never handed out meanwhile)
        return _open_head(store, svc, emb, erasure=erasure, backend=backend, persist=persist, tuning=tuning,
                          save=save, owned=_owned)


def _open_head(store: Store, svc: _Service, emb: Embedder, *, erasure: str, backend: str | None, persist: bool,
               tuning: Tuning, save: bool, owned: bool) -> Retriever:
    """:func:`open_index` of the log's head, under the service's lock (``owned``: ``_owned`` there)."""
    spec = store.current_spec()
    head = store.head()
    epoch = _epoch(store, spec.hash, emb.model_id, persist, erasure)
    cached_epoch, cached = svc.head.get((spec.hash, emb.model_id), (None, None))
    if cached is not None and save and persist and not cached.stored:
        cached = None  # a read's view, never stored: this call stores it
    if (cached is not None and cached_epoch == epoch and (cached.last_seq, cached.link) == (head.seq, head.link)
            and backend in (None, cached.backend)):
        cached.owned = cached.owned and owned  # (handed to a caller: never changed in place again)
        return cached
    if cached is not None and cached_epoch == epoch and backend in (None, cached.backend):
        moved = _moved_by_reads_only(store, cached, head)
        if moved is not None:
            moved.owned = cached.owned = cached.owned and owned  # (they share the indexes)
            svc.head[(spec.hash, emb.model_id)] = (epoch, moved)
            return moved
    state_tables = index_store(store.layout) if persist else None
    # a search's base: a view kept here that is as new as the stored index (no reload of its files)
    usable = cached if (cached is not None and cached_epoch == epoch and backend in (None, cached.backend)
                        and (owned or state_tables is None)) else None
    if usable is not None and state_tables is not None:
        manifest = state_tables.manifest(spec.hash, emb.model_id)
        if manifest is not None and manifest.get("last_seq", -1) > usable.last_seq:
            usable = None
    loaded = state_tables.load(spec.hash, emb.model_id, tuning=tuning) if state_tables and usable is None else None
    if loaded is not None and loaded[0]["dim"] != emb.dim:
        loaded = None
    want = backend or (loaded[0]["backend"] if loaded else usable.backend if usable is not None else "flat")
    pending, stored = 0, True  # stored: the index on disk is this one
    if loaded is not None and (loaded[0]["last_seq"], loaded[0]["link"]) == (head.seq, head.link) \
            and loaded[0]["backend"] == want and loaded[0].get("erasure_epoch", "") == erasure:
        indexes = loaded[1]
        totals = {"added": 0, "embedded": 0, "removed": 0}
    else:
        # pin the log at the head's table version so the state and the event texts agree
        pinned = head.table_version if head.seq >= 0 else None
        donors, indexes = None, None
        if loaded is not None:
            base, indexes = (loaded[1], *events_through(loaded[0])), loaded[1]
        elif usable is not None:
            base = (usable.indexes, usable.last_seq, usable.link)
            if owned and usable.owned:
                indexes = usable.indexes  # (no caller holds it: brought up to date in place)
                svc.head.pop((spec.hash, emb.model_id), None)  # (kept again once it is whole)
            else:
                donors = usable.indexes  # (a caller may hold it: its vectors are copied)
        else:
            base = None
        items, pending = _head_items(store, pinned, base)
        indexes = indexes if indexes is not None else _empty(emb, want, tuning)
        if any(ix.backend != want for ix in indexes.values()):
            indexes = {k: ix.rebuilt(want) for k, ix in indexes.items()}
        totals = _sync(indexes, items, emb, donors=donors)
        stored = False
        if state_tables is not None and save and not pending:
            state_tables.save(spec.hash, emb.model_id, indexes, last_seq=head.seq, link=head.link, erasure=erasure)
            stored = True
            epoch = _epoch(store, spec.hash, emb.model_id, persist, erasure)  # a first save writes the manifest
    report = IndexReport(spec_hash=spec.hash, model_id=emb.model_id, backend=want, last_seq=head.seq,
                         facts=len(indexes["facts"]), events=len(indexes["events"]), **totals,
                         path=state_tables.location(spec.hash, emb.model_id) if state_tables else None)
    retriever = Retriever(embedder=emb, indexes=indexes, link=head.link, report=report)
    retriever.stored = stored
    retriever.owned = owned
    if not pending:  # the next read after a fold must see the extracted facts
        svc.head[(spec.hash, emb.model_id)] = (epoch, retriever)
    return retriever


#: kinds that change neither the folded state nor the index: recorded reads (refold.search.replay)
_INDEX_NEUTRAL = frozenset({"memory_read"})


def _moved_by_reads_only(store: Store, cached: Retriever, head) -> Retriever | None:
    """``cached`` moved to ``head`` when every event after it is a recorded read (else None).

    A traced search appends a ``memory_read`` event, so without this every traced search would
    re-sync the head index (O(state): ~0.1 s at 1k facts) for a log move that changes nothing in it.
    """
    if head.seq <= cached.last_seq:
        return None
    rows = store.log_store.arrow(columns=["kind", "prev_link", "link"], prune=[{"seq": (cached.last_seq + 1, None)}])
    if rows.num_rows == 0 or rows["prev_link"][0].as_py() != cached.link \
            or not set(rows["kind"].to_pylist()) <= _INDEX_NEUTRAL:
        return None
    report = dataclasses.replace(cached.report, last_seq=rows["seq"][-1].as_py(), added=0, embedded=0, removed=0)
    return cached.moved_to(link=rows["link"][-1].as_py(), report=report)


def _open_past(store: Store, emb: Embedder, as_of, *, backend, persist: bool, tuning: Tuning,
               erasure: str, spec: FoldSpec | None = None) -> Retriever:
    svc = _service(store)
    spec = spec or store.current_spec()
    events = store.events(as_of=as_of)
    seq, link = (events[-1].seq, events[-1].link) if events else (-1, "")
    head = open_index(store, embedder=emb, backend=backend, persist=persist, tuning=tuning)
    if (head.last_seq, head.link) == (seq, link) and head.report.spec_hash == spec.hash:
        return head
    key = (spec.hash, emb.model_id, seq, link, head.backend, _epoch(store, spec.hash, emb.model_id, persist, erasure))
    if key in svc.past:
        svc.past.move_to_end(key)
        return svc.past[key]
    tables = read_tables(store, as_of, spec)  # time travel on the state tables (docs/state.md)
    items = {"facts": _table_fact_items(store, tables), "events": event_items(events)}
    indexes = _empty(emb, head.backend, tuning)
    totals = _sync(indexes, items, emb, donors=head.indexes)  # today's vectors, then's metadata
    report = IndexReport(spec_hash=spec.hash, model_id=emb.model_id, backend=head.backend, last_seq=seq,
                         facts=len(indexes["facts"]), events=len(indexes["events"]), **totals, as_of=str(as_of))
    retriever = Retriever(embedder=emb, indexes=indexes, link=link, report=report)
    svc.past[key] = retriever
    if len(svc.past) > _PAST_CACHE:
        svc.past.popitem(last=False)
    return retriever


def search(store: Store, text: str, *, k: int = 5, tenant: str | None = None, principal: str | None = None,
           as_of: int | str | datetime | None = None, valid_at: str | datetime | None = None,
           kind: Kind = "facts", history: bool = False, embedder: str | Embedder | None = None) -> pl.DataFrame:
    """Search memory; see the module docstring for the filters. Returns a polars DataFrame."""
    if as_of is not None:
        retriever = open_index(store, embedder=embedder, as_of=as_of, save=False)  # a read writes nothing
        return retriever.search(text, k=k, kind=kind, tenant=tenant, principal=principal,
                                valid_at=valid_at, history=history)
    with _service(store).lock:  # (the view is this call's alone until it returns: see open_index)
        retriever = open_index(store, embedder=embedder, save=False, _owned=True)
        return retriever.search(text, k=k, kind=kind, tenant=tenant, principal=principal,
                                valid_at=valid_at, history=history)


def purge_index(target: "Store | Layout", event_ids: Sequence[str]) -> PurgeResult:
    """Remove every vector derived from ``event_ids`` from the stored index and from the in-memory
    caches of every open Memory on the same store. Erasure calls this; the next search re-syncs."""
    layout = target if isinstance(target, Layout) else target.layout
    for store in list(_services.keys()):
        if store.layout.root == layout.root:
            _services.pop(store, None)
    return index_store(layout).purge(event_ids)
