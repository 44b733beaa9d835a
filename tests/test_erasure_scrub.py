"""Scrubbing a Delta table: removed files vacuumed, orphans holding erased rows deleted, young
unrelated orphans kept (they may belong to a commit in flight), old log commits gone."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from refold.erasure.planning import seq_predicate, seq_ranges
from refold.erasure.scrub import delta_tables, scrub_table


def _table(tmp_path):
    path = tmp_path / "t"
    for i in range(3):
        write_deltalake(str(path), pa.table({"event_id": [f"e{2 * i}", f"e{2 * i + 1}"], "text": ["x", "y"]}),
                        mode="append")
    return path


def test_scrub_removes_old_files_erased_orphans_and_old_commits(tmp_path):
    path = _table(tmp_path)
    DeltaTable(str(path)).delete("event_id = 'e0'")
    pq.write_table(pa.table({"event_id": ["e0"], "text": ["lost append"]}), path / "orphan-erased.parquet")
    pq.write_table(pa.table({"event_id": ["e9"], "text": ["in flight"]}), path / "orphan-young.parquet")
    result = scrub_table(path, erased_ids={"e0"}, orphan_grace_hours=1)
    names = {p.name for p in path.iterdir()}
    assert "orphan-erased.parquet" in result["removed"] and "orphan-erased.parquet" not in names
    assert "orphan-young.parquet" in names  # could be a commit in flight: kept within the grace
    assert len(result["removed"]) == 2  # the rewritten file's predecessor and the erased orphan
    log = sorted(p.name for p in (path / "_delta_log").iterdir())
    assert not [n for n in log if n.endswith(".json") and int(n[:20]) < result["checkpoint_version"]]
    with pytest.raises(Exception):
        DeltaTable(str(path), version=1)
    dt = DeltaTable(str(path))
    assert dt.metadata().configuration["delta.logRetentionDuration"] == "interval 30 days"
    assert sorted(pa.table(dt.get_add_actions(flatten=True))["num_records"].to_pylist()) == [1, 2, 2]
    # idempotent
    again = scrub_table(path, erased_ids={"e0"})
    assert again["removed"] == []


def test_zero_grace_is_the_full_vacuum(tmp_path):
    path = _table(tmp_path)
    pq.write_table(pa.table({"event_id": ["e9"], "text": ["in flight"]}), path / "orphan-young.parquet")
    scrub_table(path, orphan_grace_hours=0)
    assert not (path / "orphan-young.parquet").exists()


def test_helpers(tmp_path):
    assert seq_ranges([7, 1, 2, 3, 9, 8, 20]) == [(1, 3), (7, 9), (20, 20)]
    assert seq_predicate([1, 2, 3, 20]) == "(seq >= 1 AND seq <= 3) OR seq = 20"
    _table(tmp_path / "a")
    _table(tmp_path / "b" / "nested")
    assert [p.relative_to(tmp_path).as_posix() for p in delta_tables(tmp_path)] == ["a/t", "b/nested/t"]
