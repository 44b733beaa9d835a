"""Decremental erasure on a real store: the erasure patches the newest snapshot in place, the
refold resumes from it with no extraction call, and the state equals a full rebuild of the log
without the subject's events — also when the subject named an entity first (rename + roll-ups),
after a crash inside the patch, and when the patch cannot be made (it falls back)."""

from __future__ import annotations

import pytest

import refold
from refold import erasing
from refold.erasing.snapshot_patch import SnapshotPatcher
from refold.folding import build_state
from refold.storage.snapshots import SnapshotStore
from tests.fold_helpers import canonical_graph, fact_event
from tests.snapshot_helpers import CountingRules

#: these tests are about the graph engine (its snapshots, their patching, its reads)
FOLD_ENGINE = "graph"

X = "s-x"


def _others(n: int, start: int = 0) -> list[dict]:
    return [fact_event(f"Person{i % 5}", "lives_in" if i % 2 else "works_at",
                       f"Place{i % 6}" if i % 2 else f"Org{i % 3}", day=i) for i in range(start, start + n)]


def _store(tmp_path, x_events: list[dict]):
    mem = refold.init(tmp_path / "store")
    mem.append(_others(20))
    mem.append(x_events[: len(x_events) // 2])
    mem.append(_others(20, start=20))
    mem.append(x_events[len(x_events) // 2:])
    mem.append(_others(9, start=40))
    mem.fold(snapshot_every=10)
    return mem


def _x(subject="Xavier Quill", n=4) -> list[dict]:
    return [fact_event(subject, "likes", f"quillberry{i}", day=60 + i, event_id=f"x-{i}", subjects=[X])
            for i in range(n)] + [
        fact_event(subject, "lives_in", "Place1", day=70, event_id="x-move", subjects=[X]),
        fact_event("Person1", "works_at", "Org2", day=71, event_id="x-says", subjects=[X]),  # corroborates
    ]


def _full(mem) -> str:
    """A fold of the whole log from scratch (extracting what the cache lacks)."""
    spec = mem.current_spec()
    ext = CountingRules()
    extractions = mem.cache.get(spec.hash)
    events = mem.events()
    missing = [e for e in events if e.kind != "retraction" and e.content and e.event_id not in extractions]
    extractions.update((x.event_id, x) for x in ext.extract(missing, spec))
    return canonical_graph(build_state(spec, events, extractions).graph)


def _patched(receipt) -> dict:
    return next(p for p in receipt.purged if p["store"] == "snapshot patch")


def test_erasure_patches_the_newest_snapshot_and_the_refold_resumes_from_it(tmp_path):
    mem = _store(tmp_path, _x())
    newest = SnapshotStore(mem.layout).list()[-1]
    receipt = erasing.erase(mem, X)
    assert _patched(receipt)["rows"] == 1 and "re-merged" in _patched(receipt)["detail"][0]
    # the patched snapshot sits where the old one was and holds none of X's events
    store = SnapshotStore(mem.layout)
    after = store.list()[-1]
    assert after.last_seq == newest.last_seq and after.link == newest.link
    assert not store.contained_ids(after) & {"x-0", "x-1", "x-2", "x-3", "x-move", "x-says"}
    fresh, ext = refold.Memory(mem.root), CountingRules()
    report = fresh.fold(extractor=ext)
    assert report.started_from == after.last_seq and ext.calls == 0
    assert canonical_graph(fresh.state().graph) == _full(fresh)
    assert receipt.scan["hits"] == [] if receipt.scan.get("needles") else True


def test_a_subject_that_named_an_entity_first_renames_it_and_roll_ups_follow(tmp_path):
    x = [fact_event("globex", "located_in", "Oslo", day=1, event_id="x-0", subjects=[X]),  # first "globex"
         fact_event("Xavier", "works_at", "Globex", day=2, event_id="x-1", subjects=[X])]
    mem = refold.init(tmp_path / "store")
    mem.append(x)
    mem.append([fact_event("Globex", "located_in", "Oslo", day=3),
                fact_event("Ann", "works_at", "Globex", day=4)] + _others(12))
    mem.fold(snapshot_every=5)
    assert mem.state().graph.nodes["default/globex"]["name"] == "globex"
    receipt = erasing.erase(mem, X)
    assert "1 renamed" in _patched(receipt)["detail"][0]
    fresh = refold.Memory(mem.root)
    graph = fresh.state().graph
    assert graph.nodes["default/globex"]["name"] == "Globex"
    assert any(d["relation"] == "works_in" for *_, d in graph.out_edges("default/ann", data=True))
    assert canonical_graph(graph) == _full(fresh)


def test_a_crash_after_the_patch_is_finished_by_the_rerun(tmp_path, monkeypatch):
    mem = _store(tmp_path, _x())
    real = SnapshotPatcher.purge

    def crash_after(self, ids):
        real(self, ids)
        raise KeyboardInterrupt("killed after the patch, before the journal saw it")

    monkeypatch.setattr(SnapshotPatcher, "purge", crash_after)
    with pytest.raises(KeyboardInterrupt):
        erasing.erase(mem, X)
    monkeypatch.setattr(SnapshotPatcher, "purge", real)
    receipt = erasing.erase(refold.Memory(mem.root), X)  # the rerun resumes the journal
    assert receipt.status == "erased"
    assert "nothing to patch" in _patched(receipt)["detail"][0]  # the snapshot is clean already
    fresh = refold.Memory(mem.root)
    assert canonical_graph(fresh.state().graph) == _full(fresh)


def test_without_a_surviving_input_the_patch_falls_back_to_purge_and_refold(tmp_path):
    mem = _store(tmp_path, _x())
    # Person1's first works_at statement, corroborated by X, loses its cache row: the patch cannot
    # re-merge that key, so the snapshot is purged and the refold extracts that one event again
    first = next(e.event_id for e in mem.events() if e.fact and e.fact.subject == "Person1"
                 and e.fact.relation == "works_at")
    mem.cache.purge([first])
    receipt = erasing.erase(mem, X)
    assert _patched(receipt)["rows"] == 0 and "not patched" in _patched(receipt)["detail"][0]
    assert next(p for p in receipt.purged if p["store"] == "snapshots")["rows"] >= 1
    fresh = refold.Memory(mem.root)
    assert canonical_graph(fresh.state().graph) == _full(fresh)


def test_shred_mode_and_decremental_false_purge_instead(tmp_path):
    mem = _store(tmp_path, _x())
    receipt = erasing.erase(mem, X, decremental=False)
    assert not [p for p in receipt.purged if p["store"] == "snapshot patch"]
    assert next(p for p in receipt.purged if p["store"] == "snapshots")["rows"] >= 1
    shred = refold.init(tmp_path / "shred", mode="shred")
    shred.append(_others(10) + _x() + _others(5, start=10))
    shred.fold(snapshot_every=5)
    receipt = erasing.erase(shred, X)
    assert _patched(receipt)["rows"] == 0
    fresh = refold.Memory(shred.root)
    assert canonical_graph(fresh.state().graph) == _full(fresh)


def test_the_cli_can_choose_the_purge_path(tmp_path):
    import json

    from click.testing import CliRunner

    from refold.cli import main

    mem = _store(tmp_path, _x())
    out = CliRunner().invoke(main, ["erase", str(mem.root), "--subject", X, "--no-decremental", "--json"])
    assert out.exit_code == 0, out.output
    stores = {p["store"] for p in json.loads(out.output)["purged"]}
    assert "snapshot patch" not in stores and "snapshots" in stores
