"""The two ways an append commits (storage/datafiles.py, storage/delta_commit.py) give the same table.

Local appends are written by pyarrow and committed by refold's own commit file (put-if-absent
with ``os.link``); object stores, and local tables whose protocol refold does not write, go
through ``write_deltalake``. Both must keep: the rows, statistics on the stats columns only, the
compare-and-append (a racing commit makes the write fail, the append retries, also between a
refold writer and a delta-rs writer), delta-rs's checkpoints, and no file of a lost race left in
the table folder. Real Delta tables in tmp_path; the delta-rs way is forced locally by switching
refold's commit off (monkeypatch of ``delta_commit.ENABLED``), nothing else is replaced.
"""

from __future__ import annotations

import json
import os
import time
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
from refold.fold.errors import StoreError
from refold.fold.events import NewEvent
from refold.storage import delta_commit
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


def test_refold_add_stats_are_delta_rs_stats_with_exact_times(tmp_path):
    when = datetime(2026, 3, 4, 5, 6, 7, 891234, tzinfo=timezone.utc)
    rows, _, _ = seal_rows(_events("st", 50), first_seq=10, prev_link=GENESIS, recorded_at=when,
                        table_version=1)
    props = CommitProperties(max_commit_retries=0)
    paths = {}
    for way in ("delta-rs", "refold"):
        paths[way] = str(tmp_path / way)
        DeltaTable.create(paths[way], EVENTS_SCHEMA, configuration=TABLE_CONFIGURATION)
        dt = DeltaTable(paths[way])
        assert delta_commit.unsupported(dt) is None  # refold may commit the tables it creates
        if way == "refold":
            folder = Path(paths[way])
            delta_commit.commit_rows(folder, 1, rows, {"k": "v"})
        else:
            write_deltalake(dt, rows, mode="append", commit_properties=props)
        assert DeltaTable(paths[way]).version() == 1
    theirs, ours = _stats(paths["delta-rs"]), _stats(paths["refold"])
    assert set(ours) == {"num_records"} | {f"{k}.{c}" for k in ("min", "max", "null_count") for c in STATS_COLUMNS}
    assert ours["min.recorded_at"] == ours["max.recorded_at"] == when  # to the microsecond
    assert theirs["max.recorded_at"] == when.replace(microsecond=891000)  # delta-rs: milliseconds
    for key in ("min.recorded_at", "max.recorded_at"):
        del theirs[key], ours[key]
    assert ours == theirs
    assert ours["min.seq"] == 10 and ours["max.seq"] == 59 and ours["min.kind"] == "chat_turn"
    assert_frame_equal(pl.read_delta(paths["refold"]), pl.read_delta(paths["delta-rs"]))
    entry = DeltaTable(paths["refold"]).history(1)[0]  # custom metadata comes back as delta-rs's does
    assert entry["operation"] == "WRITE" and entry["k"] == "v" and entry["version"] == 1
    assert entry["operationParameters"] == {"mode": "Append"}
    assert not list((Path(paths["refold"]) / "_delta_log").glob("*.tmp"))


def _engines(events_dir: str) -> list[str]:
    """engineInfo of every WRITE commit, oldest first."""
    return [c.get("engineInfo", "") for c in reversed(DeltaTable(events_dir).history())
            if c["operation"] == "WRITE"]


def test_local_appends_are_committed_by_refold(tmp_path):
    mem = refold.init(tmp_path / "store")
    assert mem.log_store.append(_events("big", 2000)) == list(range(2000))
    time.sleep(0.01)  # the two commits in different milliseconds, for time travel by time below
    assert mem.log_store.append(_events("small", 3)) == [2000, 2001, 2002]
    assert _engines(mem.layout.events) == ["refold", "refold"]
    files = {Path(p).name: pq.ParquetFile(p).metadata for p in _plain_delta_files(Path(mem.layout.events))}
    assert len(files) == 2
    for meta in files.values():
        codecs = {meta.row_group(0).column(i).path_in_schema: meta.row_group(0).column(i).compression
                  for i in range(meta.num_columns)}
        assert codecs["link"] == codecs["salt"] == "UNCOMPRESSED" and codecs["content"] == "SNAPPY"
    assert mem.verify().ok
    assert mem.head().seq == 2002 and mem.head().table_version == 2
    assert_frame_equal(pl.read_delta(mem.layout.events).sort("seq"), mem.log())
    # the log's own table handle was not moved by those commits; it catches up when read
    log = mem.log_store
    assert log._fresh_table().version() == 2
    assert log._indexed == set(log._fresh_table().file_uris())  # the id index names files as delta-rs does
    assert pl.read_delta(mem.layout.events, version=1).height == 2000  # time travel by version
    for entry in DeltaTable(mem.layout.events).history(2):  # by time, as delta-rs resolves it
        dt = DeltaTable(mem.layout.events)
        dt.load_as_version(datetime.fromtimestamp(entry["timestamp"] / 1000, timezone.utc))
        assert dt.version() == entry["version"]


