"""Shared table handles (storage/table_handles.py) and the extraction cache's commits (storage/cache.py).

A handle must always read what a freshly loaded DeltaTable reads, also after the table was
replaced at its path. The cache's commits must make a Delta table that delta-rs reads,
checkpoints, deletes from and keeps statistics on the keys only.
Real Delta tables in tmp_path (refold stores, delta-rs writers); nothing is mocked.
"""

from __future__ import annotations

import json
import shutil

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, write_deltalake

from refold.fold.extract import ExtractedFact, Extraction
from refold.storage.cache.table import CACHE_SCHEMA, ExtractionCache, _to_table
from refold.storage.delta.io import read_arrow
from refold.storage.delta.handles import shared_table
from refold.storage.layout import Layout


def test_a_table_replaced_at_the_same_path_is_loaded_again(tmp_path):
    path = str(tmp_path / "t")
    write_deltalake(path, _to_table([_x(0)], {}), mode="append")
    handle = shared_table(path)
    with handle.view() as view:
        assert view.version() == 0
    shutil.rmtree(path)
    write_deltalake(path, _to_table([_x(1)], {}), mode="append")
    write_deltalake(path, _to_table([_x(2)], {}), mode="append")
    with handle.view() as view:
        got = read_arrow(view, CACHE_SCHEMA, columns=["event_id"])["event_id"].to_pylist()
        assert sorted(got) == ["ev-00001", "ev-00002"] and view.version() == 1


def _x(i: int, spec: str = "s1") -> Extraction:
    return Extraction(event_id=f"ev-{i:05d}", spec_hash=spec, facts=(ExtractedFact(f"P{i}", "lives_in", "Oslo"),),
                      engine="rules")


def test_the_caches_commits_make_a_table_delta_rs_reads_checkpoints_and_deletes_from(tmp_path):
    layout = Layout(str(tmp_path))
    cache = ExtractionCache(layout)
    for i in range(12):  # versions 1..12 (0: the create); delta-rs checkpoints at 9
        assert cache.put([_x(i)], seqs={f"ev-{i:05d}": i}) == 1
    dt = DeltaTable(layout.extractions)
    assert dt.version() == 12
    info = dt.history(1)[0]
    assert info["operation"] == "WRITE" and info["clientVersion"].startswith("delta-rs")
    assert json.loads((tmp_path / "extractions" / "_delta_log" / "_last_checkpoint").read_text())["version"] == 9
    actions = pa.table(dt.get_add_actions(flatten=True)).to_pydict()
    assert sorted(actions["min.seq"]) == list(range(12))
    assert not any(name.startswith("min.") and name.split(".", 1)[1] not in ("event_id", "spec_hash", "seq")
                   for name in actions)  # facts, requests and outputs quote personal data
    rows = read_arrow(dt, CACHE_SCHEMA, filter=pc.field("spec_hash") == "s1")
    assert sorted(rows["event_id"].to_pylist()) == [f"ev-{i:05d}" for i in range(12)]
    assert cache.purge(["ev-00003", "ev-00007"]).rows == 2  # a delta-rs DELETE
    assert cache.put([_x(3), _x(12)]) == 2  # and appends go on after it
    assert sorted(cache.keys("s1")) == sorted(f"ev-{i:05d}" for i in range(13) if i != 7)
    assert cache.get("s1", ["ev-00012"], seqs=[12]) == {}  # (put without a seq: not found by seq)
    assert cache.get("s1", ["ev-00011"], seqs=[11])["ev-00011"].facts == _x(11).facts
