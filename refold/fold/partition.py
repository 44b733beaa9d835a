"""The partitioned fold (pure, no IO): merge one partition alone, roll up across partitions.

The merge is per (tenant, subject, relation) (see :mod:`refold.fold.merge`), so the log's
extracted facts can be split by their subject: a **bucket** is a stable hash of the subject's
node id (``"<tenant>/<entity key>"``) modulo the bucket count, and every fact, supersession and
retraction of a subject lands in that subject's bucket. A bucket folds alone, in log order, with
memory bounded by the bucket:

    (event, cached facts) ──► items (one row per fact, with its bucket)            items_of
    items of one bucket, in log order ──► merged fact rows                         fold_partition
    merged rows of changed subjects + new items ──► their new merged rows          advance_subjects
    merged rows (all buckets) ──► derived rows (compose/inverse, polars joins)     derive_frame
    a subject's rows + its objects' rows ──► its compose rows (at read time)       derive_for_subjects
    items (surface names) + merged rows ──► entity rows (name, aliases, summary)   entity_rows

Each step's output equals, row for row, what the reference fold (:func:`refold.fold.merge.merge`
+ :func:`refold.fold.rollups.apply_rollups` on one networkx graph) gives for the same log: the
merge of a partition *is* :class:`~refold.fold.merge.GraphBuilder` fed that partition's items,
and the roll-up stage applies :mod:`refold.fold.rollups`' rules (property-tested in
tests/test_fold_partition.py).

The state tables keep only the roll-ups whose rows are linear in the log (:func:`stored_rules`:
inverse rules, one row per input row); compose rules (:func:`read_time_rules`) would keep a
closed copy of every member's row at each move of what they point at (rows ∝ moves × staff),
so they are derived when read, for exactly the subjects read (:func:`derive_for_subjects`).
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import networkx as nx
import polars as pl
import pyarrow as pa

from refold.fold.events import Event, Fact
from refold.fold.extract import ExtractedFact, Extraction
from refold.fold.columnar import simple_edges, split_simple
from refold.fold.merge import GraphBuilder, MergeChanges, MergeStats, entity_key, fact_id_of, node_id
from refold.fold.spec import FoldSpec

__all__ = [
    "DEFAULT_BUCKETS", "ENTITY_SCHEMA", "FACT_SCHEMA", "ITEM_SCHEMA", "advance_subjects", "bucket_of",
    "derive_for_subjects", "derive_frame", "entities_from_names", "entity_names", "entity_rows",
    "first_surfaces", "fold_pairs", "fold_partition", "items_frame", "items_of", "merge_items",
    "merged_frame", "names_of_surfaces", "one_of", "read_time_rules", "stored_rules", "subject_buckets"
]

#: Buckets of a new state: a full fold's peak memory follows the largest bucket (~1/64 of the
#: store), and a subject's read opens one bucket's files.
DEFAULT_BUCKETS = 64

_TS = pa.timestamp("us", tz="UTC")
_STRS = pa.list_(pa.string())

#: One extracted fact (or one retraction) of one event: what a partition's merge reads.
ITEM_SCHEMA = pa.schema([
    ("bucket", pa.int32()), ("seq", pa.int64()), ("ordinal", pa.int32()), ("event_id", pa.string()),
    ("tenant", pa.string()), ("kind", pa.string()), ("recorded_at", _TS),
    ("event_valid_from", _TS), ("event_valid_to", _TS), ("principals", _STRS),
    ("subject", pa.string()), ("relation", pa.string()), ("object", pa.string()),
    ("subject_node", pa.string()), ("object_node", pa.string()), ("object_bucket", pa.int32()),
    ("valid_from", _TS), ("valid_to", _TS), ("confidence", pa.float64()), ("accepted", pa.bool_()),
])

#: A merged or derived fact: the attributes of a reference-fold edge (see refold.fold.merge),
#: plus ``layer`` ("merged"/"derived"), ``bucket`` (of the subject) and ``input_subjects``
#: (derived rows: the subjects of their inputs, so a refresh finds the rows an input change hits).
FACT_SCHEMA = pa.schema([
    ("layer", pa.string()), ("bucket", pa.int32()), ("fact_id", pa.string()), ("tenant", pa.string()),
    ("subject", pa.string()), ("relation", pa.string()), ("object", pa.string()),
    ("valid_from", _TS), ("valid_to", _TS), ("recorded_seq", pa.int64()), ("recorded_at", _TS),
    ("sources", _STRS), ("source_seqs", pa.list_(pa.int64())), ("source_principals", pa.list_(_STRS)),
    ("derivation", pa.string()), ("inputs", _STRS), ("input_subjects", _STRS),
    ("confidence", pa.float64()), ("superseded_by", pa.string()), ("ended_by", pa.string()),
])

#: An entity (a reference-fold node): ``summary`` is the JSON of {relation: [object names]};
#: ``name_seqs`` the log seq of each name's first occurrence ([name, *aliases]): an erasure
#: renames a node only where it erased such an occurrence, so it leaves every other node's row
#: alone without reading the items that name it.
ENTITY_SCHEMA = pa.schema([
    ("bucket", pa.int32()), ("node", pa.string()), ("tenant", pa.string()), ("name", pa.string()),
    ("key", pa.string()), ("aliases", _STRS), ("name_seqs", pa.list_(pa.int64())), ("summary", pa.string()),
    ("summary_sources", _STRS),
])

FACT_POLARS = pl.from_arrow(FACT_SCHEMA.empty_table()).schema
#: a relation name is empty under every spec or under none (aliases map names to names), so the
#: items' ``accepted`` test needs no spec
_NO_SPEC = FoldSpec()


@functools.lru_cache(maxsize=1 << 16)
def bucket_of(node: str, buckets: int) -> int:
    """The bucket of a node id (``"<tenant>/<key>"``): stable across processes and machines."""
    digest = hashlib.blake2b(node.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % buckets


def subject_buckets(tenants: Iterable[str], subject: str, buckets: int) -> set[int]:
    """The buckets that can hold ``subject``'s facts in any of ``tenants``."""
    return {bucket_of(node_id(t, subject), buckets) for t in tenants}


