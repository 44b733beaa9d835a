"""An erasure's dry run says how the folded facts change (``fact_impact``): from the state tables
it reads only what the erased events' items name (:func:`refold.reads.queries.facts_sourced_from`)
instead of folding the whole state as one graph, and gives the reference fold's answer.

The seeded logs are those of tests/test_state_scoping.py (supersession, retractions, facts about
the past, inverse and compose roll-ups, events after the last fold); the erased events are random
subsets, including an organisation's location (a compose roll-up's second input, whose roll-ups
live with its staff's subjects).
"""

from __future__ import annotations

import random

import pytest

import refold
from refold.erasure.verbs import fact_impact
from refold.reads.queries import facts_sourced_from
from refold.reads.tables import read_tables
from tests.fold_helpers import fact_event, reference_of
from tests.test_state_scoping import UNREADABLE, _events, garble_buckets


def _reference_answer(graph, ids: set[str]) -> dict:
    """What the dry run must say, counted over the reference fold's edges as ``fact_impact`` counts."""
    gone = current = kept = derived = 0
    for *_, d in graph.edges(data=True):
        sources = set(d["sources"])
        if not sources & ids:
            continue
        if d["derivation"] != "extracted":
            derived += 1
        elif sources <= ids:
            gone, current = gone + 1, current + (d["valid_to"] is None)
        else:
            kept += 1
    return {"store": "state", "rows": gone + derived, "detail": [
        f"{gone} fact(s) removed: {current} current, {gone - current} historical",
        f"{kept} fact(s) also stated by other events: kept with fewer sources",
        f"{derived} derived fact(s) depend on erased events: recomputed by the refold"]}


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.slow
def test_the_dry_runs_fact_impact_from_the_tables_equals_the_reference_folds(tmp_path, seed):
    rng = random.Random(seed)
    mem = refold.init(tmp_path / "store")
    mem.append(_events(rng, 40, 0))
    mem.fold()
    mem.append(_events(rng, 12, 40))  # after the fold: the overlay's rows
    tables = read_tables(mem.store)
    graph = reference_of(mem).graph
    located = [e.event_id for e in mem.events() if e.kind == "memory_written" and "located in" in (e.content or "")]
    trials = [set(rng.sample([f"ev-{i}" for i in range(52)], k)) for k in (1, 3, 8)] + [set(located[:2]), {"ev-45"}]
    derived_hit = 0
    for ids in trials:
        want = {k for _, _, k, d in graph.edges(keys=True, data=True) if set(d["sources"]) & ids}
        got = facts_sourced_from(*tables, ids)
        assert set(got["fact_id"].to_list()) == want and got.height == len(want), sorted(ids)
        derived_hit += sum(1 for _, _, k, d in graph.edges(keys=True, data=True)
                           if k in want and len(d["inputs"]) == 2)
        assert fact_impact(mem.store, ids) == _reference_answer(graph, ids), sorted(ids)
    assert derived_hit  # (compose roll-ups were among the facts compared)


def test_an_erasure_dry_run_folds_no_graph_of_the_whole_state(tmp_path):
    """The dry run counts fact rows; it builds no graph, which needs every node's entity row
    (its name): with every ``entities`` file garbled it still answers, while a graph fails."""
    mem = refold.init(tmp_path / "store")
    mem.append([fact_event("Zoe", "works_at", "Acme", day=0), fact_event("Yann", "works_at", "Acme", day=0),
                fact_event("Acme", "located_in", "Oslo", day=1, subjects=["s-x"]),
                fact_event("Zoe", "lives_in", "Rome", day=2, subjects=["s-x"])])
    mem.fold()
    assert garble_buckets(mem.state_store(mem.current_spec()).path("entities"))
    mem = refold.open(mem.root)  # (no read kept in memory)
    for whole in (mem.state, mem.graph):
        with pytest.raises(UNREADABLE):
            whole()  # (a graph of the state reads the garbled files)
    plan = mem.erase("s-x", dry_run=True)
    impact = next(d for d in plan.derived if d["store"] == "state")
    # Zoe lives in Rome and Acme located in Oslo go (2 current facts); the roll-ups through Oslo
    # (Zoe and Yann works_in Oslo) and the inverse of nothing erased: 2 derived facts recomputed
    assert impact["detail"][0].startswith("2 fact(s) removed: 2 current")
    assert impact["detail"][2].startswith("2 derived fact(s)")
