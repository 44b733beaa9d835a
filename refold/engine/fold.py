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
and reads leave those owners' facts out themselves until then (refold.state_overlay).

Compose roll-ups are not stored: a read derives them for what it reads (refold.state_rollups),
so no stage here costs in proportion to (moves × staff). Peak memory of a full fold follows the
largest bucket group, not the whole graph. :func:`merge_group` reads a bucket group's items from
the store itself and commits its merged partitions there, returning only a row count, so the same
function runs as a remote task given the store URI (``refold.jobs.ray_merge``: nothing large
travels through the driver); locally the groups run one after another in this process.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from refold.fold.errors import ExtractionError, RefoldError, StoreError
from refold.fold.events import Event
from refold.fold.extract import Extractor
from refold.fold.partition import (
    DEFAULT_BUCKETS, FACT_SCHEMA, ITEM_SCHEMA, advance_subjects, bucket_of, derive_frame, entities_from_names,
    entity_rows, first_surfaces, items_of, merge_items, names_of_surfaces, one_of, read_time_rules, stored_rules,
)
from refold.fold.spec import FoldSpec
from refold.folding import FoldReport, extract_missing, needs_extraction
from refold.progress import FoldProgress
from refold.storage.cache import PurgeResult
from refold.storage.keys import marks_fingerprint
from refold.storage.schema import _utc_times, table_to_events
from refold.storage.state import FORMAT as STATE_FORMAT
from refold.storage.state import StateStore, StateTag, among, state_specs

if TYPE_CHECKING:
    from refold.memory import Memory

__all__ = ["PartitionError", "StatePurger", "fold_state", "group_size", "local_merger", "merge_buckets",
           "merge_group"]

#: Log events read (and their items built) per batch of a full fold.
EVENT_BATCH = 20_000
#: Item rows a full fold holds before writing them (each write adds a file per bucket).
ITEM_FLUSH = 200_000
#: Item rows per bucket group: a full fold (and a compaction) holds one group at a time, and
#: each group costs a few commits, so small stores fold in one group and large ones in many.
#: (``REFOLD_STATE_GROUP_ROWS`` overrides it for a process: tests of many groups on a small log.)
GROUP_ROWS = int(os.environ.get("REFOLD_STATE_GROUP_ROWS", 25_000))
#: An incremental fold compacts the state tables (newest versions only) when the facts table
#: holds more than this many data files per bucket (each incremental fold adds about two).
COMPACT_FILES = 10
#: Commits a bucket group's merge task tries before giving up (concurrent groups rarely conflict).
MERGE_COMMIT_TRIES = 5


class PartitionError(RefoldError):
    """A partition's fold failed; names the partition (bucket) and the cause."""


@dataclass(frozen=True)
class _Head:
    seq: int
    link: str


# -- reading the log -----------------------------------------------------------------------------


def _event_batches(mem: "Memory", since: int = 0, marks: frozenset[str] = frozenset()) -> Iterator[list[Event]]:
    """Stored events with seq >= ``since`` in batches (each in log order), readable form (shred
    mode: decrypted batch by batch, events of owners among ``marks`` erased)."""
    from refold.storage.delta_io import parquet_dataset
    from refold.storage.schema import EVENTS_SCHEMA

    dt = mem.log_store._table()  # (pyarrow's reader over delta-rs's file list: see StateStore.read)
    scanner = parquet_dataset(dt, dt.file_uris(), EVENTS_SCHEMA).scanner(filter=pc.field("seq") >= since,
                                                                         batch_size=EVENT_BATCH)
    for batch in scanner.to_batches():
        if batch.num_rows:
            table = pa.Table.from_batches([batch]).sort_by("seq")
            yield mem._readable(list(table_to_events(table)), marks)


def _items(mem: "Memory", spec: FoldSpec, events: list[Event], *, extractor: Extractor | None, buckets: int,
           progress: bool, runner, batch_size: int) -> tuple[list[dict[str, Any]], int, int]:
    """(item rows, extraction calls, rejected outputs) of ``events``, extracting what is missing."""
    cache = mem.cache
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
                              f"fold {mem.root} --extractor {spec.extractor}` first")
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


def _dicts(table: pa.Table) -> list[dict[str, Any]]:
    """Rows as dicts, column by column (times through the log reader's converter: each distinct
    time made once; ``to_pylist`` made a zoneinfo datetime per value, half of a partition's fold)."""
    columns = {name: (_utc_times(table[name]) if pa.types.is_timestamp(table.schema.field(name).type)
                      else table[name].to_pylist()) for name in table.column_names}
    names = list(columns)
    return [dict(zip(names, values)) for values in zip(*columns.values())]