# -- items -----------------------------------------------------------------------------------------


def items_of(event: Event, facts: Sequence[ExtractedFact] | None, buckets: int) -> list[dict[str, Any]]:
    """The item rows of one event: its extracted ``facts`` (None: no extraction), or its retraction.

    An erased event (no content, or a tombstone) has none: it contributes nothing to the fold.
    """
    if event.content is None or event.is_tombstone:
        return []
    common = {"seq": event.seq, "event_id": event.event_id, "tenant": event.tenant,
              "recorded_at": event.recorded_at, "event_valid_from": event.valid_from,
              "event_valid_to": event.valid_to, "principals": list(event.principals)}
    if event.kind == "retraction" and event.fact is not None:
        f = event.fact
        return [_item(common, 0, "retraction", f.subject, f.relation, f.object, None, None, 1.0, buckets)]
    if not facts:
        return []
    return [_item(common, i, "fact", f.subject, f.relation, f.object, f.valid_from, f.valid_to, f.confidence,
                  buckets) for i, f in enumerate(facts)]


def _item(common: dict, ordinal: int, kind: str, subject: str, relation: str, obj: str, valid_from, valid_to,
          confidence: float, buckets: int) -> dict[str, Any]:
    s, o = node_id(common["tenant"], subject), node_id(common["tenant"], obj)
    return {**common, "bucket": bucket_of(s, buckets), "ordinal": ordinal, "kind": kind, "subject": subject,
            "relation": relation, "object": obj, "subject_node": s, "object_node": o,
            "object_bucket": bucket_of(o, buckets),
            # the merge's own test of a fact (an entity key at each end, a relation name), kept so
            # that the entity stage need not repeat it per row
            "accepted": bool(entity_key(subject) and entity_key(obj) and _NO_SPEC.canonical_relation(relation)),
            "valid_from": valid_from, "valid_to": valid_to, "confidence": float(confidence)}


def _pairs(items: Iterable[dict[str, Any]], spec_hash: str) -> Iterable[tuple[Event, Extraction | None]]:
    """(event, extraction) pairs rebuilt from items sorted by (seq, ordinal): what a
    :class:`GraphBuilder` reads (only the attributes the merge uses are set)."""
    group: list[dict[str, Any]] = []
    for item in items:
        if group and item["seq"] != group[0]["seq"]:
            yield _pair(group, spec_hash)
            group = []
        group.append(item)
    if group:
        yield _pair(group, spec_hash)


