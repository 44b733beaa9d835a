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
(:mod:`refold.state_queries`): it replaces rows by fact id and adds new ones. Nothing is written,
so a later fold extracts (and caches) every pending event and folds the log exactly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import polars as pl
import pyarrow as pa

from refold.fold.entities import entity_key
from refold.fold.events import Event
from refold.fold.partition import (
    FACT_SCHEMA, advance_subjects, bucket_of, derive_frame, entity_names, items_of, stored_rules,
)
from refold.fold.spec import FoldSpec
from refold.fold.stated import stated_extraction
from refold.folding import needs_extraction
from refold.storage.state import StateStore, StateTag, among

if TYPE_CHECKING:
    from refold.memory import Memory

__all__ = ["StateOverlay", "log_after", "state_overlay", "tail_after"]


def _empty_rows() -> pl.DataFrame:
    return pl.from_arrow(FACT_SCHEMA.empty_table())


@dataclass(frozen=True)
class StateOverlay:
    """What the events after a tag change in the state a read sees.

    ``rows``: fact rows (:data:`FACT_SCHEMA`, both layers) that replace the tables' rows of the
    same fact id or are new; ``gone``: fact ids the tables hold that are no longer in the state
    (a derived fact whose inputs no longer derive it); ``names``: node → (tenant, display name)
    of nodes the events name first; ``pending``: events after the tag whose facts need a model
    (their extraction is neither cached nor stated); ``overlaid``: events read after the tag.
    """

    rows: pl.DataFrame = field(default_factory=_empty_rows)
    gone: frozenset[str] = frozenset()
    names: dict[str, tuple[str, str]] = field(default_factory=dict)
    pending: int = 0
    overlaid: int = 0

    @property
    def replaced(self) -> frozenset[str]:
        """Fact ids whose table rows a read must not show (replaced or gone)."""
        return self.gone | frozenset(self.rows["fact_id"].to_list())

    def apply(self, df: pl.DataFrame, *, nodes: Iterable[str] | None = None, relation: str | set[str] | None = None,
              tenant: str | None = None, fact_ids: Iterable[str] | None = None) -> pl.DataFrame:
        """``df`` (rows read from the tables with these filters) as the overlaid state has them."""
        replaced = self.replaced
        if not replaced:
            return df
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
            return kept
        return pl.concat([kept, extra.select(kept.columns).cast(kept.schema)])

    def entity(self, node: str) -> dict[str, Any] | None:
        """Entity attributes (as the graph views give them) of a node only the overlay names:
        its first surface name; no summary until a fold writes its entity row."""
        found = self.names.get(node)
        if found is None:
            return None
        tenant, name = found
        return {"tenant": tenant, "name": name, "key": entity_key(name), "aliases": [], "summary": {},
                "summary_sources": []}



def _read(store: StateStore, tag: StateTag, **options: Any) -> pl.DataFrame:
    return pl.from_arrow(store.read("facts", version=tag.facts_version, layer="merged", **options))


def tail_after(mem: "Memory", tag: StateTag, *, until: int | None = None) -> list[Event] | None:
    """The log's events after ``tag``'s position up to seq ``until`` (None: the head), or None
    when the log no longer holds that position (rewritten, or another log: only a fold can
    answer then). A read of those seqs' files only."""
    return log_after(mem, tag.log_seq, tag.log_link, until=until)


def log_after(mem: "Memory", seq: int, link: str, *, until: int | None = None) -> list[Event] | None:
    """The log's events after position ``seq`` (whose row has ``link``; seq < 0: the start) up
    to seq ``until`` (None: the head), or None when the log no longer holds that row. A read of
    those seqs' files only."""
    from refold.projection import DeltaSource
    from refold.storage.schema import table_to_events

    start = max(seq, 0)
    if until is None:
        events, _ = DeltaSource(mem.log_store, erased=False).window(start)  # (the tail only)
    else:
        events = list(table_to_events(mem.log_store.arrow(prune=[{"seq": (start, until)}])))
        if len(events) != until - start + 1 or (events and events[0].seq != start):
            return None  # (the statistics the read pruned by hid rows: a fold answers, and checks)
    if seq < 0:
        return events
    if not events or events[0].seq != seq or events[0].link != link:
        return None
    return events[1:]


def state_overlay(mem: "Memory", spec: FoldSpec, store: StateStore, tag: StateTag,
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
    items, pending = _tail_items(mem, spec, tail, tag.buckets)
    pending, overlaid = base.pending + pending, base.overlaid + len(tail)
    if not items:
        return dataclasses.replace(base, pending=pending, overlaid=overlaid)
    items.sort(key=lambda r: (r["seq"], r["ordinal"]))
    subjects = {i["subject_node"] for i in items}
    tables = _read(store, tag, buckets={bucket_of(s, tag.buckets) for s in subjects}, filter=among("subject", subjects))
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
    names = {**_new_names(spec, store, tag, items), **base.names}  # (base's names came first)
    return StateOverlay(rows=rows, gone=frozenset(gone), names=names, pending=pending, overlaid=overlaid)


def _tail_items(mem: "Memory", spec: FoldSpec, tail: list[Event], buckets: int) -> tuple[list[dict[str, Any]], int]:
    """(item rows, pending events) of ``tail`` with the extractions a read may make: cached,
    stated, or (rules spec) the rules extractor in memory; an event needing a model is pending."""
    wanted = [e for e in tail if needs_extraction(e)]
    cached = mem.cache.facts(spec.hash, [e.event_id for e in wanted]) if wanted else {}
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
    overlay. Compose roll-ups are derived by the read itself (refold.state_rollups)."""
    rules = stored_rules(spec.rollups)
    new = derive_frame(rules, after, buckets=buckets, touching=changed)
    old = derive_frame(rules, current, buckets=buckets, touching=changed)
    return new, set(old["fact_id"].to_list()) - set(new["fact_id"].to_list())


def _new_names(spec: FoldSpec, store: StateStore, tag: StateTag, items: list[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    """node → (tenant, display name) of the nodes ``items`` name that the tables' entities lack
    (an append never renames a known node: its first surface name stays its name)."""
    from refold.fold.partition import items_frame

    found = entity_names(spec, items_frame(items))
    if found.height == 0:
        return {}
    nodes = set(found["node"].to_list())
    known = store.read("entities", version=tag.entities_version, columns=["node"],
                       buckets={bucket_of(n, tag.buckets) for n in nodes}, filter=among("node", nodes))
    have = set(known["node"].to_pylist())
    return {n: (t, s[0]) for n, t, s in zip(found["node"].to_list(), found["tenant"].to_list(),
                                            found["surfaces"].to_list()) if n not in have}
