"""Refreshing what depends on the subjects a fold or a purge changed: the stored roll-ups and the
entities of the touched buckets, and the tag of the newest versions (shared by the incremental
fold and the erasure's purge).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from refold.fold.errors import StoreError
from refold.fold.partition import (
    FACT_SCHEMA, bucket_of, derive_frame, entity_rows, one_of, read_time_rules, stored_rules,
)
from refold.fold.spec import FoldSpec
from refold.storage.state import StateStore, StateTag, among

OCC_COLUMNS = ["kind", "tenant", "seq", "ordinal", "subject", "relation", "object", "subject_node", "object_node",
                "bucket", "object_bucket", "accepted"]
SUMMARY_COLUMNS = ["subject", "relation", "object", "recorded_seq", "fact_id", "sources", "valid_to"]
BASE_COLUMNS = ["fact_id", "tenant", "subject", "relation", "object", "valid_from", "valid_to", "recorded_seq",
                 "recorded_at", "sources", "source_seqs", "source_principals", "confidence"]


def read_rollups(spec: FoldSpec) -> tuple:
    """The rules a read of this state derives (named by its tag, see StateTag.rollups)."""
    return tuple((r.name, r.kind, tuple(r.inputs), r.output) for r in read_time_rules(spec.rollups))


def current_tag(state_tables: StateStore) -> StateTag:
    tag = state_tables.tag()
    if tag is None:
        raise StoreError(f"state tables under {state_tables.root} were written without their tag; rerun the fold")
    return tag


def buckets_of(nodes: Iterable[str], buckets: int) -> set[int]:
    return {bucket_of(n, buckets) for n in nodes}


def refresh_derived(spec: FoldSpec, state_tables: StateStore, buckets: int, *, before: pl.DataFrame,
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
    direct = after.select(BASE_COLUMNS).filter(pl.col("relation").is_in(inverse) & one_of("fact_id", changed))
    # (an append: the changed rows' new versions come first, so they win over the stored ones)
    pending = after.filter(one_of("fact_id", changed)) if append else after.clear()
    base = pl.concat([pending.select(BASE_COLUMNS), direct]).unique("fact_id", keep="first", maintain_order=True)
    new = derive_frame(rules, base, buckets=buckets, touching=changed)
    fresh_ids = set(new["fact_id"].to_list())
    if append:
        # the derived rows the state holds with a changed input are what the rules gave over
        # the inputs' previous versions: derived again from those, not read back
        previous = before.select(BASE_COLUMNS).filter(one_of("fact_id", changed))
        prior_base = pl.concat([base.filter(~one_of("fact_id", changed)), previous])
        old = derive_frame(rules, prior_base, buckets=buckets, touching=changed)
        gone = old.filter(~one_of("fact_id", fresh_ids))
        rows = [t.to_arrow().select(FACT_SCHEMA.names).cast(FACT_SCHEMA) for t in (pending, new, gone)]
        if sum(t.num_rows for t in rows):
            flags = pa.array([False] * (pending.height + new.height) + [True] * gone.height, pa.bool_())
            state_tables.write("facts", pa.concat_tables(rows), mode="append", seen_at=seen_at, deleted=flags)
        return len(fresh_ids - set(old["fact_id"].to_list())) - gone.height
    # the derived rows the state holds with a changed input: what the rules gave over the
    # inputs' stored versions (a derived id is a hash of its inputs' ids, which every version
    # of a row shares); they are replaced, every version of them, by id in the buckets of their
    # subjects: delta-rs rewrites only the files that hold them
    old = derive_frame(rules, before.select(BASE_COLUMNS).filter(one_of("fact_id", changed)), buckets=buckets,
                       touching=changed)
    homes = set(old["bucket"].to_list()) | set(new["bucket"].to_list())
    if homes:
        state_tables.write("facts", new.to_arrow(), buckets=homes, layer="derived",
                    ids=set(old["fact_id"].to_list()) | fresh_ids)
    return len(fresh_ids) - old.height


def refresh_entities(spec: FoldSpec, state_tables: StateStore, buckets: int, nodes: set[str], renamed: set[str],
                      new_items: pl.DataFrame | None = None, merged: pl.DataFrame | None = None,
                      seen_at: int = -1) -> int:
    """Recompute the entity rows of ``nodes`` (and the summaries of current facts pointing at a
    node of ``renamed``) from the items naming them; return the entities table's version.

    ``new_items`` (an append): the entities' surfaces so far come from their current rows (names
    never change on an append) instead of a scan of every item, ``merged`` holds every merged
    row of the subjects whose facts changed (the other nodes keep their summaries), and the new
    rows are appended as new versions; otherwise their buckets are rewritten."""
    if not nodes:
        dt = state_tables.table("entities")
        return -1 if dt is None else dt.version()
    where = buckets_of(nodes, buckets)
    append = new_items is not None
    old = pl.from_arrow(state_tables.read("entities", buckets=where, filter=among("node", nodes) if append else None))
    prior = None
    if append:
        items, prior = new_items, old
    else:
        items = pl.from_arrow(state_tables.read("items", columns=OCC_COLUMNS,
                                         filter=among("subject_node", nodes) | among("object_node", nodes)))
    summarised = None if merged is None else set(merged["subject"].to_list())
    if merged is None:
        merged = pl.from_arrow(state_tables.read("facts", buckets=buckets_of(nodes, buckets), columns=SUMMARY_COLUMNS,
                                          layer="merged", filter=among("subject", nodes)))
    objects = set(merged.filter(pl.col("valid_to").is_null())["object"].to_list()) - nodes
    names = {}
    if objects:
        known = state_tables.read("entities", buckets=buckets_of(objects, buckets), columns=["node", "name"],
                           filter=among("node", objects))
        names = dict(zip(known["node"].to_pylist(), known["name"].to_pylist()))
    fresh = entity_rows(spec, items, merged.select(SUMMARY_COLUMNS), buckets=buckets, nodes=nodes, names=names,
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
        return state_tables.write("entities", fresh.to_arrow(), mode="append", seen_at=seen_at)
    keep = old.filter(~one_of("node", nodes))
    version = state_tables.write("entities", pl.concat([keep, fresh.cast(keep.schema)]).to_arrow(), buckets=where)
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
            referrers = state_tables.read("facts", buckets=homes, columns=["subject", "valid_to"], layer="merged",
                                   filter=among("object", changed))
            more = set(referrers.filter(pc.is_null(referrers["valid_to"]))["subject"].to_pylist()) - nodes
            if more:
                version = refresh_entities(spec, state_tables, buckets, more, set())
    return version


def retag(state_tables: StateStore, tag: StateTag) -> StateTag:
    """Tag the newest versions again (after a compaction) with ``tag``'s position and counts."""
    entities = state_tables.table("entities")
    state_tables.set_tag(dataclasses.replace(tag, entities_version=entities.version()))
    return current_tag(state_tables)