def _pair(group: list[dict[str, Any]], spec_hash: str) -> tuple[Event, Extraction | None]:
    first = group[0]
    retraction = first["kind"] == "retraction"
    event = Event(seq=first["seq"], event_id=first["event_id"], recorded_at=first["recorded_at"],
                  table_version=0, kind="retraction" if retraction else "observation", tenant=first["tenant"],
                  source=None, content="", principals=tuple(first["principals"] or ()),
                  valid_from=first["event_valid_from"], valid_to=first["event_valid_to"],
                  fact=Fact(first["subject"], first["relation"], first["object"]) if retraction else None)
    if retraction:
        return event, None
    facts = tuple(ExtractedFact(i["subject"], i["relation"], i["object"], valid_from=i["valid_from"],
                                valid_to=i["valid_to"], confidence=i["confidence"]) for i in group)
    return event, Extraction(event_id=first["event_id"], spec_hash=spec_hash, facts=facts)


# -- the merge of one partition ------------------------------------------------------------------


def fold_partition(spec: FoldSpec, items: Iterable[dict[str, Any]], *, buckets: int) -> list[dict[str, Any]]:
    """Merged fact rows (:data:`FACT_SCHEMA`) of one partition's items, sorted by (seq, ordinal).

    Memory is bounded by the partition: one :class:`GraphBuilder` over its items only.
    """
    builder = GraphBuilder(spec=spec, stats=MergeStats())
    for event, extraction in _pairs(items, spec.hash):
        builder.apply(event, extraction)
    return _merged_rows(builder.graph, buckets)


def merge_items(spec: FoldSpec, items: pl.DataFrame, *, buckets: int,
                rows: Callable[[pl.DataFrame], Iterable[dict[str, Any]]] | None = None) -> pl.DataFrame:
    """Merged rows (:data:`FACT_SCHEMA`, sorted by (recorded_seq, fact_id)) of ``items`` (item
    rows of any set of whole subjects, in any order): what :func:`fold_partition` gives for them.

    The groups whose merge has a closed form are merged as polars expressions
    (:mod:`refold.fold.columnar`); the others go through :func:`fold_partition`, whose item
    dicts ``rows`` makes from a frame (default: ``iter_rows(named=True)``)."""
    simple, rest = split_simple(spec, items)
    parts = []
    if simple.height:
        parts.append(simple_edges(simple, fact_id=fact_id_of).cast(FACT_POLARS))
    if rest.height:
        made = fold_partition(spec, (rows or _named_rows)(rest), buckets=buckets)
        parts.append(merged_frame(made))
    if not parts:
        return pl.DataFrame(schema=FACT_POLARS)
    return pl.concat(parts).sort(["recorded_seq", "fact_id"])


def _named_rows(frame: pl.DataFrame) -> Iterable[dict[str, Any]]:
    return frame.iter_rows(named=True)


def advance_subjects(spec: FoldSpec, current: Iterable[dict[str, Any]], items: Iterable[dict[str, Any]], *,
                     buckets: int) -> tuple[list[dict[str, Any]], set[str]]:
    """(merged rows, ids of the rows made or changed) of the subjects that ``items`` (new events,
    in log order) touch, given their ``current`` merged rows: incremental projection per subject
    (state at n + events (n, m] = state at m), reading nothing of other subjects.

    ``current`` may be only their open rows (``valid_to`` null): the merge never changes a
    closed row, so the result is then those rows as they become, and the new ones."""
    graph = nx.MultiDiGraph()
    for row in current:
        d = {k: row[k] for k in _EDGE_KEYS}
        d["sources"], d["source_seqs"] = list(d["sources"]), list(d["source_seqs"])
        d["source_principals"] = [list(p) for p in d["source_principals"]]
        for n in (d["subject"], d["object"]):
            if n not in graph:
                graph.add_node(n, name="", aliases=[])  # names live in the entity rows
        graph.add_edge(d["subject"], d["object"], key=d["fact_id"], **d)
    builder = GraphBuilder.from_graph(spec, graph, MergeStats())
    builder.changes = changes = MergeChanges()
    for event, extraction in _pairs(items, spec.hash):
        builder.apply(event, extraction)
    return _merged_rows(builder.graph, buckets), changes.added | changes.grown | changes.closed


_EDGE_KEYS = ("fact_id", "tenant", "subject", "relation", "object", "valid_from", "valid_to", "recorded_seq",
              "recorded_at", "sources", "source_seqs", "source_principals", "derivation", "inputs", "confidence",
              "superseded_by", "ended_by")


