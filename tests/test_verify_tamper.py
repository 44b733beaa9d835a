"""Trust holes of issue #16: forged tombstones and erasures, statistics, malformed rows and heads.

Every tampering is done the way someone with write access to the store would do it, with plain
pyarrow / deltalake / file edits, never through refold. Real Delta tables in tmp_path; nothing is
mocked.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import refold
from refold.fold.chain import commitment_of, seal
from refold.fold.erasure_record import Erased, ErasureRecord
from refold.fold.events import Event
from refold.storage.log.schema import EVENTS_SCHEMA, events_to_table, table_to_events
from tests.log_helpers import _bad, _file_of, _rewrite, _row, _store, mem  # noqa: F401

REPO = Path(__file__).resolve().parents[1]


def _fact_in_state(mem: refold.Memory, seq: int) -> bool:
    events = {e.seq: e for e in mem.log_store.events()}
    return events[seq].kind != "tombstone"


def _to_tombstone(row: dict, erasure_id: str, *, keep_content: bool = False) -> None:
    """A row turned into a tombstone in place (the chain fields kept, as refold's own do)."""
    row["kind"] = "tombstone"
    row["erasure_id"] = erasure_id
    if not keep_content:
        for name in ("tenant", "source", "content", "trace_id", "justification", "valid_from", "valid_to",
                     "ingestion_run", "fact", "salt", "cipher"):
            row[name] = None
        for name in ("subjects", "principals", "key_ids"):
            row[name] = []


# -- 1. forged tombstones and erasures ------------------------------------------------------------


def _erased_store(tmp_path: Path) -> refold.Memory:
    """_store's 20 events, then subj-1's erased through refold (a real erasure record)."""
    mem = _store(tmp_path / "store")
    mem.register_subject("subj-1", "nobody")
    mem.erase("subj-1")
    assert mem.verify().ok
    return mem


def test_erasure_event_records_what_it_tombstoned(tmp_path):
    mem = _erased_store(tmp_path)
    events = mem.log_store.events()
    (erasure,) = [e for e in events if e.kind == "erasure"]
    record = ErasureRecord.parse(erasure.content)
    tombs = [e for e in events if e.is_tombstone]
    assert [e.seq for e in record.erased] == [e.seq for e in tombs] == [1, 4, 7, 10, 13, 16, 19]
    assert record.erasure_id == erasure.erasure_id
    assert all(Erased.of(t.seq, t.event_id, t.commitment, t.recorded_at, t.table_version) == r
               for t, r in zip(tombs, record.erased))


def test_row_rewritten_into_a_tombstone_keeping_its_content_is_tampering(tmp_path):
    """Only ``kind`` and ``erasure_id`` change, through plain deltalake, naming a real erasure."""
    mem = _erased_store(tmp_path)
    (erasure_id,) = {e.erasure_id for e in mem.log_store.events() if e.kind == "erasure"}
    dt = DeltaTable(mem.layout.events)
    row = dt.to_pyarrow_table(filters=[("seq", "=", 5)]).to_pylist()[0]
    _to_tombstone(row, erasure_id, keep_content=True)
    write_deltalake(dt, pa.Table.from_pylist([row], schema=EVENTS_SCHEMA), mode="overwrite", predicate="seq = 5")
    _bad(mem, 5, "seq 5: tombstone", "does not list this event")


def test_row_rewritten_into_a_clean_tombstone_is_tampering(tmp_path):
    mem = _erased_store(tmp_path)
    (erasure_id,) = {e.erasure_id for e in mem.log_store.events() if e.kind == "erasure"}
    _rewrite(_file_of(mem, 6), lambda rows: _to_tombstone(_row(rows, 6), erasure_id))
    _bad(mem, 6, "seq 6: tombstone", "forged deletion")


def test_tombstone_whose_kept_fields_changed_is_tampering(tmp_path):
    mem = _erased_store(tmp_path)
    _rewrite(_file_of(mem, 4), lambda rows: _row(rows, 4).update(event_id="someone-else"))
    _bad(mem, 4, "seq 4: tombstone's event_id differ")


def test_tombstone_that_still_holds_data_is_tampering(tmp_path):
    mem = _erased_store(tmp_path)
    _rewrite(_file_of(mem, 7), lambda rows: _row(rows, 7).update(tenant="acme", subjects=["subj-1"]))
    _bad(mem, 7, "seq 7: tombstone still holds tenant, subjects")


def _forge_tail_erasure(mem: refold.Memory, victim: int) -> str:
    """Tombstone ``victim`` and append, with plain deltalake, a chained erasure event naming it
    (what someone who knows the chain's definition but has no key can do)."""
    events = mem.log_store.events()
    target = next(e for e in events if e.seq == victim)
    erasure_id = "forged-erasure"
    record = ErasureRecord.build(erasure_id, [Erased.of(target.seq, target.event_id, target.commitment,
                                                        target.recorded_at, target.table_version)])
    _append_erasure(mem, erasure_id, record.content())
    dt = DeltaTable(mem.layout.events)
    row = dt.to_pyarrow_table(filters=[("seq", "=", victim)]).to_pylist()[0]
    _to_tombstone(row, erasure_id)
    write_deltalake(dt, pa.Table.from_pylist([row], schema=EVENTS_SCHEMA), mode="overwrite",
                    predicate=f"seq = {victim}")
    return erasure_id


def _append_erasure(mem: refold.Memory, erasure_id: str, content: str) -> None:
    """A chained ``erasure`` event appended with plain deltalake (no head published for it)."""
    events = mem.log_store.events()
    last = events[-1]
    dt = DeltaTable(mem.layout.events)
    write_deltalake(dt, events_to_table([seal(Event(
        seq=last.seq + 1, event_id=erasure_id, recorded_at=last.recorded_at, table_version=dt.version() + 1,
        kind="erasure", tenant="default", source="refold:erasure", content=content, salt="00" * 16,
        erasure_id=erasure_id), last.link)]), mode="append")


def test_an_erasure_that_does_not_list_its_events_justifies_no_tombstone(mem):
    """The shape of erasures made before records listed their events: the id alone names nothing."""
    _append_erasure(mem, "old-style", "erasure old-style")
    _rewrite(_file_of(mem, 2), lambda rows: _to_tombstone(_row(rows, 2), "old-style"))
    _bad(mem, 2, "seq 2: tombstone names erasure 'old-style'", "does not list this event")


def test_a_tombstone_named_by_an_erasure_recorded_before_it_is_tampering(mem):
    """A record can only name events already in the log. Here the forger computes the victim's
    commitment first (it does not depend on the chain), appends a record naming it at seq 20,
    then the victim at seq 21 already as a tombstone: every field and link agrees."""
    last = mem.log_store.events()[-1]
    dt = DeltaTable(mem.layout.events)
    version = dt.version() + 1
    victim = Event(seq=21, event_id="victim", recorded_at=last.recorded_at, table_version=version,
                   kind="chat_turn", tenant="default", source="chat#9", content="later", salt="11" * 16)
    record = ErasureRecord.build("early", [Erased.of(21, "victim", commitment_of(victim), victim.recorded_at,
                                                     version)])
    erasure = seal(Event(seq=20, event_id="early", recorded_at=last.recorded_at, table_version=version,
                         kind="erasure", tenant="default", source="refold:erasure", content=record.content(),
                         salt="00" * 16, erasure_id="early"), last.link)
    victim = seal(victim, erasure.link)
    tombstone = victim.with_(kind="tombstone", erasure_id="early", tenant=None, source=None, content=None,
                             salt=None)
    write_deltalake(dt, events_to_table([erasure, tombstone]), mode="append")
    _bad(mem, 21, "seq 21: tombstone is named by an erasure recorded before it, at seq 20")


def test_forged_erasure_at_the_tail_is_caught_by_the_published_head(mem):
    """A store that never had an erasure: the forged record is chained, but no published head
    covers it, and the head before it vouches for the event it 'erased'."""
    saved = mem.head()
    _forge_tail_erasure(mem, 3)
    assert not _fact_in_state(mem, 3)  # the fold would lose it...
    _bad(mem, 3, "seq 3: erased by erasure 'forged-erasure' recorded at seq 20", "newest published head")
    _bad(mem, 3, "head kept elsewhere", against=saved)  # ...and verify says so, both ways


def test_erasure_after_the_kept_head_is_reported_and_a_newer_head_clears_it(tmp_path):
    """The same shape from a real erasure: the kept head predates it, so verify --against cannot
    tell it from a forged one and says what to do; a head kept after the erasure passes."""
    mem = _store(tmp_path / "store")
    kept = mem.head()
    mem.register_subject("subj-1", "nobody")
    mem.erase("subj-1")
    assert mem.verify().ok  # the published head covers the real erasure
    _bad(mem, 1, "receipt", "keep a head taken after it", against=kept)
    assert mem.verify(against=mem.head()).ok


# -- 2. statistics ----------------------------------------------------------------------------------


def _edit_stats(mem: refold.Memory, version: int, change) -> None:
    commit = Path(mem.layout.events) / "_delta_log" / f"{version:020d}.json"
    lines = []
    for line in commit.read_text().splitlines():
        action = json.loads(line)
        if "add" in action:
            stats = json.loads(action["add"]["stats"])
            change(stats)
            action["add"]["stats"] = json.dumps(stats)
        lines.append(json.dumps(action))
    commit.write_text("\n".join(lines) + "\n")


def test_edited_seq_statistics_are_reported_with_file_and_seq(mem):
    """Version 3's file (seqs 10..14) claims seqs 20..24: pruned reads of 10..14 skip it."""
    path = _file_of(mem, 10).name
    _edit_stats(mem, 3, lambda s: (s["minValues"].update(seq=20), s["maxValues"].update(seq=24)))
    report = _bad(mem, 10, path, "seq in [20, 24]", "from seq 10")
    assert "chain" not in " ".join(report.problems)


def test_edited_kind_statistics_are_reported(mem):
    _edit_stats(mem, 2, lambda s: (s["minValues"].update(kind="x"), s["maxValues"].update(kind="y")))
    _bad(mem, 5, "kind in [x, y]")


def test_row_moved_between_data_files_is_reported(mem):
    """Seq 12 moved from its file (10..14) into version 1's (0..4): the chain is intact, every
    row is there once, but version 1's statistics say 0..4."""
    moved = {}
    _rewrite(_file_of(mem, 12), lambda rows: moved.update(row=rows.pop(next(i for i, r in enumerate(rows)
                                                                             if r["seq"] == 12))))
    _rewrite(_file_of(mem, 0), lambda rows: rows.append(moved["row"]))
    _bad(mem, 12, "seq in [0, 4]", "row count of 5 (the file holds 6)")


# -- 4. verify never tracebacks ---------------------------------------------------------------------


def test_null_inside_a_list_column_is_reported_at_its_seq(mem):
    _rewrite(_file_of(mem, 8), lambda rows: _row(rows, 8).update(subjects=["a", None]))
    _bad(mem, 8, "seq 8: a stored field is missing or malformed")


def test_null_seq_and_null_fields_are_reported(mem):
    _rewrite(_file_of(mem, 3), lambda rows: _row(rows, 3).update(seq=None))
    _rewrite(_file_of(mem, 6), lambda rows: _row(rows, 6).update(kind=None, table_version=None))
    report = _bad(mem, 3, "without a seq", "seq 3: missing")
    assert len(report.problems) >= 2


def _cli(*args: str) -> subprocess.CompletedProcess:
    script = str(Path(sys.executable).parent / "refold")
    return subprocess.run([script, *args], capture_output=True, text=True, cwd=REPO, timeout=120)


def test_cli_verify_json_on_malformed_rows_prints_a_report(mem):
    _rewrite(_file_of(mem, 8), lambda rows: _row(rows, 8).update(subjects=["a", None]))
    result = _cli("verify", mem.root, "--json")
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] is False and report["first_bad_seq"] == 8
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_malformed_heads_lines_are_named_and_do_not_hide_the_rest(mem):
    journal = Path(mem.layout.heads) / "heads.jsonl"
    lines = journal.read_text().split("\n")
    bogus = ["not json", json.dumps({"seq": "x"}), json.dumps([1, 2]), json.dumps({"seq": 3, "link": "zz",
             "recorded_at": "2026-01-01T00:00:00+00:00", "table_version": 1})]
    journal.write_text("\n".join(lines[:3] + bogus + lines[3:]))
    report = mem.verify()
    assert not report.ok and report.first_bad_seq is None  # the log itself is fine
    text = "\n".join(report.problems)
    for number in (4, 5, 6, 7):
        assert f"receipts/heads/heads.jsonl line {number}: not a chain head" in text
    assert len(report.problems) == 4
    result = _cli("verify", mem.root)  # a failed check: exit 1, each line named
    assert result.returncode == 1 and "no single bad seq" in result.stderr and "line 7" in result.stderr
    # and the rest of the check still runs: a truncated tail is still caught
    _rewrite(_file_of(mem, 19), lambda rows: rows.clear())
    _bad(mem, 15, "truncated")


