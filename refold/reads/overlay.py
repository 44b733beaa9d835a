"""The read path's answer past the state tables' tag: no extraction, no write (docs/fold.md, "Reads").

    state tables at their tag (the log position they reflect: the snapshot)
      → the events after the tag, each with the extraction a read may make without a model and
        without writing: a cached extraction (another process extracted it, no fold merged it
        yet); memory_written: its stated fact (refold.fold.stated); retraction: none needed;
        under the rules spec: the rules extractor in memory (deterministic, no model)
      → their items, and the touched subjects' current merged rows (read with bucket pruning)
        advanced in memory by :func:`refold.fold.partition.advance_subjects`
      → the derived facts with an input among the changed rows, derived again from those rows
        and their partners (as an incremental fold's roll-up stage does)
      → every other extractable event counts as pending

The overlay is a value (:class:`StateOverlay`) applied to what a query reads from the tables
(:mod:`refold.reads.queries`): it replaces rows by fact id and adds new ones. Nothing is written,
so a later fold extracts (and caches) every pending event and folds the log exactly.

Two more cases go through the same value, so every read has one path:

* no tag yet (a spec never folded): :func:`empty_tag` stands for an empty state at log position
  -1, and the overlay of the whole log is the answer (bounded by the caller's overlay limit);
* erased events the tables still hold (shred mode: a key destroyed outside an erasure, which
  the next fold or erasure purges): :func:`without_events` refolds, in memory, the subjects
  their items touched from the surviving items (what the purge will write) and every query
  leaves out any other row with one of them among its sources (``erased``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import polars as pl
import pyarrow as pa

from refold.fold.entities import entity_key
from refold.fold.events import Event
from refold.fold.partition import (
    DEFAULT_BUCKETS, FACT_SCHEMA, advance_subjects, bucket_of, derive_frame, entity_names, entity_rows, items_of,
    merge_items, read_time_rules, stored_rules,
)
from refold.fold.spec import FoldSpec
from refold.fold.stated import stated_extraction
from refold.fold.extract import needs_extraction
from refold.storage.state import StateStore, StateTag, among
from refold.store import Store


__all__ = ["StateOverlay", "empty_tag", "log_after", "state_overlay", "tail_after", "without_events"]


def _empty_rows() -> pl.DataFrame:
    return pl.from_arrow(FACT_SCHEMA.empty_table())


@dataclass(frozen=True)
class StateOverlay:
    """What the events after a tag change in the state a read sees.

    ``rows``: fact rows (:data:`FACT_SCHEMA`, both layers) that replace the tables' rows of the
    same fact id or are new; ``gone``: fact ids the tables hold that are no longer in the state
    (a derived fact whose inputs no longer derive it); ``names``: node → (tenant, display name)
    of nodes the events name first; ``pending``: events after the tag whose facts need a model
    (their extraction is neither cached nor stated); ``overlaid``: events read after the tag;
    ``tenants``: the tenants of those events (a subject's nodes are looked up in each);
    ``entities``: node → entity attributes (as the graph views give them) that replace the
    tables' (a node whose name or summary came from erased events); ``erased``: event ids whose
    facts no read may show: a row with one of them among its sources is left out.
    """

    rows: pl.DataFrame = field(default_factory=_empty_rows)
    gone: frozenset[str] = frozenset()
    names: dict[str, tuple[str, str]] = field(default_factory=dict)
    pending: int = 0
    overlaid: int = 0
    tenants: frozenset[str] = frozenset()
    entities: dict[str, dict[str, Any]] = field(default_factory=dict)
    erased: frozenset[str] = frozenset()

    @property
    def replaced(self) -> frozenset[str]:
        """Fact ids whose table rows a read must not show (replaced or gone)."""
        return self.gone | frozenset(self.rows["fact_id"].to_list())

    def apply(self, df: pl.DataFrame, *, nodes: Iterable[str] | None = None, relation: str | set[str] | None = None,
              tenant: str | None = None, fact_ids: Iterable[str] | None = None) -> pl.DataFrame:
        """``df`` (rows read from the tables with these filters) as the overlaid state has them."""
        replaced = self.replaced
        if not replaced:
            return self._unerased(df)
        kept = df.filter(~pl.col("fact_id").is_in(pl.Series(sorted(replaced), dtype=pl.Utf8).implode()))
        extra = self.rows
        if nodes is not None:
            extra = extra.filter(pl.col("subject").is_in(pl.Series(sorted(set(nodes)), dtype=pl.Utf8).implode()))
        if fact_ids is not None:
            extra = extra.filter(pl.col("fact_id").is_in(pl.Series(sorted(set(fact_ids)), dtype=pl.Utf8).implode()))
        if isinstance(relation, set):
            extra = extra.filter(pl.col("relation").is_in(pl.Series(sorted(relation), dtype=pl.Utf8).implode()))
        elif relation is not None:
            extra = extra.filter(pl.col("relation") == relation)
        if tenant is not None:
            extra = extra.filter(pl.col("tenant") == tenant)
        if extra.height == 0:
            return self._unerased(kept)
        return self._unerased(pl.concat([kept, extra.select(kept.columns).cast(kept.schema)]))

    def _unerased(self, df: pl.DataFrame) -> pl.DataFrame:
        """``df`` without the rows that have an erased event among their sources."""
        if not self.erased or df.height == 0 or "sources" not in df.columns:
            return df
        gone = pl.Series(sorted(self.erased), dtype=pl.Utf8).implode()
        return df.filter(~pl.col("sources").list.eval(pl.element().is_in(gone)).list.any().fill_null(False))

    def entity(self, node: str) -> dict[str, Any] | None:
        """Entity attributes (as the graph views give them) the overlay gives ``node``: those
        that replace the tables' (:attr:`entities`), or, for a node only the overlay names, its
        first surface name and no summary until a fold writes its entity row."""
        if node in self.entities:
            return self.entities[node]
        found = self.names.get(node)
        if found is None:
            return None
        tenant, name = found
        return {"tenant": tenant, "name": name, "key": entity_key(name), "aliases": [], "summary": {},
                "summary_sources": []}

    def of_tag(self, tag: StateTag) -> StateTag:
        """``tag`` with the tenants the overlaid events add (a read looks a subject up in each)."""
        if self.tenants <= set(tag.tenants):
            return tag
        return dataclasses.replace(tag, tenants=tuple(sorted(set(tag.tenants) | self.tenants)))


def empty_tag(spec: FoldSpec, *, buckets: int = DEFAULT_BUCKETS) -> StateTag:
    """The tag of an empty state at log position -1 (no table version: every read of it is
    empty): what a read of a spec never folded overlays the log on."""
    return StateTag(log_seq=-1, log_link="", buckets=buckets, tenants=(), entities_version=-1, facts_version=-1,
                    rollups=tuple((r.name, r.kind, tuple(r.inputs), r.output) for r in read_time_rules(spec.rollups)))


def _read(state_tables: StateStore, tag: StateTag, **options: Any) -> pl.DataFrame:
    return pl.from_arrow(state_tables.read("facts", version=tag.facts_version, layer="merged", **options))


def tail_after(store: Store, tag: StateTag, *, until: int | None = None) -> list[Event] | None:
    """The log's events after ``tag``'s position up to seq ``until`` (None: the head), or None
    when the log no longer holds that position (rewritten, or another log: only a fold can
    answer then). A read of those seqs' files only."""
    return log_after(store, tag.log_seq, tag.log_link, until=until)


def log_after(store: Store, seq: int, link: str, *, until: int | None = None) -> list[Event] | None:
    """The log's events after position ``seq`` (whose row has ``link``; seq < 0: the start) up
    to seq ``until`` (None: the head), or None when the log no longer holds that row. A read of
    those seqs' files only."""
    from refold.storage.log.ranges import events_from
    from refold.storage.log.schema import table_to_events

    start = max(seq, 0)
    if until is None:
        events = events_from(store.log_store, start)  # (the tail only)
    else:
        events = list(table_to_events(store.log_store.arrow(prune=[{"seq": (start, until)}])))
        if len(events) != until - start + 1 or (events and events[0].seq != start):
            return None  # (the statistics the read pruned by hid rows: a fold answers, and checks)
    if seq < 0:
        return events
    if not events or events[0].seq != seq or events[0].link != link:
        return None
    return events[1:]


def state_overlay(store: Store, spec: FoldSpec, state_tables: StateStore, tag: StateTag,
                  tail: list[Event], *, base: StateOverlay | None = None) -> StateOverlay:
    """The overlay of ``tail`` (the events after ``tag``, in log order) on ``spec``'s state
    tables at ``tag``. With ``base`` (the overlay of the events between ``tag`` and ``tail``),
    the overlay of base's events and then ``tail``'s: base advanced by ``tail`` alone
    (incremental projection again: state at n + events (n, m] = state at m), so a read right
    after an append reads, extracts and merges only the appended events, not the whole tail.
    Reads the log's tail, the extraction cache and the touched subjects' rows; writes nothing
    and calls no model."""
    base = base or StateOverlay()
    if not tail:
        return base
    tenants = base.tenants | {e.tenant for e in tail if e.tenant is not None}
    items, pending = _tail_items(store, spec, tail, tag.buckets)
    pending, overlaid = base.pending + pending, base.overlaid + len(tail)
    if not items:
        return dataclasses.replace(base, pending=pending, overlaid=overlaid, tenants=tenants)
    items.sort(key=lambda r: (r["seq"], r["ordinal"]))
    subjects = {i["subject_node"] for i in items}
    tables = _read(state_tables, tag, buckets={bucket_of(s, tag.buckets) for s in subjects}, filter=among("subject", subjects))
    # the touched subjects' open merged rows as base leaves them (the merge never changes a
    # closed row: base's closed rows stay as they are)
    current = base.apply(tables, nodes=subjects).filter((pl.col("layer") == "merged") & pl.col("valid_to").is_null())
    fresh, changed = advance_subjects(spec, current.to_dicts(), items, buckets=tag.buckets)
    after = pl.from_arrow(pa.Table.from_pylist(fresh, schema=FACT_SCHEMA))
    rows, gone = after.filter(pl.col("fact_id").is_in(pl.Series(sorted(changed), dtype=pl.Utf8).implode())), set()
    if stored_rules(spec.rollups) and changed:  # compose roll-ups: derived by the read itself
        derived, gone = _derived(spec, current, after, changed, buckets=tag.buckets)
        rows = pl.concat([rows, derived.select(rows.columns).cast(rows.schema)])
    if base.rows.height or base.gone:
        made = set(rows["fact_id"].to_list())
        kept = base.rows.filter(~pl.col("fact_id").is_in(pl.Series(sorted(made | gone), dtype=pl.Utf8).implode()))
        rows = pl.concat([kept, rows.select(kept.columns).cast(kept.schema)])
        # (an id gone now that only base made is simply no longer among the rows; one base
        # found gone and derived again is among them, and a row shown wins over gone)
        gone = (set(base.gone) | gone) - made
    names = {**_new_names(spec, state_tables, tag, items), **base.names}  # (base's names came first)
    return StateOverlay(rows=rows, gone=frozenset(gone), names=names, pending=pending, overlaid=overlaid,
                        tenants=tenants, entities=base.entities, erased=base.erased)


#: the item columns the entity stage reads (names from occurrences, summaries from merged rows)
_NAMING_COLUMNS = ["kind", "tenant", "event_id", "seq", "ordinal", "subject", "relation", "object", "subject_node",
                   "object_node", "bucket", "object_bucket", "accepted"]


def without_events(spec: FoldSpec, state_tables: StateStore, tag: StateTag, event_ids: Iterable[str]) -> StateOverlay:
    """The overlay that takes ``event_ids`` (events up to ``tag`` whose owners were erased since
    its fold) out of ``spec``'s state at ``tag``, written nowhere: what the purge of the next
    fold or erasure will write (:func:`refold.engine.fold.purge_state`), made in memory for the
    subjects their items touched. The subjects' merged rows are merged again from their
    surviving items, the stored roll-ups of the changed rows derived again, and the entities
    those items named (names, summaries) made again; ``erased`` keeps every id, so a row no
    subject refold reaches (a compose roll-up elsewhere) is still left out. Reads the items of
    those events (one filtered scan of ``items``) and the touched subjects' buckets."""
    ids = frozenset(event_ids)
    if not ids:
        return StateOverlay()
    hit = pl.from_arrow(state_tables.read("items", columns=["seq", "subject_node", "object_node"],
                                   filter=among("event_id", ids))).filter(pl.col("seq") <= tag.log_seq)
    if hit.height == 0:
        return StateOverlay(erased=ids)
    subjects = set(hit["subject_node"].to_list())
    named = subjects | set(hit["object_node"].to_list())
    gone_ids = pl.Series(sorted(ids), dtype=pl.Utf8).implode()
    surviving = pl.from_arrow(state_tables.read("items", buckets={bucket_of(s, tag.buckets) for s in subjects},
                                         filter=among("subject_node", subjects)))
    surviving = surviving.filter((pl.col("seq") <= tag.log_seq) & ~pl.col("event_id").is_in(gone_ids))
    after = merge_items(spec, surviving, buckets=tag.buckets).select(FACT_SCHEMA.names).cast(_empty_rows().schema)
    before = _read(state_tables, tag, buckets={bucket_of(s, tag.buckets) for s in subjects}, filter=among("subject", subjects))
    made = set(after["fact_id"].to_list())
    gone = set(before["fact_id"].to_list()) - made
    rows = after
    if stored_rules(spec.rollups):
        changed = made | set(before["fact_id"].to_list())
        derived, lost = _derived(spec, before, after, changed, buckets=tag.buckets)
        rows = pl.concat([rows, derived.select(rows.columns).cast(rows.schema)])
        gone |= lost
    # entities: the subjects' (summaries) and those of named nodes whose first use of a name
    # was erased (names), from every surviving item naming them
    seqs = pl.Series(sorted(set(hit["seq"].to_list())), dtype=pl.Int64).implode()
    firsts = pl.from_arrow(state_tables.read("entities", version=tag.entities_version, columns=["node", "name_seqs"],
                                      buckets={bucket_of(n, tag.buckets) for n in named}, filter=among("node", named)))
    renamed = set(firsts.filter(pl.col("name_seqs").list.eval(pl.element().is_in(seqs)).list.any())["node"].to_list())
    nodes = subjects | renamed
    naming = pl.from_arrow(state_tables.read("items", columns=_NAMING_COLUMNS,
                                      filter=among("subject_node", nodes) | among("object_node", nodes)))
    naming = naming.filter((pl.col("seq") <= tag.log_seq) & ~pl.col("event_id").is_in(gone_ids))
    summary_rows = after
    if renamed - subjects:
        others = _read(state_tables, tag, buckets={bucket_of(n, tag.buckets) for n in renamed - subjects},
                       filter=among("subject", renamed - subjects))
        summary_rows = pl.concat([after, others.select(after.columns).cast(after.schema)])
    objects = set(summary_rows.filter(pl.col("valid_to").is_null())["object"].to_list()) - nodes
    known = state_tables.read("entities", version=tag.entities_version, columns=["node", "name"],
                       buckets={bucket_of(n, tag.buckets) for n in objects}, filter=among("node", objects)) \
        if objects else None
    object_names = {} if known is None else dict(zip(known["node"].to_pylist(), known["name"].to_pylist()))
    summary_rows = summary_rows.select("subject", "relation", "object", "recorded_seq", "fact_id", "sources",
                                       "valid_to")
    fresh = entity_rows(spec, naming, summary_rows, buckets=tag.buckets, nodes=nodes, names=object_names)
    entities = {r["node"]: {"tenant": r["tenant"], "name": r["name"], "key": r["key"], "aliases": r["aliases"],
                            "summary": json.loads(r["summary"]), "summary_sources": r["summary_sources"]}
                for r in fresh.to_dicts()}
    return StateOverlay(rows=rows, gone=frozenset(gone), entities=entities, erased=ids)


def _tail_items(store: Store, spec: FoldSpec, tail: list[Event], buckets: int) -> tuple[list[dict[str, Any]], int]:
    """(item rows, pending events) of ``tail`` with the extractions a read may make: cached,
    stated, or (rules spec) the rules extractor in memory; an event needing a model is pending."""
    wanted = [e for e in tail if needs_extraction(e)]
    cached = store.cache.facts(spec.hash, [e.event_id for e in wanted]) if wanted else {}
    rules = None
    if spec.extractor == "rules":
        from refold.extractors import get_extractor

        rules = get_extractor("rules")
    items: list[dict[str, Any]] = []
    pending = 0
    for event in tail:
        facts = None
        if needs_extraction(event):
            hit = cached.get(event.event_id)
            if hit is not None:
                facts = hit.facts
            else:
                extraction = rules.extract([event], spec)[0] if rules is not None else stated_extraction(event, spec)
                if extraction is None:
                    pending += 1
                else:
                    facts = extraction.facts
        items += items_of(event, facts, buckets)
    return items, pending


def _derived(spec: FoldSpec, current: pl.DataFrame, after: pl.DataFrame, changed: set[str], *,
             buckets: int) -> tuple[pl.DataFrame, set[str]]:
    """(derived rows with an input among ``changed``, ids of the tables' derived rows no longer
    derived): the stored roll-ups (inverse rules: one input row each, so no other subject's rows
    join in) over the touched subjects' rows after (``after``) and before (``current``) the
    overlay. Compose roll-ups are derived by the read itself (refold.reads.rollups)."""
    rules = stored_rules(spec.rollups)
    new = derive_frame(rules, after, buckets=buckets, touching=changed)
    old = derive_frame(rules, current, buckets=buckets, touching=changed)
    return new, set(old["fact_id"].to_list()) - set(new["fact_id"].to_list())


def _new_names(spec: FoldSpec, state_tables: StateStore, tag: StateTag, items: list[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    """node → (tenant, display name) of the nodes ``items`` name that the tables' entities lack
    (an append never renames a known node: its first surface name stays its name)."""
    from refold.fold.partition import items_frame

    found = entity_names(spec, items_frame(items))
    if found.height == 0:
        return {}
    nodes = set(found["node"].to_list())
    known = state_tables.read("entities", version=tag.entities_version, columns=["node"],
                       buckets={bucket_of(n, tag.buckets) for n in nodes}, filter=among("node", nodes))
    have = set(known["node"].to_pylist())
    return {n: (t, s[0]) for n, t, s in zip(found["node"].to_list(), found["tenant"].to_list(),
                                            found["surfaces"].to_list()) if n not in have}
