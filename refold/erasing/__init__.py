"""Erasure verbs of a :class:`~refold.memory.Memory` (functions taking the Memory first).

    from refold import erasing
    erasing.register_subject(mem, "s-3f9c", "Ada Lovelace", aliases=["Ada"])
    erasing.find(mem, "s-3f9c")                 # tagged events and untagged mentions
    erasing.erase(mem, "s-3f9c", dry_run=True)  # ErasurePlan: what would go
    receipt = erasing.erase(mem, "s-3f9c", canaries=["a phrase only Ada wrote"])
    erasing.verify_receipt(mem, receipt)        # chain, tombstones/keys, old versions, digest

The procedure lives in :mod:`refold.storage.erasure`; this module supplies the store's pieces:
its subject registry, key store (shred mode), derived stores (extraction cache, vector index, and
whatever ``mem.derived_stores()`` adds) and a refold that returns the spec hash and a digest of
the folded graph.

The front door's part of the story: the snapshot patch (:mod:`.snapshot_patch`, with the region
it works on in :mod:`.region`) is the first derived store the procedure purges, and the refold
after it starts from the patched snapshot.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from refold.fold.errors import ErasureError, ExtractionError
from refold.storage.cache import PurgeResult
from refold.storage.erasure import erase as _erase
from refold.storage.erasure import plan as _plan
from refold.storage.erasure.planning import ErasurePlan, RefoldOutcome
from refold.storage.erasure.receipts import Receipt, ReceiptReport, load_receipt, receipt_path
from refold.storage.erasure.receipts import verify_receipt as _verify_receipt
from refold.storage.scan import ScanReport, scan_report
from refold.storage.subjects import Mentions, Subject, SubjectRegistry, find_mentions

if TYPE_CHECKING:
    from refold.memory import Memory
    from refold.storage.erasure.batch import BatchResult

__all__ = [
    "DIGEST_SCHEME", "STATE_SCHEME", "derived_stores", "erase", "erase_batch", "fact_impact", "find", "json_state_digest", "keystore",
    "refold_outcome", "register_subject", "registry", "scan", "state_digest", "subjects", "sweep_destroyed",
    "verify_receipt",
]


def registry(mem: "Memory") -> SubjectRegistry:
    return SubjectRegistry.of(mem.layout)


def register_subject(mem: "Memory", subject_id: str, name: str, *, aliases: Sequence[str] = (),
                     identifiers: Sequence[str] = ()) -> Subject:
    """Add (or replace) a subject: opaque id → display name, aliases, identifiers (e.g. emails)."""
    return registry(mem).register(subject_id, name, aliases=aliases, identifiers=identifiers)


def subjects(mem: "Memory") -> list[Subject]:
    return registry(mem).list()


def keystore(mem: "Memory"):
    """The store's key store in shred mode (the adapter it was created with), else None."""
    if mem.mode != "shred":
        return None
    return mem.key_store


def find(mem: "Memory", subject_id: str) -> Mentions:
    """Events tagged with ``subject_id`` and readable events naming it without the tag.

    Untagged mentions need a registry entry (its name, aliases and identifiers are the search).
    """
    subject = registry(mem).get(subject_id) or Subject(subject_id, "")
    return find_mentions(mem.events(), subject)


def derived_stores(mem: "Memory", *, decremental: bool = True, subjects: Iterable[str] = ()) -> list[Any]:
    """Every derived store of ``mem`` with ``purge(event_ids)``: the snapshot patcher (see
    :mod:`refold.erasing.snapshot_patch`), cache, index, the Memory's extras (snapshots, state
    tables) and, in shred mode, the :class:`ResidueSweeper` (``subjects``: the erasure's own)."""
    from .snapshot_patch import SnapshotPatcher

    # the patcher first: it needs the erased events' cache rows, which the cache purge removes
    stores: list[Any] = [SnapshotPatcher(mem), mem.cache] if decremental else [mem.cache]
    if Path(mem.layout.index).exists() if mem.layout.is_local else mem.layout.files().list("index"):
        from refold.storage.index import index_store

        stores.append(index_store(mem.layout))
    extra = getattr(mem, "derived_stores", None)
    if callable(extra):
        stores += [s for s in extra(subjects) if type(s) not in {type(x) for x in stores}]
    if getattr(mem, "mode", None) == "shred":
        stores.append(ResidueSweeper(mem, subjects))  # last: after every store purged the erasure's events
    return stores