def test_a_well_formed_head_the_log_never_had_is_named_with_its_line(mem):
    journal = Path(mem.layout.heads) / "heads.jsonl"
    good = json.loads(journal.read_text().strip().split("\n")[-1])
    journal.write_text(journal.read_text() + "\n" + json.dumps({**good, "seq": 500, "table_version": 99}))
    report = _bad(mem, 20, "truncated")
    assert any(p.startswith("receipts/heads/heads.jsonl line") and "remove it" in p for p in report.problems)


def test_a_head_a_crash_cut_short_is_a_note_not_a_failure(mem):
    """Each head is one write; a crash during it can leave the start of a line (or, in stores from
    before the journal, an empty per-version file): no claim about the log, so verify passes."""
    journal = Path(mem.layout.heads) / "heads.jsonl"
    good = journal.read_text().strip().split("\n")[-1]
    journal.write_text(journal.read_text() + "\n" + good[:40] + "\n" + good)
    (Path(mem.layout.heads) / f"{9:020d}.json").write_text("")
    report = mem.verify()
    assert report.ok, report.problems
    assert len(report.notes) == 2 and "cut short by a crash" in report.notes[0]
    journal.write_text(journal.read_text() + "\n" + good[:40] + "}")  # not what a crash leaves
    assert not mem.verify().ok