def test_a_table_refold_does_not_write_itself_goes_through_delta_rs(tmp_path):
    """A check constraint needs writer version 3: refold leaves such commits to delta-rs."""
    mem = refold.init(tmp_path / "store")
    mem.log_store.append(_events("a", 2))
    DeltaTable(mem.layout.events).alter.add_constraint({"seq_ok": "seq >= 0"})
    assert delta_commit.unsupported(DeltaTable(mem.layout.events)) is not None
    mem.log_store.append(_events("b", 2))
    other = EventLog(mem.layout)
    other.append(_events("c", 2))
    engines = _engines(mem.layout.events)
    assert engines[0] == "refold" and all(e.startswith("delta-rs") for e in engines[1:]), engines
    assert mem.verify().ok and mem.log()["seq"].to_list() == list(range(6))


@pytest.mark.parametrize("first", ["refold", "delta-rs"])
def test_refold_and_delta_rs_commits_exclude_each_other(tmp_path, first):
    """Put-if-absent holds across implementations: whichever commits version 1 first wins."""
    path = tmp_path / "t"
    DeltaTable.create(str(path), EVENTS_SCHEMA, configuration=TABLE_CONFIGURATION)
    stale = DeltaTable(str(path))  # read at version 0 by the delta-rs writer
    rows, _, _ = seal_rows(_events("x", 3), first_seq=0, prev_link=GENESIS,
                        recorded_at=datetime.now(timezone.utc), table_version=1)
    props = CommitProperties(max_commit_retries=0)

    def refold_commit():
        delta_commit.commit_rows(path, 1, rows, {})  # (a lost race removes its data file)

    def delta_rs_commit():
        write_deltalake(stale, rows, mode="append", commit_properties=props)

    order = [refold_commit, delta_rs_commit] if first == "refold" else [delta_rs_commit, refold_commit]
    order[0]()
    with pytest.raises(CommitFailedError):
        order[1]()
    dt = DeltaTable(str(path))
    assert dt.version() == 1 and len(dt.file_uris()) == 1
    assert pl.read_delta(str(path)).height == 3


class _Raced(EventLog):
    """An EventLog whose first write finds that ``rival`` committed just before it."""

    rival: EventLog | None = None
    writes = 0

    def _write(self, version, table, metadata):
        self.writes += 1
        if self.writes == 1:
            self.rival.append(_events("rival", 2))
        super()._write(version, table, metadata)


def test_a_lost_race_retries_and_leaves_no_file(tmp_path, monkeypatch):
    mem = refold.init(tmp_path / "store")
    mem.log_store.append(_events("first", 2))
    log = _Raced(mem.layout)
    log.rival = EventLog(mem.layout)
    failures = []
    real = delta_commit.commit_add

    def spy(*args, **kwargs):
        try:
            return real(*args, **kwargs)
        except CommitFailedError:
            failures.append(1)
            raise

    monkeypatch.setattr(delta_commit, "commit_add", spy)
    assert log.append(_events("mine", 3)) == [4, 5, 6]  # after the rival's two
    assert log.writes == 2 and failures == [1]  # lost once, then landed
    live = {Path(p).name for p in _plain_delta_files(Path(mem.layout.events))}
    on_disk = {p.name for p in Path(mem.layout.events).glob("*.parquet")}
    assert on_disk == live and len(live) == 3  # the lost race's file is gone
    assert not list((Path(mem.layout.events) / "_delta_log").glob("*.tmp"))  # and its staged commit
    assert mem.verify().ok
    assert mem.log()["event_id"].to_list()[2:] == ["rival-00000", "rival-00001", "mine-00000",
                                                   "mine-00001", "mine-00002"]


