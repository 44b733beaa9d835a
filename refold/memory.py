"""The Memory facade: one store, opened once, with the verbs a notebook or an agent needs."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import networkx as nx
import polars as pl

from refold.engine.closure import audit
from refold.engine.extraction import FoldReport
from refold.reads import answers
from refold.engine.fold import fold_state
from refold.engine.purge import vacuum_state
from refold.erasure import verbs as erasing
from refold.extractors import get_extractor
from refold.fold.errors import NotFoundError, ValidationError
from refold.fold.events import (
    DEFAULT_MAX_CONTENT_BYTES,
    Event,
    NewEvent,
    parse_jsonl,
    validate_event,
)
from refold.fold.extract import Extractor
from refold.fold.spec import FoldSpec
from refold.proofs import ConsistencyProof, InclusionProof
from refold.reads.tables import forget_reads, read_tables
from refold.search.replay import trace, traced_search
from refold.search.retriever import open_index, search
from refold.storage.files.options import with_defaults
from refold.storage.layout import Layout, Mode
from refold.storage.legacy import drop_legacy_snapshots
from refold.storage.log.checkpoints import store_checkpoint
from refold.storage.log.eventlog import Head
from refold.storage.log.tree_views import tree_view
from refold.storage.log.signing import load_public_key
from refold.storage.log.verify import VerifyReport, verify
from refold.store import Store, create_store, store_exists


class Memory:
    """A refold store: the event log and everything folded from it, with the verbs a notebook or an
    agent needs. It composes a :class:`~refold.store.Store` (``mem.store``: the resources every
    helper takes) with those verbs. Create with :func:`refold.open` or :func:`refold.init`.
    """

    def __init__(self, root: str | Path, *, storage_options: dict[str, str] | None = None,
                 max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES, group_commit: bool = True):
        """``group_commit`` (default on): concurrent :meth:`append` calls from threads of this
        process share Delta commits; a lone caller pays nothing for it (docs/log.md)."""
        self.store = Store(root, storage_options=storage_options, max_content_bytes=max_content_bytes,
                           group_commit=group_commit)
        self._legacy_checked = False  # whether this object's first fold removed refold 0.1's snapshots/

    def __repr__(self) -> str:
        return f"Memory({self.root!r}, mode={self.mode!r})"

    # the Store's parts, by their public names
    layout = property(lambda self: self.store.layout)
    root = property(lambda self: self.store.root)
    mode = property(lambda self: self.store.mode)
    settings = property(lambda self: self.store.settings)
    storage_options = property(lambda self: self.store.storage_options)
    max_content_bytes = property(lambda self: self.store.max_content_bytes)
    log_store = property(lambda self: self.store.log_store)
    key_store = property(lambda self: self.store.key_store, doc="The shred-mode key store (see Store.key_store).")
    cache = property(lambda self: self.store.cache, doc="The extraction cache.")

    read_overlay_limit = property(
        lambda self: self.store.read_overlay_limit,
        lambda self, value: setattr(self.store, "read_overlay_limit", value),
        doc="The most log events a read overlays in memory (default 50,000; docs/state.md, \"Reads\").")

    def erasure_epoch(self) -> str:
        """The store's erasure epoch, read now (see :meth:`Store.erasure_epoch`): every read this
        object keeps is dropped when it changed."""
        return self.store.erasure_epoch()

    def erased_marks(self) -> frozenset[str]:
        """The key store's erased markers (shred mode; empty in delete mode)."""
        return self.store.erased_marks()

    def state_store(self, spec: FoldSpec):
        """The state tables of ``spec`` (their Delta handles kept open)."""
        return self.store.state_store(spec)

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
        return self.store.appender.append(batch)

    def append_jsonl(self, lines: Iterable[str] | str | Path, *, ingestion_run: str | None = None) -> list[int]:
        """Append events from JSON Lines (an iterable of lines, a text, or a file path)."""
        if isinstance(lines, Path):  # bytes: parse_jsonl names the line of a byte that is not UTF-8
            lines = lines.read_bytes().splitlines()
        elif isinstance(lines, str):
            lines = lines.splitlines()
        batch = parse_jsonl(lines, max_content_bytes=self.max_content_bytes, ingestion_run=ingestion_run)
        return self.store.appender.append(batch)

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
        return self.store.current_spec()

    def events(self, *, as_of: int | str | datetime | None = None, until: int | None = None) -> list[Event]:
        """Stored events in log order, readable form: shred-mode content decrypted, and events
        whose key was destroyed returned with ``content=None`` (the fold treats them as erased)."""
        return self.store.events(as_of=as_of, until=until)

    def events_by_id(self, event_ids: Iterable[str], *, seqs: Iterable[int] | None = None) -> dict[str, Event]:
        """The stored events among ``event_ids``, by id, in the readable form of :meth:`events`
        (one filtered read of the log: what ``why`` needs of a fact's sources). ``seqs``: their
        log positions, when known (a fact's ``source_seqs``): then only files holding them are read."""
        return self.store.events_by_id(event_ids, seqs=seqs)

    def fold(self, *, extractor: str | Extractor = "rules", spec: FoldSpec | None = None,
             full: bool = False, progress: bool = False, runner=None, index: bool | str = False,
             buckets: int | None = None, merger=None, **options: Any) -> FoldReport:
        """Bring the state tables up to date with the log and return the counts (docs/fold.md).

        Records the spec in the log, then folds the events after the tables' tag into the buckets
        they touch, extracting only events with no cached extraction; ``full`` rewrites every
        bucket from the cache (``buckets`` partitions, default 64). Every fold ends with a tagged
        state version (docs/state.md). ``index`` (True or an embedder name) also syncs the vector
        index; ``runner``/``merger`` run extraction and the merge elsewhere (Ray: docs/ray.md);
        ``options`` go to the extractor. Shred mode: the residue of keys destroyed outside an
        erasure is purged first."""
        _refuse_removed(options, _REMOVED_FOLD_OPTIONS)
        ext = get_extractor(extractor, **options) if isinstance(extractor, str) else extractor
        if spec is None:
            spec = ext.default_spec() if hasattr(ext, "default_spec") else FoldSpec(extractor=ext.name)
        self.store.record_spec(spec)
        if self.mode == "shred":  # keys destroyed outside an erasure: their residue goes first
            erasing.sweep_destroyed(self.store)
        if not self._legacy_checked:  # refold 0.1's snapshot files: never read again, so gone
            drop_legacy_snapshots(self.layout)
            self._legacy_checked = True
        with self.store.fold_lock:
            report = fold_state(self.store, spec, extractor=ext, full=full, progress=progress, runner=runner,
                                merger=merger, **({"buckets": buckets} if buckets else {}))
            forget_reads(self.store, spec.hash)
        if index:
            self.index(embedder=None if index is True else index)
        return report

    def snapshot(self, **_: Any):
        """Removed in refold 0.2: every :meth:`fold` leaves a tagged state version, the snapshot."""
        raise ValidationError("Memory.snapshot() was removed in refold 0.2: every mem.fold() tags a state "
                              "version, which is the snapshot; call mem.fold()")

    def vacuum_state(self, *, retain_hours: int = 168) -> dict[str, int]:
        """Delete the files the state tables of every spec stopped using more than
        ``retain_hours`` ago; return spec hash → files deleted. A scheduled job runs it after its
        fold; it also sets how far back ``as_of`` reads reach (docs/state.md)."""
        return vacuum_state(self.store, retain_hours)


    def state(self, *, as_of: int | str | datetime | None = None, spec: FoldSpec | None = None) -> answers.FoldState:
        """The whole folded state (as it stood at ``as_of``, record time) as a view: a
        :class:`~refold.reads.answers.FoldState` whose ``graph`` is :meth:`graph` of the whole store,
        read from the state tables (its cost grows with the state: every fact and entity in one
        networkx graph; prefer :meth:`facts` or a narrowed :meth:`graph`). ``pending``: events
        awaiting an extraction (see :meth:`pending`). A read: writes nothing, calls no model."""
        return answers.whole_state(self.store, as_of=as_of, spec=spec)


    def pending(self, *, as_of: int | str | datetime | None = None) -> int:
        """How many events up to the head (or ``as_of``) await an extraction under the current
        spec: reads answer without their facts until :meth:`fold` extracts them."""
        return read_tables(self.store, as_of)[2].pending  # the read overlay (docs/state.md, "Reads")

    def graph(self, *, as_of: int | str | datetime | None = None, subject: str | None = None, depth: int = 1,
              tenant: str | None = None, valid_at: str | datetime | None = None,
              principal: str | None = None) -> nx.MultiDiGraph:
        """The knowledge graph (networkx MultiDiGraph, edges keyed by fact id) at ``as_of``, as a
        view of what is asked: ``subject``'s neighbourhood to ``depth`` hops, one ``tenant``, the
        facts valid at ``valid_at``, as ``principal`` may see it; with neither subject nor tenant,
        the whole store (its cost grows with the state)."""
        return answers.graph(self.store, as_of=as_of, subject=subject, depth=depth, tenant=tenant,
                             valid_at=valid_at, principal=principal)


    def facts(self, *, subject: str | None = None, relation: str | None = None,
              as_of: int | str | datetime | None = None, valid_at: str | datetime | None = None,
              tenant: str | None = None, current_only: bool = False, principal: str | None = None) -> pl.DataFrame:
        """Facts as a polars DataFrame: history included (``current`` column) unless ``current_only``.

        ``as_of`` is record time, ``valid_at`` valid time; ``principal`` shows only what that
        principal may see (refold.fold.scoping). A read: writes nothing, calls no model; facts of
        events no fold has extracted yet are absent (see :meth:`pending`)."""
        return answers.facts(self.store, subject=subject, relation=relation, as_of=as_of, valid_at=valid_at,
                             tenant=tenant, current_only=current_only, principal=principal)


    def why(self, fact_id: str, *, as_of: int | str | datetime | None = None,
            principal: str | None = None) -> dict[str, Any]:
        """Why refold believes ``fact_id``: the fact, its derivation and its source events.

        With ``principal``, a fact the principal may not see is unknown (NotFoundError), and the
        answer names no fact or event the principal may not see (refold.fold.scoping)."""
        return answers.why_fact(self.store, fact_id, as_of=as_of, principal=principal)


    def audit(self):
        """Re-derive every recorded model request from the log and the spec (input closure)."""
        return audit(self.store)

    # -- erasure (refold.erasure.verbs) -----------------------------------------------------------------

    def register_subject(self, subject_id: str, name: str, *, aliases: Sequence[str] = (),
                         identifiers: Sequence[str] = ()):
        """Record a data subject's display name, aliases and identifiers (erasable)."""
        return erasing.register_subject(self.store, subject_id, name, aliases=aliases, identifiers=identifiers)

    def subjects(self):
        """The subject registry's entries."""
        return erasing.subjects(self.store)

    def find(self, subject_id: str):
        """Events tagged with the subject, and untagged events that mention its names."""
        return erasing.find(self.store, subject_id)

    def erase(self, subject_id, *, dry_run: bool = False, canaries: Iterable[str] = (),
              include: Iterable[str] = (), include_mentions: bool = False, orphan_grace_hours: int = 1,
              notes: Iterable[str] = (), **removed: Any):
        """Erase a data subject (store mode: delete or shred) and return the receipt; with
        ``dry_run`` return the impact preview and write nothing. A rerun finishes a killed
        erasure. ``notes``: lines the receipt carries. A list of subject ids erases them as one
        batch and returns a :class:`~refold.erasure.batch.BatchResult` (docs/erasure.md)."""
        _refuse_removed(removed, _REMOVED_ERASE_OPTIONS)
        if removed:
            raise TypeError(f"erase() got unexpected keyword argument(s): {', '.join(sorted(removed))}")
        if isinstance(subject_id, (list, tuple)):
            if include or include_mentions:
                raise ValidationError("include= and include_mentions= erase one subject's extra events; "
                                      "erase that subject alone with them")
            return erasing.erase_batch(self.store, subject_id, dry_run=dry_run, canaries=canaries,
                                       orphan_grace_hours=orphan_grace_hours, notes=tuple(notes))
        return erasing.erase(self.store, subject_id, dry_run=dry_run, canaries=canaries, include=include,
                             include_mentions=include_mentions, orphan_grace_hours=orphan_grace_hours,
                             notes=tuple(notes))

    def scan(self, needles: Iterable[str] = (), *, canaries: Iterable[str] = ()):
        """Residue scan of every file under the store for ``needles`` (names, as whole words)
        and ``canaries`` (substrings)."""
        return erasing.scan(self.store, needles, canaries=canaries)

    def verify_receipt(self, receipt, *, needles: Iterable[str] = (), canaries: Iterable[str] = (),
                       refold: bool = True):
        """Re-check an erasure receipt (chain, tombstones, residue scan, state digest)."""
        return erasing.verify_receipt(self.store, receipt, needles=needles, canaries=canaries, refold=refold)

    # -- search (refold.search.retriever) -------------------------------------------------------------------

    def search(self, text: str, *, k: int = 5, tenant: str | None = None, principal: str | None = None,
               as_of: int | str | datetime | None = None, valid_at: str | datetime | None = None,
               kind: Literal["facts", "events"] = "facts", history: bool = False,
               embedder: Any = None, trace_id: str | None = None) -> pl.DataFrame:
        """The ``k`` facts (or events) most similar to ``text``, filtered before ranking.

        Current facts only unless ``valid_at`` or ``history``; ``as_of`` searches the index of
        the log as it stood then; ``tenant``/``principal`` scope what may be seen. See refold.search.retriever.
        ``trace_id``: also record the read in the log (a ``memory_read`` event; see refold.search.replay).
        """
        if trace_id is not None:
            

            return traced_search(self.store, text, trace_id=trace_id, k=k, tenant=tenant, principal=principal,
                                 as_of=as_of, valid_at=valid_at, kind=kind, history=history, embedder=embedder)
        return search(self.store, text, k=k, tenant=tenant, principal=principal, as_of=as_of,
                      valid_at=valid_at, kind=kind, history=history, embedder=embedder)

    def trace(self, trace_id: str, *, replay: bool = False, embedder: Any = None):
        """Everything trace ``trace_id`` wrote and read, in log order; ``replay`` asks each recorded
        read again of the log as it stood then and reports whether it returns the same ids
        (a :class:`refold.search.replay.TraceReport`)."""
        return trace(self.store, trace_id, replay=replay, embedder=embedder)

    def index(self, *, embedder: Any = None, as_of: int | str | datetime | None = None,
              backend: Literal["flat", "hnsw"] | None = None):
        """Bring the vector index up to date (or build it as of ``as_of``); return a Retriever
        whose ``search``/``search_many`` answer many queries against that one state."""
        return open_index(self.store, embedder=embedder, as_of=as_of, backend=backend)

    # -- Merkle proofs (RFC 9162; refold.proofs, docs/verify.md) ------------------------------------

    def checkpoint(self, size: int | None = None, *, signed: bool = True):
        """The newest published signed checkpoint (of ``size`` leaves when given), or with
        ``signed=False`` the unsigned one of the tree of ``size`` leaves (default: the whole log)."""
        return store_checkpoint(self.log_store, size, signed=signed)

    def inclusion_proof(self, seq: int, size: int | None = None):
        """Proof that event ``seq`` is leaf ``seq`` of the tree of ``size`` leaves (default: the
        whole log): a :class:`refold.proofs.InclusionProof`."""
        return InclusionProof.of(tree_view(self.log_store, size, leaf=seq), seq)

    def consistency_proof(self, size1: int, size2: int | None = None):
        """Proof that the tree of ``size2`` leaves (default: the whole log) extends the tree of
        ``size1``: a :class:`refold.proofs.ConsistencyProof`."""
        return ConsistencyProof.of(tree_view(self.log_store, size2, since=size1), size1)


