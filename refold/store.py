"""The Store: what every helper needs of one refold store, below the :class:`~refold.memory.Memory` facade.

A Store holds the store's layout and settings, its event log, its key store and erased markers,
its erasure epoch, its recorded fold specs, the extraction cache, the state tables' open handles
and the reads this process keeps. Helpers (reads, the fold engine, search, erasure) take a Store
or a narrower part of it, never the facade; the facade composes a Store with the verbs.

Kept reads are keyed by the erasure epoch: :meth:`Store.erasure_epoch` drops them all when an
erasure (here, in another process, or a key destroyed outside one) changed the past they were
built from, so no kept read outlives an erasure.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import polars as pl

from refold.fold.errors import StoreError
from refold.fold.events import DEFAULT_MAX_CONTENT_BYTES, Event, NewEvent
from refold.fold.spec import FoldSpec
from refold.storage.cache.table import ExtractionCache
from refold.storage.epoch import read_epoch
from refold.storage.files.modes import create_root
from refold.storage.files.options import with_defaults
from refold.storage.keys.crypto import marked_events, open_event, shred_protector
from refold.storage.keys.port import KeyStore, marks_fingerprint
from refold.storage.keys.select import key_settings, open_keystore
from refold.storage.layout import SETTINGS, Layout, Mode, read_settings, write_settings
from refold.storage.log.eventlog import EventLog, Head, plain_protector
from refold.storage.log.group import GroupCommit
from refold.storage.state import StateStore

#: where a ``spec_changed`` event says it comes from
SPEC_SOURCE = "refold:spec"

#: hooks run whenever a Store sees its erasure epoch change (module-level caches register here)
_ON_ERASURE: list[Callable[[Store], None]] = []


def on_erasure(hook: Callable[[Store], None]) -> Callable[[Store], None]:
    """Register ``hook(store)`` to run when a Store sees a new erasure epoch (a module that keeps
    data derived from a store's state outside it drops that data there). Returns ``hook``."""
    _ON_ERASURE.append(hook)
    return hook


class Store:
    """One refold store, opened once per process object: its resources and its kept reads.

    Not thread-safe for writes beyond what its parts promise (the log's group commit, the fold
    lock): a fold, a purge or an erasure holds :attr:`fold_lock` while it changes the tables."""

    #: the most log events a read overlays on the state tables in memory (the events after their
    #: tag, or, for a spec never folded, the whole log): past it a read asks for a fold instead of
    #: holding that much of the state in one process (docs/state.md, "Reads")
    read_overlay_limit: int = 50_000

    def __init__(self, root: str | Path, *, storage_options: dict[str, str] | None = None,
                 max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES, group_commit: bool = True):
        storage_options = with_defaults(str(root), storage_options)  # (conditional put, retries)
        self.layout = Layout(str(root), storage_options)
        self.storage_options = storage_options
        self.max_content_bytes = max_content_bytes
        self.settings = read_settings(self.layout)
        protector = shred_protector(self.layout, keystore=self.key_store) if self.mode == "shred" \
            else plain_protector
        self.log_store = EventLog(self.layout, storage_options=storage_options, protector=protector)
        #: what appends go through: a group commit shared by this process's threads, or the log
        self.appender = GroupCommit(self.log_store) if group_commit else self.log_store
        #: one fold, purge or erasure refold of this process at a time
        self.fold_lock = threading.RLock()
        self._spec_at: tuple[int, FoldSpec] | None = None  # (log version, current spec) last seen
        self._recorded: set[str] = set()  # spec hashes known to be in the log (never erased)
        self._state_stores: dict[str, StateStore] = {}
        self._kept: dict[str, dict] = {}  # name → reads kept under the epoch below
        self._seen_epoch = self._epoch_now()

    def __repr__(self) -> str:
        return f"Store({self.root!r}, mode={self.mode!r})"

    @property
    def root(self) -> str:
        return self.layout.root

    @property
    def mode(self) -> Mode:
        return self.settings.get("mode", "delete")

    @functools.cached_property
    def key_store(self) -> KeyStore:
        """The shred-mode key store this store was created with (key files, or AWS KMS:
        ``store.json``'s ``keys``), one per Store so a KMS adapter's cache of unwrapped keys
        serves every read."""
        return open_keystore(self.layout, self.settings)

    def erased_marks(self) -> frozenset[str]:
        """The key store's erased markers (one listing); empty in delete mode. An event of a
        marked owner is erased for every read and fold, whatever keys remain."""
        return self.key_store.erased_owners() if self.mode == "shred" else frozenset()

    # -- the erasure epoch and the reads kept under it ------------------------------------------

    def _epoch_now(self) -> str:
        # a key destroyed outside an erasure bumps no epoch file, yet the events it makes
        # unreadable keep their seqs and links: every kept read must see it as an erasure
        epoch = read_epoch(self.layout)
        return epoch if self.mode != "shred" else f"{epoch}|{marks_fingerprint(self.erased_marks())}"

    def erasure_epoch(self) -> str:
        """The store's erasure epoch (:mod:`refold.storage.epoch`; in shred mode with the erased
        markers), read now. When it differs from the one last seen, every read this Store keeps
        (:meth:`kept`), its open state-table handles and its current spec are dropped first, and
        the :func:`on_erasure` hooks run. Every read calls it before reading data."""
        now = self._epoch_now()
        if now != self._seen_epoch:
            with self.fold_lock:
                self._state_stores, self._kept, self._spec_at = {}, {}, None
                for hook in _ON_ERASURE:
                    hook(self)
                self._seen_epoch = now
        return now

    def kept(self, name: str) -> dict:
        """The dict of reads kept under ``name`` (each helper owns its name), checked against the
        erasure epoch first: nothing kept from before an erasure is ever served."""
        self.erasure_epoch()
        return self._kept.setdefault(name, {})

    def forget(self, *names: str) -> None:
        """Drop the reads kept under ``names`` (e.g. after a fold or a vacuum changed the tables)."""
        for name in names:
            self._kept.pop(name, None)

    def forget_tables(self) -> None:
        """Drop the open state-table handles (a vacuum deleted files they may name)."""
        self._state_stores = {}

    # -- the log, readable ------------------------------------------------------------------------

    def head(self) -> Head:
        return self.log_store.head()

    def readable(self, events: list[Event], marks: frozenset[str] | None = None) -> list[Event]:
        """``events`` in readable form: in shred mode decrypted, and an event whose key is gone
        or whose owner has an erased marker among ``marks`` (default: listed now) returned with
        ``content=None`` (the fold treats it as erased). Delete mode: ``events`` as they are."""
        if self.mode != "shred":
            return events
        marks = self.erased_marks() if marks is None else marks
        gone = marked_events(pl.DataFrame({
            "event_id": [e.event_id for e in events], "subjects": [list(e.subjects or ()) for e in events],
            "tenant": [e.tenant for e in events], "cipher": [e.cipher for e in events],
        }, schema={"event_id": pl.Utf8, "subjects": pl.List(pl.Utf8), "tenant": pl.Utf8, "cipher": pl.Utf8}),
            marks) if marks else set()
        out = []
        for e in events:
            if e.cipher:
                opened = None if e.event_id in gone else open_event(e, self.key_store)
                e = opened if opened is not None else e.with_(content=None, justification=None, fact=None)
            out.append(e)
        return out

    def events(self, *, as_of: int | str | datetime | None = None, until: int | None = None) -> list[Event]:
        """Stored events in log order, readable (see :meth:`readable`)."""
        return self.readable(self.log_store.events(as_of=as_of, until=until))

    def events_by_id(self, event_ids: Iterable[str], *, seqs: Iterable[int] | None = None) -> dict[str, Event]:
        """The stored events among ``event_ids``, by id, readable (one filtered read of the log;
        ``seqs``, their log positions when known, restrict it to the files holding them)."""
        ids = sorted(set(event_ids))
        if not ids:
            return {}
        return {e.event_id: e for e in self.readable(self.log_store.events_by_id(None, ids, seqs=seqs))}

    def retraction_principals(self) -> dict[str, tuple[str, ...]]:
        """Principals of every retraction event, by event id (what may close a fact)."""
        rows = self.log_store.rows_of_kinds(["retraction"], columns=["event_id", "principals"])
        if rows is None:
            return {}
        return {i: tuple(p or ()) for i, p in zip(rows["event_id"].to_pylist(), rows["principals"].to_pylist())}

    # -- specs, the extraction cache, the state tables --------------------------------------------

    def recorded_specs(self) -> dict[str, FoldSpec]:
        """Specs recorded in the log, by hash, in log order."""
        rows = self.log_store.rows_of_kinds(["spec_changed"], columns=["content"])
        return {} if rows is None else specs_from(rows["content"].to_pylist())

    def current_spec(self) -> FoldSpec:
        """The newest spec recorded in the log, or the default (rules) spec when none is."""
        version = self.log_store.version()
        if self._spec_at is None or self._spec_at[0] != version:
            specs = self.recorded_specs()
            self._spec_at = (version, list(specs.values())[-1] if specs else FoldSpec())
        return self._spec_at[1]

    def record_spec(self, spec: FoldSpec) -> bool:
        """Append a ``spec_changed`` event unless ``spec`` is already in the log. True if appended."""
        if spec.hash in self._recorded or spec.hash in self.recorded_specs():
            self._recorded.add(spec.hash)
            return False
        event = NewEvent(kind="spec_changed", content=spec.canonical_bytes().decode(),
                         source=f"{SPEC_SOURCE}/{spec.hash}", event_id=f"spec-{spec.hash}")
        # not protected: a spec holds no personal data and must stay readable for audits
        self.log_store.append([event], protect=False)
        self._recorded.add(spec.hash)
        return True

    @property
    def cache(self) -> ExtractionCache:
        """The extraction cache (a new handle each time: cheap, and never stale)."""
        return ExtractionCache(self.layout, storage_options=self.storage_options)

    def state_store(self, spec: FoldSpec | str) -> StateStore:
        """The state tables of ``spec`` (or a spec hash): one object per spec per Store, so its
        Delta handles stay open and a read does not replay their commit logs."""
        spec_hash = spec if isinstance(spec, str) else spec.hash
        store = self._state_stores.get(spec_hash)
        if store is None:
            store = self._state_stores[spec_hash] = StateStore(self.layout, spec_hash,
                                                               storage_options=self.storage_options)
        return store


def store_exists(layout: Layout) -> bool:
    """Whether ``layout`` holds a refold store: its settings file, or (object storage, a store
    made before its settings moved there) its log table."""
    files = layout.files()
    return files.exists(SETTINGS) or (not layout.is_local and bool(files.list("events/_delta_log")))


def create_store(root: str | Path, *, mode: Mode = "delete", storage_options: dict[str, str] | None = None,
                 group: bool = False, keys: dict[str, Any] | None = None) -> dict[str, str]:
    """Create an empty store at ``root``: its folder (local: private, or group-shared with
    ``group``), its settings (``mode`` and the key store, ``keys``: the KMS options of
    :func:`refold.storage.keys.select.key_settings`) and an empty log. Returns the storage options
    with refold's defaults. Raises :class:`StoreError` when ``root`` already holds a store."""
    storage_options = with_defaults(str(root), storage_options)
    layout = Layout(str(root), storage_options)
    if store_exists(layout):
        raise StoreError(f"{root} is already a refold store; open it with refold.open({str(root)!r})",
                         cli=f"{root} is already a refold store; use it as it is (e.g. `refold log {root}`)")
    settings = key_settings(mode, **(keys or {}))
    if layout.is_local:
        create_root(layout.root.removeprefix("file://"), group=group)
    write_settings(layout, mode, keys=settings)
    EventLog.create(layout, storage_options=storage_options)
    return storage_options


def specs_from(contents: Sequence[str | None]) -> dict[str, FoldSpec]:
    """The specs ``spec_changed`` events' contents hold (in order; None: an erased one), by hash."""
    specs: dict[str, FoldSpec] = {}
    for content in contents:
        if content:
            spec = FoldSpec.from_json(json.loads(content))
            specs[spec.hash] = spec
    return specs


def honours(tag: Any, marks: frozenset[str]) -> bool:
    """Whether state tables at ``tag`` honour exactly the erased markers ``marks`` (listed now):
    no owner was erased since their fold (markers are never removed)."""
    return tag.erased == marks_fingerprint(marks)
