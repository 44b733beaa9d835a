"""The reference fold: the test oracle, and nothing else.

Merge (:class:`refold.fold.merge.GraphBuilder`, in log order) and roll-ups
(:func:`refold.fold.rollups.apply_rollups`) over an event list, in memory, on one networkx graph.
It is the plainest statement of what the state tables must hold: the tests compare what every
read of the state tables answers (``facts``, ``graph``, ``why``, ``as_of``, scoped and shred-mode
reads, after folds, appends and erasures) with this fold of the same events. It holds the whole
state in one process, so no product path may call it (tests/test_layout.py checks that none
imports it); the product folds bucket by bucket (:mod:`refold.fold.partition`,
``refold.state_fold``). Pure: no IO, imports nothing outside :mod:`refold.fold`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import networkx as nx

from .events import Event
from .extract import Extraction
from .merge import GraphBuilder, MergeStats
from .rollups import apply_rollups
from .spec import FoldSpec

__all__ = ["ReferenceState", "reference_fold"]


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
