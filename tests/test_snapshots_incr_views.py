"""Table views (storage/table_handles.py) and the extraction cache's own commits (storage/cache.py).

A view is the loaded DeltaTable plus the files that later append commits added, read from their
commit files: it must always read what a freshly loaded DeltaTable reads, and hand the work back
to delta-rs whenever a commit does more than add files. The cache's own commits must make a Delta
table that delta-rs reads, checkpoints, deletes from and keeps statistics on the keys only.
Real Delta tables in tmp_path (refold stores, delta-rs writers); nothing is mocked.
"""

from __future__ import annotations

import json
import shutil

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, write_deltalake

import refold
from refold.fold.events import NewEvent
from refold.fold.extract import ExtractedFact, Extraction
from refold.storage import delta_io, table_handles
from refold.storage.cache import CACHE_SCHEMA, ExtractionCache, _to_table
from refold.storage.delta_io import read_arrow
from refold.storage.table_handles import shared_table
from refold.storage.layout import Layout
from refold.storage.schema import EVENTS_SCHEMA


def _events(start: int, n: int) -> list[NewEvent]:
    return [NewEvent(kind="observation", content=f"Person{i} lives in Oslo.", source="test",
                     event_id=f"ev-{i:05d}")
            for i in range(start, start + n)]


def _same_as_fresh(path: str, view, schema, prune) -> None:
    fresh = DeltaTable(path)
    assert view.version() == fresh.version()
    assert sorted(view.file_uris()) == sorted(fresh.file_uris())
    mine = read_arrow(view, schema, prune=prune).sort_by("seq")
    theirs = read_arrow(fresh, schema, prune=prune).sort_by("seq")
    assert mine.equals(theirs)


def test_a_view_reads_the_appends_after_its_table_without_delta_rs_catching_up(tmp_path):
    mem = refold.init(tmp_path / "store")
    mem.append(_events(0, 5))
    handle = shared_table(mem.layout.events)
    with handle.view() as first:
        loaded = first.base
    for start in range(5, 25, 5):  # other EventLog objects: refold's own commit files
        refold.Memory(tmp_path / "store").append(_events(start, 5))
    prune = [{"seq": (12, None)}, {"kind": ("tombstone", "tombstone")}]
    with handle.view() as view:
        assert view.base == loaded and view.version() == loaded + 4  # read from the commit files
        _same_as_fresh(mem.layout.events, view, EVENTS_SCHEMA, prune)
        rows = read_arrow(view, EVENTS_SCHEMA, prune=prune)
        assert rows["seq"].to_pylist() and min(rows["seq"].to_pylist()) == 12
        assert len(delta_io._pruned(view, view.file_uris(), prune)) == 3  # the add stats prune too
    with handle.view() as again:
        assert again is view  # nothing landed since: the same view, no file read twice


def test_a_commit_that_removes_files_hands_back_to_delta_rs(tmp_path):
    mem = refold.init(tmp_path / "store")
    for start in range(0, 20, 5):
        mem.append(_events(start, 5))
    handle = shared_table(mem.layout.events)
    with handle.view() as before:
        loaded = before.base
    DeltaTable(mem.layout.events).optimize.compact()  # remove + add: not an append
    mem2 = refold.Memory(tmp_path / "store")
    mem2.append(_events(20, 5))
    with handle.view() as view:
        assert view.base > loaded  # delta-rs replayed the log
        _same_as_fresh(mem.layout.events, view, EVENTS_SCHEMA, [{"seq": (0, None)}])


def test_a_view_hands_back_after_max_pending_commits(tmp_path, monkeypatch):
    monkeypatch.setattr(table_handles, "MAX_PENDING", 3)
    mem = refold.init(tmp_path / "store")
    handle = shared_table(mem.layout.events)
    with handle.view() as view:
        loaded = view.base
    for start in range(0, 10, 2):
        mem.append(_events(start, 2))
    with handle.view() as view:
        assert view.base > loaded and view.version() - view.base <= 3
        _same_as_fresh(mem.layout.events, view, EVENTS_SCHEMA, [{"seq": (3, 7)}])


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


def test_the_caches_own_commits_make_a_table_delta_rs_reads_checkpoints_and_deletes_from(tmp_path):
    layout = Layout(str(tmp_path))
    cache = ExtractionCache(layout)
    for i in range(12):  # versions 1..12 by refold (0: the create); delta-rs checkpoints at 9
        assert cache.put([_x(i)], seqs={f"ev-{i:05d}": i}) == 1
    dt = DeltaTable(layout.extractions)
    assert dt.version() == 12
    info = dt.history(1)[0]
    assert info["operation"] == "WRITE" and info["clientVersion"] == "refold"
    assert json.loads((tmp_path / "extractions" / "_delta_log" / "_last_checkpoint").read_text())["version"] == 9
    actions = pa.table(dt.get_add_actions(flatten=True)).to_pydict()
    assert sorted(actions["min.seq"]) == list(range(12))
    assert not any(name.startswith("min.") and name.split(".", 1)[1] not in ("event_id", "spec_hash", "seq")
                   for name in actions)  # facts, requests and outputs quote personal data
    rows = read_arrow(dt, CACHE_SCHEMA, filter=pc.field("spec_hash") == "s1")
    assert sorted(rows["event_id"].to_pylist()) == [f"ev-{i:05d}" for i in range(12)]
    assert cache.purge(["ev-00003", "ev-00007"]).rows == 2  # a delta-rs DELETE over refold's files
    assert cache.put([_x(3), _x(12)]) == 2  # and refold's commits go on after it
    assert sorted(cache.keys("s1")) == sorted(f"ev-{i:05d}" for i in range(13) if i != 7)
    assert cache.get("s1", ["ev-00012"], seqs=[12]) == {}  # (put without a seq: not found by seq)
    assert cache.get("s1", ["ev-00011"], seqs=[11])["ev-00011"].facts == _x(11).facts