# -- the fold ------------------------------------------------------------------------------------


def _group_name(group: Sequence[int]) -> str:
    return f"{group[0]}-{group[-1]}"


def local_merger(store: StateStore, spec: FoldSpec, groups: Sequence[Sequence[int]], buckets: int, *,
                 run: str) -> Iterator[tuple[Sequence[int], int]]:
    """The merge stage in this process: each group merged and written (:func:`merge_group`), one
    after another, yielding (group, rows written). A *merger* is any callable of this shape
    (``refold.jobs.ray_merge.ray_merger`` runs the groups as Ray tasks that write their own
    files): the fold only learns which groups are done, never their rows."""
    for group in groups:
        yield group, merge_group(store, spec, group, buckets=buckets, run=run)


def merge_group(store: StateStore, spec: FoldSpec, group: Sequence[int], *, buckets: int, run: str) -> int:
    """Merge the buckets ``group`` (:func:`merge_buckets`) and replace their partitions of the
    merged layer with the result, in one commit noting the run and the group (what a rerun after
    a kill reuses); return the rows written. Groups are disjoint partitions, so several of them
    (Ray tasks) may commit at once: delta-rs rebases an overwrite whose predicate no concurrent
    commit touched, and a commit that still fails is retried (the overwrite is idempotent).

    The facts table must exist (the fold creates or empties it before the merge stage): a task
    that created it would replace the whole table, and a concurrent group's commit with it."""
    from deltalake.exceptions import CommitFailedError

    if store.table("facts") is None:
        raise StoreError(f"the state table {store.path('facts')} does not exist; a merge task only replaces "
                         "its partitions (run the merge through fold_state, which creates the table first)")
    merged = merge_buckets(store, spec, group, buckets=buckets)
    for attempt in range(MERGE_COMMIT_TRIES):
        try:
            store.write("facts", merged, buckets=group, layer="merged", note={"run": run, "group": _group_name(group)})
            return merged.num_rows
        except StoreError as exc:
            if not isinstance(exc.__cause__, CommitFailedError) or attempt + 1 == MERGE_COMMIT_TRIES:
                raise
    raise AssertionError("unreachable")


def merge_buckets(store: StateStore, spec: FoldSpec, group: Sequence[int], *, buckets: int) -> pa.Table:
    """Merged rows of the buckets ``group`` from the store's items table (subjects never span
    buckets, so the group merges as one: :func:`~refold.fold.partition.merge_items`).

    Reads only those partitions; a failure names the bucket (:class:`PartitionError`)."""
    parts = []
    for bucket in group:
        try:
            parts.append(store.read("items", buckets=[bucket]))
        except RefoldError:
            raise
        except Exception as exc:  # noqa: BLE001 - name the partition, keep the cause
            raise PartitionError(f"reading partition bucket={bucket} of {store.root} failed: {exc!r}; "
                                 "rerun the fold (finished partitions are kept)") from exc
    try:
        return _merge(spec, pa.concat_tables(parts), buckets)
    except RefoldError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise PartitionError(f"folding partitions bucket={_group_name(group)} of {store.root} failed: {exc!r}; "
                             "rerun the fold (finished partitions are kept)") from exc


def _merge(spec: FoldSpec, items: pa.Table, buckets: int) -> pa.Table:
    """Merged rows (:data:`FACT_SCHEMA`) of ``items`` (whole subjects' item rows)."""
    merged = merge_items(spec, pl.from_arrow(items), buckets=buckets, rows=lambda f: _dicts(f.to_arrow()))
    return merged.to_arrow().select(FACT_SCHEMA.names).cast(FACT_SCHEMA)


def fold_state(mem: "Memory", spec: FoldSpec, *, extractor: Extractor | None, full: bool = False,
               progress: bool = False, runner=None, batch_size: int = 16,
               buckets: int | None = None, merger=None) -> FoldReport:
    """Bring ``spec``'s state tables up to date with the log (see the module docstring).

    ``buckets``: the partition count (default: the state's, or :data:`DEFAULT_BUCKETS`); a
    count other than the state's refolds in full. ``merger``: how a full fold's merge stage runs
    (default :func:`local_merger`)."""
    store = mem.state_store(spec)
    marks = mem.erased_marks()  # before any event is read: a marker listed later is the next fold's
    tag = None if full else store.tag()
    if tag is not None and buckets is not None and buckets != tag.buckets:
        tag = None
    buckets = buckets or DEFAULT_BUCKETS
    if tag is not None:
        tag = honour_marks(mem, spec, store, tag, marks)
        done = _incremental(mem, spec, store, tag, marks, extractor=extractor, progress=progress, runner=runner,
                            batch_size=batch_size)
        if done is not None:
            return done
    return _full(mem, spec, store, marks, extractor=extractor, progress=progress, runner=runner,
                 batch_size=batch_size, buckets=buckets, merger=merger)