def _merged_rows(graph: nx.MultiDiGraph, buckets: int) -> list[dict[str, Any]]:
    rows = []
    for _, _, d in graph.edges(data=True):
        row = {k: d[k] for k in _EDGE_KEYS}
        row.update(layer="merged", bucket=bucket_of(d["subject"], buckets), input_subjects=[])
        rows.append(row)
    rows.sort(key=lambda r: (r["recorded_seq"], r["fact_id"]))
    return rows


# -- the roll-up stage (across partitions) ---------------------------------------------------------


def stored_rules(rules) -> tuple:
    """The roll-up rules whose rows the state tables keep: inverse rules (one row per input)."""
    return tuple(r for r in rules if r.kind == "inverse")


def read_time_rules(rules) -> tuple:
    """The roll-up rules derived when read: compose rules (their rows grow with moves × staff)."""
    return tuple(r for r in rules if r.kind != "inverse")


def one_of(column: str, values: Iterable[str]) -> pl.Expr:
    """``column`` is one of ``values`` (a polars filter; :func:`refold.storage.state.among` is
    the pyarrow one that a read pushes down)."""
    return pl.col(column).is_in(pl.Series(sorted(set(values)), dtype=pl.Utf8).implode())


def derive_for_subjects(rules, rows: pl.DataFrame, partners: pl.DataFrame, subjects: Iterable[str], *,
                        buckets: int) -> pl.DataFrame:
    """The compose-derived rows (:data:`FACT_SCHEMA`, by fact id) whose subject is one of
    ``subjects``: exactly the rows :func:`derive_frame` gives over every merged row.

    ``rows``: merged rows holding at least every first input (``rule.inputs[0]``) of
    ``subjects``; ``partners``: merged rows holding at least every second input whose subject is
    an object of those (the subjects' objects' rows). Other rows may be present: a pair whose
    first input is not a subject's is left out."""
    rules = read_time_rules(rules)
    wanted = pl.Series(sorted(set(subjects)), dtype=pl.Utf8).implode()
    firsts = {r.inputs[0] for r in rules}
    seconds = {r.inputs[1] for r in rules}
    a = rows.filter(pl.col("subject").is_in(wanted) & pl.col("relation").is_in(sorted(firsts)))
    b = partners.filter(pl.col("relation").is_in(sorted(seconds)))
    if not rules or a.height == 0 or b.height == 0:
        return pl.DataFrame(schema=FACT_POLARS)
    base = pl.concat([a.select(_BASE), b.select(_BASE)]).unique("fact_id", maintain_order=True)
    out = derive_frame(rules, base, buckets=buckets)
    # (a partner that is also a first input, e.g. a rule over one relation, derives rows of its own)
    return out.filter(pl.col("subject").is_in(wanted))


#: the columns of a merged row that the roll-up rules read
_BASE = ["fact_id", "tenant", "subject", "relation", "object", "valid_from", "valid_to", "recorded_seq",
         "recorded_at", "sources", "source_seqs", "source_principals", "confidence"]


