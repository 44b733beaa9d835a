"""The two ways an append writes its data file (storage/datafiles.py) give the same table.

Large local batches are written by pyarrow and committed with ``create_write_transaction``; the
rest through ``write_deltalake``. Both must keep: the rows, statistics on the stats columns only,
the compare-and-append (a racing commit makes the write fail, the append retries), and no file
of a lost race left in the table folder. Real Delta tables in tmp_path; the direct path is forced
for small batches by lowering its threshold (monkeypatch), nothing else is replaced.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError
from polars.testing import assert_frame_equal

import refold
from refold.fold.chain import GENESIS
from refold.fold.events import NewEvent
from refold.storage import datafiles
from refold.storage.log import EventLog
from refold.storage.schema import EVENTS_SCHEMA, STATS_COLUMNS, TABLE_CONFIGURATION
from refold.storage.sealing import seal_rows
from tests.log_helpers import _plain_delta_files


def _events(prefix: str, n: int) -> list[NewEvent]:
    return [NewEvent(kind="chat_turn" if i % 3 else "observation", content=f"{prefix} says {i}",
                     source=f"chat#{i % 4}", event_id=f"{prefix}-{i:05d}", subjects=(f"s{i % 5}",))
            for i in range(n)]


def _stats(table_dir: str) -> dict:
    actions = pa.table(DeltaTable(table_dir).get_add_actions(flatten=True)).to_pylist()
    assert len(actions) == 1
    return {k: v for k, v in actions[0].items() if k.startswith(("min.", "max.", "null_count.", "num_records"))}


def test_direct_add_stats_are_delta_rs_stats_with_exact_times(tmp_path):
    when = datetime(2026, 3, 4, 5, 6, 7, 891234, tzinfo=timezone.utc)
    rows, _ = seal_rows(_events("st", 50), first_seq=10, prev_link=GENESIS, recorded_at=when,
                        table_version=1)
    props = CommitProperties(max_commit_retries=0)
    paths = {}
    for way in ("delta-rs", "direct"):
        paths[way] = str(tmp_path / way)
        DeltaTable.create(paths[way], EVENTS_SCHEMA, configuration=TABLE_CONFIGURATION)
        dt = DeltaTable(paths[way])
        if way == "direct":
            datafiles._write_direct(dt, rows, props, Path(paths[way]))
        else:
            write_deltalake(dt, rows, mode="append", commit_properties=props)
        assert dt.version() == 1  # both leave the handle at the new version
    theirs, ours = _stats(paths["delta-rs"]), _stats(paths["direct"])
    assert set(ours) == {"num_records"} | {f"{k}.{c}" for k in ("min", "max", "null_count") for c in STATS_COLUMNS}
    assert ours["min.recorded_at"] == ours["max.recorded_at"] == when  # to the microsecond
    assert theirs["max.recorded_at"] == when.replace(microsecond=891000)  # delta-rs: milliseconds
    for key in ("min.recorded_at", "max.recorded_at"):
        del theirs[key], ours[key]
    assert ours == theirs
    assert ours["min.seq"] == 10 and ours["max.seq"] == 59 and ours["min.kind"] == "chat_turn"
    assert_frame_equal(pl.read_delta(paths["direct"]), pl.read_delta(paths["delta-rs"]))


def test_large_batches_are_written_directly(tmp_path):
    mem = refold.init(tmp_path / "store")
    n = datafiles.DIRECT_WRITE_FROM
    assert mem.log_store.append(_events("big", n)) == list(range(n))
    assert mem.log_store.append(_events("small", 3)) == [n, n + 1, n + 2]  # through delta-rs
    files = {Path(p).name: pq.ParquetFile(p).metadata for p in _plain_delta_files(Path(mem.layout.events))}
    direct = [meta for meta in files.values() if meta.num_rows == n]
    assert len(files) == 2 and len(direct) == 1
    codecs = {direct[0].row_group(0).column(i).path_in_schema: direct[0].row_group(0).column(i).compression
              for i in range(direct[0].num_columns)}
    assert codecs["link"] == codecs["salt"] == "UNCOMPRESSED" and codecs["content"] == "SNAPPY"
    assert mem.verify().ok
    assert_frame_equal(pl.read_delta(mem.layout.events).sort("seq"), mem.log())


class _Raced(EventLog):
    """An EventLog whose first write finds that ``rival`` committed just before it."""

    rival: EventLog | None = None
    writes = 0

    def _write(self, dt, table, props):
        self.writes += 1
        if self.writes == 1:
            self.rival.append(_events("rival", 2))
        super()._write(dt, table, props)


def test_a_lost_race_on_the_direct_path_retries_and_leaves_no_file(tmp_path, monkeypatch):
    monkeypatch.setattr(datafiles, "DIRECT_WRITE_FROM", 1)
    mem = refold.init(tmp_path / "store")
    mem.log_store.append(_events("first", 2))
    log = _Raced(mem.layout)
    log.rival = EventLog(mem.layout)
    failures = []
    real = datafiles._write_direct

    def spy(*args, **kwargs):
        try:
            return real(*args, **kwargs)
        except CommitFailedError:
            failures.append(1)
            raise

    monkeypatch.setattr(datafiles, "_write_direct", spy)
    assert log.append(_events("mine", 3)) == [4, 5, 6]  # after the rival's two
    assert log.writes == 2 and failures == [1]  # lost once, then landed
    live = {Path(p).name for p in _plain_delta_files(Path(mem.layout.events))}
    on_disk = {p.name for p in Path(mem.layout.events).glob("*.parquet")}
    assert on_disk == live and len(live) == 3  # the lost race's file is gone
    assert mem.verify().ok
    assert mem.log()["event_id"].to_list()[2:] == ["rival-00000", "rival-00001", "mine-00000",
                                                   "mine-00001", "mine-00002"]


@pytest.mark.parametrize("threshold", [1, 10**9])
def test_both_paths_survive_a_checkpoint_and_keep_the_chain(tmp_path, monkeypatch, threshold):
    monkeypatch.setattr(datafiles, "DIRECT_WRITE_FROM", threshold)
    mem = refold.init(tmp_path / "store")
    for i in range(101):  # past delta-rs's checkpoint (its commit hook runs on either path)
        mem.log_store.append(_events(f"b{i}", 1))
    log_dir = Path(mem.layout.events) / "_delta_log"
    assert json.loads((log_dir / "_last_checkpoint").read_text())["version"] == 99  # 100 commits: v0..v99
    report = mem.verify()
    assert report.ok and report.events == 101
    assert_frame_equal(pl.read_delta(mem.layout.events).sort("seq"), mem.log())
