"""The format 3 patch's lazy bucket reads on real stores with many tiny buckets (so that every
path that reads a bucket on demand runs: partners when a key keeps an edge, a first mention found
again when an erased event named an entity first, a renamed entity's in-edges pulled in, a
retraction that ends a surviving fact): the state after the patch equals a full rebuild, with no
extraction call, and a second erasure patches the patched snapshot again (through its updated
index)."""

from __future__ import annotations

import random

import pytest

import refold
from refold import erasing
from refold.storage import snapshots
from refold.storage.snapshots import SnapshotStore
from tests.fold_helpers import canonical_graph, fact_event
from tests.snapshot_helpers import CountingRules
from tests.test_erasure_patch import X, _full, _others, _patched

#: these tests are about the graph engine (its snapshots, their patching, its reads)
FOLD_ENGINE = "graph"

pytestmark = pytest.mark.usefixtures("tiny_buckets")


@pytest.fixture
def tiny_buckets(monkeypatch):
    monkeypatch.setattr(snapshots, "BUCKET_ROWS", 2)


def _refolds_equal(mem) -> None:
    fresh, ext = refold.Memory(mem.root), CountingRules()
    report = fresh.fold(extractor=ext)
    assert ext.calls == 0 and report.started_from == SnapshotStore(mem.layout).list()[-1].last_seq
    assert canonical_graph(fresh.state().graph) == _full(fresh)


def test_a_first_mention_by_an_erased_event_is_found_again_in_the_buckets(tmp_path):
    x = [fact_event("globex", "located_in", "Oslo", day=1, event_id="x-0", subjects=[X]),
         fact_event("Xavier", "works_at", "Globex", day=2, event_id="x-1", subjects=[X])]
    mem = refold.init(tmp_path / "store")
    mem.append(x)
    mem.append([fact_event("Globex", "located_in", "Oslo", day=3),
                fact_event("Ann", "works_at", "Globex", day=4)] + _others(12))
    mem.fold(snapshot_every=5)
    info = SnapshotStore(mem.layout).list()[-1]
    assert info.indexed and snapshots.edge_bucket_count(info) > 4
    receipt = erasing.erase(mem, X)
    assert _patched(receipt)["rows"] == 1 and "1 renamed" in _patched(receipt)["detail"][0]
    _refolds_equal(mem)


def test_a_retraction_ends_the_surviving_fact_and_partners_are_read(tmp_path):
    mem = refold.init(tmp_path / "store")
    mem.append(_others(20))
    mem.append([fact_event("Person9", "works_at", "Org1", day=30, event_id="a"),
                fact_event("Org1", "located_in", "Place3", day=30, event_id="o")])
    mem.append([fact_event("Person9", "works_at", "Org2", day=31, event_id="x-move", subjects=[X])])
    mem.append([fact_event("Person9", "works_at", "Org1", day=32, event_id="r", kind="retraction")])
    mem.append(_others(9, start=20))
    mem.fold(snapshot_every=10)
    receipt = erasing.erase(mem, X)
    assert _patched(receipt)["rows"] == 1
    _refolds_equal(mem)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_logs_patch_twice_to_a_full_rebuild(tmp_path, seed):
    """Two subjects erased one after the other from a random log of people, organisations and
    places (corroboration, supersession, roll-ups, shared entities, mixed spellings)."""
    rng = random.Random(seed)
    people, orgs, places = ["Ann", "Bob", "Cy", "Dee"], ["Acme", "acme", "Globex", "Initech"], ["Oslo", "Rome", "oslo"]
    events = []
    for i in range(70):
        who = rng.choice(["s-a", "s-b", None, None])
        name = {"s-a": "Quinn Ash", "s-b": "Rex Birch"}.get(who) or rng.choice(people)
        kind = rng.random()
        if kind < 0.15:
            e = fact_event(rng.choice(orgs), "located_in", rng.choice(places), day=i, event_id=f"e{i}")
        elif kind < 0.55:
            e = fact_event(name, "works_at", rng.choice(orgs), day=i, event_id=f"e{i}")
        else:
            e = fact_event(name, rng.choice(["lives_in", "likes"]), rng.choice(places + orgs), day=i,
                           event_id=f"e{i}")
        if who:
            e["subjects"] = [who]
        events.append(e)
    mem = refold.init(tmp_path / "store")
    for start in range(0, len(events), 10):
        mem.append(events[start:start + 10])
    mem.fold(snapshot_every=20)
    for subject in ("s-a", "s-b"):
        receipt = erasing.erase(mem, subject)
        assert _patched(receipt)["rows"] == 1, _patched(receipt)
        _refolds_equal(mem)
        mem = refold.Memory(mem.root)