def derive_frame(rules, merged: pl.DataFrame, *, buckets: int,
                 touching: Iterable[str] | None = None) -> pl.DataFrame:
    """Derived fact rows (:data:`FACT_SCHEMA`) that ``rules`` give over ``merged`` rows (polars
    joins: a compose rule's two inputs may live in different partitions), sorted by fact id.

    ``touching`` (fact ids): only rows with an input among them. Each derived row carries the
    union of its inputs' lineage, as :func:`refold.fold.rollups.derive` does.
    """
    want = None if touching is None else pl.Series(sorted(set(touching)), dtype=pl.Utf8).implode()
    base = merged.select(_BASE)
    parts: list[pl.DataFrame] = []
    for rule in rules:
        if rule.kind == "inverse":
            r = base.filter(pl.col("relation") == rule.inputs[0])
            if want is not None:
                r = r.filter(pl.col("fact_id").is_in(want))
            if r.height == 0:
                continue
            parts.append(_finish(rule, r.select(
                pl.col("tenant"), pl.col("object").alias("subject"), pl.col("subject").alias("object"),
                "valid_from", "valid_to", "recorded_seq", "recorded_at",
                pl.col("sources").list.unique(maintain_order=True),
                pl.col("source_seqs").list.unique(maintain_order=True), "source_principals",
                pl.concat_list([pl.col("fact_id")]).alias("inputs"),
                pl.concat_list([pl.col("subject")]).alias("input_subjects"), "confidence")))
        else:
            a = base.filter(pl.col("relation") == rule.inputs[0])
            b = base.filter(pl.col("relation") == rule.inputs[1])
            if a.height == 0 or b.height == 0:
                continue
            if want is None:
                j = a.join(b, left_on="object", right_on="subject", suffix="_b")
            else:  # the pairs with a touching input, each once: (touching, any), (other, touching)
                # (joining everything first and filtering after built every pair of an
                # organisation's staff history with its location history: gigabytes)
                hot_a, hot_b = pl.col("fact_id").is_in(want), b["fact_id"].is_in(want)
                j = pl.concat([
                    a.filter(hot_a).join(b, left_on="object", right_on="subject", suffix="_b"),
                    a.filter(~hot_a).join(b.filter(hot_b), left_on="object", right_on="subject", suffix="_b"),
                ])
            if j.height == 0:
                continue
            vt, vtb = pl.col("valid_to"), pl.col("valid_to_b")
            start = pl.max_horizontal("valid_from", "valid_from_b")
            end = pl.when(vt.is_null()).then(vtb).when(vtb.is_null()).then(vt).otherwise(pl.min_horizontal(vt, vtb))
            j = j.with_columns(start.alias("_start"), end.alias("_end"))
            j = j.filter(pl.col("_end").is_null() | (pl.col("_end") > pl.col("_start")))
            if j.height == 0:
                continue
            parts.append(_finish(rule, j.select(
                pl.col("tenant"), pl.col("subject"), pl.col("object_b").alias("object"),
                pl.col("_start").alias("valid_from"), pl.col("_end").alias("valid_to"),
                pl.max_horizontal("recorded_seq", "recorded_seq_b").alias("recorded_seq"),
                pl.max_horizontal("recorded_at", "recorded_at_b").alias("recorded_at"),
                pl.concat_list(["sources", "sources_b"]).list.unique(maintain_order=True).alias("sources"),
                pl.concat_list(["source_seqs", "source_seqs_b"]).list.unique(maintain_order=True).alias("source_seqs"),
                pl.concat_list(["source_principals", "source_principals_b"]).alias("source_principals"),
                pl.concat_list(["fact_id", "fact_id_b"]).alias("inputs"),
                pl.concat_list(["subject", "object"]).alias("input_subjects"),
                pl.min_horizontal("confidence", "confidence_b").alias("confidence"))))
    if not parts:
        return pl.DataFrame(schema=FACT_POLARS)
    out = pl.concat(parts, how="vertical")
    out = out.with_columns(pl.col("subject").map_elements(lambda n: bucket_of(n, buckets),
                                                          return_dtype=pl.Int32).alias("bucket"))
    return out.select(list(FACT_POLARS)).cast(FACT_POLARS).sort("fact_id")


def _finish(rule, frame: pl.DataFrame) -> pl.DataFrame:
    ids = [fact_id_of("rollup", rule.name, *inputs) for inputs in frame["inputs"].to_list()]
    return frame.with_columns(
        pl.Series("fact_id", ids, dtype=pl.Utf8), pl.lit("derived").alias("layer"),
        pl.lit(rule.output).alias("relation"), pl.lit(rule.name).alias("derivation"),
        pl.lit(None, dtype=pl.Utf8).alias("superseded_by"), pl.lit(None, dtype=pl.Utf8).alias("ended_by"),
        pl.lit(0, dtype=pl.Int32).alias("bucket"),
    ).select(list(FACT_POLARS)).cast(FACT_POLARS)


# -- entities --------------------------------------------------------------------------------------


_OCC_SCHEMA = {"node": pl.Utf8, "bucket": pl.Int32, "tenant": pl.Utf8, "surface": pl.Utf8, "seq": pl.Int64,
               "ordinal": pl.Int32, "pos": pl.Int8}


