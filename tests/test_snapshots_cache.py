"""The extraction cache's compare-and-append: a duplicated batch, a batch that races another
writer's commit, and writers in several processes never store a key twice; reads by id are exact.

A put commits through delta-rs (``max_commit_retries=0`` on the version its keys were checked at).
Real Delta tables in tmp_path, real processes (spawn) for the concurrent writers.
"""

from __future__ import annotations

import multiprocessing
import pickle

import pytest

from refold.fold.extract import ExtractedFact, Extraction
from refold.storage.cache import table as cache_module
from refold.storage.cache.table import ExtractionCache
from refold.storage.layout import Layout


def _x(i: int, spec: str = "s1") -> Extraction:
    return Extraction(event_id=f"ev-{i:05d}", spec_hash=spec,
                      facts=(ExtractedFact(f"P{i}", "lives_in", "Oslo"),), engine="rules")


def _rows(cache: ExtractionCache) -> list[tuple[str, str]]:
    frame = cache.frame()
    return sorted(zip(frame["event_id"].to_list(), frame["spec_hash"].to_list()))


def test_a_duplicated_or_overlapping_batch_adds_no_row_twice(tmp_path):
    cache = ExtractionCache(Layout(str(tmp_path)))
    assert cache.put([_x(i) for i in range(10)], seqs={f"ev-{i:05d}": i for i in range(10)}) == 10
    assert cache.put([_x(i) for i in range(10)]) == 0  # a retried batch
    assert cache.put([_x(i) for i in range(5, 15)] + [_x(14)]) == 5  # overlapping, repeated inside
    assert cache.put([_x(3, "s2")]) == 1  # the same event under another spec is another key
    assert _rows(cache) == sorted([(f"ev-{i:05d}", "s1") for i in range(15)] + [("ev-00003", "s2")])
    got = cache.get("s1", ["ev-00003", "ev-00012", "ev-99999"])
    assert sorted(got) == ["ev-00003", "ev-00012"] and got["ev-00003"].facts == _x(3).facts
    assert cache.missing("s2", ["ev-00003", "ev-00004"]) == ["ev-00004"]
    assert cache.keys("s2") == {"ev-00003"}


def test_a_commit_that_loses_the_race_rechecks_the_keys(tmp_path, monkeypatch):
    """Another writer commits some of the same keys between our check and our commit: ours fails
    (the version is taken), the keys are checked again on the newer version, the rest lands."""
    layout = Layout(str(tmp_path))
    cache = ExtractionCache(layout)
    cache.put([_x(0)])
    real_write = cache_module.write_deltalake
    raced = []

    def other_writer():
        if not raced:  # the other writer: its own table object, committing first
            raced.append(True)
            real_write(layout.extractions, cache_module._to_table([_x(1), _x(2)], {}), mode="append")

    def racing_write(dt, table, **kwargs):
        other_writer()
        return real_write(dt, table, **kwargs)

    monkeypatch.setattr(cache_module, "write_deltalake", racing_write)
    assert cache.put([_x(1), _x(2), _x(3)]) == 1
    assert raced and _rows(cache) == [(f"ev-{i:05d}", "s1") for i in range(4)]
    from deltalake import DeltaTable

    live = {uri.rsplit("/", 1)[-1] for uri in DeltaTable(layout.extractions).file_uris()}
    assert len(live) == 3 and cache.get("s1", ["ev-00003"])["ev-00003"].facts == _x(3).facts


def _writer(root: str, start: int) -> int:
    cache = ExtractionCache(Layout(root))
    inserted = 0
    for round_ in range(4):  # overlapping batches: each writer shares half its ids with the next
        base = start + 5 * round_
        inserted += cache.put([_x(i) for i in range(base, base + 10)])
    return inserted


@pytest.mark.slow
def test_writers_in_several_processes_store_each_key_once(tmp_path):
    root = str(tmp_path)
    ExtractionCache(Layout(root)).put([_x(0)])  # the table exists before the race
    with multiprocessing.get_context("spawn").Pool(3) as pool:
        inserted = pool.starmap(_writer, [(root, 0), (root, 10), (root, 20)])
    rows = _rows(ExtractionCache(Layout(root)))
    assert rows == [(f"ev-{i:05d}", "s1") for i in range(45)]
    assert sum(inserted) + 1 == len(rows)  # every row counted by exactly one writer


def test_the_cache_pickles_without_its_table(tmp_path):
    cache = ExtractionCache(Layout(str(tmp_path)))
    cache.put([_x(1)])
    copy = pickle.loads(pickle.dumps(cache))
    assert copy.path == cache.path and copy.get("s1", ["ev-00001"])["ev-00001"].facts == _x(1).facts


@pytest.mark.parametrize("ids", [["ev-00002"], ["ev-00001", "ev-00004"], []])
def test_get_by_id_reads_exactly_those_rows(tmp_path, ids):
    cache = ExtractionCache(Layout(str(tmp_path)))
    for i in range(5):  # one file per put: pruning has files to skip
        cache.put([_x(i)])
    assert sorted(cache.get("s1", ids)) == sorted(ids)
    assert sorted(cache.get("s1")) == [f"ev-{i:05d}" for i in range(5)]


def test_a_put_after_a_get_trusts_the_get_only_at_the_same_table_version(tmp_path):
    layout = Layout(str(tmp_path))
    cache = ExtractionCache(layout)
    cache.put([_x(0)])
    assert cache.get("s1", ["ev-00001", "ev-00002"]) == {}  # both absent at this version
    # another writer (its own table object) caches one of them before our put
    cache_module.write_deltalake(layout.extractions, cache_module._to_table([_x(1)], {}), mode="append")
    assert cache.put([_x(1), _x(2)]) == 1  # the version moved: the keys were checked again
    assert cache.get("s1", ["ev-00003"]) == {}
    assert cache.put([_x(3)]) == 1  # nothing moved: the get's answer stands
    assert _rows(cache) == [(f"ev-{i:05d}", "s1") for i in range(4)]
