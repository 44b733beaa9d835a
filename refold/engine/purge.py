"""The state tables as a derived store of erasure, the honouring of erased markers, and vacuum.

:class:`StatePurger` is what an erasure purges (``purge(event_ids)``): the buckets that held the
erased events' items are refolded from the surviving items (cached extractions: no model call),
the dependent roll-ups and entities refreshed. :func:`honour_marks` does the same for keys
destroyed outside an erasure; :func:`vacuum_state` deletes files old versions no longer need.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

import polars as pl
import pyarrow.compute as pc

from refold.fold.errors import ValidationError
from refold.fold.partition import (
    one_of,
)
from refold.fold.spec import FoldSpec
from refold.storage.derived import PurgeResult
from refold.storage.keys.port import marks_fingerprint
from refold.storage.state import StateStore, StateTag, among, state_specs
from refold.reads.tables import PAST, forget_reads
from refold.engine.merge import merge_rows
from refold.engine.refresh import buckets_of, current_tag, read_rollups, refresh_derived, refresh_entities
from refold.store import Store


class StatePurger:
    """The state tables as a derived store of erasure: ``purge(event_ids)`` refolds, for every
    spec, the subjects whose items came from an erased event (from the surviving items: no model
    call) and refreshes the roll-ups and entities that depend on them; the erasure's next step
    (``scrub_derived``) vacuums every state table, so no old version keeps what was erased.

    Idempotent in ``event_ids`` (an erasure's rerun calls it again with the same ids): a spec's
    state that a killed purge left untagged (:func:`purge_state` untags it while it rewrites) is
    dropped, and the erasure's refold then folds it anew from the rewritten log."""

    def __init__(self, store: Store, subjects: Iterable[str] = ()):
        self.store = store
        self.subjects = tuple(subjects)  # the erasure's own: every event under their keys is in its plan

    def purge(self, event_ids: Iterable[str]) -> PurgeResult:
        """In shred mode the events of every owner with an erased marker are purged too (the
        erasure's own subject's, and those of keys destroyed outside an erasure since the last
        fold), and the tags record those markers (see :func:`honour_marks`). A state whose tag
        honours every marker but those of the erasure's own ``subjects`` needs only
        ``event_ids``: the log is not read for the others (whose events it no longer holds)."""
        from refold.storage.keys.crypto import marked_in_log
        from refold.storage.keys.port import KeyOwner

        marks = self.store.erased_marks()  # (the erasure wrote its subject's marker before this step)
        ids = sorted(set(event_ids))
        honoured = marks_fingerprint(marks - {KeyOwner.subject(s).digest() for s in self.subjects})
        marked: list[str] | None = None  # every marked owner's events, read once if a state needs them
        forget_reads(self.store)  # this process's up-to-date marks no longer hold
        found = state_specs(self.store.layout)
        if not found or not (ids or marks):
            return PurgeResult(store="state", rows=0)
        specs = self.store.recorded_specs()
        removed, detail = 0, []
        for spec_hash in found:
            state_tables = self.store.state_store(specs[spec_hash]) if spec_hash in specs else None
            tag = None if state_tables is None else state_tables.tag()
            if tag is None:
                # no spec to refold with, a fold that never finished or a purge killed half-way:
                # drop it (it may hold erased data; which rows, nothing says any more)
                (state_tables or StateStore(self.store.layout, spec_hash, storage_options=self.store.storage_options)).drop()
                detail.append(f"state/{spec_hash}: dropped (untagged: refolded in full by the erasure's refold)")
                continue
            if marks and tag.erased != honoured:
                if marked is None:
                    marked = sorted(set(ids) | marked_in_log(self.store.log_store, marks))
                these = marked
            else:
                these = ids
            n = purge_state(state_tables, specs[spec_hash], these, erased=marks_fingerprint(marks), vacuum=False)
            removed += n
            detail.append(f"state/{spec_hash}: {n} item row(s) removed")
        return PurgeResult(store="state", rows=removed, detail=tuple(detail))


def honour_marks(store: Store, spec: FoldSpec, state_tables: StateStore, tag: StateTag, marks: frozenset[str]) -> StateTag:
    """``tag``, or the tag after erasing from the state the events up to it of the owners among
    ``marks`` when ``tag`` honours other markers: keys destroyed outside an erasure (a tenant's
    key, ``KeyStore.destroy`` called directly, an erasure stopped before its refold). The events
    go as an erasure's do (:func:`purge_state`: cached extractions, no model call, old versions
    vacuumed); the events after the tag are read with ``marks`` by the fold that follows."""
    from refold.storage.keys.crypto import marked_in_log

    wanted = marks_fingerprint(marks)
    if tag.erased == wanted:
        return tag
    ids = marked_in_log(store.log_store, marks, until=tag.log_seq)
    forget_reads(store)  # (this process's kept reads of the tables predate the purge)
    purge_state(state_tables, spec, sorted(ids), erased=wanted)
    return current_tag(state_tables)


def purge_state(state_tables: StateStore, spec: FoldSpec, event_ids: Sequence[str], *, erased: str | None = None,
                vacuum: bool = True) -> int:
    """Remove ``event_ids``' items from ``store`` and refold what they touched; return the rows removed.
    ``erased``: the erased markers the state honours after it (``StateTag.erased``; None: as before).
    ``vacuum`` False: the caller vacuums the tables next (an erasure's scrub step), even after a crash.

    The items and merged rows are rewritten bucket by bucket (only the buckets of the erased
    items' subjects: a subject's rows are a small part of its bucket); the derived rows of the
    subjects' facts live in their objects' buckets, which can be large (an organisation's staff),
    so they are replaced by fact id, delta-rs rewriting only the files that hold them. Then the
    vacuum removes the old files: no version left holds the erased items or what they gave.

    What to refold is found from the erased items, which the first rewrite removes; so the state
    is untagged before it (one commit) and tagged again only after the last rewrite and the
    vacuum. Killed anywhere in between, it stays untagged: no read takes it for a whole state,
    and the next purge (:class:`StatePurger`, an erasure's rerun) drops it or the next fold
    refolds it in full, instead of finding no erased item left and keeping what they gave."""
    tag = state_tables.tag()
    assert tag is not None
    buckets = tag.buckets
    honoured = tag.erased if erased is None else erased
    hit = state_tables.read("items", columns=["bucket", "seq", "subject_node", "object_node"],
                     filter=among("event_id", event_ids))
    if hit.num_rows == 0:
        if honoured != tag.erased:
            state_tables.set_tag(dataclasses.replace(tag, erased=honoured))
        return 0
    state_tables.clear_tag()
    where = set(hit["bucket"].to_pylist())
    subjects = set(hit["subject_node"].to_pylist())
    named = subjects | set(hit["object_node"].to_pylist())
    items = state_tables.read("items", buckets=where)
    surviving = items.filter(pc.invert(among("event_id", event_ids)))
    state_tables.write("items", surviving, buckets=where)
    after = pl.from_arrow(merge_rows(spec, surviving.filter(among("subject_node", subjects)), buckets))
    home = buckets_of(subjects, buckets)
    old = pl.from_arrow(state_tables.read("facts", buckets=home, layer="merged"))
    mine = one_of("subject", subjects)
    state_tables.write("facts", pl.concat([old.filter(~mine), after]).to_arrow(), buckets=home, layer="merged")
    before = old.filter(mine)
    changed = set(before["fact_id"].to_list()) | set(after["fact_id"].to_list())
    derived = refresh_derived(spec, state_tables, buckets, before=before, after=after, changed=changed, append=False,
                               seen_at=-1)
    # a node the erased items named changes only where they held the first occurrence of one of
    # its names (or it is one of their subjects: its summary): the others are left as they are
    firsts = pl.from_arrow(state_tables.read("entities", buckets=buckets_of(named, buckets), columns=["node", "name_seqs"],
                                      filter=among("node", named)))
    erased = pl.Series(sorted(set(hit["seq"].to_pylist())), dtype=pl.Int64).implode()
    renamed = set(firsts.filter(pl.col("name_seqs").list.eval(pl.element().is_in(erased)).list.any())["node"]
                  .to_list())
    entities_version = refresh_entities(spec, state_tables, buckets, subjects | renamed, renamed)
    if vacuum:  # (before the tag: a state tagged again holds no version with the erased items)
        state_tables.vacuum()
    state_tables.set_tag(dataclasses.replace(tag, entities_version=entities_version,
                                      facts=tag.facts + after.height - before.height, derived=tag.derived + derived,
                                      rollups=read_rollups(spec), erased=honoured))
    return items.num_rows - surviving.num_rows


def vacuum_state(store: Store, retain_hours: int) -> dict[str, int]:
    """Delete the files the state tables of every spec stopped using more than ``retain_hours``
    ago (Delta's vacuum); return spec hash → files deleted. Drops the Store's open table handles
    and kept past reads, which may name those files."""
    if isinstance(retain_hours, bool) or not isinstance(retain_hours, int) or retain_hours < 0:
        raise ValidationError(f"retain_hours is {retain_hours!r}; give a whole number of hours, 0 or more "
                              "(168: a week)")
    out = {spec_hash: len(StateStore(store.layout, spec_hash, storage_options=store.storage_options)
                          .vacuum(retain_hours))
           for spec_hash in state_specs(store.layout)}
    store.forget_tables()
    store.forget(PAST)
    return out
