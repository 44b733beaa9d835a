"""The merge of a partition's items as polars expressions, for the groups that allow it (pure).

The merge (:mod:`refold.fold.merge`) is a state machine per (tenant, subject, relation) group,
run event by event in Python. Most groups never use its rarer branches, and for those the
machine's outcome is a closed form over the group's items in log order:

* a **single-valued** relation: each run of consecutive items naming the same object is one
  edge (the first item makes it, the others corroborate it); the next run's first item closes
  it at that item's valid start, and names itself as ``superseded_by``/``ended_by``; the last
  run's edge is open;
* a **multi-valued** relation: one open edge per object, made by its first item and
  corroborated by the others.

That holds when a group has no retraction, no stated end (the fact's or its event's
``valid_to``), starts that never go back in log order (the merge's "this fact describes the
past" branch), and no event naming two objects in the group (an event may repeat its own fact).
Every other group goes through the reference machine, so :func:`merge_items` gives, row for row,
what :func:`refold.fold.partition.fold_partition` gives (property-tested in
tests/test_fold_columnar.py and, through ``fold_pairs``, against the reference fold).
"""

from __future__ import annotations

from collections.abc import Callable

import polars as pl

from refold.fold.spec import FoldSpec

__all__ = ["simple_edges", "split_simple"]

_GROUP = ["tenant", "subject_node", "_relation"]
_ORDER = ["seq", "ordinal"]


def split_simple(spec: FoldSpec, items: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(items of the groups :func:`simple_edges` merges, every other item in their log order).

    ``items``: item rows (:data:`refold.fold.partition.ITEM_SCHEMA`). Items the merge rejects
    (no entity key at an end, no relation name) change nothing and are in neither frame, except
    retractions, which always go to the second."""
    if items.height == 0:
        return items.with_columns(_relation=pl.lit("")), items
    stated = items["relation"].unique().to_list()
    canonical = {r: spec.canonical_relation(r) for r in stated}
    single = {r: spec.is_single_valued(r) for r in stated}
    frame = items.with_columns(
        pl.col("relation").replace_strict(canonical, return_dtype=pl.Utf8).alias("_relation"),
        pl.col("relation").replace_strict(single, return_dtype=pl.Boolean).alias("_single"),
        pl.coalesce("valid_from", "event_valid_from", "recorded_at").alias("_start"),
    ).filter((pl.col("kind") != "fact") | pl.col("accepted")).sort(_ORDER)
    start = pl.col("_start")
    simple = (
        (pl.col("kind") == "fact").all()
        & pl.col("valid_to").is_null().all() & pl.col("event_valid_to").is_null().all()
        & (start >= start.shift(1)).fill_null(True).all()
    ).over(_GROUP)
    # an event names one object in a group, at one position of the log (an id is never reused)
    one_object = ((pl.col("object_node").n_unique() == 1) & (pl.col("seq").n_unique() == 1)).over(
        [*_GROUP, "event_id"])
    frame = frame.with_columns((simple & one_object.all().over(_GROUP)).alias("_simple"))
    # (retractions name a fact whose ends may not be accepted: their groups are never simple)
    rest = frame.filter(~pl.col("_simple")).select(items.columns)
    return frame.filter(pl.col("_simple")), rest


def simple_edges(frame: pl.DataFrame, *, fact_id: Callable[..., str]) -> pl.DataFrame:
    """The merged rows (the columns of :data:`refold.fold.partition.FACT_SCHEMA`, in its order)
    of the simple groups in ``frame`` (the first frame of :func:`split_simple`), in no
    particular order. ``fact_id``: the merge's id of an edge made by an event, from (tenant,
    subject node, relation, object node, event id)."""
    # the edge an item belongs to: a run of one object (single-valued), or an object (multi)
    changed = (pl.col("object_node") != pl.col("object_node").shift(1)).fill_null(True).over(_GROUP)
    run = changed.cast(pl.Int64).cum_sum().over(_GROUP)
    frame = frame.with_columns(pl.when(pl.col("_single")).then(run.cast(pl.Utf8))
                               .otherwise(pl.col("object_node")).alias("_edge"))
    edge = [*_GROUP, "_edge"]
    # an event adds its source (and its confidence) once per edge: with its first item there
    firsts = frame.filter(pl.struct([*edge, "event_id"]).is_first_distinct())
    edges = firsts.group_by(edge).agg(
        pl.col("bucket").first(), pl.col("_single").first(), pl.col("object_node").first(),
        pl.col("_start").first(), pl.col("seq").first().alias("recorded_seq"), pl.col("recorded_at").first(),
        pl.col("event_id").alias("sources"), pl.col("seq").alias("source_seqs"),
        pl.col("principals").fill_null(pl.lit([], dtype=pl.List(pl.Utf8))).alias("source_principals"),
        pl.col("confidence").max(),
    ).sort([*_GROUP, "recorded_seq"])  # (a group's runs in log order: one event starts one run)
    ids = [fact_id(*parts) for parts in zip(edges["tenant"], edges["subject_node"], edges["_relation"],
                                             edges["object_node"], edges["sources"].list.first())]
    edges = edges.with_columns(pl.Series("fact_id", ids, dtype=pl.Utf8))
    closer = pl.when(pl.col("_single"))
    return edges.select(
        pl.lit("merged").alias("layer"), pl.col("bucket"), pl.col("fact_id"), pl.col("tenant"),
        pl.col("subject_node").alias("subject"), pl.col("_relation").alias("relation"),
        pl.col("object_node").alias("object"), pl.col("_start").alias("valid_from"),
        closer.then(pl.col("_start").shift(-1).over(_GROUP)).alias("valid_to"),
        pl.col("recorded_seq"), pl.col("recorded_at"), pl.col("sources"), pl.col("source_seqs"),
        pl.col("source_principals"), pl.lit("extracted").alias("derivation"),
        pl.lit([], dtype=pl.List(pl.Utf8)).alias("inputs"), pl.lit([], dtype=pl.List(pl.Utf8)).alias("input_subjects"),
        pl.col("confidence"),
        closer.then(pl.col("fact_id").shift(-1).over(_GROUP)).alias("superseded_by"),
        closer.then(pl.col("sources").list.first().shift(-1).over(_GROUP)).alias("ended_by"),
    )