def occurrences(spec: FoldSpec, items: pl.DataFrame) -> pl.DataFrame:
    """(node, bucket, tenant, surface, seq, ordinal, pos) of every surface name the merge gives a
    node: both ends of every fact item it accepts (retractions name no new node)."""
    facts = items.filter((pl.col("kind") == "fact") & pl.col("accepted"))
    if facts.height == 0:
        return pl.DataFrame(schema=_OCC_SCHEMA)
    cols = ["tenant", "seq", "ordinal"]
    return pl.concat([
        facts.select(pl.col("subject_node").alias("node"), "bucket", *cols,
                     pl.col("subject").str.strip_chars().alias("surface"), pl.lit(0, dtype=pl.Int8).alias("pos")),
        facts.select(pl.col("object_node").alias("node"), pl.col("object_bucket").alias("bucket"), *cols,
                     pl.col("object").str.strip_chars().alias("surface"), pl.lit(1, dtype=pl.Int8).alias("pos")),
    ]).select(list(_OCC_SCHEMA)).cast(_OCC_SCHEMA)


def entity_names(spec: FoldSpec, items: pl.DataFrame, *, nodes: Iterable[str] | None = None,
                 buckets_in: Iterable[int] | None = None, prior: pl.DataFrame | None = None) -> pl.DataFrame:
    """(node, tenant, surfaces, seqs) per node named by ``items``: its surface names in log
    order, each once (the first is its display name), and the seq of each one's first
    occurrence. ``nodes``/``buckets_in``: only those nodes, or the nodes of those buckets;
    ``prior``: entity rows as they were before ``items``."""
    occ = occurrences(spec, items)
    if prior is not None and prior.height:
        # an entity's surfaces so far, in order and at the seqs they were first seen (all before
        # the new items' seqs), ties in list order
        before = prior.select(
            "node", "bucket", "tenant", pl.concat_list([pl.col("name"), pl.col("aliases")]).alias("surface"),
            pl.col("name_seqs").alias("seq"),
        ).explode("surface", "seq").with_columns(
            pl.lit(0, dtype=pl.Int32).alias("ordinal"),
            pl.int_range(pl.len()).over("node").cast(pl.Int8).alias("pos"),
        ).select(list(_OCC_SCHEMA)).cast(_OCC_SCHEMA)
        occ = pl.concat([before, occ])
    if nodes is not None:
        occ = occ.filter(pl.col("node").is_in(pl.Series(sorted(set(nodes)), dtype=pl.Utf8).implode()))
    if buckets_in is not None:
        occ = occ.filter(pl.col("bucket").is_in(pl.Series(sorted(set(buckets_in)), dtype=pl.Int32).implode()))
    return names_of_surfaces(occ)


def first_surfaces(spec: FoldSpec, items: pl.DataFrame) -> pl.DataFrame:
    """The first occurrence of each (node, surface name) in ``items``: a partial of the name
    stage. Partials of any split of the items, concatenated, give :func:`names_of_surfaces`
    the same names as all the items at once (a full fold reads the items a bucket group at a
    time, and a node is named by items in its subjects' buckets too)."""
    return _firsts(occurrences(spec, items))


def names_of_surfaces(occ: pl.DataFrame) -> pl.DataFrame:
    """(node, tenant, surfaces, seqs) from occurrences or :func:`first_surfaces` partials: each
    node's distinct surfaces in order of first occurrence, and the seqs of those occurrences."""
    return (_firsts(occ).group_by("node", maintain_order=True)
            .agg(pl.col("tenant").first(), pl.col("bucket").first(), pl.col("surface").alias("surfaces"),
                 pl.col("seq").alias("seqs")))


def _firsts(occ: pl.DataFrame) -> pl.DataFrame:
    return occ.sort(["seq", "ordinal", "pos"]).unique(["node", "surface"], keep="first", maintain_order=True)


