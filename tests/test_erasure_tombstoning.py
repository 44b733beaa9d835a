"""Tombstones are written by file selection: the data files holding erased rows are rewritten with
pyarrow and swapped in ONE delta-rs transaction, whatever the pattern of the erased seqs (one
speaker's turns alternate with the other's). Real Delta tables."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable
from deltalake.exceptions import CommitFailedError

import refold
from refold.erasure import procedure as erasure
from refold.storage.erased_ids import pseudonyms
from refold.storage.log.schema import EVENTS_SCHEMA
from refold.erasure.log_rewrite import stage

A, B = "s-a11e", "s-b0b0"


def _conversation(mem: refold.Memory, turns: int = 40, batch: int = 5) -> None:
    mem.append([{"kind": "observation", "content": f"earlier {i}", "source": "notes", "event_id": f"pre-{i}"}
                for i in range(10)])
    rows = [{"kind": "chat_turn", "content": f"turn {i}", "source": "chat#1", "subjects": [A if i % 2 == 0 else B],
             "event_id": f"turn-{i:03d}"} for i in range(turns)]
    for i in range(0, turns, batch):
        mem.append(rows[i:i + batch])
    mem.append([{"kind": "observation", "content": f"later {i}", "source": "notes", "event_id": f"post-{i}"}
                for i in range(10)])


def _rows(mem: refold.Memory) -> dict[int, dict]:
    return {r["seq"]: r for r in mem.log_store.arrow().to_pylist()}


def test_alternating_seqs_are_tombstoned_in_one_commit_touching_only_their_files(tmp_path):
    mem = refold.init(tmp_path / "store")
    _conversation(mem)
    dt = DeltaTable(mem.layout.events)
    files_before = set(pa.table(dt.get_add_actions(flatten=True))["path"].to_pylist())
    before = _rows(mem)
    a_seqs = {s for s, r in before.items() if A in (r["subjects"] or [])}
    versions = []
    original = erasure._Run._commit_tombstones

    def counted(self, seqs, expected):
        start = self.log.table().version()
        result = original(self, seqs, expected)
        versions.append(self.log.table().version() - start)
        return result

    erasure._Run._commit_tombstones = counted
    try:
        receipt = erasure.erase(mem.log_store, A, mode="delete")
    finally:
        erasure._Run._commit_tombstones = original
    assert versions == [1] and len(receipt.events) == 20
    after = _rows(mem)
    key = pseudonyms(mem.root)
    for seq, row in before.items():
        if seq in a_seqs:
            assert after[seq]["kind"] == "tombstone" and after[seq]["event_id"] == key(row["event_id"])
            assert (after[seq]["link"], after[seq]["commitment"]) == (row["link"], row["commitment"])
            assert after[seq]["content"] is None and after[seq]["subjects"] == []
        else:
            assert after[seq] == row  # every other row exactly as it was
    # the earlier and later files held no erased row: untouched; the conversation's were replaced
    files_after = set(pa.table(DeltaTable(mem.layout.events).get_add_actions(flatten=True))["path"].to_pylist())
    removed = {f.removeprefix("events/") for f in receipt.removed_files}
    assert removed and removed <= files_before and not removed & files_after
    assert files_before - removed <= files_after
    assert mem.verify().ok


def test_a_commit_that_lands_first_makes_the_staged_swap_fail_and_leave_nothing(tmp_path):
    mem = refold.init(tmp_path / "store")
    _conversation(mem, turns=10)
    rows = _rows(mem)
    seqs = {s for s, r in rows.items() if A in (r["subjects"] or [])}
    dt = DeltaTable(mem.layout.events)
    staged = stage(dt, mem.layout.events, seqs, erasure_id="e-test", pseudonym=lambda i: "erased:" + i,
                   expected={s: rows[s]["commitment"] for s in seqs})
    written = [Path(mem.layout.events) / a.path for a in staged.adds]
    assert written and all(p.exists() for p in written) and len(staged.erased) == len(seqs)
    mem.append([{"kind": "observation", "content": "racing", "source": "notes", "event_id": "racer"}])
    with pytest.raises(CommitFailedError):
        dt.create_write_transaction(staged.actions, mode="append", schema=EVENTS_SCHEMA,
                                    commit_properties=CommitProperties(max_commit_retries=0))
    staged.discard()
    assert not any(p.exists() for p in written)
    assert all(r["kind"] != "tombstone" for r in _rows(mem).values()) and mem.verify().ok


def test_a_rewrite_keeps_every_row_where_it_was(tmp_path):
    """The rewritten files hold the rows in the order they were read (files by first seq), an
    erased row replaced by its tombstone in its place: on a log appended in batches that is seq
    order, and the surviving rows are not copied to get there."""
    import numpy as np
    import pyarrow.parquet as pq

    from refold.erasure.log_rewrite import _spliced

    mem = refold.init(tmp_path / "store")
    _conversation(mem)
    rows = mem.log_store.arrow().select(EVENTS_SCHEMA.names).cast(EVENTS_SCHEMA)
    rows = rows.take(pa.array(np.random.default_rng(1).permutation(rows.num_rows)))  # any order
    hit = np.array([s % 3 == 0 for s in rows["seq"].to_pylist()])
    hits = rows.filter(pa.array(hit))
    tombs = hits.set_column(hits.schema.get_field_index("kind"), "kind",
                            pa.array(["tombstone"] * hits.num_rows, pa.string()))
    spliced = _spliced(rows, hit, tombs)
    assert spliced["seq"].to_pylist() == rows["seq"].to_pylist()
    assert [k == "tombstone" for k in spliced["kind"].to_pylist()] == hit.tolist()
    assert spliced.drop_columns(["kind"]).equals(rows.drop_columns(["kind"]))
    erasure.erase(mem.log_store, A, mode="delete")
    dt = DeltaTable(mem.layout.events)
    for path in pa.table(dt.get_add_actions(flatten=True))["path"].to_pylist():
        seqs = pq.read_table(f"{mem.layout.events}/{path}", columns=["seq"])["seq"].to_numpy()
        assert np.all(np.diff(seqs) > 0), path


@pytest.mark.slow
def test_a_rewrite_keeps_the_logs_file_layout(tmp_path, monkeypatch):
    """The files an erasure rewrites are written back in runs of about the log's file size, in
    seq order: the log keeps files over disjoint seq ranges (a read of a few seqs still opens
    only their files), and small files are still written back as one."""
    import os

    monkeypatch.setattr("refold.storage.log.eventlog.COMPACT_EVERY", 5)
    monkeypatch.setattr("refold.storage.log.eventlog.FILE_TARGET_BYTES", 50_000)
    monkeypatch.setattr("refold.erasure.log_rewrite.FILE_TARGET_BYTES", 50_000)
    mem = refold.init(tmp_path / "store")
    for i in range(30):
        mem.append([{"kind": "chat_turn", "content": os.urandom(300).hex(), "source": "chat#1",
                     "subjects": [A if j % 2 == 0 else B], "event_id": f"t{i}-{j}"} for j in range(10)])

    def spans():
        files = pa.table(DeltaTable(mem.layout.events).get_add_actions(flatten=True))
        return sorted(zip(files["min.seq"].to_pylist(), files["max.seq"].to_pylist(), files["size_bytes"].to_pylist()))

    before = spans()
    assert len(before) >= 5
    receipt = erasure.erase(mem.log_store, A, mode="delete")
    after = spans()
    assert len(receipt.events) == 150
    assert all(high < low for (_, high, _), (low, _, _) in zip(after, after[1:])), after  # disjoint ranges
    assert len(before) - 2 <= len(after) <= len(before) + 1  # one for one (small ones may merge), and the erasure event
    assert max(size for *_, size in after) < 2 * 50_000
    assert mem.verify().ok and all(r["kind"] == "tombstone" for r in mem.log_store.arrow().to_pylist()
                                   if r["seq"] in {e.seq for e in mem.events() if e.kind == "tombstone"})