class ResidueSweeper:
    """The erasure's purge step's last store in shred mode: :func:`sweep_destroyed` with the
    erasure's own events left out (the stores before it purged them), so an erasure also
    purges what the derived stores keep of owners whose keys went outside an erasure."""

    def __init__(self, mem: "Memory", subjects: Iterable[str] = ()):
        self.mem = mem
        self.subjects = tuple(subjects)

    def purge(self, event_ids: Iterable[str]) -> PurgeResult:
        # the erasure's subjects' events are all among event_ids: the log is not read for them
        return sweep_destroyed(self.mem, skip=event_ids, covered=self.subjects)


def sweep_destroyed(mem: "Memory", *, skip: Iterable[str] = (), covered: Iterable[str] = ()) -> PurgeResult:
    """Purge the extraction cache, a stored search index and graph snapshots of the events of
    every owner with an erased marker not swept yet (:mod:`refold.storage.erasure.sweep`: keys
    destroyed outside an erasure). Shred mode only; each :meth:`Memory.fold` calls it first, and
    an erasure's purge step (:class:`ResidueSweeper`). The state tables honour the markers on
    their own (:func:`refold.state_fold.honour_marks`)."""
    from refold.state_fold import StatePurger
    from refold.storage.erasure.sweep import STORE, sweep
    from refold.storage.keys import KeyOwner

    if mem.mode != "shred":
        return PurgeResult(STORE, 0)
    marks = mem.erased_marks()
    if not marks:
        return PurgeResult(STORE, 0)
    # (not the state tables: they honour markers themselves; not the sweep itself)
    stores = [s for s in derived_stores(mem, decremental=False) if not isinstance(s, (StatePurger, ResidueSweeper))]
    return sweep(mem.layout, mem.log_store, marks, stores, skip=skip, storage_options=mem.storage_options,
                 covered={KeyOwner.subject(s).digest() for s in covered})


#: Prefix of a state digest over the snapshot encoding (:func:`state_digest`); a digest without
#: it is the older JSON digest (:func:`json_state_digest`), which receipts made before still hold.
DIGEST_SCHEME = "cols1:"
#: Prefix of a digest of the partitioned engine's state tables (:meth:`StateStore.digest`).
STATE_SCHEME = "state1:"


def state_digest(graph) -> str:
    """``"cols1:"`` + SHA-256 of the graph in its snapshot encoding
    (:func:`refold.fold.snapshot_codec.table_digest`: every node and edge attribute, whatever the
    order). ~0.1 s for 20k facts where the JSON digest took ~1 s. A graph the codec cannot encode
    (not a folded state) gets the JSON digest."""
    from refold.fold.errors import StoreError
    from refold.fold.graph_objects import paused_gc
    from refold.fold.snapshot_codec import encode_graph, table_digest

    # no collector passes while encoding: they would walk the whole folded graph (measured
    # ~0.35 s of encoding a 20k-event state in a process holding it, ~0.1 s without)
    with paused_gc():
        try:
            nodes, edges = encode_graph(graph)
        except StoreError:
            return json_state_digest(graph)
        return DIGEST_SCHEME + table_digest(nodes, edges)


