"""Erasure verbs over a :class:`~refold.store.Store` (functions taking the Store first; the facade's
``Memory.erase``, ``find``, ``register_subject`` … call them with ``mem.store``).

    from refold.erasure import verbs as erasing
    erasing.register_subject(store, "s-3f9c", "Ada Lovelace", aliases=["Ada"])
    erasing.find(store, "s-3f9c")                 # tagged events and untagged mentions
    erasing.erase(store, "s-3f9c", dry_run=True)  # ErasurePlan: what would go
    receipt = erasing.erase(store, "s-3f9c", canaries=["a phrase only Ada wrote"])
    erasing.verify_receipt(store, receipt)        # chain, tombstones/keys, old versions, digest

The procedure lives in :mod:`refold.erasure.procedure`; this module supplies the store's pieces:
its subject registry, key store (shred mode), derived stores (the extraction cache, a stored
vector index, the state tables: :func:`derived_stores`) and the refold, which brings the state
tables up to date and returns the spec hash and their digest (:func:`refold_outcome`). There is
one derived state, the state tables: the purge refolds the buckets the erased events touched
(:class:`~refold.engine.fold.StatePurger`), and nothing else is patched or rebuilt.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from refold.fold.errors import ErasureError, ExtractionError
from refold.storage.derived import DerivedStore, PurgeResult
from refold.erasure.procedure import erase as _erase
from refold.erasure.procedure import plan as _plan
from refold.erasure.planning import ErasurePlan, RefoldOutcome
from refold.erasure.receipts import (
    RETIRED_SCHEMES, STATE1_SCHEME, STATE_SCHEME, Receipt, ReceiptReport, load_receipt, receipt_path,
)
from refold.erasure.receipts import verify_receipt as _verify_receipt
from refold.erasure.scan import ScanReport, scan_report
from refold.storage.subjects import Mentions, Subject, SubjectRegistry, find_mentions
from refold.engine.purge import StatePurger
from refold.reads.tables import forget_reads, read_tables
from refold.store import Store
from refold.storage.legacy import LegacySnapshots, has_legacy_snapshots

if TYPE_CHECKING:
    from refold.erasure.batch import BatchResult

__all__ = [
    "RETIRED_SCHEMES", "STATE_SCHEME", "derived_stores", "erase", "erase_batch", "fact_impact", "find", "keystore",
    "refold_outcome", "register_subject", "registry", "scan", "subjects", "sweep_destroyed", "verify_receipt",
]


def registry(store: Store) -> SubjectRegistry:
    return SubjectRegistry.of(store.layout)


def register_subject(store: Store, subject_id: str, name: str, *, aliases: Sequence[str] = (),
                     identifiers: Sequence[str] = ()) -> Subject:
    """Add (or replace) a subject: opaque id → display name, aliases, identifiers (e.g. emails)."""
    return registry(store).register(subject_id, name, aliases=aliases, identifiers=identifiers)


def subjects(store: Store) -> list[Subject]:
    return registry(store).list()


def keystore(store: Store):
    """The store's key store in shred mode (the adapter it was created with), else None."""
    if store.mode != "shred":
        return None
    return store.key_store


def find(store: Store, subject_id: str) -> Mentions:
    """Events tagged with ``subject_id`` and readable events naming it without the tag.

    Untagged mentions need a registry entry (its name, aliases and identifiers are the search).
    """
    subject = registry(store).get(subject_id) or Subject(subject_id, "")
    return find_mentions(store.events(), subject)


def derived_stores(store: Store, *, subjects: Iterable[str] = ()) -> list[DerivedStore]:
    """Every derived store of ``store`` with ``purge(event_ids)``, in the order an erasure purges
    them: the extraction cache, a stored vector index, the state tables
    (:class:`~refold.engine.fold.StatePurger`), refold 0.1's snapshot files and, in shred mode, the
    :class:`ResidueSweeper` (``subjects``: the erasure's own)."""
    stores: list[DerivedStore] = [store.cache]
    if Path(store.layout.index).exists() if store.layout.is_local else store.layout.files().list("index"):
        from refold.storage.index import index_store

        stores.append(index_store(store.layout))
    stores.append(StatePurger(store, subjects))
    if has_legacy_snapshots(store.layout):  # refold 0.1's snapshot files, where a store still holds them
        stores.append(LegacySnapshots(store.layout))
    if store.mode == "shred":
        stores.append(ResidueSweeper(store, subjects))  # last: after every store purged the erasure's events
    return stores


