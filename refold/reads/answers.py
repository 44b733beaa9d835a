"""What the facade's read verbs answer, from the state tables: facts, why, graphs and the whole state.

Each function takes the :class:`~refold.store.Store` and answers through
:func:`~refold.reads.tables.read_tables` (the tables at a tag plus the read overlay): a read writes
nothing and calls no model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import networkx as nx
import polars as pl

from refold.fold.queries import fact_rows, facts_frame, why
from refold.fold.spec import FoldSpec
from refold.fold.timeutil import parse_time_or_none
from refold.reads.queries import facts_from_state, graph_view, lineage_view
from refold.reads.tables import read_tables
from refold.store import Store

AsOf = int | str | datetime | None


@dataclass(frozen=True)
class FoldState:
    """The whole folded state at a log position under one spec, as a networkx view
    (:meth:`refold.memory.Memory.state`). ``graph`` is not to be mutated."""

    spec: FoldSpec
    graph: nx.MultiDiGraph
    last_seq: int
    stats: dict[str, int] = field(default_factory=dict)
    #: extractable events up to ``last_seq`` whose facts need an extraction no fold has made yet:
    #: a read merges them with no facts (docs/fold.md, "Reads"); ``refold fold`` extracts them
    pending: int = 0

    @property
    def spec_hash(self) -> str:
        return self.spec.hash


def whole_state(store: Store, *, as_of: AsOf = None, spec: FoldSpec | None = None) -> FoldState:
    """The whole folded state at ``as_of`` as a :class:`FoldState` (every fact in one graph)."""
    spec = spec or store.current_spec()
    tables, tag, overlay = read_tables(store, as_of, spec)
    graph = graph_view(tables, tag, overlay, retraction_principals=store.retraction_principals)
    derived = sum(1 for *_, d in graph.edges(data=True) if d.get("derivation") != "extracted")
    return FoldState(spec=spec, graph=graph, last_seq=tag.log_seq + overlay.overlaid, pending=overlay.pending,
                     stats={"facts": graph.number_of_edges() - derived, "derived": derived,
                            "overlaid": overlay.overlaid, "resumed_from": tag.log_seq})


def graph(store: Store, *, as_of: AsOf = None, subject: str | None = None, depth: int = 1,
          tenant: str | None = None, valid_at: str | datetime | None = None,
          principal: str | None = None) -> nx.MultiDiGraph:
    """The knowledge graph narrowed to what is asked (see :meth:`refold.memory.Memory.graph`)."""
    return graph_view(*read_tables(store, as_of), subject=subject, depth=depth, tenant=tenant,
                      valid_at=parse_time_or_none(valid_at), principal=principal,
                      retraction_principals=store.retraction_principals)


def facts(store: Store, *, subject: str | None = None, relation: str | None = None, as_of: AsOf = None,
          valid_at: str | datetime | None = None, tenant: str | None = None, current_only: bool = False,
          principal: str | None = None) -> pl.DataFrame:
    """Facts as a DataFrame (see :meth:`refold.memory.Memory.facts`): pruned to the subject's
    buckets; with ``principal``, through the scoped graph of the buckets that decide what the
    principal may see."""
    when = parse_time_or_none(valid_at)
    relation = store.current_spec().canonical_relation(relation) if relation else None
    tables = read_tables(store, as_of)
    if principal is None:
        return facts_from_state(*tables, subject=subject, relation=relation, valid_at=when, tenant=tenant,
                                current_only=current_only)
    scoped = graph_view(*tables, subject=subject, tenant=tenant, principal=principal,
                        retraction_principals=store.retraction_principals)
    return facts_frame(fact_rows(scoped, subject=subject, relation=relation, valid_at=when, tenant=tenant,
                                 current_only=current_only))


def why_fact(store: Store, fact_id: str, *, as_of: AsOf = None, principal: str | None = None) -> dict[str, Any]:
    """The fact, its derivation and its source events (see :meth:`refold.memory.Memory.why`):
    the fact's lineage only, and every source event in one filtered read of the log."""
    lineage = lineage_view(*read_tables(store, as_of), fact_id, principal=principal,
                           retraction_principals=store.retraction_principals)
    seqs = {i: s for _, _, d in lineage.edges(data=True) for i, s in zip(d["sources"], d["source_seqs"])}
    found = store.events_by_id(seqs, seqs=seqs.values())
    return why(lineage, fact_id, lambda ids: {i: found[i] for i in ids if i in found})