def _full(mem, spec, store: StateStore, marks: frozenset[str], *, extractor, progress, runner, batch_size, buckets,
          merger=None) -> FoldReport:
    """Refold every partition. Resumable: each commit notes the run (spec, log head, bucket
    count) and what it holds, so a rerun after a killed fold of the same log reuses the items
    and the bucket groups already written and redoes only the missing ones."""
    log_head = mem.head()
    run = f"{STATE_FORMAT}:{log_head.seq}:{log_head.link}:{buckets}:{marks_fingerprint(marks)}"
    # shred mode: untagged tables with files are a purge or fold that was killed; their old
    # versions may hold owners erased since (a destroyed key): none may outlive this fold
    unknown = bool(marks) and store.table("facts") is not None and store.tag() is None
    calls = rejected = 0
    items_done = next((n for n in store.notes("items") if n.get("run") == run and "tenants" in n), None)
    groups_done = {n["group"] for n in store.notes("facts") if n.get("run") == run and "group" in n}
    store.clear_tag()
    if items_done is not None:
        tenants = set(json.loads(items_done["tenants"]))
    else:
        calls, rejected, tenants = _write_items(mem, spec, store, marks, extractor=extractor, progress=progress,
                                                runner=runner, batch_size=batch_size, buckets=buckets,
                                                until=log_head.seq, run=run)
        groups_done = set()
    groups = _groups(buckets, group_size(store, buckets))
    todo = [g for g in groups if _group_name(g) not in groups_done]
    reused = buckets - sum(len(g) for g in todo)
    if len(todo) == len(groups):  # nothing to reuse: the table is emptied first (old rows, old counts)
        store.write("facts", FACT_SCHEMA.empty_table(), note={"run": run, "cleared": "1"})
    with FoldProgress(buckets, label="merging partitions", enabled=progress) as bar:
        bar.advance(reused)
        for i, (group, _written) in enumerate((merger or local_merger)(store, spec, todo, buckets, run=run)):
            _crash_point(f"merged:{i}")
            bar.advance(len(group))
    tag = _finish(mem, spec, store, head=_Head(log_head.seq, log_head.link), tenants=tenants, buckets=buckets,
                  subjects=None, erased=marks_fingerprint(marks))
    if unknown:
        store.vacuum()
    report = _report(store, spec, tag, calls=calls, rejected=rejected, started_from=-1)
    return dataclasses.replace(report, reused_partitions=reused)