@pytest.mark.slow
def test_a_commit_file_that_does_not_parse_is_a_finding_for_verify_and_an_error_elsewhere(mem):
    commit = Path(mem.layout.events) / "_delta_log" / f"{3:020d}.json"
    commit.write_text(commit.read_text() + "garbage\n")
    result = _cli("verify", mem.root, "--json")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    report = json.loads(result.stdout)
    assert not report["ok"] and "cannot be loaded" in report["problems"][0]
    result = _cli("log", mem.root)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "_delta_log" in result.stderr


_CELL = {
    pa.int64(): st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
    pa.string(): st.one_of(st.none(), st.text(max_size=12)),
    pa.timestamp("us", tz="UTC"): st.one_of(st.none(), st.datetimes(timezones=st.just(timezone.utc))),
    pa.list_(pa.string()): st.one_of(st.none(), st.lists(st.one_of(st.none(), st.text(max_size=5)), max_size=3)),
}


def _decoded_or_none(row: dict, schema: pa.Schema):
    try:
        return list(table_to_events(pa.Table.from_pylist([row], schema=schema)))
    except Exception:  # noqa: BLE001 - a row that does not decode differs from any event
        return None


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
@pytest.mark.slow
def test_verify_never_raises_on_any_cell_value(tmp_path_factory, data):
    """Any value of the column's type (nulls inside lists, nulls anywhere, any text or time) in
    any cell of any row: verify returns a report, and one that is not ok when the stored event
    changed (a null list and an empty one, or a null and an empty ``fact``, are the same event)."""
    root = tmp_path_factory.mktemp("cell") / "store"
    mem = _store(root, batches=(3, 3))
    seq = data.draw(st.integers(0, 5))
    column = data.draw(st.sampled_from(EVENTS_SCHEMA.names))
    value = data.draw(_CELL[EVENTS_SCHEMA.field(column).type])
    path = _file_of(mem, seq)
    table = pq.read_table(path)
    rows = table.to_pylist()
    row = _row(rows, seq)
    before = _decoded_or_none(row, table.schema)
    row[column] = value
    changed = before != _decoded_or_none(row, table.schema)
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), path)
    report = refold.Memory(root).verify()
    assert report.ok is not changed, (column, value, report.problems)
