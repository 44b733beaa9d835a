"""Running the partitioned fold against a store: state as Delta tables (see refold.storage.state).

    full         log (in batches) → extraction cache (extract what is missing) → items table
                 → per bucket group: read its items, merge them (merge_items: the plain
                   (tenant, subject, relation) groups in closed form, the rest event by event)
                 → entities (names from one pass over the items, summaries) → stored roll-ups
                   (inverse rules)
                 → the last commit is tagged with the log position (the snapshot)
    incremental  the events after the tag → their items (appended) → only the subjects they touch
                 are advanced from their current rows, the buckets holding them rewritten, and the
                 stored roll-ups and entities that depend on those subjects refreshed
    erasure      :class:`StatePurger`: the buckets that held the erased events' items are refolded
                 from the surviving items (cached extractions: no model call), the dependent
                 roll-ups and entities refreshed, and old versions vacuumed

In shred mode the events are read decrypted, an event of an owner with an erased marker
(``KeyStore.erased_owners``) as erased, and every tag records the markers its fold honoured
(``StateTag.erased``): markers listed since (keys destroyed outside an erasure) make the next
fold erase those owners' events from the state first, as an erasure does (:func:`honour_marks`),
and reads leave those owners' facts out themselves until then (refold.reads.overlay).

Compose roll-ups are not stored: a read derives them for what it reads (refold.reads.rollups),
so no stage here costs in proportion to (moves × staff). Peak memory of a full fold follows the
largest bucket group, not the whole graph. :func:`merge_group` reads a bucket group's items from
the store itself and commits its merged partitions there, returning only a row count, so the same
function runs as a remote task given the store URI (``refold.jobs.ray_merge``: nothing large
travels through the driver); locally the groups run one after another in this process.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from refold import faults
from refold.fold.errors import ExtractionError
from refold.fold.events import Event
from refold.fold.extract import Extractor
from refold.fold.partition import (
    DEFAULT_BUCKETS, FACT_SCHEMA, ITEM_SCHEMA, advance_subjects, derive_frame, entities_from_names,
    first_surfaces, items_of, names_of_surfaces, stored_rules,
)
from refold.fold.spec import FoldSpec
from refold.engine.extraction import FoldReport, extract_missing
from refold.fold.extract import needs_extraction
from refold.engine.progress import FoldProgress
from refold.storage.keys.port import marks_fingerprint
from refold.storage.log.schema import table_to_events
from refold.storage.state import FORMAT as STATE_FORMAT
from refold.storage.state import StateStore, StateTag, among
from refold.engine.merge import group_name, group_size, groups_of, local_merger
from refold.engine.purge import honour_marks
from refold.engine.refresh import (
    BASE_COLUMNS, OCC_COLUMNS, SUMMARY_COLUMNS, buckets_of, current_tag, read_rollups, refresh_derived, refresh_entities,
    retag,
)
from refold.store import Store


__all__ = ["fold_state"]

_log = logging.getLogger(__name__)  # counts and seconds only: never an event's content

#: Log events read (and their items built) per batch of a full fold.
EVENT_BATCH = 20_000
#: Item rows a full fold holds before writing them (each write adds a file per bucket).
ITEM_FLUSH = 200_000
#: An incremental fold compacts the state tables (newest versions only) when the facts table
#: holds more than this many data files per bucket (each incremental fold adds about two).
COMPACT_FILES = 10


@dataclass(frozen=True)
class _Head:
    seq: int
    link: str


# -- reading the log -----------------------------------------------------------------------------


def _event_batches(store: Store, since: int = 0, marks: frozenset[str] = frozenset()) -> Iterator[list[Event]]:
    """Stored events with seq >= ``since`` in batches (each in log order), readable form (shred
    mode: decrypted batch by batch, events of owners among ``marks`` erased)."""
    from refold.storage.delta.io import parquet_dataset
    from refold.storage.log.schema import EVENTS_SCHEMA

    dt = store.log_store.table()  # (pyarrow's reader over delta-rs's file list: see StateStore.read)
    scanner = parquet_dataset(dt, dt.file_uris(), EVENTS_SCHEMA).scanner(filter=pc.field("seq") >= since,
                                                                         batch_size=EVENT_BATCH)
    for batch in scanner.to_batches():
        if batch.num_rows:
            table = pa.Table.from_batches([batch]).sort_by("seq")
            yield store.readable(list(table_to_events(table)), marks)


def _items(store: Store, spec: FoldSpec, events: list[Event], *, extractor: Extractor | None, buckets: int,
           progress: bool, runner, batch_size: int) -> tuple[list[dict[str, Any]], int, int]:
    """(item rows, extraction calls, rejected outputs) of ``events``, extracting what is missing."""
    cache = store.cache
    calls = rejected = 0
    wanted = [e for e in events if needs_extraction(e)]
    if not wanted:
        return [i for e in events for i in items_of(e, None, buckets)], 0, 0
    ids = [e.event_id for e in wanted]
    found = _cached(cache, spec, wanted)
    if extractor is not None and len(found) < len(ids):
        # (the cache was just read: what it lacks is extracted without a second read of it, and
        # what landed is used as extracted; only a key another writer cached first is read back)
        calls, rejected = extract_missing(events, spec=spec, extractor=extractor, cache=cache,
                                          batch_size=batch_size, progress=progress, runner=runner,
                                          cached=set(found), collect=found)
        unread = [e for e in wanted if e.event_id not in found]
        if unread:
            found.update(_cached(cache, spec, unread))
    missing = [i for i in ids if i not in found]
    if missing:
        raise ExtractionError(f"{len(missing)} event(s) have no {spec.extractor} extraction yet; run `refold "
                              f"fold {store.root} --extractor {spec.extractor}` first")
    if extractor is None or calls == 0:
        rejected = sum(len(found[i].rejected) for i in ids)
    rows = []
    for e in events:
        cached = found.get(e.event_id)
        rows += items_of(e, None if cached is None else cached.facts, buckets)
    return rows, calls, rejected


def _cached(cache, spec: FoldSpec, events: list[Event]) -> dict[str, Any]:
    """The cached extractions of ``events`` for ``spec``, by event id (those cached)."""
    found = cache.facts(spec.hash, [e.event_id for e in events], seqs=[e.seq for e in events])
    if len(found) < len(events) and not cache.every_row_has_seq():  # (else a seq-pruned read saw them all)
        found.update(cache.facts(spec.hash, [e.event_id for e in events if e.event_id not in found]))
    return found


# -- the fold ------------------------------------------------------------------------------------


def fold_state(store: Store, spec: FoldSpec, *, extractor: Extractor | None, full: bool = False,
               progress: bool = False, runner=None, batch_size: int = 16,
               buckets: int | None = None, merger=None) -> FoldReport:
    """Bring ``spec``'s state tables up to date with the log (see the module docstring).

    ``buckets``: the partition count (default: the state's, or :data:`DEFAULT_BUCKETS`); a
    count other than the state's refolds in full. ``merger``: how a full fold's merge stage runs
    (default :func:`local_merger`)."""
    started = time.perf_counter()
    state_tables = store.state_store(spec)
    marks = store.erased_marks()  # before any event is read: a marker listed later is the next fold's
    current = state_tables.tag()
    tag = None if full else current
    if tag is not None and buckets is not None and buckets != tag.buckets:
        tag = None
    # a full fold keeps the state's count unless told another (an operator's choice outlives it)
    buckets = buckets or (current.buckets if current is not None else DEFAULT_BUCKETS)
    report = None
    if tag is not None:
        tag = honour_marks(store, spec, state_tables, tag, marks)
        report = _incremental(store, spec, state_tables, tag, marks, extractor=extractor, progress=progress,
                              runner=runner, batch_size=batch_size)
        if report is not None:
            buckets = tag.buckets
    how = "incremental" if report is not None else "full"
    if report is None:
        report = _full(store, spec, state_tables, marks, extractor=extractor, progress=progress, runner=runner,
                       batch_size=batch_size, buckets=buckets, merger=merger)
    _log.info("fold (%s, spec %s): %d events folded (%d new), %d buckets, %d extraction calls, %d facts, %.3fs",
              how, spec.hash, report.events_folded, report.last_seq - report.started_from, buckets,
              report.extraction_calls, report.facts, time.perf_counter() - started)
    return report


def _full(store, spec, state_tables: StateStore, marks: frozenset[str], *, extractor, progress, runner, batch_size, buckets,
          merger=None) -> FoldReport:
    """Refold every partition. Resumable: each commit notes the run (spec, log head, bucket
    count) and what it holds, so a rerun after a killed fold of the same log reuses the items
    and the bucket groups already written and redoes only the missing ones."""
    log_head = store.head()
    run = f"{STATE_FORMAT}:{log_head.seq}:{log_head.link}:{buckets}:{marks_fingerprint(marks)}"
    # shred mode: untagged tables with files are a purge or fold that was killed; their old
    # versions may hold owners erased since (a destroyed key): none may outlive this fold
    unknown = bool(marks) and state_tables.table("facts") is not None and state_tables.tag() is None
    calls = rejected = 0
    # the items are reusable only when the newest run that wrote them is this one: a run at the
    # same log position with other buckets may have rewritten them since (64 → 8 → 64 buckets)
    newest = next((n for n in state_tables.notes("items") if "run" in n), None)
    items_done = newest if newest is not None and newest["run"] == run and "tenants" in newest else None
    groups_done = {n["group"] for n in state_tables.notes("facts") if n.get("run") == run and "group" in n}
    state_tables.clear_tag()
    if items_done is not None:
        tenants = set(json.loads(items_done["tenants"]))
    else:
        calls, rejected, tenants = _write_items(store, spec, state_tables, marks, extractor=extractor, progress=progress,
                                                runner=runner, batch_size=batch_size, buckets=buckets,
                                                until=log_head.seq, run=run)
        groups_done = set()
    groups = groups_of(buckets, group_size(state_tables, buckets))
    todo = [g for g in groups if group_name(g) not in groups_done]
    reused = buckets - sum(len(g) for g in todo)
    if len(todo) == len(groups):  # nothing to reuse: the table is emptied first (old rows, old counts)
        state_tables.write("facts", FACT_SCHEMA.empty_table(), note={"run": run, "cleared": "1"})
    with FoldProgress(buckets, label="merging partitions", enabled=progress) as bar:
        bar.advance(reused)
        for i, (group, _written) in enumerate((merger or local_merger)(state_tables, spec, todo, buckets, run=run)):
            faults.point(f"fold.merged:{i}")  # (crash tests kill the fold here)
            _log.debug("fold: bucket group %d merged (%d buckets)", i, len(group))
            bar.advance(len(group))
    tag = _finish(store, spec, state_tables, head=_Head(log_head.seq, log_head.link), tenants=tenants, buckets=buckets,
                  subjects=None, erased=marks_fingerprint(marks))
    if unknown:
        state_tables.vacuum()
    report = _report(state_tables, spec, tag, calls=calls, rejected=rejected, started_from=-1)
    return dataclasses.replace(report, reused_partitions=reused)


def _write_items(store, spec, state_tables: StateStore, marks: frozenset[str], *, extractor, progress, runner, batch_size,
                 buckets, until: int, run: str) -> tuple[int, int, set[str]]:
    """Write the items table of the log up to ``until`` (extracting what is missing); the last
    commit notes the run and the tenants."""
    calls = rejected = 0
    tenants: set[str] = set()
    first, pending = True, []
    for events in _event_batches(store, marks=marks):
        events = [e for e in events if e.seq <= until]
        if not events:
            continue
        rows, c, r = _items(store, spec, events, extractor=extractor, buckets=buckets, progress=progress,
                            runner=runner, batch_size=batch_size)
        calls, rejected = calls + c, rejected + r
        tenants.update(e.tenant for e in events if e.tenant is not None)  # (tombstones: none)
        pending.append(pa.Table.from_pylist(rows, schema=ITEM_SCHEMA))
        if sum(t.num_rows for t in pending) >= ITEM_FLUSH:  # (fewer, larger files per bucket)
            state_tables.write("items", pa.concat_tables(pending), mode="overwrite" if first else "append")
            pending, first = [], False
    state_tables.write("items", pa.concat_tables(pending) if pending else ITEM_SCHEMA.empty_table(),
                mode="overwrite" if first else "append",
                note={"run": run, "tenants": json.dumps(sorted(tenants))})
    faults.point("fold.items")
    return calls, rejected, tenants


def _finish(store, spec, state_tables: StateStore, *, head: _Head, tenants: Iterable[str], buckets: int,
            subjects: set[str] | None, nodes: set[str] | None = None, new_items: pl.DataFrame | None = None,
            before: pl.DataFrame | None = None, after: pl.DataFrame | None = None,
            changed: set[str] | None = None, counts: tuple[int, int] = (0, 0), erased: str = "") -> StateTag:
    """The stages after the merge: entities, then the roll-ups, then the tag.

    ``subjects`` None: everything (a full fold). Else (an append: an incremental fold) the
    subjects whose merged rows changed: ``before``/``after`` their merged rows before and after,
    ``changed`` the ids of the rows that changed, ``nodes`` the nodes the ``new_items`` name;
    new row versions are appended. ``counts``: the (merged, derived) row counts before the
    change. ``erased``: the erased markers the fold honoured (``StateTag.erased``). (An erasure
    runs its own stages: :func:`purge_state`.)"""
    tenants = tuple(sorted(tenants))
    if subjects is None:
        entities_version, facts_count = _full_entities(spec, state_tables, buckets)
        derived = _full_rollups(spec, state_tables, buckets)
        tag = StateTag(log_seq=head.seq, log_link=head.link, buckets=buckets, tenants=tenants,
                       entities_version=entities_version, facts=facts_count, derived=derived,
                       rollups=read_rollups(spec), erased=erased)
    else:
        assert new_items is not None and before is not None and after is not None and changed is not None
        entities_version = refresh_entities(spec, state_tables, buckets, (nodes or set()) | subjects, set(),
                                             new_items=new_items, merged=after, seen_at=head.seq)
        delta = refresh_derived(spec, state_tables, buckets, before=before, after=after, changed=changed,
                                 append=True, seen_at=head.seq)
        tag = StateTag(log_seq=head.seq, log_link=head.link, buckets=buckets, tenants=tenants,
                       entities_version=entities_version, facts=counts[0] + after.height - before.height,
                       derived=counts[1] + delta, rollups=read_rollups(spec), erased=erased)
    state_tables.set_tag(tag)
    return current_tag(state_tables)


def _full_entities(spec: FoldSpec, state_tables: StateStore, buckets: int) -> tuple[int, int]:
    """The entity stage of a full fold, bucket group by bucket group: first every node's names
    (one pass over the items, a group's partitions at a time: each group gives the first
    occurrence of each surface it names, objects in other buckets included), then the
    summaries of each group's subjects; returns (entities version, merged row count)."""
    groups = groups_of(buckets, group_size(state_tables, buckets))
    partials = [first_surfaces(spec, pl.from_arrow(state_tables.read("items", buckets=group, columns=OCC_COLUMNS)))
                for group in groups]
    names = names_of_surfaces(pl.concat(partials))
    name_of = dict(zip(names["node"].to_list(), (s[0] for s in names["surfaces"].to_list())))
    version, merged_rows = -1, 0
    for group in groups:
        found = names.filter(pl.col("bucket").is_in(pl.Series(group, dtype=pl.Int32).implode()))
        merged = pl.from_arrow(state_tables.read("facts", buckets=group, columns=SUMMARY_COLUMNS,
                                          layer="merged"))
        merged_rows += merged.height
        rows = entities_from_names(found, merged, name_of, buckets=buckets).to_arrow()
        version = state_tables.write("entities", rows) if group is groups[0] else state_tables.write("entities", rows, buckets=group)
    return version, merged_rows


def _full_rollups(spec: FoldSpec, state_tables: StateStore, buckets: int) -> int:
    """The stored roll-ups of a full fold (inverse rules: one row per input row), bucket group by
    bucket group of their inputs; returns the derived row count. Compose rules are derived when
    read (their rows grow with moves × staff)."""
    rules = stored_rules(spec.rollups)
    firsts = sorted({r.inputs[0] for r in rules})
    state_tables.write("facts", FACT_SCHEMA.empty_table(), layer="derived")  # the layer, emptied
    total = 0
    for group in groups_of(buckets, group_size(state_tables, buckets)) if firsts else []:
        mine = pl.from_arrow(state_tables.read("facts", buckets=group, columns=BASE_COLUMNS, layer="merged",
                                        filter=among("relation", firsts)))
        if mine.height == 0:
            continue
        derived = derive_frame(rules, mine, buckets=buckets)
        if derived.height:
            state_tables.write("facts", derived.to_arrow(), mode="append")
            total += derived.height
    return total


def _report(state_tables: StateStore, spec: FoldSpec, tag: StateTag, *, calls: int, rejected: int,
            started_from: int) -> FoldReport:
    return FoldReport(events_folded=tag.log_seq + 1, extraction_calls=calls, facts=tag.facts,
                      derived_facts=tag.derived, rejected_outputs=rejected, last_seq=tag.log_seq,
                      spec_hash=spec.hash, started_from=started_from)


# -- incremental -----------------------------------------------------------------------------------


def _tail(store: Store, tag: StateTag, marks: frozenset[str]) -> list[Event] | None:
    """The events after ``tag``'s position in readable form (shred mode: only they are
    decrypted, those of owners among ``marks`` erased), or None when the log no longer has that
    position (rewritten or another log: the caller refolds in full)."""
    from refold.storage.log.ranges import events_from

    if tag.log_seq < 0:
        return store.readable(events_from(store.log_store, 0), marks)
    events = events_from(store.log_store, tag.log_seq)
    if not events or events[0].seq != tag.log_seq or events[0].link != tag.log_link:
        return None
    return store.readable(events[1:], marks)


def _incremental(store, spec, state_tables: StateStore, tag: StateTag, marks: frozenset[str], *, extractor, progress,
                 runner, batch_size) -> FoldReport | None:
    tail = _tail(store, tag, marks)
    if tail is None:
        return None
    if not tail:
        return _report(state_tables, spec, tag, calls=0, rejected=0, started_from=tag.log_seq)
    buckets, started_from = tag.buckets, tag.log_seq
    rows, calls, rejected = _items(store, spec, tail, extractor=extractor, buckets=buckets, progress=progress,
                                   runner=runner, batch_size=batch_size)
    head = _Head(tail[-1].seq, tail[-1].link)
    tenants = set(tag.tenants) | {e.tenant for e in tail if e.tenant is not None}
    if not rows:
        # events without facts (an erasure's own record, a spec change): only the position
        # moves; the stages after the merge would read both layers' files to change nothing
        entities = state_tables.table("entities")
        state_tables.set_tag(dataclasses.replace(tag, log_seq=head.seq, log_link=head.link, tenants=tuple(sorted(tenants)),
                                          entities_version=tag.entities_version if entities is None
                                          else entities.version()))
        return _report(state_tables, spec, current_tag(state_tables), calls=calls, rejected=rejected, started_from=started_from)
    state_tables.write("items", pa.Table.from_pylist(rows, schema=ITEM_SCHEMA), mode="append")
    subjects = {r["subject_node"] for r in rows}
    nodes = subjects | {r["object_node"] for r in rows}
    # only the touched subjects' rows are read, and only the rows the merge changed are written
    # (as new versions): 1% new events touch nearly every bucket, so rewriting buckets would
    # rewrite the whole state
    current = pl.from_arrow(state_tables.read("facts", buckets=buckets_of(subjects, buckets),
                                       layer="merged", filter=among("subject", subjects)))
    # the merge changes only open rows (it corroborates, supersedes or retracts an open fact, or
    # adds one): the closed history goes neither through it nor into the stages after it
    # (summaries are of open rows too)
    current = current.filter(pl.col("valid_to").is_null())
    rows.sort(key=lambda r: (r["seq"], r["ordinal"]))
    fresh, changed = advance_subjects(spec, current.to_dicts(), rows, buckets=buckets)
    after = pl.from_arrow(pa.Table.from_pylist(fresh, schema=FACT_SCHEMA))
    # (the changed rows are committed with the roll-ups they change: one commit to facts)
    tag = _finish(store, spec, state_tables, head=head, tenants=tenants, buckets=buckets, subjects=subjects, nodes=nodes,
                  new_items=pl.from_arrow(pa.Table.from_pylist(rows, schema=ITEM_SCHEMA)),
                  before=current, after=after, changed=changed, counts=(tag.facts, tag.derived), erased=tag.erased)
    if state_tables.files("facts") > COMPACT_FILES * buckets:
        size = group_size(state_tables, buckets)
        state_tables.compact("facts", buckets=buckets, group=size)
        state_tables.compact("entities", buckets=buckets, group=size)
        tag = retag(state_tables, tag)
    return _report(state_tables, spec, tag, calls=calls, rejected=rejected, started_from=started_from)


# -- erasure ---------------------------------------------------------------------------------------