@pytest.mark.parametrize("refold_commits", [True, False])
def test_both_paths_survive_a_checkpoint_and_keep_the_chain(tmp_path, monkeypatch, refold_commits):
    monkeypatch.setattr(delta_commit, "ENABLED", refold_commits)
    mem = refold.init(tmp_path / "store")
    for i in range(101):  # past delta-rs's checkpoint (refold's commits run the same hook)
        mem.log_store.append(_events(f"b{i}", 1))
    log_dir = Path(mem.layout.events) / "_delta_log"
    assert json.loads((log_dir / "_last_checkpoint").read_text())["version"] == 99  # 100 commits: v0..v99
    assert _engines(mem.layout.events)[0] == ("refold" if refold_commits else "delta-rs:py-1.6.6")
    report = mem.verify()
    assert report.ok and report.events == 101
    assert_frame_equal(pl.read_delta(mem.layout.events).sort("seq"), mem.log())


def test_a_failed_encode_leaves_neither_staged_file(tmp_path, monkeypatch):
    """A local commit's data file and commit file are created before its rows are encoded
    (storage/datafiles.py StagedFiles); when encoding fails, neither stays and nothing landed.
    The encoder is replaced by one that raises (the failure cannot be provoked otherwise)."""
    mem = refold.init(tmp_path / "store")
    mem.log_store.append(_events("first", 20))
    folder = Path(mem.layout.events)
    before = sorted(p.relative_to(folder) for p in folder.rglob("*"))
    calls = []

    def broken(rows, **kwargs):
        calls.append(kwargs["name"])
        assert (folder / kwargs["name"]).parent == folder  # the staged file's name, in the table folder
        raise MemoryError("encoder ran out of memory")

    monkeypatch.setattr(delta_commit, "encode_file", broken)
    with pytest.raises(StoreError, match="did not land .encoder ran out of memory.; it is safe to retry"):
        mem.log_store.append(_events("second", 20))
    assert len(calls) == 2 and sorted(p.relative_to(folder) for p in folder.rglob("*")) == before
    assert mem.log().height == 20 and mem.verify().ok


def test_a_failed_data_file_write_leaves_neither_staged_file(tmp_path, monkeypatch):
    """Writing the data file fails (a full disk; provoked by replacing os.write
    while the append runs): the append fails as safe to retry, and neither the half-written data file
    nor the staged commit file stays."""
    from refold.storage import datafiles

    mem = refold.init(tmp_path / "store")
    mem.log_store.append(_events("first", 20))
    folder = Path(mem.layout.events)
    before = sorted(p.relative_to(folder) for p in folder.rglob("*"))

    def full_disk(fd, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(datafiles.os, "write", full_disk)
    with pytest.raises(StoreError, match="did not land .*No space left on device.*; it is safe to retry"):
        mem.log_store.append(_events("second", 20))
    monkeypatch.undo()
    assert sorted(p.relative_to(folder) for p in folder.rglob("*")) == before
    assert mem.log().height == 20 and mem.verify().ok


def test_staged_files_hand_on_each_descriptor_once(tmp_path):
    """StagedFiles: store() writes and closes the data file, commit_file() hands on the commit
    file's descriptor, discard() closes only what was not handed on and removes both files."""
    from refold.storage.datafiles import StagedFiles

    (tmp_path / "_delta_log").mkdir()
    files = StagedFiles(tmp_path)
    files.store(pa.py_buffer(b"PAR1 rows"))
    assert (tmp_path / files.data_name).read_bytes() == b"PAR1 rows"
    path, fd = files.commit_file()
    assert path.parent.name == "_delta_log" and path.exists()
    os.close(fd)  # what commit_add does with it
    files.discard()
    assert list(tmp_path.rglob("*")) == [tmp_path / "_delta_log"]

    untouched = StagedFiles(tmp_path)
    untouched.discard()  # nothing handed on: both descriptors closed here, both files removed
    assert list(tmp_path.rglob("*")) == [tmp_path / "_delta_log"]
    with pytest.raises(FileNotFoundError):  # creation failed (no such folder): nothing to discard
        gone = StagedFiles(tmp_path / "missing")
        gone.discard()
        gone.commit_file()