def group_size(store: StateStore, buckets: int) -> int:
    """Buckets per group: :data:`GROUP_ROWS` item rows each (from the items files' metadata)."""
    dt = store.table("items")
    rows = sum(pa.table(dt.get_add_actions(flatten=True))["num_records"].to_pylist()) if dt is not None else 0
    return max(1, min(buckets, -(-GROUP_ROWS * buckets // max(rows, 1))))


def _groups(buckets: int, size: int) -> list[list[int]]:
    return [list(range(b, min(b + size, buckets))) for b in range(0, buckets, size)]


def _write_items(mem, spec, store: StateStore, marks: frozenset[str], *, extractor, progress, runner, batch_size,
                 buckets, until: int, run: str) -> tuple[int, int, set[str]]:
    """Write the items table of the log up to ``until`` (extracting what is missing); the last
    commit notes the run and the tenants."""
    calls = rejected = 0
    tenants: set[str] = set()
    first, pending = True, []
    for events in _event_batches(mem, marks=marks):
        events = [e for e in events if e.seq <= until]
        if not events:
            continue
        rows, c, r = _items(mem, spec, events, extractor=extractor, buckets=buckets, progress=progress,
                            runner=runner, batch_size=batch_size)
        calls, rejected = calls + c, rejected + r
        tenants.update(e.tenant for e in events if e.tenant is not None)  # (tombstones: none)
        pending.append(pa.Table.from_pylist(rows, schema=ITEM_SCHEMA))
        if sum(t.num_rows for t in pending) >= ITEM_FLUSH:  # (fewer, larger files per bucket)
            store.write("items", pa.concat_tables(pending), mode="overwrite" if first else "append")
            pending, first = [], False
    store.write("items", pa.concat_tables(pending) if pending else ITEM_SCHEMA.empty_table(),
                mode="overwrite" if first else "append",
                note={"run": run, "tenants": json.dumps(sorted(tenants))})
    _crash_point("items")
    return calls, rejected, tenants


def _crash_point(step: str) -> None:
    """Kill this process at ``step`` when ``REFOLD_FOLD_CRASH_AT`` names it (crash tests)."""
    if os.environ.get("REFOLD_FOLD_CRASH_AT") == step:
        os.kill(os.getpid(), signal.SIGKILL)


def _finish(mem, spec, store: StateStore, *, head: _Head, tenants: Iterable[str], buckets: int,
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
        entities_version, facts_count = _full_entities(spec, store, buckets)
        derived = _full_rollups(spec, store, buckets)
        tag = StateTag(log_seq=head.seq, log_link=head.link, buckets=buckets, tenants=tenants,
                       entities_version=entities_version, facts=facts_count, derived=derived,
                       rollups=_read_rollups(spec), erased=erased)
    else:
        assert new_items is not None and before is not None and after is not None and changed is not None
        entities_version = _refresh_entities(spec, store, buckets, (nodes or set()) | subjects, set(),
                                             new_items=new_items, merged=after, seen_at=head.seq)
        delta = _refresh_derived(spec, store, buckets, before=before, after=after, changed=changed,
                                 append=True, seen_at=head.seq)
        tag = StateTag(log_seq=head.seq, log_link=head.link, buckets=buckets, tenants=tenants,
                       entities_version=entities_version, facts=counts[0] + after.height - before.height,
                       derived=counts[1] + delta, rollups=_read_rollups(spec), erased=erased)
    store.set_tag(tag)
    return _current_tag(store)


def _full_entities(spec: FoldSpec, store: StateStore, buckets: int) -> tuple[int, int]:
    """The entity stage of a full fold, bucket group by bucket group: first every node's names
    (one pass over the items, a group's partitions at a time: each group gives the first
    occurrence of each surface it names, objects in other buckets included), then the
    summaries of each group's subjects; returns (entities version, merged row count)."""
    groups = _groups(buckets, group_size(store, buckets))
    partials = [first_surfaces(spec, pl.from_arrow(store.read("items", buckets=group, columns=_OCC_COLUMNS)))
                for group in groups]
    names = names_of_surfaces(pl.concat(partials))
    name_of = dict(zip(names["node"].to_list(), (s[0] for s in names["surfaces"].to_list())))
    version, merged_rows = -1, 0
    for group in groups:
        found = names.filter(pl.col("bucket").is_in(pl.Series(group, dtype=pl.Int32).implode()))
        merged = pl.from_arrow(store.read("facts", buckets=group, columns=_SUMMARY_COLUMNS,
                                          layer="merged"))
        merged_rows += merged.height
        rows = entities_from_names(found, merged, name_of, buckets=buckets).to_arrow()
        version = store.write("entities", rows) if group is groups[0] else store.write("entities", rows, buckets=group)
    return version, merged_rows


def _read_rollups(spec: FoldSpec) -> tuple:
    """The rules a read of this state derives (named by its tag, see StateTag.rollups)."""
    return tuple((r.name, r.kind, tuple(r.inputs), r.output) for r in read_time_rules(spec.rollups))


def _full_rollups(spec: FoldSpec, store: StateStore, buckets: int) -> int:
    """The stored roll-ups of a full fold (inverse rules: one row per input row), bucket group by
    bucket group of their inputs; returns the derived row count. Compose rules are derived when
    read (their rows grow with moves × staff)."""
    rules = stored_rules(spec.rollups)
    firsts = sorted({r.inputs[0] for r in rules})
    store.write("facts", FACT_SCHEMA.empty_table(), layer="derived")  # the layer, emptied
    total = 0
    for group in _groups(buckets, group_size(store, buckets)) if firsts else []:
        mine = pl.from_arrow(store.read("facts", buckets=group, columns=_BASE_COLUMNS, layer="merged",
                                        filter=among("relation", firsts)))
        if mine.height == 0:
            continue
        derived = derive_frame(rules, mine, buckets=buckets)
        if derived.height:
            store.write("facts", derived.to_arrow(), mode="append")
            total += derived.height
    return total


def _current_tag(store: StateStore) -> StateTag:
    tag = store.tag()
    if tag is None:
        raise StoreError(f"state tables under {store.root} were written without their tag; rerun the fold")
    return tag


_OCC_COLUMNS = ["kind", "tenant", "seq", "ordinal", "subject", "relation", "object", "subject_node", "object_node",
                "bucket", "object_bucket", "accepted"]
_SUMMARY_COLUMNS = ["subject", "relation", "object", "recorded_seq", "fact_id", "sources", "valid_to"]
_BASE_COLUMNS = ["fact_id", "tenant", "subject", "relation", "object", "valid_from", "valid_to", "recorded_seq",
                 "recorded_at", "sources", "source_seqs", "source_principals", "confidence"]



def _buckets(nodes: Iterable[str], buckets: int) -> set[int]:
    return {bucket_of(n, buckets) for n in nodes}


def _refresh_derived(spec: FoldSpec, store: StateStore, buckets: int, *, before: pl.DataFrame,
                     after: pl.DataFrame, changed: set[str], append: bool, seen_at: int) -> int:
    """Recompute the derived rows with an input among ``changed`` merged rows (``before``: old
    versions of merged rows, or rows now gone; ``after``: current rows). ``append``: the merged
    layer still holds the old versions; the new versions of the ``changed`` rows of ``after``
    take their place here and are committed together with the derived rows' new versions and
    deletion markers, in one append. Else (an erasure) the merged layer is already up to date and
    such derived rows are replaced, every version of them, by id. Returns the change in the
    derived row count.

    Only the stored rules (inverse: a row per input row) are refreshed: compose roll-ups are
    derived when read, so a moved organisation re-derives nothing here."""
    rules = stored_rules(spec.rollups)
    inverse = sorted({r.inputs[0] for r in rules})
    direct = after.select(_BASE_COLUMNS).filter(pl.col("relation").is_in(inverse) & one_of("fact_id", changed))
    # (an append: the changed rows' new versions come first, so they win over the stored ones)
    pending = after.filter(one_of("fact_id", changed)) if append else after.clear()
    base = pl.concat([pending.select(_BASE_COLUMNS), direct]).unique("fact_id", keep="first", maintain_order=True)
    new = derive_frame(rules, base, buckets=buckets, touching=changed)
    fresh_ids = set(new["fact_id"].to_list())
    if append:
        # the derived rows the state holds with a changed input are what the rules gave over
        # the inputs' previous versions: derived again from those, not read back
        previous = before.select(_BASE_COLUMNS).filter(one_of("fact_id", changed))
        prior_base = pl.concat([base.filter(~one_of("fact_id", changed)), previous])
        old = derive_frame(rules, prior_base, buckets=buckets, touching=changed)
        gone = old.filter(~one_of("fact_id", fresh_ids))
        rows = [t.to_arrow().select(FACT_SCHEMA.names).cast(FACT_SCHEMA) for t in (pending, new, gone)]
        if sum(t.num_rows for t in rows):
            flags = pa.array([False] * (pending.height + new.height) + [True] * gone.height, pa.bool_())
            store.write("facts", pa.concat_tables(rows), mode="append", seen_at=seen_at, deleted=flags)
        return len(fresh_ids - set(old["fact_id"].to_list())) - gone.height
    # the derived rows the state holds with a changed input: what the rules gave over the
    # inputs' stored versions (a derived id is a hash of its inputs' ids, which every version
    # of a row shares); they are replaced, every version of them, by id in the buckets of their
    # subjects: delta-rs rewrites only the files that hold them
    old = derive_frame(rules, before.select(_BASE_COLUMNS).filter(one_of("fact_id", changed)), buckets=buckets,
                       touching=changed)
    homes = set(old["bucket"].to_list()) | set(new["bucket"].to_list())
    if homes:
        store.write("facts", new.to_arrow(), buckets=homes, layer="derived",
                    ids=set(old["fact_id"].to_list()) | fresh_ids)
    return len(fresh_ids) - old.height


def _refresh_entities(spec: FoldSpec, store: StateStore, buckets: int, nodes: set[str], renamed: set[str],
                      new_items: pl.DataFrame | None = None, merged: pl.DataFrame | None = None,
                      seen_at: int = -1) -> int:
    """Recompute the entity rows of ``nodes`` (and the summaries of current facts pointing at a
    node of ``renamed``) from the items naming them; return the entities table's version.

    ``new_items`` (an append): the entities' surfaces so far come from their current rows (names
    never change on an append) instead of a scan of every item, ``merged`` holds every merged
    row of the subjects whose facts changed (the other nodes keep their summaries), and the new
    rows are appended as new versions; otherwise their buckets are rewritten."""
    if not nodes:
        dt = store.table("entities")
        return -1 if dt is None else dt.version()
    where = _buckets(nodes, buckets)
    append = new_items is not None
    old = pl.from_arrow(store.read("entities", buckets=where, filter=among("node", nodes) if append else None))
    prior = None
    if append:
        items, prior = new_items, old
    else:
        items = pl.from_arrow(store.read("items", columns=_OCC_COLUMNS,
                                         filter=among("subject_node", nodes) | among("object_node", nodes)))
    summarised = None if merged is None else set(merged["subject"].to_list())
    if merged is None:
        merged = pl.from_arrow(store.read("facts", buckets=_buckets(nodes, buckets), columns=_SUMMARY_COLUMNS,
                                          layer="merged", filter=among("subject", nodes)))
    objects = set(merged.filter(pl.col("valid_to").is_null())["object"].to_list()) - nodes
    names = {}
    if objects:
        known = store.read("entities", buckets=_buckets(objects, buckets), columns=["node", "name"],
                           filter=among("node", objects))
        names = dict(zip(known["node"].to_pylist(), known["name"].to_pylist()))
    fresh = entity_rows(spec, items, merged.select(_SUMMARY_COLUMNS), buckets=buckets, nodes=nodes, names=names,
                        prior=prior)
    if summarised is not None and prior is not None and prior.height:
        kept = prior.filter(~one_of("node", summarised)).select("node", "summary", "summary_sources")
        if kept.height:
            fresh = fresh.join(kept, on="node", how="left", suffix="_kept").with_columns(
                pl.coalesce("summary_kept", "summary").alias("summary"),
                pl.when(pl.col("summary_kept").is_null()).then(pl.col("summary_sources"))
                .otherwise(pl.col("summary_sources_kept")).alias("summary_sources"),
            ).select(fresh.columns)
    if append:
        return store.write("entities", fresh.to_arrow(), mode="append", seen_at=seen_at)
    keep = old.filter(~one_of("node", nodes))
    version = store.write("entities", pl.concat([keep, fresh.cast(keep.schema)]).to_arrow(), buckets=where)
    if renamed:
        # a node whose display name changed (its first surface was erased) or that is gone:
        # the summaries naming it change too (rare: a name that only erased events used first)
        was = old.filter(one_of("node", renamed & nodes)).select("node", "name")
        now = dict(zip(fresh["node"].to_list(), fresh["name"].to_list()))
        changed = {n for n, name in zip(was["node"].to_list(), was["name"].to_list()) if now.get(n) != name}
        if changed:
            # a merged row pointing at such a node came from a surviving item naming it as the
            # object, which lives in the row's subject's bucket: only those buckets are read
            homes = set(items.filter(one_of("object_node", changed))["bucket"].to_list())
            referrers = store.read("facts", buckets=homes, columns=["subject", "valid_to"], layer="merged",
                                   filter=among("object", changed))
            more = set(referrers.filter(pc.is_null(referrers["valid_to"]))["subject"].to_pylist()) - nodes
            if more:
                version = _refresh_entities(spec, store, buckets, more, set())
    return version


def _report(store: StateStore, spec: FoldSpec, tag: StateTag, *, calls: int, rejected: int,
            started_from: int) -> FoldReport:
    return FoldReport(events_folded=tag.log_seq + 1, extraction_calls=calls, facts=tag.facts,
                      derived_facts=tag.derived, rejected_outputs=rejected, last_seq=tag.log_seq,
                      spec_hash=spec.hash, started_from=started_from)


# -- incremental -----------------------------------------------------------------------------------


def _tail(mem: "Memory", tag: StateTag, marks: frozenset[str]) -> list[Event] | None:
    """The events after ``tag``'s position in readable form (shred mode: only they are
    decrypted, those of owners among ``marks`` erased), or None when the log no longer has that
    position (rewritten or another log: the caller refolds in full)."""
    from refold.storage.log_range import events_from

    if tag.log_seq < 0:
        return mem._readable(events_from(mem.log_store, 0), marks)
    events = events_from(mem.log_store, tag.log_seq)
    if not events or events[0].seq != tag.log_seq or events[0].link != tag.log_link:
        return None
    return mem._readable(events[1:], marks)


def _incremental(mem, spec, store: StateStore, tag: StateTag, marks: frozenset[str], *, extractor, progress,
                 runner, batch_size) -> FoldReport | None:
    tail = _tail(mem, tag, marks)
    if tail is None:
        return None
    if not tail:
        return _report(store, spec, tag, calls=0, rejected=0, started_from=tag.log_seq)
    buckets, started_from = tag.buckets, tag.log_seq
    rows, calls, rejected = _items(mem, spec, tail, extractor=extractor, buckets=buckets, progress=progress,
                                   runner=runner, batch_size=batch_size)
    head = _Head(tail[-1].seq, tail[-1].link)
    tenants = set(tag.tenants) | {e.tenant for e in tail if e.tenant is not None}
    if not rows:
        # events without facts (an erasure's own record, a spec change): only the position
        # moves; the stages after the merge would read both layers' files to change nothing
        entities = store.table("entities")
        store.set_tag(dataclasses.replace(tag, log_seq=head.seq, log_link=head.link, tenants=tuple(sorted(tenants)),
                                          entities_version=tag.entities_version if entities is None
                                          else entities.version()))
        return _report(store, spec, _current_tag(store), calls=calls, rejected=rejected, started_from=started_from)
    store.write("items", pa.Table.from_pylist(rows, schema=ITEM_SCHEMA), mode="append")
    subjects = {r["subject_node"] for r in rows}
    nodes = subjects | {r["object_node"] for r in rows}
    # only the touched subjects' rows are read, and only the rows the merge changed are written
    # (as new versions): 1% new events touch nearly every bucket, so rewriting buckets would
    # rewrite the whole state
    current = pl.from_arrow(store.read("facts", buckets=_buckets(subjects, buckets),
                                       layer="merged", filter=among("subject", subjects)))
    # the merge changes only open rows (it corroborates, supersedes or retracts an open fact, or
    # adds one): the closed history goes neither through it nor into the stages after it
    # (summaries are of open rows too)
    current = current.filter(pl.col("valid_to").is_null())
    rows.sort(key=lambda r: (r["seq"], r["ordinal"]))
    fresh, changed = advance_subjects(spec, current.to_dicts(), rows, buckets=buckets)
    after = pl.from_arrow(pa.Table.from_pylist(fresh, schema=FACT_SCHEMA))
    # (the changed rows are committed with the roll-ups they change: one commit to facts)
    tag = _finish(mem, spec, store, head=head, tenants=tenants, buckets=buckets, subjects=subjects, nodes=nodes,
                  new_items=pl.from_arrow(pa.Table.from_pylist(rows, schema=ITEM_SCHEMA)),
                  before=current, after=after, changed=changed, counts=(tag.facts, tag.derived), erased=tag.erased)
    if store.files("facts") > COMPACT_FILES * buckets:
        size = group_size(store, buckets)
        store.compact("facts", buckets=buckets, group=size)
        store.compact("entities", buckets=buckets, group=size)
        tag = _retag(store, tag)
    return _report(store, spec, tag, calls=calls, rejected=rejected, started_from=started_from)


def _retag(store: StateStore, tag: StateTag) -> StateTag:
    """Tag the newest versions again (after a compaction) with ``tag``'s position and counts."""
    entities = store.table("entities")
    store.set_tag(dataclasses.replace(tag, entities_version=entities.version()))
    return _current_tag(store)


# -- erasure ---------------------------------------------------------------------------------------


class StatePurger:
    """The state tables as a derived store of erasure: ``purge(event_ids)`` refolds, for every
    spec, the subjects whose items came from an erased event (from the surviving items: no model
    call) and refreshes the roll-ups and entities that depend on them; the erasure's next step
    (``scrub_derived``) vacuums every state table, so no old version keeps what was erased.

    Idempotent in ``event_ids`` (an erasure's rerun calls it again with the same ids): a spec's
    state that a killed purge left untagged (:func:`purge_state` untags it while it rewrites) is
    dropped, and the erasure's refold then folds it anew from the rewritten log."""

    def __init__(self, mem: "Memory", subjects: Iterable[str] = ()):
        self.mem = mem
        self.subjects = tuple(subjects)  # the erasure's own: every event under their keys is in its plan

    def purge(self, event_ids: Iterable[str]) -> PurgeResult:
        """In shred mode the events of every owner with an erased marker are purged too (the
        erasure's own subject's, and those of keys destroyed outside an erasure since the last
        fold), and the tags record those markers (see :func:`honour_marks`). A state whose tag
        honours every marker but those of the erasure's own ``subjects`` needs only
        ``event_ids``: the log is not read for the others (whose events it no longer holds)."""
        from refold.folding import recorded_specs
        from refold.storage.crypto import marked_in_log
        from refold.storage.keys import KeyOwner

        marks = self.mem.erased_marks()  # (the erasure wrote its subject's marker before this step)
        ids = sorted(set(event_ids))
        honoured = marks_fingerprint(marks - {KeyOwner.subject(s).digest() for s in self.subjects})
        marked: list[str] | None = None  # every marked owner's events, read once if a state needs them
        self.mem._state_at = {}  # this process's up-to-date marks no longer hold
        found = state_specs(self.mem.layout)
        if not found or not (ids or marks):
            return PurgeResult(store="state", rows=0)
        specs = recorded_specs(self.mem)
        removed, detail = 0, []
        for spec_hash in found:
            store = self.mem.state_store(specs[spec_hash]) if spec_hash in specs else None
            tag = None if store is None else store.tag()
            if tag is None:
                # no spec to refold with, a fold that never finished or a purge killed half-way:
                # drop it (it may hold erased data; which rows, nothing says any more)
                (store or StateStore(self.mem.layout, spec_hash, storage_options=self.mem.storage_options)).drop()
                detail.append(f"state/{spec_hash}: dropped (untagged: refolded in full by the erasure's refold)")
                continue
            if marks and tag.erased != honoured:
                if marked is None:
                    marked = sorted(set(ids) | marked_in_log(self.mem.log_store, marks))
                these = marked
            else:
                these = ids
            n = purge_state(store, specs[spec_hash], these, erased=marks_fingerprint(marks), vacuum=False)
            removed += n
            detail.append(f"state/{spec_hash}: {n} item row(s) removed")
        return PurgeResult(store="state", rows=removed, detail=tuple(detail))


def honour_marks(mem: "Memory", spec: FoldSpec, store: StateStore, tag: StateTag, marks: frozenset[str]) -> StateTag:
    """``tag``, or the tag after erasing from the state the events up to it of the owners among
    ``marks`` when ``tag`` honours other markers: keys destroyed outside an erasure (a tenant's
    key, ``KeyStore.destroy`` called directly, an erasure stopped before its refold). The events
    go as an erasure's do (:func:`purge_state`: cached extractions, no model call, old versions
    vacuumed); the events after the tag are read with ``marks`` by the fold that follows."""
    from refold.storage.crypto import marked_in_log

    wanted = marks_fingerprint(marks)
    if tag.erased == wanted:
        return tag
    ids = marked_in_log(mem.log_store, marks, until=tag.log_seq)
    mem._state_at = {}  # (this process's kept reads of the tables predate the purge)
    purge_state(store, spec, sorted(ids), erased=wanted)
    return _current_tag(store)


def purge_state(store: StateStore, spec: FoldSpec, event_ids: Sequence[str], *, erased: str | None = None,
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
    tag = store.tag()
    assert tag is not None
    buckets = tag.buckets
    honoured = tag.erased if erased is None else erased
    hit = store.read("items", columns=["bucket", "seq", "subject_node", "object_node"],
                     filter=among("event_id", event_ids))
    if hit.num_rows == 0:
        if honoured != tag.erased:
            store.set_tag(dataclasses.replace(tag, erased=honoured))
        return 0
    store.clear_tag()
    where = set(hit["bucket"].to_pylist())
    subjects = set(hit["subject_node"].to_pylist())
    named = subjects | set(hit["object_node"].to_pylist())
    items = store.read("items", buckets=where)
    surviving = items.filter(pc.invert(among("event_id", event_ids)))
    store.write("items", surviving, buckets=where)
    after = pl.from_arrow(_merge(spec, surviving.filter(among("subject_node", subjects)), buckets))
    home = _buckets(subjects, buckets)
    old = pl.from_arrow(store.read("facts", buckets=home, layer="merged"))
    mine = one_of("subject", subjects)
    store.write("facts", pl.concat([old.filter(~mine), after]).to_arrow(), buckets=home, layer="merged")
    before = old.filter(mine)
    changed = set(before["fact_id"].to_list()) | set(after["fact_id"].to_list())
    derived = _refresh_derived(spec, store, buckets, before=before, after=after, changed=changed, append=False,
                               seen_at=-1)
    # a node the erased items named changes only where they held the first occurrence of one of
    # its names (or it is one of their subjects: its summary): the others are left as they are
    firsts = pl.from_arrow(store.read("entities", buckets=_buckets(named, buckets), columns=["node", "name_seqs"],
                                      filter=among("node", named)))
    erased = pl.Series(sorted(set(hit["seq"].to_pylist())), dtype=pl.Int64).implode()
    renamed = set(firsts.filter(pl.col("name_seqs").list.eval(pl.element().is_in(erased)).list.any())["node"]
                  .to_list())
    entities_version = _refresh_entities(spec, store, buckets, subjects | renamed, renamed)
    if vacuum:  # (before the tag: a state tagged again holds no version with the erased items)
        store.vacuum()
    store.set_tag(dataclasses.replace(tag, entities_version=entities_version,
                                      facts=tag.facts + after.height - before.height, derived=tag.derived + derived,
                                      rollups=_read_rollups(spec), erased=honoured))
    return items.num_rows - surviving.num_rows