def init(root: str | Path, *, mode: Mode = "delete", storage_options: dict[str, str] | None = None,
         kms_key_id: str | None = None, kms_key_per_subject: bool = False, kms_endpoint: str | None = None,
         kms_region: str | None = None, kms_pending_window_days: int | None = None,
         group: bool = False) -> Memory:
    """Create a new store at ``root`` (erasure ``mode`` is fixed here) and open it.

    Raises :class:`StoreError` when ``root`` already holds a store. Shred mode keeps its keys in
    files under ``keys/``, or in AWS KMS (``kms_key_id``, or a key per subject with
    ``kms_key_per_subject``; docs/erasure.md). A local store is private to its owner; ``group``
    makes it group-shared (:mod:`refold.storage.files.modes`)."""
    storage_options = create_store(root, mode=mode, storage_options=storage_options, group=group,
                                   keys=dict(kms_key_id=kms_key_id, kms_key_per_subject=kms_key_per_subject,
                                             kms_endpoint=kms_endpoint, kms_region=kms_region,
                                             kms_pending_window_days=kms_pending_window_days))
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


def open(root: str | Path, *, create: bool = False, mode: Mode = "delete",  # noqa: A001
         storage_options: dict[str, str] | None = None, group_commit: bool = True) -> Memory:
    """Open the existing store at ``root``.

    A missing store raises :class:`NotFoundError` (a mistyped path must not silently become an
    empty memory); create one with :func:`init`, or pass ``create=True`` to create it (with
    ``mode``) when absent. ``mode`` is used only when this call creates the store.
    """
    storage_options = with_defaults(str(root), storage_options)
    if not store_exists(Layout(str(root), storage_options)):
        if not create:
            raise NotFoundError(
                f"no refold store at {root}; create one with refold.init({str(root)!r}) "
                "(or refold.open(path, create=True))",
                cli=f"no refold store at {root}; create one with `refold init {root}`")
        init(root, mode=mode, storage_options=storage_options)
    return Memory(root, storage_options=storage_options, group_commit=group_commit)
