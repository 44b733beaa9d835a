"""Idempotency, compaction and reading of the event log (invariant 3), on real Delta tables."""

from __future__ import annotations

import json
from contextlib import nullcontext
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import pyarrow.compute as pc
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

import refold
from refold.fold.errors import ConflictError
from refold.fold.events import Fact, NewEvent

from tests.log_helpers import _bad, _event, _file_of, _rewrite, _row, _store, mem  # noqa: F401 (mem: fixture)


# -- idempotency ----------------------------------------------------------------------------------


def _version(mem) -> int:
    return DeltaTable(mem.layout.events).version()


def test_same_event_id_again_returns_the_original_seq(mem):
    first = mem.append(_event(100, event_id="evt-1"))
    version = _version(mem)
    assert first == [20]
    assert mem.append(_event(100, event_id="evt-1")) == [20]
    assert refold.Memory(mem.root).append(_event(100, event_id="evt-1")) == [20]  # cold index
    assert _version(mem) == version and mem.log().height == 21


def test_same_event_id_with_different_content_is_a_conflict(mem):
    mem.append(_event(100, event_id="evt-1"))
    version = _version(mem)
    with pytest.raises(ConflictError, match="evt-1.*seq 20.*different content"):
        mem.append(_event(101, event_id="evt-1"))
    with pytest.raises(ConflictError):
        refold.Memory(mem.root).append(_event(100, event_id="evt-1", subjects=["x"]))
    assert _version(mem) == version


def test_batch_mixing_known_and_new_ids(mem):
    mem.append([_event(100, event_id="a"), _event(101, event_id="b")])
    seqs = mem.append([_event(101, event_id="b"), _event(102, event_id="c"), _event(100, event_id="a"),
                       _event(103, event_id="d")])
    assert seqs == [21, 22, 20, 23]
    assert mem.log(since=20)["event_id"].to_list() == ["a", "b", "c", "d"]
    assert mem.verify().ok


def test_repeated_id_inside_one_batch_is_written_once(mem):
    seqs = mem.append([_event(100, event_id="a"), _event(100, event_id="a"), _event(101, event_id="b")])
    assert seqs == [20, 20, 21]
    assert mem.log().height == 22
    version = _version(mem)
    with pytest.raises(ConflictError, match="twice in the batch"):
        mem.append([_event(102, event_id="z"), _event(103, event_id="z")])
    assert _version(mem) == version


def test_jsonl_retry_after_failure_is_idempotent(mem):
    lines = [json.dumps(_event(200 + i, event_id=f"line-{i}")) for i in range(3)]
    assert mem.append_jsonl(lines) == [20, 21, 22]
    assert mem.append_jsonl(lines) == [20, 21, 22]
    assert mem.log().height == 23


def test_idempotency_index_survives_a_rewrite_of_files(mem):
    """After a rewrite replaced a data file (as erasure's tombstone commit does: the same rows,
    new files), the id index is rebuilt from the files now listed."""
    log = mem.log_store
    log.append([NewEvent(kind="chat_turn", content="x", source="s", event_id="keep")])
    dt = DeltaTable(mem.layout.events)
    write_deltalake(dt, log.arrow(filter=pc.field("seq") == 2), mode="overwrite", predicate="seq = 2")
    assert log.append([NewEvent(kind="chat_turn", content="x", source="s", event_id="keep")]) == [20]
    assert log.append([NewEvent(kind="chat_turn", content="y", source="s", event_id="new")]) == [21]


def test_the_id_index_only_preselects(mem):
    """The index holds ids only; a known id's seq comes from its row. Were the index ever to name
    an id no row has, the rows win: the event is appended, not answered with a made-up seq."""
    log = mem.log_store
    log.append([NewEvent(kind="chat_turn", content="x", source="s", event_id="real")])
    log._ids.add("ghost")  # what a stale index would look like
    batch = [NewEvent(kind="chat_turn", content="x", source="s", event_id=i) for i in ("real", "ghost")]
    assert log.append(batch) == [20, 21]
    assert mem.log(since=20)["event_id"].to_list() == ["real", "ghost"]
    assert mem.verify().ok