class ResidueSweeper:
    """The erasure's purge step's last store in shred mode: :func:`sweep_destroyed` with the
    erasure's own events left out (the stores before it purged them), so an erasure also
    purges what the derived stores keep of owners whose keys went outside an erasure."""

    def __init__(self, store: Store, subjects: Iterable[str] = ()):
        self.store = store
        self.subjects = tuple(subjects)

    def purge(self, event_ids: Iterable[str]) -> PurgeResult:
        # the erasure's subjects' events are all among event_ids: the log is not read for them
        return sweep_destroyed(self.store, skip=event_ids, covered=self.subjects)


def sweep_destroyed(store: Store, *, skip: Iterable[str] = (), covered: Iterable[str] = ()) -> PurgeResult:
    """Purge the extraction cache and a stored search index of the events of every owner with
    an erased marker not swept yet (:mod:`refold.erasure.sweep`: keys destroyed outside
    an erasure). Shred mode only; each :meth:`Memory.fold` calls it first, and an erasure's
    purge step (:class:`ResidueSweeper`). The state tables honour the markers on their own
    (:func:`refold.engine.purge.honour_marks`)."""

    from refold.erasure.sweep import STORE, sweep
    from refold.storage.keys.port import KeyOwner

    if store.mode != "shred":
        return PurgeResult(STORE, 0)
    marks = store.erased_marks()
    if not marks:
        return PurgeResult(STORE, 0)
    # (not the state tables: they honour markers themselves; not the sweep itself)
    stores = [s for s in derived_stores(store) if not isinstance(s, (StatePurger, ResidueSweeper))]
    return sweep(store.layout, store.log_store, marks, stores, skip=skip, storage_options=store.storage_options,
                 covered={KeyOwner.subject(s).digest() for s in covered})


def refold_outcome(store: Store, scheme: str = STATE_SCHEME, *, kept: bool = True) -> RefoldOutcome:
    """Bring the current spec's state tables up to date with the log (the partitioned fold: after
    an erasure's purge, only the erasure's own record is new) and return the spec hash,
    ``scheme`` + their digest and the extraction (model) calls that took, for the receipt.
    ``state2:`` (what erasures write): :meth:`~refold.storage.state.StateStore.bucket_digest`,
    reusing the stored hashes of unchanged buckets unless ``kept`` is False (a verification
    recomputes them all); ``state1:`` (receipts of refold 0.2):
    :meth:`~refold.storage.state.StateStore.digest`, always in full.

    A fold needing model extractions (a model spec whose cached rows the purge removed) raises
    :class:`ErasureError` saying to fold with the model and rerun the erasure (it resumes)."""
    from refold.extractors import get_extractor
    from refold.engine.fold import fold_state
    from refold.engine.merge import group_size

    try:
        spec = store.current_spec()
        extractor = get_extractor("rules") if spec.extractor == "rules" else None
        state_tables = store.state_store(spec)
        with store.fold_lock:
            report = fold_state(store, spec, extractor=extractor)
            forget_reads(store, spec.hash)  # (this process's kept read predates the fold)
        buckets = state_tables.tag().buckets
        group = group_size(state_tables, buckets)
        digest = scheme + (state_tables.digest(buckets=buckets, group=group) if scheme == STATE1_SCHEME
                           else state_tables.bucket_digest(buckets=buckets, group=group, kept=kept))
        return RefoldOutcome(spec.hash, digest, report.extraction_calls)
    except ExtractionError as exc:
        raise ErasureError(
            f"the refold after the erasure needs model extractions ({exc}); run mem.fold(extractor=...) "
            "with the model, then call erase again for the same subject: it resumes where it stopped",
            cli=f"the refold after the erasure needs model extractions ({exc.for_cli()}); run "
                "`refold fold STORE --extractor ...` with the model, then rerun the same `refold erase` "
                "command: it resumes where it stopped",
        ) from exc


def fact_impact(store: Store, event_ids: Iterable[str]) -> dict[str, Any]:
    """How the state changes when ``event_ids`` go (for the dry run), read from the state tables
    (and the read overlay of events after their tag): only the buckets the events' items name.

    Extracted facts whose sources are all erased disappear (counted as current or historical);
    facts that other events also state stay; derived facts whose lineage includes an erased event
    are recomputed without it.
    """
    from refold.reads.queries import facts_sourced_from

    ids = set(event_ids)
    tables = read_tables(store, None)
    facts = facts_sourced_from(*tables, ids).select("derivation", "sources", "valid_to").to_dicts()
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
    return {"store": "state", "rows": gone + derived, "detail": list(detail)}


