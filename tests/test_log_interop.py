"""The log is a plain Delta table: other readers see what refold sees, and the table keeps the
settings erasure relies on (no statistics on content-bearing columns, no change data feed, no
deletion vectors). No refold code is used to read in these tests except as the reference.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pyarrow.dataset as ds
import pytest
from deltalake import DeltaTable
from polars.testing import assert_frame_equal

import refold
from refold.storage.log.schema import STATS_COLUMNS
from tests.log_helpers import _plain_delta_files

MARKERS = {
    "content": "CONTENT-7f3a",
    "source": "SOURCE-19bc",
    "justification": "JUSTIFY-55e1",
    "subject": "SUBJECT-a0d2",
    "fact": "FACTOBJ-c4e8",
    "trace": "TRACE-3b91",
    "principal": "PRINCIPAL-8d07",
}


def _fill(mem: refold.Memory, n_commits: int = 3) -> None:
    for c in range(n_commits):
        mem.append([
            {"kind": "chat_turn", "content": f"{MARKERS['content']} {c}", "source": MARKERS["source"],
             "subjects": [MARKERS["subject"]], "principals": [MARKERS["principal"]],
             "trace_id": MARKERS["trace"], "valid_from": "2024-05-01T12:00:00+02:00"},
            {"kind": "memory_written", "content": f"remember {c}", "source": "agent#1",
             "fact": {"subject": "user", "relation": "likes", "object": MARKERS["fact"]},
             "justification": MARKERS["justification"]},
        ])


@pytest.fixture()
def mem(tmp_path):
    m = refold.init(tmp_path / "store")
    _fill(m)
    return m


def test_polars_read_delta_sees_the_same_rows(mem):
    theirs = pl.read_delta(mem.layout.events).sort("seq")
    ours = mem.log()
    assert theirs.height == 6
    assert_frame_equal(theirs, ours)


def test_polars_read_delta_at_a_version(mem):
    theirs = pl.read_delta(mem.layout.events, version=2).sort("seq")
    assert_frame_equal(theirs, mem.log(as_of=2))


def test_plain_pyarrow_from_the_delta_log_sees_the_same_rows(mem):
    files = _plain_delta_files(Path(mem.layout.events))
    assert len(files) == 3
    theirs = pl.from_arrow(ds.dataset(files, format="parquet").to_table()).sort("seq")
    assert_frame_equal(theirs, mem.log())


@pytest.mark.slow
def test_plain_reader_after_a_checkpoint(tmp_path):
    """Past 100 commits delta-rs writes a checkpoint; a reader that knows only the protocol
    (checkpoint parquet + later JSON) still sees every row refold sees."""
    mem = refold.init(tmp_path / "store")
    for i in range(103):
        mem.append({"kind": "observation", "content": f"tick {i}", "source": "clock"})
    log_dir = Path(mem.layout.events) / "_delta_log"
    assert (log_dir / "_last_checkpoint").exists()
    files = _plain_delta_files(Path(mem.layout.events))
    theirs = pl.from_arrow(ds.dataset(files, format="parquet").to_table()).sort("seq")
    assert_frame_equal(theirs, mem.log())
    assert theirs["seq"].to_list() == list(range(103))
    assert mem.verify().ok


def test_the_same_rows_after_a_delete(mem):
    """After a DELETE rewrote a file (remove + add), all three readers still agree."""
    DeltaTable(mem.layout.events).delete("seq = 2")
    ours = mem.log()
    assert ours.height == 5
    assert_frame_equal(pl.read_delta(mem.layout.events).sort("seq"), ours)
    files = _plain_delta_files(Path(mem.layout.events))
    assert_frame_equal(pl.from_arrow(ds.dataset(files, format="parquet").to_table()).sort("seq"), ours)


# -- table settings -------------------------------------------------------------------------------


def test_table_configuration(mem):
    dt = DeltaTable(mem.layout.events)
    config = dt.metadata().configuration
    assert config["delta.dataSkippingStatsColumns"] == ",".join(STATS_COLUMNS)
    assert config["delta.enableChangeDataFeed"] == "false"
    assert config["delta.enableDeletionVectors"] == "false"
    protocol = dt.protocol()
    assert "deletionVectors" not in (protocol.reader_features or [])
    assert "deletionVectors" not in (protocol.writer_features or [])
    assert "changeDataFeed" not in (protocol.writer_features or [])
    assert set(STATS_COLUMNS) == {"seq", "event_id", "recorded_at", "table_version", "kind"}


def _log_actions(mem) -> list[dict]:
    out = []
    for commit in sorted((Path(mem.layout.events) / "_delta_log").glob("*.json")):
        out.extend(json.loads(line) for line in commit.read_text().splitlines())
    return out


def test_statistics_only_on_declared_columns(mem):
    adds = [a["add"] for a in _log_actions(mem) if "add" in a]
    assert adds
    for add in adds:
        stats = json.loads(add["stats"])
        for key in ("minValues", "maxValues", "nullCount"):
            assert set(stats.get(key, {})) <= set(STATS_COLUMNS), stats


@pytest.mark.slow
def test_no_content_value_anywhere_in_the_delta_log(mem):
    """Not in stats, not in commit metadata, not in checkpoints: erasure can rely on that."""
    for _ in range(100):  # reach a checkpoint too (they copy the stats)
        mem.append({"kind": "observation", "content": f"{MARKERS['content']} more",
                    "source": MARKERS["source"], "subjects": [MARKERS["subject"]]})
    DeltaTable(mem.layout.events).delete("seq = 0")  # remove actions carry stats as well
    log_dir = Path(mem.layout.events) / "_delta_log"
    assert list(log_dir.glob("*.checkpoint.parquet"))
    files = [p for p in log_dir.rglob("*") if p.is_file()]
    for path in files:
        data = path.read_bytes()
        for name, marker in MARKERS.items():
            assert marker.encode() not in data, f"{name} value leaked into {path.name}"


def test_no_change_data_and_no_deletion_vectors_after_a_delete(mem):
    DeltaTable(mem.layout.events).delete("seq = 3")
    assert not (Path(mem.layout.events) / "_change_data").exists()
    for action in _log_actions(mem):
        for kind in ("add", "remove"):
            if kind in action:
                assert not action[kind].get("deletionVector"), action
        assert "cdc" not in action
    assert mem.log().height == 5
