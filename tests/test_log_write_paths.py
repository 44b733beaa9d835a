"""How an append commits (storage/datafiles.py): through delta-rs, compare-and-append.

Every append is one ``write_deltalake`` on the table opened at the version the head was read at,
with ``max_commit_retries=0``. It must keep: the rows, statistics on the stats columns only,
the compare-and-append (a racing commit makes the write fail and the append retries on the new
head, instead of delta-rs rebasing it), delta-rs's checkpoints, time travel, and the head stored
in each commit's metadata. Real Delta tables in tmp_path; nothing is replaced but a spy that
counts failed commits.
"""

from __future__ import annotations

import contextlib
import json
import time
from datetime import datetime, timezone
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError
from polars.testing import assert_frame_equal

import refold
from refold.fold.chain import GENESIS
from refold.fold.events import NewEvent
from refold.storage.log import eventlog as log_module
from refold.storage.log.datafiles import write_rows
from refold.storage.log.heads import Head
from refold.storage.log.eventlog import EventLog
from refold.storage.log.reader import HEAD_KEY
from refold.storage.log.schema import EVENTS_SCHEMA, STATS_COLUMNS, TABLE_CONFIGURATION
from refold.storage.log.sealing import seal_rows


def _events(prefix: str, n: int) -> list[NewEvent]:
    return [NewEvent(kind="chat_turn" if i % 3 else "observation", content=f"{prefix} says {i}",
                     source=f"chat#{i % 4}", event_id=f"{prefix}-{i:05d}", subjects=(f"s{i % 5}",))
            for i in range(n)]


def _engines(events_dir: str) -> list[str]:
    """engineInfo of every WRITE commit, oldest first."""
    return [c.get("engineInfo", "") for c in reversed(DeltaTable(events_dir).history())
            if c["operation"] == "WRITE"]


def test_appends_are_delta_rs_commits_with_the_head_and_stats_columns_only(tmp_path):
    mem = refold.init(tmp_path / "store")
    assert mem.log_store.append(_events("big", 2000)) == list(range(2000))
    time.sleep(0.01)  # a time between the two commits, for time travel by time below
    between = datetime.now(timezone.utc)
    time.sleep(0.01)
    assert mem.log_store.append(_events("small", 3)) == [2000, 2001, 2002]
    engines = _engines(mem.layout.events)
    assert len(engines) == 2 and all(e.startswith("delta-rs") for e in engines), engines
    actions = pa.table(DeltaTable(mem.layout.events).get_add_actions(flatten=True)).to_pylist()
    for action in actions:
        stated = {k.split(".", 1)[1] for k in action if k.startswith(("min.", "max.", "null_count."))}
        assert stated == set(STATS_COLUMNS)
    assert sorted(a["num_records"] for a in actions) == [3, 2000]
    assert _codecs(mem) == {"UNCOMPRESSED"}  # append files live until the next compaction
    entry = DeltaTable(mem.layout.events).history(1)[0]
    head = Head.from_json(json.loads(entry[HEAD_KEY]))
    assert (head.seq, head.table_version) == (2002, 2) and head == mem.head()
    assert mem.verify().ok
    assert_frame_equal(pl.read_delta(mem.layout.events).sort("seq"), mem.log())
    log = mem.log_store
    assert log._dt.version() == 2  # the commit moved the log's own handle: nothing to reload
    assert log._indexed == set(log._fresh_table().file_uris())  # the id index names files as delta-rs does
    assert pl.read_delta(mem.layout.events, version=1).height == 2000  # time travel by version
    dt = DeltaTable(mem.layout.events)
    dt.load_as_version(between)  # by time, as delta-rs resolves it
    assert dt.version() == 1
    log.compact()
    assert _codecs(mem) == {"SNAPPY"} and mem.verify().ok  # the files that stay are compressed


def _codecs(mem: refold.Memory) -> set[str]:
    """The compression codecs of every live data file's columns."""
    out = set()
    for uri in DeltaTable(mem.layout.events).file_uris():
        meta = pq.ParquetFile(uri).metadata
        out |= {meta.row_group(g).column(c).compression for g in range(meta.num_row_groups)
                for c in range(meta.num_columns)}
    return out


def test_a_writer_on_a_stale_version_gets_commit_failed(tmp_path):
    """The compare-and-append itself: a write computed at version 0 cannot land after version 1."""
    path = str(tmp_path / "t")
    DeltaTable.create(path, EVENTS_SCHEMA, configuration=TABLE_CONFIGURATION)
    first, stale = DeltaTable(path), DeltaTable(path)
    rows = seal_rows(_events("x", 3), first_seq=0, prev_link=GENESIS, recorded_at=datetime.now(timezone.utc),
                     table_version=1).table
    write_rows(first, rows, {"k": "v"})
    assert first.version() == 1  # the handle is at the version it made
    with pytest.raises(CommitFailedError):
        write_rows(stale, rows, {"k": "v"})
    dt = DeltaTable(path)
    assert dt.version() == 1 and len(dt.file_uris()) == 1 and pl.read_delta(path).height == 3


class _OtherHost(EventLog):
    """A writer on another host: it does not share this host's lock (which only saves work)."""

    def _writer_turn(self):
        return contextlib.nullcontext(False)


class _Raced(EventLog):
    """An EventLog whose first write finds that ``rival`` committed just before it."""

    rival: EventLog | None = None
    writes = 0

    def _write(self, version, table, metadata):
        self.writes += 1
        if self.writes == 1:
            self.rival.append(_events("rival", 2))
        super()._write(version, table, metadata)


def test_a_lost_race_retries_on_the_new_head(tmp_path, monkeypatch):
    mem = refold.init(tmp_path / "store")
    mem.log_store.append(_events("first", 2))
    log = _Raced(mem.layout)
    log.rival = _OtherHost(mem.layout)
    log.writes = 1  # (no race yet)
    log.append(_events("warm", 1))  # this object's handle is now loaded (at version 2)
    log.writes = 0
    failures = []
    real = log_module.write_rows

    def spy(dt, *args, **kwargs):
        try:
            return real(dt, *args, **kwargs)
        except CommitFailedError:
            failures.append(dt.version())
            raise

    monkeypatch.setattr(log_module, "write_rows", spy)
    assert log.append(_events("mine", 3)) == [5, 6, 7]  # after the rival's two
    assert log.writes == 2 and failures == [2]  # lost once at version 2, then landed
    assert mem.verify().ok
    assert mem.log()["event_id"].to_list()[2:] == ["warm-00000", "rival-00000", "rival-00001", "mine-00000",
                                                   "mine-00001", "mine-00002"]


def test_appends_survive_delta_rs_checkpoints_and_keep_the_chain(tmp_path):
    mem = refold.init(tmp_path / "store")
    for i in range(101):  # past delta-rs's checkpoints (its post-commit hook)
        mem.log_store.append(_events(f"b{i}", 1))
    log_dir = Path(mem.layout.events) / "_delta_log"
    assert json.loads((log_dir / "_last_checkpoint").read_text())["version"] == 99  # every 10 commits (delta.checkpointInterval): v0..v100, the last at 99
    report = mem.verify()
    assert report.ok and report.events == 101
    assert_frame_equal(pl.read_delta(mem.layout.events).sort("seq"), mem.log())
    assert refold.Memory(mem.root).append(_events("after", 1)) == [101]  # a fresh writer reads the head
