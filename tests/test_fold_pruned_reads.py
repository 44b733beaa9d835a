"""Folds and reads read the log's tail through data-file pruning by Delta statistics; a read that
did not get every seq of its range exactly once raises IntegrityError instead of folding (or
answering) without those events (issue #16, item 2). The statistics are edited in ``_delta_log`` by hand, as someone with
write access to the store would. Real stores in tmp_path; nothing is mocked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

import refold
from refold.fold.errors import IntegrityError, RefoldError
from tests.fold_helpers import fact_event

def _facts(n: int, start: int = 0) -> list[dict]:
    return [fact_event(f"Person{i}", "lives_in", f"City{i}", day=i) for i in range(start, start + n)]


def _edit_seq_stats(mem: refold.Memory, version: int, low: int, high: int) -> None:
    commit = Path(mem.layout.events) / "_delta_log" / f"{version:020d}.json"
    lines = []
    for line in commit.read_text().splitlines():
        action = json.loads(line)
        if "add" in action:
            stats = json.loads(action["add"]["stats"])
            stats["minValues"]["seq"], stats["maxValues"]["seq"] = low, high
            action["add"]["stats"] = json.dumps(stats)
        lines.append(json.dumps(action))
    commit.write_text("\n".join(lines) + "\n")


@pytest.fixture()
def mem(tmp_path):
    m = refold.init(tmp_path / "store")
    for start in (0, 5, 10, 15):  # versions 1..4: seqs 0..4, 5..9, 10..14, 15..19
        m.append(_facts(5, start))
    return m


def test_a_full_fold_reads_every_file_whatever_its_statistics_say(mem):
    """A full fold reads every data file of the log (no pruning): statistics that hide a file
    from a pruned read do not hide its events from the fold; ``verify`` names the edit."""
    _edit_seq_stats(mem, 2, -10, -6)  # seqs 5..9 claim to be before the log: seq >= 0 skips them
    fresh = refold.Memory(mem.root)
    report = fresh.fold(full=True)
    assert report.last_seq == fresh.head().seq == 20
    assert set(fresh.facts()["subject"].to_list()) == {f"Person{i}" for i in range(20)}
    assert not refold.Memory(mem.root).verify().ok


def test_resumed_fold_refuses_a_tail_whose_newest_file_is_hidden(mem):
    """The newest file claims seqs 0..4: a fold resuming from the tag (seq 20) would stop there."""
    mem.fold()  # records the spec (seq 20, version 5) and tags the state at seq 20
    mem.append(_facts(5, 21))  # version 6: seqs 21..25
    _edit_seq_stats(mem, 6, 0, 4)
    fresh = refold.Memory(mem.root)
    with pytest.raises(IntegrityError, match=r"ends at seq 20, but the log holds seqs up to 25") as err:
        fresh.fold()
    assert err.value.first_bad_seq == 21


def test_a_read_refuses_a_tail_whose_newest_file_is_hidden(mem):
    """The read overlays the events after the tag: it must not answer without the hidden ones,
    at the head (it refuses) nor as of a version past the tag (it refuses, or reads them)."""
    mem.fold()  # the state tagged at seq 20 (version 5)
    mem.append(_facts(5, 21))  # version 6: seqs 21..25
    want = mem.facts(as_of=6)
    assert {f"Person{i}" for i in range(21, 26)} <= set(want["subject"].to_list())
    _edit_seq_stats(mem, 6, 0, 4)
    with pytest.raises(IntegrityError, match="refold verify"):
        refold.Memory(mem.root).facts()
    try:
        got = refold.Memory(mem.root).facts(as_of=6)
    except RefoldError as refused:
        assert "refold verify" in str(refused)
    else:
        assert got.equals(want)


def test_a_row_moved_into_an_older_file_stops_a_resumed_fold(tmp_path):
    """Seq 13 moved into the file of seqs 5..9: every row is there once and the chain is intact,
    but a fold resuming from the tag at seq 10 prunes that file away."""
    mem = refold.init(tmp_path / "store")
    mem.append(_facts(5))
    mem.append(_facts(5, 5))
    mem.fold()  # the spec at seq 10; the state tagged at seq 10
    mem.append(_facts(5, 11))
    actions = sorted(pa.table(DeltaTable(mem.layout.events).get_add_actions(flatten=True)).to_pylist(),
                     key=lambda a: a["min.seq"])
    src, dst = (Path(mem.layout.events) / a["path"] for a in (actions[3], actions[1]))  # 11..15 → 5..9
    schema = pq.read_schema(src)
    rows = pq.read_table(src).to_pylist()
    moved = rows.pop(2)
    assert moved["seq"] == 13
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), src)
    pq.write_table(pa.Table.from_pylist(pq.read_table(dst).to_pylist() + [moved], schema=schema), dst)
    with pytest.raises(IntegrityError, match=r"seqs 13\.\.13 are missing") as err:
        refold.Memory(mem.root).fold()
    assert err.value.first_bad_seq == 13


def test_intact_log_folds_as_before(mem):
    assert refold.Memory(mem.root).fold(full=True).events_folded >= 20


@pytest.mark.slow
def test_reading_recorded_specs_refuses_statistics_that_hide_one(mem):
    """The spec event (seq 20, alone in version 5's file) claims seq 0: the second, seq-pruned
    phase of the read by kind would lose it, and the fold would fall back to another spec. A new
    process (the CLI) reads the edited statistics; it prints one line and exits 2."""
    mem.fold()
    _edit_seq_stats(mem, 5, 0, 0)
    script = str(Path(sys.executable).parent / "refold")
    result = subprocess.run([script, "fold", mem.root], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "spec_changed differ between two reads" in result.stderr and "refold verify" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