def entities_from_names(names: pl.DataFrame, merged: pl.DataFrame, name_of: dict[str, str], *,
                        buckets: int) -> pl.DataFrame:
    """Entity rows of the nodes in ``names`` (:func:`entity_names`), summaries from their current
    ``merged`` rows as subject, the objects' names from ``name_of``.

    A summary is what :func:`refold.fold.rollups.summarize` gives, as ``json.dumps`` writes it
    (relations in order of their first current fact by record order, each object's name in
    that order), built as string columns: each distinct name and relation is encoded once."""
    if names.height == 0:
        return pl.from_arrow(ENTITY_SCHEMA.empty_table())
    current = (merged.filter(pl.col("valid_to").is_null() & pl.col("subject").is_in(names["node"].implode()))
               .sort(["recorded_seq", "fact_id"]))
    objects = current["object"].unique().to_list()
    missing = sorted(set(objects) - name_of.keys())
    if missing:
        raise ValueError(f"entity rows: no surface name for {len(missing)} object node(s), e.g. {missing[0]!r}")
    encoded = {o: json.dumps(name_of[o], ensure_ascii=False) for o in objects}
    relations = {r: json.dumps(r, ensure_ascii=False) for r in current["relation"].unique().to_list()}
    parts = (current.with_columns(pl.col("object").replace_strict(encoded, return_dtype=pl.Utf8).alias("_name"),
                                  pl.col("relation").replace_strict(relations, return_dtype=pl.Utf8).alias("_rel"))
             .group_by(["subject", "relation"], maintain_order=True)
             .agg(pl.col("_rel").first(), pl.col("_name").str.join(", ")))
    summaries = parts.group_by("subject", maintain_order=True).agg(
        pl.concat_str([pl.lit("{"), (pl.col("_rel") + pl.lit(": [") + pl.col("_name") + pl.lit("]")).str.join(", "),
                       pl.lit("}")]).alias("summary"))
    sources = (current.select("subject", "sources").explode("sources").drop_nulls("sources")
               .group_by("subject", maintain_order=True)
               .agg(pl.col("sources").unique(maintain_order=True).alias("summary_sources")))
    surfaces = names["surfaces"]
    keys = {n: entity_key(n) for n in surfaces.list.first().unique().to_list()}
    out = (names.select("node", "tenant", "surfaces", "seqs")
           .join(summaries, left_on="node", right_on="subject", how="left", maintain_order="left")
           .join(sources, left_on="node", right_on="subject", how="left", maintain_order="left"))
    return out.select(
        pl.col("node").map_elements(lambda n: bucket_of(n, buckets), return_dtype=pl.Int32).alias("bucket"),
        "node", "tenant", pl.col("surfaces").list.first().alias("name"),
        pl.col("surfaces").list.first().replace_strict(keys, return_dtype=pl.Utf8).alias("key"),
        pl.col("surfaces").list.slice(1).alias("aliases"), pl.col("seqs").alias("name_seqs"),
        pl.col("summary").fill_null("{}"),
        pl.col("summary_sources").fill_null(pl.lit([], dtype=pl.List(pl.Utf8))),
    ).cast(pl.from_arrow(ENTITY_SCHEMA.empty_table()).schema)


def entity_rows(spec: FoldSpec, items: pl.DataFrame, merged: pl.DataFrame, *, buckets: int,
                nodes: Iterable[str] | None = None, names: dict[str, str] | None = None,
                prior: pl.DataFrame | None = None) -> pl.DataFrame:
    """Entity rows (:data:`ENTITY_SCHEMA`) from ``items`` (their surface names, in log order:
    the first is the name, the others aliases) and ``merged`` rows (summaries: current facts per
    relation). ``nodes``: only these (an incremental refresh); ``items``/``merged`` must then hold
    every item naming them and every merged row of them as subject, and ``names`` the names of
    other nodes their current facts point at. ``prior``: entity rows of these nodes as they
    were before ``items`` (an append: names are kept, new surfaces become aliases)."""
    found = entity_names(spec, items, nodes=nodes, prior=prior)
    name_of = dict(names or {})
    name_of.update(zip(found["node"].to_list(), (s[0] for s in found["surfaces"].to_list())))
    return entities_from_names(found, merged, name_of, buckets=buckets)


def merged_frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    """Merged rows as a polars frame of :data:`FACT_SCHEMA`."""
    return pl.from_arrow(pa.Table.from_pylist(rows, schema=FACT_SCHEMA))


def items_frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    return pl.from_arrow(pa.Table.from_pylist(rows, schema=ITEM_SCHEMA))


def fold_pairs(spec: FoldSpec, pairs: Iterable[tuple[Event, Extraction | None]], *,
               buckets: int = DEFAULT_BUCKETS) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(merged, derived, entities) of ``pairs`` in log order, partition by partition, all in
    memory: the partitioned fold without a store (tests, small logs)."""
    rows = [i for e, x in pairs for i in items_of(e, None if x is None else x.facts, buckets)]
    items = items_frame(rows)
    merged_parts = [merge_items(spec, part, buckets=buckets)
                    for _, part in items.group_by(["bucket"], maintain_order=True)]
    merged = pl.concat(merged_parts) if merged_parts else merged_frame([])
    derived = derive_frame(spec.rollups, merged, buckets=buckets)
    return merged, derived, entity_rows(spec, items, merged, buckets=buckets)
