"""The reference fold: the test oracle, and nothing else.

Merge (:class:`refold.fold.merge.GraphBuilder`, in log order) and roll-ups
(:func:`refold.fold.rollups.apply_rollups`) over an event list, in memory, on one networkx graph.
It is the plainest statement of what the state tables must hold: the tests compare what every
read of the state tables answers (``facts``, ``graph``, ``why``, ``as_of``, scoped and shred-mode
reads, after folds, appends and erasures) with this fold of the same events. It holds the whole
state in one process, so no product path may call it (tests/test_layout.py checks that none
imports it); the product folds bucket by bucket (:mod:`refold.fold.partition`,
``refold.engine.fold``). Pure: no IO, imports nothing outside :mod:`refold.fold`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import networkx as nx
import polars as pl

from refold.fold.embed import ITEM_FACT_COLUMNS, fact_item_frame
from refold.fold.events import Event
from refold.fold.extract import Extraction
from refold.fold.merge import GraphBuilder, MergeStats
from refold.fold.rollups import apply_rollups
from refold.fold.scoping import CLOSER_COLUMNS, closer_readers, edge_map
from refold.fold.spec import FoldSpec

__all__ = ["ReferenceState", "reference_fold", "reference_index_items"]


@dataclass(frozen=True)
class ReferenceState:
    """The reference fold's result: ``graph`` (edges keyed by fact id, merged and derived, with
    every attribute; nodes with names, aliases and summaries), the merge's counts and the number
    of derived edges."""

    spec: FoldSpec
    graph: nx.MultiDiGraph
    stats: MergeStats
    derived: int

    @property
    def last_seq(self) -> int:
        """The seq of the last event folded (-1: none)."""
        return self.stats.last_seq

    @property
    def facts(self) -> int:
        """Merged (extracted) edges."""
        return self.graph.number_of_edges() - self.derived


def reference_fold(spec: FoldSpec, events: Iterable[Event],
                   extractions: Mapping[str, Extraction]) -> ReferenceState:
    """Fold ``events`` (in log order; erased and undecryptable events have ``content`` None and
    contribute nothing) with their ``extractions`` by event id (an event without one states no
    fact; retractions need none) under ``spec``: merge, then roll up."""
    builder = GraphBuilder(spec=spec)
    for event in events:
        builder.apply(event, extractions.get(event.event_id))
    derived = apply_rollups(builder.graph, spec)
    return ReferenceState(spec=spec, graph=builder.graph, stats=builder.stats, derived=derived)


def reference_index_items(graph: nx.MultiDiGraph,
                          retraction_principals: Mapping[str, Sequence[str]] | None = None) -> pl.DataFrame:
    """The search index's fact rows of a reference fold's ``graph``, built edge by edge with the
    dict form of the closing rule (:func:`refold.fold.scoping.closer_readers`): the oracle of
    :func:`refold.fold.embed.fact_items_of_rows`, which builds them from the state tables' rows.
    Every fact with its history, except a compose roll-up's (two inputs) closed copies.
    ``retraction_principals``: the principals of the log's retraction events, by id."""
    edges = edge_map(graph)
    kept = [d for d in edges.values() if d["valid_to"] is None or len(d["inputs"]) != 2]
    facts = pl.DataFrame({c: [d[c] for d in kept] for c in ITEM_FACT_COLUMNS}, schema=ITEM_FACT_COLUMNS)
    names = {n: d["name"] for n, d in graph.nodes(data=True)}
    closing = [(fid, c[0], sorted(c[1])) for fid, c in closer_readers(edges, retraction_principals or {}).items()
               if c[0] or c[1]]
    return fact_item_frame(facts, names, pl.DataFrame(closing, schema=CLOSER_COLUMNS, orient="row"))
