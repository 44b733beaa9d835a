"""The Memory facade: one store, opened once, with the verbs a notebook or an agent needs."""

from __future__ import annotations

import contextlib
import functools
import json
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import networkx as nx
import polars as pl

from refold.fold.errors import NotFoundError, StoreError, ValidationError
from refold.fold.events import (
    DEFAULT_MAX_CONTENT_BYTES, Event, NewEvent, parse_jsonl, validate_event,
)
from refold.fold.extract import Extractor
from refold.fold.spec import FoldSpec
from refold.storage.epoch import read_epoch
from refold.storage.layout import Layout, Mode, read_settings, write_settings
from refold.storage.log import EventLog, Head
from refold.storage.signing import load_public_key
from refold.storage.verify import VerifyReport, verify
from refold.storage.store_options import with_defaults

if TYPE_CHECKING:
    from refold.folding import FoldReport, FoldState
    from refold.projection import Projection


class Memory:
    """A refold store: the event log and everything folded from it.

    Create with :func:`refold.open` or :func:`refold.init`.
    """

    def __init__(self, root: str | Path, *, storage_options: dict[str, str] | None = None,
                 max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES, group_commit: bool = True):
        """``group_commit`` (default on): concurrent :meth:`append` calls from threads of this
        process share Delta commits (one commit for the events that arrive while the previous one
        is in flight) — the lever for many single-event writers. A lone caller leads a group of
        one at once, so a single-threaded writer pays nothing for it; False appends each call on
        its own commit. See docs/log.md."""
        storage_options = with_defaults(str(root), storage_options)  # (conditional put, retries)
        self.layout = Layout(str(root), storage_options)
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
        self._state_at: dict = {}  # spec hash → (log version, (store, tag, overlay), (seq, link) it reached)
        self._state_past: dict = {}  # (spec hash, log seq) → (store, tag, overlay) of a read as of that seq
        self._seen_epoch = self._epoch_now()  # the erasure epoch this object's caches belong to

    def _epoch_now(self) -> str:
        """The store's erasure epoch file and, in shred mode, the fingerprint of the key store's
        erased markers: a key destroyed outside an erasure bumps no epoch file, yet the events it
        makes unreadable keep their seqs and links, so every cache must see it as an erasure."""
        epoch = read_epoch(self.layout)
        if self.mode != "shred":
            return epoch
        from refold.storage.keys import marks_fingerprint

        return f"{epoch}|{marks_fingerprint(self.erased_marks())}"

    def erasure_epoch(self) -> str:
        """The store's erasure epoch (:mod:`refold.storage.epoch`; in shred mode with the erased
        markers, see :meth:`_epoch_now`), read now; when it differs from the one this object
        last saw, every state this object holds in memory (folded and as-of states, the live
        fold, search views) is dropped first, because an erasure — here or in another process,
        or a key destroyed outside one — rewrote the past they were built from. Every read calls
        it before reading data; a cache keyed by the returned value never serves a state from
        before an erasure."""
        now = self._epoch_now()
        if now != self._seen_epoch:
            from refold.search import forget_views
            from refold.state_rollups import forget_hints

            with self._fold_lock:
                self._states = {}
                self._live = {}
                self._state_stores = {}
                self._state_at = {}
                self._state_past = {}
                self._spec_at = None
                forget_views(self)
                forget_hints()  # (they name the read roll-ups' input subjects)
                self._seen_epoch = now
        return now

    @property
    def root(self) -> str:
        return self.layout.root

    @property
    def mode(self) -> Mode:
        return self.settings.get("mode", "delete")

    def _protector(self):
        if self.mode == "shred":
            from refold.storage.crypto import shred_protector

            return shred_protector(self.layout, keystore=self.key_store)
        from refold.storage.log import _plain

        return _plain

    @functools.cached_property
    def key_store(self):
        """The shred-mode :class:`~refold.storage.keys.KeyStore` this store was created with
        (key files, or AWS KMS: ``store.json``'s ``keys``), one per Memory so a KMS adapter's
        cache of unwrapped keys serves every read of this object."""
        from refold.storage.key_stores import open_keystore

        return open_keystore(self.layout, self.settings)

    def erased_marks(self) -> frozenset[str]:
        """The erased markers of a shred-mode store's key store (one listing,
        :meth:`~refold.storage.keys.KeyStore.erased_owners`); empty in delete mode. An event of a
        marked owner is erased for every read and fold, whatever keys remain."""
        return self.key_store.erased_owners() if self.mode == "shred" else frozenset()

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
        if isinstance(lines, Path):  # bytes: parse_jsonl names the line of a byte that is not UTF-8
            lines = lines.read_bytes().splitlines()
        elif isinstance(lines, str):
            lines = lines.splitlines()
        batch = parse_jsonl(lines, max_content_bytes=self.max_content_bytes, ingestion_run=ingestion_run)
        return self._appender.append(batch)

    def log(self, *, since: int | None = None, until: int | None = None,
            as_of: int | str | datetime | None = None) -> pl.DataFrame:
        """The log as a polars DataFrame (``since`` inclusive, ``until`` exclusive, ``as_of`` record time)."""
        return self.log_store.read(since=since, until=until, as_of=as_of)

    def verify(self, *, against: Head | str | Path | None = None, signed_heads: bool = False,
               public_key: str | Path | None = None) -> VerifyReport:
        """Recompute the chain; ``against`` is a head (or a JSON file of one) kept elsewhere;
        ``signed_heads``: the log must end at a head signed with the store's key, or with the
        Ed25519 public key in the PEM file ``public_key`` (see docs/verify.md)."""
        if isinstance(against, (str, Path)):
            try:
                against = Head.from_json(json.loads(Path(against).read_text()))
            except (OSError, ValueError, KeyError, RecursionError) as exc:
                raise ValidationError(
                    f"cannot read a chain head from {against}: {exc}; save one with `refold head STORE --json`"
                ) from exc
        key = load_public_key(public_key) if public_key is not None else None
        return verify(self.log_store, against=against, signed_heads=signed_heads, public_key=key)

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
        return self._readable(self.log_store.events(as_of=as_of, until=until))

    def events_by_id(self, event_ids: Iterable[str], *, seqs: Iterable[int] | None = None) -> dict[str, Event]:
        """The stored events among ``event_ids``, by id, in the readable form of :meth:`events`
        (one filtered read of the log: what ``why`` needs of a fact's sources). ``seqs``: their
        log positions, when known (a fact's ``source_seqs``): then only files holding them are read."""
        ids = sorted(set(event_ids))
        if not ids:
            return {}
        return {e.event_id: e for e in self._readable(self.log_store.events_by_id(None, ids, seqs=seqs))}

    def _readable(self, events: list[Event], marks: frozenset[str] | None = None) -> list[Event]:
        """``events`` in readable form (shred mode: decrypted; erased: an event whose key is gone
        or whose owner has an erased marker among ``marks``, default: listed now)."""
        if self.mode != "shred":
            return events
        from refold.storage.crypto import marked_events, open_event

        keys = self.key_store
        marks = self.erased_marks() if marks is None else marks
        gone = marked_events(pl.DataFrame({
            "event_id": [e.event_id for e in events], "subjects": [list(e.subjects or ()) for e in events],
            "tenant": [e.tenant for e in events], "cipher": [e.cipher for e in events],
        }, schema={"event_id": pl.Utf8, "subjects": pl.List(pl.Utf8), "tenant": pl.Utf8, "cipher": pl.Utf8}),
            marks) if marks else set()
        out = []
        for e in events:
            if e.cipher:
                opened = None if e.event_id in gone else open_event(e, keys)
                e = opened if opened is not None else e.with_(content=None, justification=None, fact=None)
            out.append(e)
        return out

    #: write a snapshot every this many log events (0: never automatically); see docs/snapshots.md
    snapshot_every: int = 1000
    #: keep this many snapshots per spec (the newest)
    snapshot_keep: int = 4

    #: how :meth:`fold` folds: ``"partitioned"`` (the default) writes the state tables
    #: (state/<spec-hash>/, see docs/fold.md), and reads answer from them; ``"graph"`` advances
    #: one in-process graph and writes snapshots (the reference fold, see docs/snapshots.md)
    fold_engine: Literal["graph", "partitioned"] = "partitioned"

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
        Shred mode: the fold first purges what the extraction cache, a stored index and graph
        snapshots keep of owners whose keys were destroyed outside an erasure
        (:func:`refold.erasing.sweep_destroyed`; docs/erasure.md).
        """
        from refold.extractors import get_extractor
        from refold.folding import FoldReport, record_spec

        ext = get_extractor(extractor, **options) if isinstance(extractor, str) else extractor
        if spec is None:
            spec = ext.default_spec() if hasattr(ext, "default_spec") else FoldSpec(extractor=ext.name)
        if spec.hash not in self._recorded_specs:
            record_spec(self, spec)
            self._recorded_specs.add(spec.hash)
        if self.mode == "shred":  # keys destroyed outside an erasure: their residue goes first
            from refold.erasing import sweep_destroyed

            sweep_destroyed(self)
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
        from refold.extractors import get_extractor
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

    def vacuum_state(self, *, retain_hours: int = 168) -> dict[str, int]:
        """Delete the files that the state tables (of every spec) stopped using more than
        ``retain_hours`` ago, as Delta's vacuum does; return spec hash → files deleted.

        Folds never delete old versions, so the tables grow with each fold's new row versions
        and compactions; a scheduled job runs this after its fold. Reads as of a log position
        whose state version lost files fold the log instead (docs/fold.md, "Reads as of a past
        position"); files a running fold is writing are not touched."""
        from refold.storage.state import StateStore, state_specs

        if isinstance(retain_hours, bool) or not isinstance(retain_hours, int) or retain_hours < 0:
            raise ValidationError(f"retain_hours is {retain_hours!r}; give a whole number of hours, 0 or more "
                                  "(168: a week)")
        out = {spec_hash: len(StateStore(self.layout, spec_hash, storage_options=self.storage_options)
                              .vacuum(retain_hours))
               for spec_hash in state_specs(self.layout)}
        self._state_stores, self._state_past = {}, {}  # (their open handles and kept tags predate it)
        return out

    def derived_stores(self, subjects: Iterable[str] = ()) -> list[Any]:
        """Derived stores beyond the cache and the index that erasure must purge: the snapshots
        and the state tables (``subjects``: the erasure's own, see :class:`~refold.state_fold.StatePurger`)."""
        from refold.state_fold import StatePurger
        from refold.storage.snapshots import SnapshotStore

        return [SnapshotStore(self.layout, storage_options=self.storage_options), StatePurger(self, subjects)]

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

        self.erasure_epoch()  # drops a live fold from before an erasure
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

    def _cached(self, cache: str, key):
        """The one place this process looks up folded state it kept (``cache`` names the dict:
        ``_states``, graphs of the graph engine; ``_state_at``, the state tables and their read
        overlay at a log version; ``_state_past``, the same as of a past log seq). The erasure
        epoch is checked first, so nothing kept from before an erasure (here or in another
        process) is served."""
        self.erasure_epoch()
        return getattr(self, cache).get(key)

    def _state_tables(self, spec: FoldSpec):
        """(store, tag) of ``spec``'s state tables at their tag, or None when this spec was never
        folded into state tables (or a full fold of it is under way). A read: nothing is folded."""
        found = self._state_read(spec)
        return None if found is None else found[:2]

    def _state_read(self, spec: FoldSpec):
        """(store, tag, overlay) a read of ``spec``'s state tables answers from: the tables at
        their tag and the :class:`~refold.state_overlay.StateOverlay` of the events after it
        (docs/fold.md, "Reads"); None when this spec was never folded into state tables, a full
        fold of it is under way, or the log no longer holds the tag's position (the graph engine's
        read answers then). Writes nothing, calls no model. A log version seen before, with no
        event pending, is answered from this process's memory (through :meth:`_cached`); a later
        one over the same tables advances that overlay by the events after it (an agent's read
        after its append merges only the appended events, not the whole tail).

        Shred mode: only while the key store lists the erased markers the tag honours (one
        listing per read, :meth:`erased_marks`), else None; the events after the tag are
        decrypted."""
        store = self.state_store(spec)
        version = self.log_store.version()
        marks = self.erased_marks()  # before the tables: a marker listed after is the next read's
        seen = self._cached("_state_at", spec.hash)
        if seen is not None and seen[0] == version:  # (a new marker changed the epoch: dropped)
            return seen[1]
        tag = store.tag()
        if tag is None or not _honours(tag, marks):
            return None
        from refold.state_overlay import log_after, state_overlay, tail_after

        tail = base = None
        if seen is not None and seen[1][1] == tag:
            # the same tables, the log moved (an append): the kept overlay is advanced by the
            # events after the position it reached, when the log still holds that position
            tail, base = log_after(self, *seen[2]), seen[1][2]
        if tail is None:
            tail, base = tail_after(self, tag), None
            if tail is None:
                return None
        if tail:
            end = (tail[-1].seq, tail[-1].link)  # the position the overlay reaches
        else:
            end = seen[2] if base is not None else (tag.log_seq, tag.log_link)
        found = (store, tag, state_overlay(self, spec, store, tag, self._readable(tail, marks), base=base))
        if not found[2].pending:  # else not kept: a fold (here or elsewhere) may cache their extractions
            self._state_at = {spec.hash: (version, found, end)}
        return found

    @property
    def cache(self):
        from refold.storage.cache import ExtractionCache

        return ExtractionCache(self.layout, storage_options=self.storage_options)

    def _fold_state(self, spec: FoldSpec, events: list[Event] | None, *, full: bool = False,
                    extractor: Extractor | None = None, epoch: str | None = None) -> "FoldState":
        """State of ``spec`` over ``events`` (a log prefix; None: the head, read incrementally).

        Resumes from this process's live fold or the newest valid snapshot at or before the
        prefix's end; the returned graph is a copy that later folds never touch. ``epoch``: the
        :meth:`erasure_epoch` read before ``events`` were (default: read now); it keys the cached state.
        """
        from refold.fold.graph_objects import paused_gc
        from refold.fold.snapshot_codec import stats_to_json
        from refold.folding import FoldState
        from refold.projection import DeltaSource, ListSource

        if epoch is None:
            epoch = self.erasure_epoch()
        # the epoch is part of the key: an erasure keeps seqs and links (tombstones) but not content
        if events is None:
            head = self.head()
            key, source = (spec.hash, head.seq, head.link, epoch), DeltaSource(self.log_store)
        else:
            key = (spec.hash, events[-1].seq if events else -1, events[-1].link if events else "", epoch)
            source = ListSource(events, root=self.layout.root)
        cached = self._cached("_states", key)
        if cached is not None:
            return cached
        with self.advanced_fold(spec, extractor=extractor, full=full, source=source, at_most=key[1],
                                read_only=extractor is None) as done:
            live, pending = done.live, 0
            with paused_gc():
                if done.rest:  # past the last cached extraction: the read's overlay (never kept)
                    from refold.read_overlay import overlay

                    graph, live, pending = overlay(live, done.rest, spec)
                else:
                    graph = live.detached_graph()
            stats = stats_to_json(live.builder.stats)
            stats.update(derived=live.derived_count, resumed_from=done.resumed_from, overlaid=len(done.rest))
            state = FoldState(spec=spec, graph=graph, last_seq=live.last_seq, stats=stats, pending=pending)
        if not pending:  # else not kept: a fold (here or in another process) adds the pending facts
            self._states = {key: state}
        return state

    def state(self, *, as_of: int | str | datetime | None = None, spec: FoldSpec | None = None) -> "FoldState":
        """Folded state of the log (as it stood at ``as_of``, record time) under ``spec``.

        A read: it writes nothing and calls no model. Resumes from the newest valid state at or
        before that position (see :meth:`fold`) and merges the cached extractions; past the first
        event with none, it merges what needs no model (``memory_written`` facts, retractions;
        under the rules spec, the rules extractor in memory) and counts the rest in
        ``FoldState.pending`` (docs/fold.md, "Reads"): :meth:`fold` extracts them.
        """
        epoch = self.erasure_epoch()  # before any read: see refold.storage.epoch
        spec = spec or self.current_spec()
        if as_of is None and self.mode != "shred":
            return self._fold_state(spec, None, epoch=epoch)
        return self._fold_state(spec, self.events(as_of=as_of), epoch=epoch)

    def pending(self, *, as_of: int | str | datetime | None = None) -> int:
        """How many events up to the head (or ``as_of``) await an extraction under the current
        spec: reads answer without their facts until :meth:`fold` extracts them."""
        tables = self._readable_tables(as_of)
        if tables is not None:
            return tables[2].pending  # the state tables' read overlay (docs/fold.md, "Reads")
        return self.state(as_of=as_of).pending

    def graph(self, *, as_of: int | str | datetime | None = None, subject: str | None = None, depth: int = 1,
              tenant: str | None = None, valid_at: str | datetime | None = None,
              principal: str | None = None) -> nx.MultiDiGraph:
        """The knowledge graph (networkx MultiDiGraph; edges keyed by fact id) at ``as_of``, as a
        view of what is asked: ``subject``'s neighbourhood to ``depth`` hops along out-edges,
        one ``tenant``, the facts valid at ``valid_at`` (all: the whole state). From the state
        tables when this spec was folded into them (only the buckets asked for are read). With
        ``principal``, as that principal may see it (:mod:`refold.fold.scoping`; read-only)."""
        from refold.folding import parse_time_or_none
        from refold.state_queries import graph_view, neighbourhood

        when = parse_time_or_none(valid_at)
        tables = self._readable_tables(as_of)
        if tables is not None:
            return graph_view(*tables, subject=subject, depth=depth, tenant=tenant, valid_at=when, principal=principal,
                              retraction_principals=self._retraction_principals)
        graph = self._scoped(self.state(as_of=as_of).graph, principal)
        if subject is None and tenant is None and when is None:
            return graph
        return neighbourhood(graph, subject=subject, depth=depth, tenant=tenant, valid_at=when)

    def _readable_tables(self, as_of):
        """The current spec's state tables when a read can answer from them: (store, tag,
        overlay), see :meth:`_state_read` (the head) and :meth:`_state_read_at` (``as_of``)."""
        if as_of is None:
            return self._state_read(self.current_spec())
        return self._state_read_at(self.current_spec(), as_of)

    def _state_read_at(self, spec: FoldSpec, as_of):
        """(store, tag, overlay) a read of the log as it stood at ``as_of`` answers from: time
        travel to the newest tagged state version at or before that position and the overlay of
        the events between the two (docs/fold.md, "Reads as of a past position"); None when no
        tagged version is that old (or an erasure removed the older ones), when the events
        recorded by then are not a prefix of the log, or the log no longer holds the tag's
        position: the graph engine's read answers then. Writes nothing, calls no model."""
        from refold.state_overlay import state_overlay, tail_after

        end = self.log_store.prefix_end(as_of)  # (what seqs a version holds outlives an erasure)
        if end is None or end < 0:
            return None
        marks = self.erased_marks()
        seen = self._cached("_state_past", (spec.hash, end))
        store = self.state_store(spec)
        if seen is not None and seen[1] in store.tags():  # (still whole: a vacuum elsewhere may have cut it)
            return seen
        tag = store.tag_at(end)
        if tag is None or not _honours(tag, marks):
            return None
        tail = tail_after(self, tag, until=end)
        if tail is None:
            return None
        found = (store, tag, state_overlay(self, spec, store, tag, self._readable(tail, marks)))
        if not found[2].pending:  # else not kept, as for the head (see _state_read)
            self._state_past = {(spec.hash, end): found}
        return found

    def _scoped(self, graph: nx.MultiDiGraph, principal: str | None) -> nx.MultiDiGraph:
        if principal is None:
            return graph
        from refold.fold.scoping import reader_view

        return reader_view(graph, principal, self._retraction_principals)

    def _retraction_principals(self) -> dict[str, tuple[str, ...]]:
        """Principals of every retraction event, by event id (what may close a fact)."""
        rows = self.log_store.rows_of_kinds(["retraction"], columns=["event_id", "principals"])
        if rows is None:
            return {}
        return {i: tuple(p or ()) for i, p in zip(rows["event_id"].to_pylist(), rows["principals"].to_pylist())}

    def facts(self, *, subject: str | None = None, relation: str | None = None,
              as_of: int | str | datetime | None = None, valid_at: str | datetime | None = None,
              tenant: str | None = None, current_only: bool = False, principal: str | None = None) -> pl.DataFrame:
        """Facts as a polars DataFrame: history included (``current`` column) unless ``current_only``.

        ``as_of`` is record time (the fold of the log as it stood then); ``valid_at`` is valid time.
        ``principal``: only facts whose every source event the principal may read, and a fact
        closed by something the principal may not see shows as open (see refold.fold.scoping).
        A read: writes nothing, calls no model; facts of events no fold has extracted yet are
        absent (see :meth:`state`, :meth:`pending`), ``memory_written`` facts and retractions not.
        """
        from refold.fold.queries import fact_rows, facts_frame
        from refold.folding import parse_time_or_none

        when = parse_time_or_none(valid_at)
        spec = self.current_spec()
        relation = spec.canonical_relation(relation) if relation else None
        tables = self._readable_tables(as_of)
        if tables is None:
            graph = self.graph(as_of=as_of, principal=principal)
        elif principal is None:
            from refold.state_queries import facts_from_state

            return facts_from_state(*tables, subject=subject, relation=relation, valid_at=when, tenant=tenant,
                                    current_only=current_only)
        else:  # (the subject's buckets and those that decide what the principal may see)
            from refold.state_queries import graph_view

            graph = graph_view(*tables, subject=subject, tenant=tenant, principal=principal,
                               retraction_principals=self._retraction_principals)
        rows = fact_rows(graph, subject=subject, relation=relation, valid_at=when, tenant=tenant,
                         current_only=current_only)
        return facts_frame(rows)

    def why(self, fact_id: str, *, as_of: int | str | datetime | None = None,
            principal: str | None = None) -> dict[str, Any]:
        """Why refold believes ``fact_id``: the fact, its derivation and its source events.

        With ``principal``, a fact the principal may not see is unknown (NotFoundError), and the
        answer names no fact or event the principal may not see (refold.fold.scoping)."""
        from refold.fold.queries import why

        tables = self._readable_tables(as_of)
        if tables is None:
            # (each level's source events are read by id: reading the whole log first cost 13 s at 1M events)
            return why(self.graph(as_of=as_of, principal=principal), fact_id, self.events_by_id)
        from refold.state_queries import lineage_view

        # the fact and its inputs only: every source event at once
        graph = lineage_view(*tables, fact_id, principal=principal, retraction_principals=self._retraction_principals)
        seqs = {i: s for _, _, d in graph.edges(data=True) for i, s in zip(d["sources"], d["source_seqs"])}
        found = self.events_by_id(seqs, seqs=seqs.values())
        return why(graph, fact_id, lambda ids: {i: found[i] for i in ids if i in found})

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

    def erase(self, subject_id, *, dry_run: bool = False, canaries: Iterable[str] = (),
              include: Iterable[str] = (), include_mentions: bool = False, orphan_grace_hours: int = 1,
              decremental: bool = True, notes: Iterable[str] = ()):
        """Erase a data subject (store mode: delete or shred) and return the receipt; with
        ``dry_run`` return the impact preview and write nothing. Safe to rerun after a crash.
        ``decremental``: patch the newest snapshot (see :mod:`refold.erasing.snapshot_patch`); ``notes``:
        lines the receipt carries.

        A list or tuple of subject ids erases them all in one batch
        (:func:`refold.erasing.erase_batch`) and returns a
        :class:`~refold.storage.erasure.batch.BatchResult` (``.receipts``, one per subject, and
        ``.summary``), or with ``dry_run`` a list of plans; ``include``/``include_mentions`` are
        single-subject options."""
        from refold import erasing

        if isinstance(subject_id, (list, tuple)):
            if include or include_mentions:
                raise ValidationError("include= and include_mentions= erase one subject's extra events; "
                                      "erase that subject alone with them")
            return erasing.erase_batch(self, subject_id, dry_run=dry_run, canaries=canaries,
                                       orphan_grace_hours=orphan_grace_hours, decremental=decremental,
                                       notes=tuple(notes))
        return erasing.erase(self, subject_id, dry_run=dry_run, canaries=canaries, include=include,
                             include_mentions=include_mentions, orphan_grace_hours=orphan_grace_hours,
                             decremental=decremental, notes=tuple(notes))

    def scan(self, needles: Iterable[str] = (), *, canaries: Iterable[str] = ()):
        """Residue scan of every file under the store for ``needles`` (names, as whole words)
        and ``canaries`` (substrings)."""
        from refold import erasing

        return erasing.scan(self, needles, canaries=canaries)

    def verify_receipt(self, receipt, *, needles: Iterable[str] = (), canaries: Iterable[str] = (),
                       refold: bool = True):
        """Re-check an erasure receipt (chain, tombstones, residue scan, state digest)."""
        from refold import erasing

        return erasing.verify_receipt(self, receipt, needles=needles, canaries=canaries, refold=refold)

    def __repr__(self) -> str:
        return f"Memory({self.root!r}, mode={self.mode!r})"

    # -- search (refold.search) -------------------------------------------------------------------

    def search(self, text: str, *, k: int = 5, tenant: str | None = None, principal: str | None = None,
               as_of: int | str | datetime | None = None, valid_at: str | datetime | None = None,
               kind: Literal["facts", "events"] = "facts", history: bool = False,
               embedder: Any = None, trace_id: str | None = None) -> pl.DataFrame:
        """The ``k`` facts (or events) most similar to ``text``, filtered before ranking.

        Current facts only unless ``valid_at`` or ``history``; ``as_of`` searches the index of
        the log as it stood then; ``tenant``/``principal`` scope what may be seen. See refold.search.
        ``trace_id``: also record the read in the log (a ``memory_read`` event; see refold.replay).
        """
        from refold.search import search

        if trace_id is not None:
            from refold.replay import traced_search

            return traced_search(self, text, trace_id=trace_id, k=k, tenant=tenant, principal=principal,
                                 as_of=as_of, valid_at=valid_at, kind=kind, history=history, embedder=embedder)
        return search(self, text, k=k, tenant=tenant, principal=principal, as_of=as_of,
                      valid_at=valid_at, kind=kind, history=history, embedder=embedder)

    def trace(self, trace_id: str, *, replay: bool = False, embedder: Any = None):
        """Everything trace ``trace_id`` wrote and read, in log order; ``replay`` asks each recorded
        read again of the log as it stood then and reports whether it returns the same ids
        (a :class:`refold.replay.TraceReport`)."""
        from refold.replay import trace

        return trace(self, trace_id, replay=replay, embedder=embedder)

    def index(self, *, embedder: Any = None, as_of: int | str | datetime | None = None,
              backend: Literal["flat", "hnsw"] | None = None):
        """Bring the vector index up to date (or build it as of ``as_of``); return a Retriever
        whose ``search``/``search_many`` answer many queries against that one state."""
        from refold.search import open_index

        return open_index(self, embedder=embedder, as_of=as_of, backend=backend)


def _exists(layout: Layout, storage_options: dict[str, str] | None) -> bool:
    """Whether ``layout`` holds a refold store: its settings file, or (object storage, a store
    made before its settings moved there) its log table."""
    from refold.storage.layout import SETTINGS

    files = layout.files()
    return files.exists(SETTINGS) or (not layout.is_local and bool(files.list("events/_delta_log")))


def init(root: str | Path, *, mode: Mode = "delete", storage_options: dict[str, str] | None = None,
         kms_key_id: str | None = None, kms_key_per_subject: bool = False, kms_endpoint: str | None = None,
         kms_region: str | None = None, kms_pending_window_days: int | None = None,
         group: bool = False) -> Memory:
    """Create a new store at ``root`` (erasure ``mode`` is fixed here) and open it.

    Raises :class:`StoreError` when ``root`` already holds a store (open it with :func:`open`).
    Shred mode keeps its keys in files under ``keys/``, or in AWS KMS with ``kms_key_id`` (the
    store's KMS key: ARN, id or alias) or ``kms_key_per_subject`` (a KMS key per data subject,
    deleted on erasure after ``kms_pending_window_days``); see docs/erasure.md, "Keys in a KMS".
    A local store is private to its owner (folders 0700, files 0600); ``group`` makes it
    group-shared instead (root folder 2770, setgid: its group may read and write everything in
    it). See :mod:`refold.storage.filemodes`.
    """
    from refold.storage.key_stores import key_settings

    storage_options = with_defaults(str(root), storage_options)
    layout = Layout(str(root), storage_options)
    if _exists(layout, storage_options):
        raise StoreError(f"{root} is already a refold store; open it with refold.open({str(root)!r})",
                         cli=f"{root} is already a refold store; use it as it is (e.g. `refold log {root}`)")
    keys = key_settings(mode, kms_key_id=kms_key_id, kms_key_per_subject=kms_key_per_subject,
                        kms_endpoint=kms_endpoint, kms_region=kms_region,
                        kms_pending_window_days=kms_pending_window_days)
    if layout.is_local:
        from refold.storage.filemodes import create_root

        create_root(layout.root.removeprefix("file://"), group=group)
    write_settings(layout, mode, keys=keys)
    EventLog.create(layout, storage_options=storage_options)
    return Memory(root, storage_options=storage_options)


def _honours(tag, marks: frozenset[str]) -> bool:
    """Whether state tables at ``tag`` honour exactly the erased markers ``marks`` (listed now):
    no owner was erased since their fold (markers are never removed)."""
    from refold.storage.keys import marks_fingerprint

    return tag.erased == marks_fingerprint(marks)


def open(root: str | Path, *, create: bool = False, mode: Mode = "delete",  # noqa: A001
         storage_options: dict[str, str] | None = None, group_commit: bool = True) -> Memory:
    """Open the existing store at ``root``.

    A missing store raises :class:`NotFoundError` (a mistyped path must not silently become an
    empty memory); create one with :func:`init`, or pass ``create=True`` to create it (with
    ``mode``) when absent. ``mode`` is used only when this call creates the store.
    """
    storage_options = with_defaults(str(root), storage_options)
    layout = Layout(str(root), storage_options)
    if not _exists(layout, storage_options):
        if not create:
            raise NotFoundError(
                f"no refold store at {root}; create one with refold.init({str(root)!r}) "
                "(or refold.open(path, create=True))",
                cli=f"no refold store at {root}; create one with `refold init {root}`")
        init(root, mode=mode, storage_options=storage_options)
    return Memory(root, storage_options=storage_options, group_commit=group_commit)