def json_state_digest(graph) -> str:
    """SHA-256 over a canonical JSON of the graph's nodes and edges with all attributes (the
    digest of receipts made before :data:`DIGEST_SCHEME`; kept to verify them)."""
    def plain(value):
        if isinstance(value, datetime):
            return value.isoformat()
        if isinstance(value, (list, tuple, set, frozenset)):
            items = [plain(v) for v in value]
            return sorted(items, key=repr) if isinstance(value, (set, frozenset)) else items
        if isinstance(value, dict):
            return {str(k): plain(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
        return value

    nodes = sorted(([str(n), plain(d)] for n, d in graph.nodes(data=True)), key=lambda x: x[0])
    edges = sorted(([str(u), str(v), str(k), plain(d)] for u, v, k, d in graph.edges(keys=True, data=True)),
                   key=lambda x: (x[0], x[1], x[2]))
    text = json.dumps({"nodes": nodes, "edges": edges}, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def refold_outcome(mem: "Memory", *, scheme: str | None = None) -> RefoldOutcome:
    """Refold ``mem`` (current spec) and return its spec hash, state digest (``scheme``
    :data:`DIGEST_SCHEME`, :data:`STATE_SCHEME`, "" for the JSON digest of older receipts, or
    None: the state the store's engine keeps) and the extraction calls the refold made (for the
    receipt; None for the JSON digest, which only re-checks receipts).

    When the store holds state tables for the spec (the partitioned engine folded it), the
    refold is that engine's (the erasure already refolded the touched buckets) and the digest
    is of the state tables, whatever engine this process would fold with: reads answer from
    those tables, and a whole graph fold beside them cost most of an erasure's time and memory
    (~80% of it at 100k events).

    The digest reads the Memory's live fold under its fold lock instead of the copy
    :meth:`Memory.state` hands out: the copy cost as much as the digest (~0.2 s at 20k facts),
    and the digest only reads.
    """
    try:
        spec = mem.current_spec()
        if scheme is None:
            partitioned = mem.state_store(spec).tag() is not None  # a fact of the store, not of this process
            scheme = STATE_SCHEME if partitioned else DIGEST_SCHEME
        if scheme == STATE_SCHEME:
            return RefoldOutcome(spec.hash, *_state_tables_digest(mem, spec))
        if scheme != DIGEST_SCHEME:
            state = mem.state(spec=spec)
            return RefoldOutcome(state.spec_hash, json_state_digest(state.graph))
        return RefoldOutcome(spec.hash, *_live_digest(mem, spec))
    except ExtractionError as exc:
        raise ErasureError(
            f"the refold after the erasure needs model extractions ({exc}); run mem.fold(extractor=...) "
            "with the model, then call erase again for the same subject: it resumes where it stopped",
            cli=f"the refold after the erasure needs model extractions ({exc.for_cli()}); run "
                "`refold fold STORE --extractor ...` with the model, then rerun the same `refold erase` "
                "command: it resumes where it stopped",
        ) from exc


def _state_tables_digest(mem: "Memory", spec) -> tuple[str, int]:
    """``"state1:"`` + :meth:`~refold.storage.state.StateStore.digest` of ``spec``'s state
    tables brought up to date with the log by the partitioned fold, and the extraction calls
    that took."""
    from refold.extractors import get_extractor
    from refold.state_fold import fold_state, group_size

    extractor = get_extractor("rules") if spec.extractor == "rules" else None
    store = mem.state_store(spec)
    with mem._fold_lock:
        report = fold_state(mem, spec, extractor=extractor)
        mem._state_at.pop(spec.hash, None)
    buckets = store.tag().buckets
    return STATE_SCHEME + store.digest(buckets=buckets, group=group_size(store, buckets)), report.extraction_calls


def _live_digest(mem: "Memory", spec) -> tuple[str, int]:
    """:func:`state_digest` of ``mem``'s fold of ``spec`` at the head, brought up to date as
    :meth:`Memory.state` does (resume from its live fold or the newest valid snapshot, then the
    log's tail) but digested in place, and the extraction calls that took. A shred-mode store
    folds its readable (decrypted) events, as :meth:`Memory.state` does."""
    from refold.extractors import get_extractor
    from refold.projection import DeltaSource, ListSource

    extractor = get_extractor("rules") if spec.extractor == "rules" else None
    if mem.mode == "shred":
        events = mem.events()
        source, at_most = ListSource(events), (events[-1].seq if events else -1)
    else:
        source, at_most = DeltaSource(mem.log_store), mem.head().seq
    with mem.advanced_fold(spec, extractor=extractor, source=source, at_most=at_most) as done:
        done.live.refresh()
        return state_digest(done.live.graph), done.extraction_calls


def fact_impact(mem: "Memory", event_ids: Iterable[str]) -> dict[str, Any] | None:
    """How the folded graph changes when ``event_ids`` go (for the dry run); None if not folded.

    Extracted facts whose sources are all erased disappear (counted as current or historical);
    facts that other events also state stay; derived facts whose lineage includes an erased event
    are recomputed without it.
    """
    ids = set(event_ids)
    tables = mem._readable_tables(None)
    if tables is not None:  # the state tables: only what the events' items name is read
        from refold.state_queries import facts_sourced_from

        facts = facts_sourced_from(*tables, ids).select("derivation", "sources", "valid_to").to_dicts()
    else:
        try:
            facts = [d for *_, d in mem.state().graph.edges(data=True)]
        except ExtractionError:
            return None
    gone = current = kept = derived = 0
    for d in facts:
        sources = set(d.get("sources") or ())
        if not sources & ids:
            continue
        if d.get("derivation") != "extracted":
            derived += 1
        elif sources <= ids:
            gone += 1
            current += d.get("valid_to") is None
        else:
            kept += 1
    detail = (f"{gone} fact(s) removed: {current} current, {gone - current} historical",
              f"{kept} fact(s) also stated by other events: kept with fewer sources",
              f"{derived} derived fact(s) depend on erased events: recomputed by the refold")
    return {"store": "graph", "rows": gone + derived, "detail": list(detail)}


def erase(mem: "Memory", subject_id: str, *, dry_run: bool = False, canaries: Iterable[str] = (),
          include: Iterable[str] = (), include_mentions: bool = False,
          orphan_grace_hours: int = 1, decremental: bool = True,
          notes: Sequence[str] = ()) -> Receipt | ErasurePlan:
    """Erase a subject (or, with ``dry_run``, return the plan and write nothing).

    ``include``: extra event ids to erase with the subject; ``include_mentions`` adds every
    untagged event that names it (see :func:`find`). ``canaries``: strings the residue scan must
    not find afterwards (never stored). ``decremental`` (default): patch the newest snapshot to
    drop the erased events (see :mod:`refold.erasing.snapshot_patch`); False purges it like every other
    snapshot holding them, and the refold resumes from an older one. ``notes``: lines for the
    receipt (retention says there which rule expired which events).

    Raises :class:`~refold.fold.errors.LegalHoldError` (writing nothing, dry run included) when a
    legal hold covers the subject, or the tenant or another subject of an event it would erase.
    """
    from refold.retention import check_erasure

    extra = set(include)
    if include_mentions:
        extra |= {e.event_id for e in find(mem, subject_id).untagged}
    check_erasure(mem, subject_id, extra)
    common = dict(keystore=keystore(mem), registry=registry(mem), extra_event_ids=sorted(extra))
    if dry_run:
        plan = _plan(mem, subject_id, derived=derived_stores(mem, decremental=decremental), **common)
        impact = fact_impact(mem, plan.event_ids)
        return dataclasses.replace(plan, derived=(*plan.derived, impact)) if impact else plan
    return _erase(mem, subject_id, derived=derived_stores(mem, decremental=decremental, subjects=(subject_id,)),
                  refold=lambda: refold_outcome(mem),
                  canaries=canaries, orphan_grace_hours=orphan_grace_hours, notes=notes, **common)


def erase_batch(mem: "Memory", subject_ids: Iterable[str], *, dry_run: bool = False,
                canaries: Iterable[str] | Mapping[str, Iterable[str]] = (), orphan_grace_hours: int = 1,
                decremental: bool = True, notes: Sequence[str] = (),
                skip_unknown: bool = False) -> "BatchResult | list[ErasurePlan]":
    """Erase many subjects in one pass (:mod:`refold.storage.erasure.batch`): one erasure commit,
    one tombstone commit or key destruction, one purge, scrub and refold, one residue scan, then a
    receipt per subject and the batch summary. With ``dry_run``, each subject's plan (nothing
    written). Duplicate ids are erased once.

    Raises :class:`~refold.fold.errors.LegalHoldError` before anything is written when a hold
    covers any of the subjects (or the tenant or another subject of an event they would erase),
    naming every held subject: release the holds, or leave those subjects out of the batch.
    ``canaries``: one list for the whole batch, or a mapping subject → its canaries.
    ``skip_unknown``: erase the others and list subjects refold knows nothing about in the
    result's ``unknown`` instead of refusing the batch.
    """
    from refold.fold.errors import LegalHoldError
    from refold.retention import check_erasure
    from refold.storage.erasure.batch import erase_batch as _erase_batch
    from refold.storage.erasure.batch import plan_batch, unique_subjects

    subjects = unique_subjects(subject_ids)
    held = []
    for subject_id in subjects:
        try:
            check_erasure(mem, subject_id)
        except LegalHoldError as exc:
            held.append((subject_id, str(exc)))
    if held:
        names = ", ".join(repr(s) for s, _ in held[:10]) + (" …" if len(held) > 10 else "")
        raise LegalHoldError(f"a legal hold covers {len(held)} subject(s) of the batch ({names}); nothing was "
                             f"erased. First: {held[0][1]}. Release the holds or leave those subjects out")
    derived = derived_stores(mem, decremental=decremental, subjects=subjects)
    if dry_run:
        return list(plan_batch(mem.log_store, subjects, mode=mem.mode, keystore=keystore(mem),
                               registry=registry(mem), derived=derived, skip_unknown=skip_unknown).values())
    return _erase_batch(mem, subjects, keystore=keystore(mem), registry=registry(mem), derived=derived,
                        refold=lambda: refold_outcome(mem), canaries=canaries,
                        orphan_grace_hours=orphan_grace_hours, notes=notes, skip_unknown=skip_unknown)


def scan(mem: "Memory", needles: Iterable[str] = (), *, canaries: Iterable[str] = ()) -> ScanReport:
    """Residue scan of every file under the store (see :mod:`refold.storage.scan`): ``needles``
    (names) match as whole words, ``canaries`` as substrings."""
    return scan_report(mem.root, needles, canaries=canaries, storage_options=mem.storage_options)


def verify_receipt(mem: "Memory", receipt: Receipt | str | Path, *, needles: Iterable[str] = (),
                   canaries: Iterable[str] = (), refold: bool = True) -> ReceiptReport:
    """Re-check a receipt (a Receipt, a path, or an erasure id) against the store."""
    if isinstance(receipt, str) and not receipt.endswith(".json") and not Path(receipt).exists():
        receipt = receipt_path(mem.layout, receipt)
    rec = receipt if isinstance(receipt, Receipt) else load_receipt(receipt, layout=mem.layout)
    # the refold digests the way the receipt did (receipts made before DIGEST_SCHEME hold a JSON digest)
    recorded = rec.state_digest or ""
    scheme = next((p for p in (DIGEST_SCHEME, STATE_SCHEME) if recorded.startswith(p)), "")
    return _verify_receipt(mem.root, rec, needles=needles, canaries=canaries, keystore=keystore(mem),
                           refold=(lambda: refold_outcome(mem, scheme=scheme)) if refold else None,
                           storage_options=mem.storage_options)