def test_long_lived_writer_survives_a_cleaned_up_log(tmp_path):
    """A checkpoint plus a zero-retention cleanup (what erasure's scrub does) removes commit
    files a long-lived EventLog never saw; its next append must reload, not fail."""
    mem = _store(tmp_path / "store", batches=(2, 2))  # this object's table is at version 2
    refold.Memory(mem.root).append(_event(4))  # version 3, by another writer
    path = mem.layout.events
    DeltaTable(path).alter.set_table_properties({"delta.logRetentionDuration": "interval 0 seconds"})
    dt = DeltaTable(path)
    dt.create_checkpoint()
    dt.cleanup_metadata()
    assert not (Path(path) / "_delta_log" / f"{3:020d}.json").exists()
    assert mem.append(_event(5)) == [5]
    assert mem.append(_event(5, event_id="again")) == [6]
    assert mem.log()["seq"].to_list() == list(range(7))
    assert mem.verify().ok


def test_compaction_keeps_rows_chain_head_and_ids(tmp_path, monkeypatch):
    """Appends compact every COMPACT_EVERY files (Delta OPTIMIZE): files change, rows do not."""
    monkeypatch.setattr("refold.storage.log.eventlog.COMPACT_EVERY", 5)
    mem = refold.init(tmp_path / "store")
    for i in range(12):
        mem.append(_event(i, event_id=f"c{i}"))
    dt = DeltaTable(mem.layout.events)
    assert [h["operation"] for h in dt.history()].count("OPTIMIZE") == 2
    assert len(dt.file_uris()) == 3  # 10 compacted into 2, then 2 new ones
    assert mem.log()["seq"].to_list() == list(range(12))
    head = mem.head()
    assert (head.seq, head.table_version) == (11, dt.version())  # from the OPTIMIZE commit
    assert mem.verify().ok
    # the id index survives compaction, in this object and in a cold one
    version = dt.version()
    assert mem.append(_event(3, event_id="c3")) == [3]
    assert refold.Memory(mem.root).append(_event(3, event_id="c3")) == [3]
    assert DeltaTable(mem.layout.events).version() == version
    metrics = mem.log_store.compact()
    assert metrics["numFilesRemoved"] == 3 and metrics["numFilesAdded"] == 1
    assert mem.append(_event(12)) == [12]
    assert mem.verify().ok
    # tampering inside a compacted file is still caught
    _rewrite(_file_of(mem, 4), lambda rows: _row(rows, 4).update(content="forged"))
    _bad(mem, 4, "seq 4")


def test_compaction_merges_only_small_files_so_files_hold_disjoint_seq_ranges(tmp_path, monkeypatch):
    """A compaction bins files up to FILE_TARGET_BYTES: a file near that size is left alone,
    and what gets merged is the run of files appended since. So the log keeps files of about that
    size, each over its own seq range, and a read of a few seqs opens only their files (with
    delta-rs's default target each compaction merged the whole log of a small store again, in no
    order: at 1M events 4 files each spanning every seq)."""
    import os

    monkeypatch.setattr("refold.storage.log.eventlog.COMPACT_EVERY", 5)
    monkeypatch.setattr("refold.storage.log.eventlog.FILE_TARGET_BYTES", 50_000)
    mem = refold.init(tmp_path / "store")
    for i in range(30):
        mem.append([{**_event(10 * i + j, event_id=f"c{i}-{j}"), "content": os.urandom(300).hex()}
                    for j in range(10)])
        files = pa.table(DeltaTable(mem.layout.events).get_add_actions(flatten=True))
        spans = sorted(zip(files["min.seq"].to_pylist(), files["max.seq"].to_pylist()))
        assert all(high < low for (_, high), (low, _) in zip(spans, spans[1:])), spans  # disjoint ranges
    assert [h["operation"] for h in DeltaTable(mem.layout.events).history()].count("OPTIMIZE") >= 5
    assert sum(size >= 25_000 for size in files["size_bytes"].to_pylist()) >= 3  # not one file of everything
    assert mem.log()["seq"].to_list() == list(range(300)) and mem.verify().ok


