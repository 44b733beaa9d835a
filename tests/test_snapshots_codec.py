"""The snapshot codec: merged graph ⇄ Arrow tables, exact (times keep their offsets), strict."""

from __future__ import annotations

import pyarrow as pa
import pytest

from refold.fold.errors import StoreError
from refold.fold.incremental import LiveFold
from refold.fold.merge import MergeStats
from refold.fold.snapshot_codec import (EDGE_ATTRS, EDGE_SCHEMA, NODE_SCHEMA, decode_graph, encode_graph,
                                        stats_from_json, stats_to_json)
from refold.fold.spec import FoldSpec
from tests.fold_helpers import canonical_graph
from tests.snapshot_helpers import folded

STEPS = [("Ann", "lives_in", "Oslo", 1, False, True), ("Ann", "lives_in", "Rome", 5, False, False),
         ("The Ann", "lives_in", "Rome", 6, False, False), ("Ann", "works_at", "Acme", None, False, False),
         ("Acme", "located_in", "Oslo", 2, False, True), ("Ann", "works_at", "Acme", 3, True, False)]


def _live() -> LiveFold:
    return folded(STEPS)


def test_round_trip_is_exact_roll_ups_included():
    live = _live()
    nodes, edges = encode_graph(live.graph)
    assert nodes.schema == NODE_SCHEMA and edges.schema == EDGE_SCHEMA
    assert edges.schema.field("valid_from").type == pa.timestamp("us", tz="UTC")
    assert edges.schema.field("sources").type == pa.list_(pa.string())
    derived = [d for *_, d in live.graph.edges(data=True) if d["derivation"] != "extracted"]
    assert derived and edges.num_rows == live.graph.number_of_edges()
    graph = decode_graph(nodes, edges)
    assert canonical_graph(graph) == canonical_graph(live.detached_graph())
    resumed = LiveFold.resume(live.spec, graph, live.builder.stats, contained=live.contained, link=live.link,
                              started_from=live.last_seq)
    assert resumed.derived_count == len(derived) and resumed.fact_count == live.fact_count
    assert canonical_graph(resumed.detached_graph()) == canonical_graph(live.detached_graph())
    paris = [d["valid_from"] for *_, d in graph.edges(data=True) if d["valid_from"].utcoffset().seconds]
    assert paris and all(v.isoformat().endswith("+02:00") for v in paris)
    aliases = {n: d["aliases"] for n, d in graph.nodes(data=True) if d["aliases"]}
    assert aliases == {"t/ann": ["The Ann"]}


def test_decoded_lists_are_fresh_objects():
    nodes, edges = encode_graph(_live().graph)
    one, two = decode_graph(nodes, edges), decode_graph(nodes, edges)
    key = next(iter(one.edges(keys=True)))
    one.edges[key]["sources"].append("more")
    assert "more" not in two.edges[key]["sources"]


def test_a_merged_only_graph_is_rolled_up_on_resume():
    live = _live()
    merged = live.detached_graph()
    merged.remove_edges_from([(u, v, k) for u, v, k, d in live.graph.edges(keys=True, data="derivation")
                              if d != "extracted"])
    for _, d in merged.nodes(data=True):
        del d["summary"], d["summary_sources"]
    resumed = LiveFold.resume(live.spec, merged, live.builder.stats, contained=(), link="", started_from=0)
    assert canonical_graph(resumed.detached_graph()) == canonical_graph(live.detached_graph())


def test_unknown_attributes_and_foreign_tables_are_refused():
    live = _live()
    u, v, k = next(iter(live.graph.edges(keys=True)))
    live.graph.edges[u, v, k]["new_attribute"] = 1
    with pytest.raises(StoreError, match="new_attribute"):
        encode_graph(live.graph)
    nodes, edges = encode_graph(_live().graph)
    with pytest.raises(StoreError, match="columns"):
        decode_graph(nodes, edges.drop_columns(["ended_by"]))
    assert set(EDGE_ATTRS) == {"fact_id", "tenant", "subject", "relation", "object", "valid_from", "valid_to",
                               "recorded_seq", "recorded_at", "sources", "source_seqs", "source_principals",
                               "derivation", "inputs", "confidence", "superseded_by", "ended_by"}


def test_stats_round_trip():
    stats = MergeStats(events=9, facts_in=7, edges=5, corroborations=1, supersessions=2, retractions=1,
                       rejected=3, last_seq=8)
    assert stats_from_json(stats_to_json(stats)) == stats
    assert stats_from_json({**stats_to_json(stats), "from_a_newer_version": 1}) == stats
    assert FoldSpec().hash == FoldSpec().hash