def erase(store: Store, subject_id: str, *, dry_run: bool = False, canaries: Iterable[str] = (),
          include: Iterable[str] = (), include_mentions: bool = False,
          orphan_grace_hours: int = 1, notes: Sequence[str] = ()) -> Receipt | ErasurePlan:
    """Erase a subject (or, with ``dry_run``, return the plan and write nothing).

    ``include``: extra event ids to erase with the subject; ``include_mentions`` adds every
    untagged event that names it (see :func:`find`). ``canaries``: strings the residue scan must
    not find afterwards (never stored). ``notes``: lines for the receipt (retention says there
    which rule expired which events). The state tables lose the erased events' items and their
    touched buckets are refolded from the surviving items (cached extractions: no model call).
    Interrupted at any point (kill -9 included), the same call finishes the erasure.

    Raises :class:`~refold.fold.errors.LegalHoldError` (writing nothing, dry run included) when a
    legal hold covers the subject, or the tenant or another subject of an event it would erase.
    """
    from refold.storage.policy import check_erasure

    extra = set(include)
    if include_mentions:
        extra |= {e.event_id for e in find(store, subject_id).untagged}
    check_erasure(store.layout, store.log_store, subject_id, extra)
    common = dict(keystore=keystore(store), registry=registry(store), extra_event_ids=sorted(extra))
    if dry_run:
        plan = _plan(store, subject_id, derived=derived_stores(store), **common)
        return dataclasses.replace(plan, derived=(*plan.derived, fact_impact(store, plan.event_ids)))
    return _erase(store, subject_id, derived=derived_stores(store, subjects=(subject_id,)),
                  refold=lambda: refold_outcome(store),
                  canaries=canaries, orphan_grace_hours=orphan_grace_hours, notes=notes, **common)


def erase_batch(store: Store, subject_ids: Iterable[str], *, dry_run: bool = False,
                canaries: Iterable[str] | Mapping[str, Iterable[str]] = (), orphan_grace_hours: int = 1,
                notes: Sequence[str] = (), skip_unknown: bool = False) -> "BatchResult | list[ErasurePlan]":
    """Erase many subjects in one pass (:mod:`refold.erasure.batch`): one erasure commit,
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
    from refold.storage.policy import check_erasure
    from refold.erasure.batch import erase_batch as _erase_batch
    from refold.erasure.batch import plan_batch, unique_subjects

    subjects = unique_subjects(subject_ids)
    held = []
    for subject_id in subjects:
        try:
            check_erasure(store.layout, store.log_store, subject_id)
        except LegalHoldError as exc:
            held.append((subject_id, str(exc)))
    if held:
        names = ", ".join(repr(s) for s, _ in held[:10]) + (" …" if len(held) > 10 else "")
        raise LegalHoldError(f"a legal hold covers {len(held)} subject(s) of the batch ({names}); nothing was "
                             f"erased. First: {held[0][1]}. Release the holds or leave those subjects out")
    derived = derived_stores(store, subjects=subjects)
    if dry_run:
        return list(plan_batch(store.log_store, subjects, mode=store.mode, keystore=keystore(store),
                               registry=registry(store), derived=derived, skip_unknown=skip_unknown).values())
    return _erase_batch(store, subjects, keystore=keystore(store), registry=registry(store), derived=derived,
                        refold=lambda: refold_outcome(store), canaries=canaries,
                        orphan_grace_hours=orphan_grace_hours, notes=notes, skip_unknown=skip_unknown)


def scan(store: Store, needles: Iterable[str] = (), *, canaries: Iterable[str] = ()) -> ScanReport:
    """Residue scan of every file under the store (see :mod:`refold.erasure.scan`): ``needles``
    (names) match as whole words, ``canaries`` as substrings."""
    return scan_report(store.root, needles, canaries=canaries, storage_options=store.storage_options)


def verify_receipt(store: Store, receipt: Receipt | str | Path, *, needles: Iterable[str] = (),
                   canaries: Iterable[str] = (), refold: bool = True) -> ReceiptReport:
    """Re-check a receipt (a Receipt, a path, or an erasure id) against the store. With
    ``refold``, the state tables are brought up to date and digested as the receipt's were; a
    receipt whose digest has a retired scheme (:data:`RETIRED_SCHEMES`: written by refold before
    0.2) gets a one-line note instead, every other check running as for any receipt."""
    if isinstance(receipt, str) and not receipt.endswith(".json") and not Path(receipt).exists():
        receipt = receipt_path(store.layout, receipt)
    rec = receipt if isinstance(receipt, Receipt) else load_receipt(receipt, layout=store.layout)
    return _verify_receipt(store.root, rec, needles=needles, canaries=canaries, keystore=keystore(store),
                           refold=(lambda scheme: refold_outcome(store, scheme, kept=False)) if refold else None,
                           storage_options=store.storage_options)