def test_head_metadata_of_a_rebased_optimize_is_not_trusted(tmp_path):
    """delta-rs rebases an OPTIMIZE over commits that landed after it read the table (even with
    max_commit_retries=0), so the head it carries can be stale; the next append must not reuse
    a seq because of it."""
    mem = _store(tmp_path / "store", batches=(2, 2, 2))
    other = refold.Memory(mem.root)
    stale = DeltaTable(mem.layout.events)  # version 3, head seq 5
    other.append(_event(6))  # version 4, seq 6
    other.log_store._compact(stale)  # OPTIMIZE read at 3, claims head seq 5 at version 4
    dt = DeltaTable(mem.layout.events)
    assert dt.history(1)[0]["operation"] == "OPTIMIZE" and dt.version() == 5
    assert mem.head().seq == 6
    assert mem.append(_event(7)) == [7]
    assert other.append(_event(8)) == [8]
    assert mem.log()["seq"].to_list() == list(range(9))
    assert mem.verify().ok


def test_compaction_needs_the_host_lock(tmp_path, monkeypatch):
    monkeypatch.setattr("refold.storage.log.eventlog.COMPACT_EVERY", 2)
    monkeypatch.setattr("refold.storage.log.eventlog.host_turn", lambda root: nullcontext(False))  # as on an object store
    mem = refold.init(tmp_path / "store")
    for i in range(5):
        mem.append(_event(i))
    assert "OPTIMIZE" not in [h["operation"] for h in DeltaTable(mem.layout.events).history()]
    with pytest.raises(refold.StoreError, match="cannot compact"):
        mem.log_store.compact()


# -- reading ----------------------------------------------------------------------------------------


def test_read_since_until(mem):
    assert mem.log(since=5)["seq"].to_list() == list(range(5, 20))
    assert mem.log(until=3)["seq"].to_list() == [0, 1, 2]
    assert mem.log(since=4, until=6)["seq"].to_list() == [4, 5]
    assert mem.log(since=50).height == 0


def test_read_as_of_version(mem):
    assert mem.log(as_of=0).height == 0
    assert mem.log(as_of=1)["seq"].to_list() == list(range(5))
    assert mem.log(as_of="2")["seq"].to_list() == list(range(10))
    assert mem.log(as_of=2, since=7)["seq"].to_list() == [7, 8, 9]
    assert mem.log(as_of=99).height == 20


def test_read_as_of_time(tmp_path):
    mem = refold.init(tmp_path / "store")
    mem.append([_event(0), _event(1)])
    cut = mem.head().recorded_at
    mem.append([_event(2)])
    later = mem.head().recorded_at
    assert later > cut
    assert mem.log(as_of=cut)["seq"].to_list() == [0, 1]
    assert mem.log(as_of=cut.isoformat())["seq"].to_list() == [0, 1]
    as_paris = cut.astimezone(timezone(timedelta(hours=2))).isoformat()
    assert mem.log(as_of=as_paris)["seq"].to_list() == [0, 1]
    assert mem.log(as_of=cut - timedelta(seconds=1)).height == 0
    assert mem.log(as_of=later)["seq"].to_list() == [0, 1, 2]
    with pytest.raises(refold.ValidationError, match="no timezone"):
        mem.log(as_of="2024-01-01T00:00:00")
    with pytest.raises(refold.ValidationError, match="neither a table version"):
        mem.log(as_of="yesterday")


def test_events_values_round_trip(mem):
    mem.append({"kind": "memory_written", "content": "c", "source": "agent",
                "fact": {"subject": "user", "relation": "likes", "object": "tea"},
                "justification": "said so", "valid_from": "2024-01-01T00:00:00+01:00"})
    event = mem.log_store.events(since=20)[0]
    assert event.fact == Fact("user", "likes", "tea")
    assert event.valid_from == datetime(2023, 12, 31, 23, tzinfo=timezone.utc)
    assert mem.verify().ok
