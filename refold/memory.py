"""The Memory facade: one store, opened once, with the verbs a notebook or an agent needs."""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Iterable, Mapping, Sequence
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
        self._spec_at: tuple[int, FoldSpec] | None = None  # (log version, current spec) last seen
        self._fold_lock = threading.RLock()  # one fold of this process's at a time
        self._recorded_specs: set[str] = set()  # specs known to be in the log (never erased)
        self._state_stores: dict = {}  # spec hash → StateStore (its open Delta table handles)
        self._state_at: dict = {}  # spec hash → (log version, (store, tag, overlay), (seq, link) it reached, tag)
        self._state_past: dict = {}  # (spec hash, log seq) → ((store, tag, overlay), tag) of a read as of that seq
        self._legacy: int | None = None  # files of refold 0.1's snapshots/ this object's first fold removed
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
        last saw, every state this object holds in memory (kept reads of the state tables, their
        handles, search views) is dropped first, because an erasure — here or in another process,
        or a key destroyed outside one — rewrote the past they were built from. Every read calls
        it before reading data; a cache keyed by the returned value never serves a state from
        before an erasure."""
        now = self._epoch_now()
        if now != self._seen_epoch:
            from refold.search import forget_views
            from refold.state_rollups import forget_hints

            with self._fold_lock:
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

    #: the most log events a read overlays on the state tables in memory (the events after their
    #: tag, or, for a spec never folded, the whole log): past it a read asks for a fold instead of
    #: holding that much of the state in one process (docs/state.md, "Reads")
    read_overlay_limit: int = 50_000

    def fold(self, *, extractor: str | Extractor = "rules", spec: FoldSpec | None = None,
             full: bool = False, progress: bool = False, runner=None, index: bool | str = False,
             buckets: int | None = None, merger=None, **options: Any) -> FoldReport:
        """Bring the state tables up to date with the log and return the counts.

        Records the spec in the log first. Folds the events after the tables' tag bucket by
        bucket (only the buckets they touch), extracting only events with no cached extraction;
        ``full`` rewrites the tables from the cache (in ``buckets`` partitions, default 64; never
        re-extracting). Every fold ends with a tagged state version: that tag is the snapshot
        (docs/state.md). ``index`` (True, or an embedder name such as ``"minilm"``) also brings
        the vector index up to date with the new state (embedding only new or changed texts).
        ``runner`` runs extraction elsewhere and ``merger`` the merge stage
        (``refold.jobs.ray_merge.ray_merger()``: Ray tasks). Shred mode: the fold first purges
        what the extraction cache and a stored index keep of owners whose keys were destroyed
        outside an erasure (:func:`refold.erasing.sweep_destroyed`; docs/erasure.md).
        ``options`` go to the extractor.
        """
        from refold.extractors import get_extractor
        from refold.folding import record_spec
        from refold.state_fold import fold_state

        _refuse_removed(options, _REMOVED_FOLD_OPTIONS)
        ext = get_extractor(extractor, **options) if isinstance(extractor, str) else extractor
        if spec is None:
            spec = ext.default_spec() if hasattr(ext, "default_spec") else FoldSpec(extractor=ext.name)
        if spec.hash not in self._recorded_specs:
            record_spec(self, spec)
            self._recorded_specs.add(spec.hash)
        if self.mode == "shred":  # keys destroyed outside an erasure: their residue goes first
            from refold.erasing import sweep_destroyed

            sweep_destroyed(self)
        if self._legacy is None:  # refold 0.1's snapshot files: never read again, so gone
            from refold.storage.legacy import drop_legacy_snapshots

            self._legacy = drop_legacy_snapshots(self.layout)
        with self._fold_lock:
            report = fold_state(self, spec, extractor=ext, full=full, progress=progress, runner=runner,
                                merger=merger, **({"buckets": buckets} if buckets else {}))
            self._state_at.pop(spec.hash, None)
        if index:
            self.index(embedder=None if index is True else index)
        return report

    def snapshot(self, **_: Any):
        """Removed in refold 0.2: every :meth:`fold` leaves a tagged state version, the snapshot."""
        raise ValidationError("Memory.snapshot() was removed in refold 0.2: every mem.fold() tags a state "
                              "version, which is the snapshot; call mem.fold()")

    def vacuum_state(self, *, retain_hours: int = 168) -> dict[str, int]:
        """Delete the files that the state tables (of every spec) stopped using more than
        ``retain_hours`` ago, as Delta's vacuum does; return spec hash → files deleted.

        Folds never delete old versions, so the tables grow with each fold's new row versions
        and compactions; a scheduled job runs this after its fold. It also decides how far back
        ``as_of`` reads go: a read as of a log position older than every state version still
        whole is refused, naming the oldest readable position (docs/state.md); files a running
        fold is writing are not touched."""
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
        """Derived stores beyond the cache and the index that erasure must purge: the state
        tables (``subjects``: the erasure's own, see :class:`~refold.state_fold.StatePurger`),
        and refold 0.1's snapshot files where a store made before 0.2 still holds them."""
        from refold.state_fold import StatePurger
        from refold.storage.legacy import LegacySnapshots, has_legacy_snapshots

        legacy = [LegacySnapshots(self.layout)] if has_legacy_snapshots(self.layout) else []
        return [StatePurger(self, subjects), *legacy]

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
        """The one place this process looks up state-table reads it kept (``cache`` names the
        dict: ``_state_at``, the tables and their read overlay at a log version; ``_state_past``,
        the same as of a past log seq). The erasure epoch is checked first, so nothing kept from
        before an erasure (here or in another process) is served."""
        self.erasure_epoch()
        return getattr(self, cache).get(key)

    def _state_read(self, spec: FoldSpec):
        """(store, tag, overlay) a read of ``spec``'s state answers from: the tables at their tag
        and the :class:`~refold.state_overlay.StateOverlay` of the events after it (docs/state.md,
        "Reads"). No tag (never folded, or a full fold under way) or a tag whose position the
        log no longer holds: the overlay of the whole log on an empty state. Writes nothing,
        calls no model. A log version seen before, with no event pending, is answered from this
        process's memory (through :meth:`_cached`); a later one over the same tables advances
        that overlay by the events after it (an agent's read after its append merges only the
        appended events, not the whole tail).

        Shred mode: when the key store lists erased markers the tag does not honour (keys
        destroyed outside an erasure since the fold), the overlay takes those owners' events out
        itself (:func:`~refold.state_overlay.without_events`); the events after the tag are
        decrypted. Raises :class:`ValidationError` when the overlay would pass
        :attr:`read_overlay_limit` events."""
        from refold.state_overlay import empty_tag, log_after, state_overlay, tail_after

        store = self.state_store(spec)
        version = self.log_store.version()
        marks = self.erased_marks()  # before the tables: a marker listed after is the next read's
        seen = self._cached("_state_at", spec.hash)
        if seen is not None and seen[0] == version:  # (a new marker changed the epoch: dropped)
            return seen[1]
        tag = store.tag()
        tail = base = None
        if tag is not None and seen is not None and seen[3] == tag:
            # the same tables, the log moved (an append): the kept overlay is advanced by the
            # events after the position it reached, when the log still holds that position
            self._check_overlay(self.head().seq - tag.log_seq, tag, store, as_of=None)
            tail, base = log_after(self, *seen[2]), seen[1][2]
        if tail is None:
            if tag is not None:
                self._check_overlay(self.head().seq - tag.log_seq, tag, store, as_of=None)
                tail = tail_after(self, tag)
            if tail is None:  # never folded, or the log no longer holds the tag's position
                tag = empty_tag(spec)
                self._check_overlay(self.head().seq + 1, None, store, as_of=None)
                tail = tail_after(self, tag)
            base = self._unhonoured(spec, store, tag, marks)
        if tail:
            end = (tail[-1].seq, tail[-1].link)  # the position the overlay reaches
        else:
            end = seen[2] if seen is not None and base is seen[1][2] else (tag.log_seq, tag.log_link)
        overlay = state_overlay(self, spec, store, tag, self._readable(tail, marks), base=base)
        found = (store, overlay.of_tag(tag), overlay)
        if not overlay.pending:  # else not kept: a fold (here or elsewhere) may cache their extractions
            self._state_at = {spec.hash: (version, found, end, tag)}
        return found

    def _unhonoured(self, spec: FoldSpec, store, tag, marks: frozenset[str]):
        """The overlay that takes out of the state at ``tag`` the events of owners among
        ``marks`` that its fold did not honour (None: it honours them all)."""
        if tag.log_seq < 0 or _honours(tag, marks):
            return None
        from refold.state_overlay import without_events
        from refold.storage.crypto import marked_in_log

        return without_events(spec, store, tag, marked_in_log(self.log_store, marks, until=tag.log_seq))

    def _check_overlay(self, events: int, tag, store, *, as_of) -> None:
        """Refuse a read whose overlay would hold more than :attr:`read_overlay_limit` events."""
        if events <= self.read_overlay_limit:
            return
        limit = f"{self.read_overlay_limit:,}"
        if as_of is None:
            where = "no fold yet" if tag is None else f"the state tables reflect log seq {tag.log_seq}"
            raise ValidationError(
                f"{events:,} events await a fold ({where}); reads overlay at most {limit} events in memory: run "
                "mem.fold() first (or raise Memory.read_overlay_limit)",
                cli=f"{events:,} events await a fold ({where}); run `refold fold {self.root}` first")
        oldest = self._oldest_readable(store)
        raise ValidationError(
            f"as_of={as_of!r} lies {events:,} events past the newest state version at or before it "
            f"(a read overlays at most {limit}); the oldest readable position is {oldest}: state versions are "
            "kept by mem.vacuum_state(retain_hours=...) and made by each fold, so read as_of a position a fold "
            "reached (or raise Memory.read_overlay_limit)",
            cli=f"as_of {as_of} lies {events:,} events past the newest state version at or before it; the oldest "
                f"readable position is {oldest} (state versions are kept by `refold vacuum-state --retain-hours`)")

    def _oldest_readable(self, store) -> str:
        """Which ``as_of`` positions a read answers: those within the overlay limit of the start of
        the log, and those from the oldest state version still whole on (if a fold is older)."""
        tags = store.tags()
        first = min((t.log_seq for t in tags), default=None)
        reach = self.read_overlay_limit - 1
        if first is None or first <= reach:
            if first is None:
                return f"seq 0 (no state version is kept: as_of reads reach seq {reach}, overlaid from the start)"
            return f"seq 0 (every seq from {first} on has a state version)"
        return f"seq {first} (and seqs 0-{reach}, overlaid from the start of the log)"

    @property
    def cache(self):
        from refold.storage.cache import ExtractionCache

        return ExtractionCache(self.layout, storage_options=self.storage_options)

    def state(self, *, as_of: int | str | datetime | None = None, spec: FoldSpec | None = None) -> "FoldState":
        """The whole folded state (as it stood at ``as_of``, record time) as a view: a
        :class:`~refold.folding.FoldState` whose ``graph`` is :meth:`graph` of the whole store,
        read from the state tables (its cost grows with the state: every fact and entity in one
        networkx graph; prefer :meth:`facts` or a narrowed :meth:`graph`). ``pending``: events
        awaiting an extraction (see :meth:`pending`). A read: writes nothing, calls no model."""
        from refold.folding import FoldState
        from refold.state_queries import graph_view

        spec = spec or self.current_spec()
        store, tag, overlay = self._tables_for(spec, as_of)
        graph = graph_view(store, tag, overlay, retraction_principals=self._retraction_principals)
        last = tag.log_seq + overlay.overlaid
        derived = sum(1 for *_, d in graph.edges(data=True) if d.get("derivation") != "extracted")
        return FoldState(spec=spec, graph=graph, last_seq=last, pending=overlay.pending,
                         stats={"facts": graph.number_of_edges() - derived, "derived": derived,
                                "overlaid": overlay.overlaid, "resumed_from": tag.log_seq})

    def pending(self, *, as_of: int | str | datetime | None = None) -> int:
        """How many events up to the head (or ``as_of``) await an extraction under the current
        spec: reads answer without their facts until :meth:`fold` extracts them."""
        return self._readable_tables(as_of)[2].pending  # the read overlay (docs/state.md, "Reads")

    def graph(self, *, as_of: int | str | datetime | None = None, subject: str | None = None, depth: int = 1,
              tenant: str | None = None, valid_at: str | datetime | None = None,
              principal: str | None = None) -> nx.MultiDiGraph:
        """The knowledge graph (networkx MultiDiGraph; edges keyed by fact id) at ``as_of``, as a
        view of what is asked, read from the state tables: ``subject``'s neighbourhood to ``depth``
        hops along out-edges (only the buckets it reaches are read), one ``tenant``, the facts
        valid at ``valid_at``; with none of ``subject``/``tenant``, the whole store (every fact in
        memory: its cost grows with the state). With ``principal``, as that principal may see it
        (:mod:`refold.fold.scoping`; read-only)."""
        from refold.folding import parse_time_or_none
        from refold.state_queries import graph_view

        when = parse_time_or_none(valid_at)
        return graph_view(*self._readable_tables(as_of), subject=subject, depth=depth, tenant=tenant, valid_at=when,
                          principal=principal, retraction_principals=self._retraction_principals)

    def _readable_tables(self, as_of):
        """(store, tag, overlay) a read of the current spec answers from: :meth:`_state_read`
        (the head) or :meth:`_state_read_at` (``as_of``). Never None: every read has this path."""
        return self._tables_for(self.current_spec(), as_of)

    def _tables_for(self, spec: FoldSpec, as_of):
        if as_of is None:
            return self._state_read(spec)
        return self._state_read_at(spec, as_of)

    def _state_read_at(self, spec: FoldSpec, as_of):
        """(store, tag, overlay) a read of the log as it stood at ``as_of`` answers from: time
        travel to the newest tagged state version at or before that position and the overlay of
        the events between the two (docs/state.md, "Reads as of a past position"); with no such
        version (none that old, or vacuumed), the overlay of the log's prefix on an empty state.
        Raises :class:`ValidationError` when that overlay would pass :attr:`read_overlay_limit`
        events (the message names the oldest readable position). Writes nothing, calls no model."""
        from refold.state_overlay import empty_tag, state_overlay, tail_after

        end = self.log_store.prefix_end(as_of)  # (what seqs a version holds outlives an erasure)
        if end is None or end < 0:
            end = -1
        marks = self.erased_marks()
        seen = self._cached("_state_past", (spec.hash, end))
        store = self.state_store(spec)
        if seen is not None and (seen[1].log_seq < 0 or seen[1] in store.tags()):  # (a vacuum may have cut it)
            return seen[0]
        tag = store.tag_at(end)
        tail = None
        if tag is not None:
            self._check_overlay(end - tag.log_seq, tag, store, as_of=as_of)
            tail = tail_after(self, tag, until=end)
        if tail is None:  # no state version that old, or the log no longer holds its position
            tag = empty_tag(spec)
            self._check_overlay(end + 1, tag, store, as_of=as_of)
            tail = tail_after(self, tag, until=end) if end >= 0 else []
            if tail is None:
                raise StoreError(f"the log's data file statistics hide events up to seq {end}; run "
                                 f"`refold verify {self.root}`")
        overlay = state_overlay(self, spec, store, tag, self._readable(tail, marks),
                                base=self._unhonoured(spec, store, tag, marks))
        found = (store, overlay.of_tag(tag), overlay)
        if not overlay.pending:  # else not kept, as for the head (see _state_read)
            self._state_past = {(spec.hash, end): (found, tag)}
        return found

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
        if principal is None:
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

        from refold.state_queries import lineage_view

        tables = self._readable_tables(as_of)

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
              notes: Iterable[str] = (), **removed: Any):
        """Erase a data subject (store mode: delete or shred) and return the receipt; with
        ``dry_run`` return the impact preview and write nothing. Safe to rerun after a crash: a
        rerun finishes what a killed erasure began. ``notes``: lines the receipt carries.

        A list or tuple of subject ids erases them all in one batch
        (:func:`refold.erasing.erase_batch`) and returns a
        :class:`~refold.storage.erasure.batch.BatchResult` (``.receipts``, one per subject, and
        ``.summary``), or with ``dry_run`` a list of plans; ``include``/``include_mentions`` are
        single-subject options."""
        from refold import erasing

        _refuse_removed(removed, _REMOVED_ERASE_OPTIONS)
        if removed:
            raise TypeError(f"erase() got unexpected keyword argument(s): {', '.join(sorted(removed))}")
        if isinstance(subject_id, (list, tuple)):
            if include or include_mentions:
                raise ValidationError("include= and include_mentions= erase one subject's extra events; "
                                      "erase that subject alone with them")
            return erasing.erase_batch(self, subject_id, dry_run=dry_run, canaries=canaries,
                                       orphan_grace_hours=orphan_grace_hours, notes=tuple(notes))
        return erasing.erase(self, subject_id, dry_run=dry_run, canaries=canaries, include=include,
                             include_mentions=include_mentions, orphan_grace_hours=orphan_grace_hours,
                             notes=tuple(notes))

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

    # -- Merkle proofs (RFC 9162; refold.proofs, docs/verify.md) ------------------------------------

    def checkpoint(self, size: int | None = None, *, signed: bool = True):
        """The newest published signed checkpoint (of ``size`` leaves when given), or with
        ``signed=False`` the unsigned one of the tree of ``size`` leaves (default: the whole log)."""
        from refold.storage.checkpoints import store_checkpoint

        return store_checkpoint(self.log_store, size, signed=signed)

    def inclusion_proof(self, seq: int, size: int | None = None):
        """Proof that event ``seq`` is leaf ``seq`` of the tree of ``size`` leaves (default: the
        whole log): a :class:`refold.proofs.InclusionProof`."""
        from refold.proofs import InclusionProof
        from refold.storage.merkle import tree_view

        return InclusionProof.of(tree_view(self.log_store, size, leaf=seq), seq)

    def consistency_proof(self, size1: int, size2: int | None = None):
        """Proof that the tree of ``size2`` leaves (default: the whole log) extends the tree of
        ``size1``: a :class:`refold.proofs.ConsistencyProof`."""
        from refold.proofs import ConsistencyProof
        from refold.storage.merkle import tree_view

        return ConsistencyProof.of(tree_view(self.log_store, size2, since=size1), size1)


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


#: options :meth:`Memory.fold` no longer takes (refold 0.2: one engine), with what replaces each
_REMOVED_FOLD_OPTIONS = {
    "engine": "there is one engine, the state tables; drop engine=",
    "snapshot_every": "every fold tags a state version (the snapshot); drop snapshot_every=",
    "snapshot_keep": "state versions are kept until mem.vacuum_state(retain_hours=...); drop snapshot_keep=",
}
#: options :meth:`Memory.erase` no longer takes, with what replaces each
_REMOVED_ERASE_OPTIONS = {
    "decremental": "erasure always refolds the touched buckets of the state tables; drop decremental=",
}


def _refuse_removed(options: Mapping[str, Any], removed: Mapping[str, str]) -> None:
    """Raise a one-line :class:`ValidationError` for the first removed option in ``options``."""
    for name, replacement in removed.items():
        if name in options:
            raise ValidationError(f"{name}= was removed in refold 0.2: {replacement}")


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
