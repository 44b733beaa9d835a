"""Resuming checks a candidate state through the first event after it: that event's ``prev_link``
(the chain) must be the candidate's link, so the row at the candidate's own position and the
data file holding it are not read (refold/projection.py ``resume``). Real stores in tmp_path."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import refold
from refold.fold.spec import FoldSpec
from refold.folding import build_state
from refold.storage.snapshots import SnapshotStore
from tests.fold_helpers import canonical_graph, fact_event
from tests.snapshot_helpers import CountingRules

#: these tests are about the graph engine (its snapshots, their patching, its reads)
FOLD_ENGINE = "graph"


def _facts(n: int, start: int = 0, *, city: str = "City") -> list[dict]:
    return [fact_event(f"Person{i % 7}", "lives_in", f"{city}{i % 5}", day=i) if i % 2 else
            fact_event(f"Org{i % 3}", "located_in", f"{city}{i % 4}", day=i) for i in range(start, start + n)]


def _full_graph(mem) -> str:
    spec = FoldSpec(extractor="rules", extractor_version=CountingRules.version)
    return canonical_graph(build_state(spec, mem.events(), mem.cache.get(spec.hash)).graph)


def test_a_snapshot_whose_link_the_next_event_does_not_chain_to_is_skipped(tmp_path):
    mem = refold.init(tmp_path / "store")
    mem.append(_facts(30))
    mem.fold(snapshot_every=10)
    newest = SnapshotStore(mem.layout).list()[-1]
    manifest = Path(newest.path) / "manifest.json"
    data = json.loads(manifest.read_text())
    data["link"] = "0" * 64  # as if it came from another (or a rewritten) log
    manifest.write_text(json.dumps(data))
    mem.append(_facts(3, start=30))  # events after it: checked through their prev_link
    fresh = refold.Memory(mem.root)
    assert fresh.fold(snapshot_every=0).started_from == 19
    assert canonical_graph(fresh.graph()) == _full_graph(mem)
    again = refold.Memory(mem.root)  # an intact snapshot with events after it is used
    mem.append(_facts(2, start=33))
    assert again.fold(snapshot_every=0).started_from == 19 and canonical_graph(again.graph()) == _full_graph(mem)


def test_a_live_fold_is_not_resumed_on_a_log_replaced_by_a_longer_one(tmp_path):
    mem = refold.init(tmp_path / "store")
    mem.append(_facts(20))
    assert mem.fold(snapshot_every=0).started_from == -1
    other = refold.init(tmp_path / "other")
    other.append(_facts(25, city="Town"))  # another log: same length and more, other chain
    shutil.rmtree(Path(mem.layout.events))
    shutil.copytree(Path(other.layout.events), Path(mem.layout.events))
    report = mem.fold(snapshot_every=0)
    assert report.started_from == -1 and report.events_folded == 25
    assert canonical_graph(mem.graph()) == _full_graph(mem)
    mem.append(_facts(2, start=100, city="Town"))  # and on that log, the live fold resumes again
    assert mem.fold(snapshot_every=0).started_from == 24
    assert canonical_graph(mem.graph()) == _full_graph(mem)
