"""The Memory facade: one store, opened once, with the verbs a notebook or an agent needs."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import networkx as nx
import polars as pl

from refold.fold.errors import StoreError, ValidationError
from refold.fold.events import (
    DEFAULT_MAX_CONTENT_BYTES, Event, NewEvent, parse_jsonl, validate_event,
)
from refold.fold.extract import Extractor
from refold.fold.spec import FoldSpec
from refold.storage.layout import Layout, Mode, read_settings, write_settings
from refold.storage.log import EventLog, Head
from refold.storage.verify import VerifyReport, verify

if TYPE_CHECKING:
    from refold.folding import FoldReport, FoldState
    from refold.projection import Projection


class Memory:
    """A refold store: the event log and everything folded from it.

    Create with :func:`refold.open` or :func:`refold.init`.
    """

    def __init__(self, root: str | Path, *, storage_options: dict[str, str] | None = None,
                 max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES, group_commit: bool = False):
        """``group_commit``: concurrent :meth:`append` calls from threads of this process share
        Delta commits (one commit for the events that arrive while the previous one is in
        flight) — the lever for many single-event writers; see docs/log.md."""
        self.layout = Layout(str(root))
        self.storage_options = storage_options
        self.max_content_bytes = max_content_bytes
        self.settings = read_settings(self.layout)
        self.log_store = EventLog(self.layout, storage_options=storage_options,
                                  protector=self._protector())
        if group_commit:
            from refold.storage.group import GroupCommit

            self._appender = GroupCommit(self.log_store)
        else:
            self._appender = self.log_store
        self._states: dict = {}
        self._live: dict = {}  # spec hash → LiveFold: this process's incremental fold (refold.projection)
        self._spec_at: tuple[int, FoldSpec] | None = None  # (log version, current spec) last seen
        self._fold_lock = threading.RLock()  # the live fold is advanced by one caller at a time
        self._recorded_specs: set[str] = set()  # specs known to be in the log (never erased)
        self._state_stores: dict = {}  # spec hash → StateStore (its open Delta table handles)
        self._state_at: dict = {}  # spec hash → (log version, StateTag) last brought up to date

    @property
    def root(self) -> str:
        return self.layout.root

    @property
    def mode(self) -> Mode:
        return self.settings.get("mode", "delete")

    def _protector(self):
        if self.mode == "shred":
            from refold.storage.crypto import shred_protector

            return shred_protector(self.layout)
        from refold.storage.log import _plain

        return _plain

    # -- the log ----------------------------------------------------------------------------------

    def append(self, events: NewEvent | Mapping[str, Any] | Iterable[NewEvent | Mapping[str, Any]],
               *, ingestion_run: str | None = None) -> list[int]:
        """Validate and append events (dicts in the JSONL input format, or :class:`NewEvent`).

        Returns the seq of each event. All or nothing: one invalid event rejects the batch.
        """
        if isinstance(events, (NewEvent, Mapping)):
            events = [events]
        batch: list[NewEvent] = []
        for number, item in enumerate(events, start=1):
            # hand-built NewEvent values are validated like JSONL input: same rules, same errors
            raw = item.as_input() if isinstance(item, NewEvent) else item
            batch.append(validate_event(raw, line=number, max_content_bytes=self.max_content_bytes,
                                        ingestion_run=ingestion_run))
        return self._appender.append(batch)

    def append_jsonl(self, lines: Iterable[str] | str | Path, *, ingestion_run: str | None = None) -> list[int]:
        """Append events from JSON Lines (an iterable of lines, a text, or a file path)."""
        if isinstance(lines, Path):
            lines = lines.read_text(encoding="utf-8").splitlines()
        elif isinstance(lines, str):
            lines = lines.splitlines()
        batch = parse_jsonl(lines, max_content_bytes=self.max_content_bytes, ingestion_run=ingestion_run)
        return self._appender.append(batch)

    def log(self, *, since: int | None = None, until: int | None = None,
            as_of: int | str | datetime | None = None) -> pl.DataFrame:
        """The log as a polars DataFrame (``since`` inclusive, ``until`` exclusive, ``as_of`` record time)."""
        return self.log_store.read(since=since, until=until, as_of=as_of)

    def verify(self, *, against: Head | str | Path | None = None) -> VerifyReport:
        """Recompute the chain; ``against`` is a head (or a JSON file of one) kept elsewhere."""
        if isinstance(against, (str, Path)):
            try:
                against = Head.from_json(json.loads(Path(against).read_text()))
            except (OSError, ValueError, KeyError) as exc:
                raise ValidationError(
                    f"cannot read a chain head from {against}: {exc}; save one with `refold head STORE --json`"
                ) from exc
        return verify(self.log_store, against=against)

    def head(self) -> Head:
        """The newest position of the log (seq -1 when empty)."""
        return self.log_store.head()

    # -- the fold -------------------------------------------------------------------------------

    def current_spec(self) -> FoldSpec:
        """The newest spec recorded in the log, or the default (rules) spec when none is."""
        from refold.folding import newest_spec, recorded_specs

        version = self.log_store.version()
        if self._spec_at is None or self._spec_at[0] != version:
            self._spec_at = (version, newest_spec(recorded_specs(self)))
        return self._spec_at[1]

    def events(self, *, as_of: int | str | datetime | None = None, until: int | None = None) -> list[Event]:
        """Stored events in log order, readable form: shred-mode content decrypted, and events
        whose key was destroyed returned with ``content=None`` (the fold treats them as erased)."""
        events = self.log_store.events(as_of=as_of, until=until)
        if self.mode != "shred":
            return events
        from refold.storage.crypto import open_event
        from refold.storage.keys import FileKeyStore

        keys = FileKeyStore(self.layout.keys)
        out = []
        for e in events:
            if e.cipher:
                opened = open_event(e, keys)
                e = opened if opened is not None else e.with_(content=None, justification=None, fact=None)
            out.append(e)
        return out

    #: write a snapshot every this many log events (0: never automatically); see docs/snapshots.md
    snapshot_every: int = 1000
    #: keep this many snapshots per spec (the newest)
    snapshot_keep: int = 4

    #: how :meth:`fold` folds: ``"partitioned"`` writes the state tables (state/<spec-hash>/,
    #: see docs/fold.md); ``"graph"`` advances one in-process graph and writes snapshots
    fold_engine: Literal["graph", "partitioned"] = "graph"

    def fold(self, *, extractor: str | Extractor = "rules", spec: FoldSpec | None = None,
             full: bool = False, progress: bool = False, runner=None, snapshot_every: int | None = None,
             index: bool | str = False, engine: Literal["graph", "partitioned"] | None = None,
             buckets: int | None = None, merger=None, **options: Any) -> FoldReport:
        """Bring derived state up to date with the log and return the counts.

        Records the spec in the log first. Resumes from the newest valid state (this process's
        previous fold, or a snapshot on disk) and extracts only the events after it that have no
        cached extraction; ``full`` ignores snapshots and re-merges everything from the cache
        (never re-extracting). After an erasure this same call is the erasure refold. Writes a
        snapshot every ``snapshot_every`` events (default :attr:`snapshot_every`; 0: none).
        ``index`` (True, or an embedder name such as ``"minilm"``) also brings the vector index up
        to date with the new state (embedding only new or changed texts). ``engine``
        (default :attr:`fold_engine`): ``"partitioned"`` folds bucket by bucket into the state
        tables (``full`` rewrites them, in ``buckets`` partitions, default 64; otherwise only
        what the new events touch); ``merger`` runs its merge stage elsewhere
        (``refold.jobs.ray_merge.ray_merger()``: Ray tasks; ``runner`` does the same for extraction).
        """
        from refold.fold.extractors import get_extractor
        from refold.folding import FoldReport, record_spec

        ext = get_extractor(extractor, **options) if isinstance(extractor, str) else extractor
        if spec is None:
            spec = ext.default_spec() if hasattr(ext, "default_spec") else FoldSpec(extractor=ext.name)
        if spec.hash not in self._recorded_specs:
            record_spec(self, spec)
            self._recorded_specs.add(spec.hash)
        if (engine or self.fold_engine) == "partitioned":
            from refold.state_fold import fold_state

            with self._fold_lock:
                report = fold_state(self, spec, extractor=ext, full=full, progress=progress, runner=runner,
                                    merger=merger, **({"buckets": buckets} if buckets else {}))
                self._state_at.pop(spec.hash, None)
            if index:
                self.index(embedder=None if index is True else index)
            return report
        every = self.snapshot_every if snapshot_every is None else snapshot_every
        with self.advanced_fold(spec, extractor=ext, full=full, progress=progress, runner=runner,
                                snapshot_every=every, keep=self.snapshot_keep) as done:
            live = done.live
            if index:
                self.index(embedder=None if index is True else index)
            return FoldReport(
                events_folded=live.last_seq + 1, extraction_calls=done.extraction_calls,
                facts=live.fact_count, derived_facts=live.derived_count,
                rejected_outputs=live.builder.stats.rejected, last_seq=live.last_seq, spec_hash=spec.hash,
                started_from=done.resumed_from,
            )

    def snapshot(self, *, spec: FoldSpec | None = None):
        """Snapshot the fold of ``spec`` (default: the current spec) at the head of the log now.

        The fold is brought up to date first (the rules spec extracts what is missing; a model
        spec needs :meth:`fold` first). Returns the :class:`~refold.storage.snapshots.SnapshotInfo`
        (the existing one when that position is already snapshotted; None for an empty log or a
        store that keeps no snapshots).
        """
        from refold.fold.extractors import get_extractor
        from refold.storage.snapshots import SnapshotStore

        spec = spec or self.current_spec()
        store = SnapshotStore(self.layout, storage_options=self.storage_options)
        with self.advanced_fold(spec, extractor=get_extractor("rules") if spec.extractor == "rules" else None
                                ) as done:
            info = store.write(done.live)
            if info is not None:
                store.prune(spec.hash, keep=max(self.snapshot_keep, 1))
                return info
            return next((s for s in store.list(spec.hash) if s.last_seq == done.live.last_seq), None)

    def derived_stores(self) -> list[Any]:
        """Derived stores beyond the cache and the index that erasure must purge: the snapshots
        and the state tables."""
        from refold.state_fold import StatePurger
        from refold.storage.snapshots import SnapshotStore

        return [SnapshotStore(self.layout, storage_options=self.storage_options), StatePurger(self)]

    @contextlib.contextmanager
    def advanced_fold(self, spec: FoldSpec, *, extractor: Extractor | None = None, **options: Any
                      ) -> Iterator["Projection"]:
        """This process's live fold of ``spec`` brought up to date, used under the fold lock.

        Projects from the live fold (or the newest valid snapshot; ``options`` go to
        :func:`refold.projection.project`: ``full``, ``source``, ``at_most``, ``progress``,
        ``runner``, ``snapshot_every``, ``keep``), keeps the result as the live fold, and holds
        the lock for the ``with`` block, in which ``done.live`` may be read but not kept.
        """
        from refold.projection import project

        with self._fold_lock:
            done = project(self, spec, extractor=extractor, live=self._live.get(spec.hash), **options)
            self._keep_live(done.live)
            yield done

    def forget_live(self) -> None:
        """Drop this process's folded state (an erasure patched the snapshot it came from)."""
        self._live = {}
        self._state_at = {}

    def _keep_live(self, live) -> None:
        old = self._live.get(live.spec.hash)
        if old is None or old is live or live.last_seq >= old.last_seq:
            self._live = {live.spec.hash: live}

    def state_store(self, spec: FoldSpec):
        """The state tables of ``spec`` (one object per spec per Memory: it keeps their Delta
        handles open, so a read does not replay their commit logs)."""
        from refold.storage.state import StateStore

        store = self._state_stores.get(spec.hash)
        if store is None:
            store = self._state_stores[spec.hash] = StateStore(self.layout, spec.hash,
                                                               storage_options=self.storage_options)
        return store

    def _cached(self, cache: dict, key):
        """The one place this process looks up folded state it kept (``_states``: graphs of
        the graph engine; ``_state_at``: state tables known to be up to date): a check that
        must drop such caches (e.g. after an erasure elsewhere) belongs here."""
        return cache.get(key)

    def _state_tables(self, spec: FoldSpec):
        """(store, tag) of ``spec``'s state tables brought up to date with the log, or None when
        this spec was never folded into state tables (or a full fold of it is under way). A log
        version seen before skips the check (looked up through :meth:`_cached`)."""
        store = self.state_store(spec)
        version = self.log_store.version()
        seen = self._cached(self._state_at, spec.hash)
        if seen is not None and seen[0] == version:
            return store, seen[1]
        if store.tag() is None:
            return None
        from refold.fold.extractors import get_extractor
        from refold.state_fold import fold_state

        with self._fold_lock:
            fold_state(self, spec, extractor=get_extractor("rules") if spec.extractor == "rules" else None)
            tag = store.tag()
            self._state_at = {spec.hash: (version, tag)}
        return store, tag

    @property
    def cache(self):
        from refold.storage.cache import ExtractionCache

        return ExtractionCache(self.layout, storage_options=self.storage_options)

    def _fold_state(self, spec: FoldSpec, events: list[Event] | None, *, full: bool = False,
                    extractor: Extractor | None = None) -> "FoldState":
        """State of ``spec`` over ``events`` (a log prefix; None: the head, read incrementally).

        Resumes from this process's live fold or the newest valid snapshot at or before the
        prefix's end; the returned graph is a copy that later folds never touch.
        """
        from refold.fold.graph_objects import paused_gc
        from refold.fold.snapshot_codec import stats_to_json
        from refold.folding import FoldState
        from refold.projection import DeltaSource, ListSource

        if events is None:
            head = self.head()
            key, source = (spec.hash, head.seq, head.link), DeltaSource(self.log_store)
        else:
            key = (spec.hash, events[-1].seq if events else -1, events[-1].link if events else "")
            source = ListSource(events)
        cached = self._cached(self._states, key)
        if cached is not None:
            return cached
        with self.advanced_fold(spec, extractor=extractor, full=full, source=source, at_most=key[1]) as done:
            live = done.live
            stats = stats_to_json(live.builder.stats)
            stats.update(derived=live.derived_count, resumed_from=done.resumed_from)
            with paused_gc():
                graph = live.detached_graph()
            state = FoldState(spec=spec, graph=graph, last_seq=live.last_seq, stats=stats)
        self._states = {key: state}
        return state

    def state(self, *, as_of: int | str | datetime | None = None, spec: FoldSpec | None = None) -> "FoldState":
        """Folded state of the log (as it stood at ``as_of``, record time) under ``spec``.

        Events with no cached extraction are extracted with the rules extractor when the spec is
        the rules spec; for model specs run :meth:`fold` first. Resumes from the newest valid
        state at or before that position (see :meth:`fold`); never writes snapshots.
        """
        from refold.fold.extractors import get_extractor

        spec = spec or self.current_spec()
        extractor = get_extractor("rules") if spec.extractor == "rules" else None
        if as_of is None and self.mode != "shred":
            return self._fold_state(spec, None, extractor=extractor)
        return self._fold_state(spec, self.events(as_of=as_of), extractor=extractor)

    def graph(self, *, as_of: int | str | datetime | None = None, subject: str | None = None, depth: int = 1,
              tenant: str | None = None, valid_at: str | datetime | None = None) -> nx.MultiDiGraph:
        """The knowledge graph (networkx MultiDiGraph; edges keyed by fact id) at ``as_of``, as a
        view of what is asked: ``subject``'s neighbourhood to ``depth`` hops along out-edges,
        one ``tenant``, the facts valid at ``valid_at`` (all: the whole state). From the state
        tables when this spec was folded into them (only the buckets asked for are read)."""
        from refold.folding import parse_time_or_none
        from refold.state_queries import graph_view, neighbourhood

        when = parse_time_or_none(valid_at)
        spec = self.current_spec()
        tables = self._state_tables(spec) if as_of is None and self.mode != "shred" else None
        if tables is not None:
            return graph_view(*tables, subject=subject, depth=depth, tenant=tenant, valid_at=when)
        graph = self.state(as_of=as_of).graph
        if subject is None and tenant is None and when is None:
            return graph
        return neighbourhood(graph, subject=subject, depth=depth, tenant=tenant, valid_at=when)

    def facts(self, *, subject: str | None = None, relation: str | None = None,
              as_of: int | str | datetime | None = None, valid_at: str | datetime | None = None,
              tenant: str | None = None, current_only: bool = False) -> pl.DataFrame:
        """Facts as a polars DataFrame: history included (``current`` column) unless ``current_only``.

        ``as_of`` is record time (the fold of the log as it stood then); ``valid_at`` is valid time.
        """
        from refold.fold.queries import fact_rows, facts_frame
        from refold.folding import parse_time_or_none

        when = parse_time_or_none(valid_at)
        spec = self.current_spec()
        relation = spec.canonical_relation(relation) if relation else None
        tables = self._state_tables(spec) if as_of is None and self.mode != "shred" else None
        if tables is not None:
            from refold.state_queries import facts_from_state

            return facts_from_state(*tables, subject=subject, relation=relation, valid_at=when, tenant=tenant,
                                    current_only=current_only)
        rows = fact_rows(self.state(as_of=as_of).graph, subject=subject, relation=relation,
                         valid_at=when, tenant=tenant, current_only=current_only)
        return facts_frame(rows)

    def why(self, fact_id: str, *, as_of: int | str | datetime | None = None) -> dict[str, Any]:
        """Why refold believes ``fact_id``: the fact, its derivation and its source events."""
        from refold.fold.queries import why

        by_id = {e.event_id: e for e in self.events()}
        tables = self._state_tables(self.current_spec()) if as_of is None and self.mode != "shred" else None
        if tables is not None:
            from refold.state_queries import lineage_view

            graph = lineage_view(*tables, fact_id)
        else:
            graph = self.state(as_of=as_of).graph
        return why(graph, fact_id, lambda ids: {i: by_id[i] for i in ids if i in by_id})

    def audit(self):
        """Re-derive every recorded model request from the log and the spec (input closure)."""
        from refold.closure import audit

        return audit(self)

    # -- erasure (refold.erasing) -----------------------------------------------------------------

    def register_subject(self, subject_id: str, name: str, *, aliases: Sequence[str] = (),
                         identifiers: Sequence[str] = ()):
        """Record a data subject's display name, aliases and identifiers (erasable)."""
        from refold import erasing

        return erasing.register_subject(self, subject_id, name, aliases=aliases, identifiers=identifiers)

    def subjects(self):
        """The subject registry's entries."""
        from refold import erasing

        return erasing.subjects(self)

    def find(self, subject_id: str):
        """Events tagged with the subject, and untagged events that mention its names."""
        from refold import erasing

        return erasing.find(self, subject_id)

    def erase(self, subject_id: str, *, dry_run: bool = False, canaries: Iterable[str] = (),
              include: Iterable[str] = (), include_mentions: bool = False, orphan_grace_hours: int = 1,
              decremental: bool = True):
        """Erase a data subject (store mode: delete or shred) and return the receipt; with
        ``dry_run`` return the impact preview and write nothing. Safe to rerun after a crash.
        ``decremental``: patch the newest snapshot (see :mod:`refold.erasure_refold`)."""
        from refold import erasing

        return erasing.erase(self, subject_id, dry_run=dry_run, canaries=canaries, include=include,
                             include_mentions=include_mentions, orphan_grace_hours=orphan_grace_hours,
                             decremental=decremental)

    def scan(self, needles: Iterable[str]):
        """Residue scan of every file under the store for ``needles``."""
        from refold import erasing

        return erasing.scan(self, needles)

    def verify_receipt(self, receipt, *, needles: Iterable[str] = (), refold: bool = True):
        """Re-check an erasure receipt (chain, tombstones, residue scan, state digest)."""
        from refold import erasing

        return erasing.verify_receipt(self, receipt, needles=needles, refold=refold)

    def __repr__(self) -> str:
        return f"Memory({self.root!r}, mode={self.mode!r})"

    # -- search (refold.search) -------------------------------------------------------------------

    def search(self, text: str, *, k: int = 5, tenant: str | None = None, principal: str | None = None,
               as_of: int | str | datetime | None = None, valid_at: str | datetime | None = None,
               kind: Literal["facts", "events"] = "facts", history: bool = False,
               embedder: Any = None) -> pl.DataFrame:
        """The ``k`` facts (or events) most similar to ``text``, filtered before ranking.

        Current facts only unless ``valid_at`` or ``history``; ``as_of`` searches the index of
        the log as it stood then; ``tenant``/``principal`` scope what may be seen. See refold.search.
        """
        from refold.search import search

        return search(self, text, k=k, tenant=tenant, principal=principal, as_of=as_of,
                      valid_at=valid_at, kind=kind, history=history, embedder=embedder)

    def index(self, *, embedder: Any = None, as_of: int | str | datetime | None = None,
              backend: Literal["flat", "hnsw"] | None = None):
        """Bring the vector index up to date (or build it as of ``as_of``); return a Retriever
        whose ``search``/``search_many`` answer many queries against that one state."""
        from refold.search import open_index

        return open_index(self, embedder=embedder, as_of=as_of, backend=backend)


def init(root: str | Path, *, mode: Mode = "delete", storage_options: dict[str, str] | None = None) -> Memory:
    """Create a new store at ``root`` (erasure ``mode`` is fixed here) and open it."""
    layout = Layout(str(root))
    if layout.is_local and Path(layout.settings).exists():
        raise StoreError(f"{root} is already a refold store; open it with refold.open({str(root)!r})")
    write_settings(layout, mode)
    EventLog.create(layout, storage_options=storage_options)
    return Memory(root, storage_options=storage_options)


def open(root: str | Path, *, create: bool = True, mode: Mode = "delete",
         storage_options: dict[str, str] | None = None, group_commit: bool = False) -> Memory:  # noqa: A001
    """Open the store at ``root``; create it (with ``mode``) when absent and ``create`` is true."""
    layout = Layout(str(root))
    if create and layout.is_local and not Path(layout.settings).exists():
        init(root, mode=mode, storage_options=storage_options)
    return Memory(root, storage_options=storage_options, group_commit=group_commit)
