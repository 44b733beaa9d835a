"""The hash chain, verify and idempotency (invariants 2, 3 and 7).

Tampering is done the way an attacker with write access to the bucket would do it: rewriting a
data file with pyarrow under its own name, deleting through deltalake, copying files over each
other, editing or deleting ``_delta_log`` commit files. Each case must be detected with the right
first bad seq. Real Delta tables in tmp_path; nothing is mocked.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import refold
from refold.fold.chain import (
    GENESIS, commitment_of, header_bytes, link_of, reference_header_bytes, seal,
)
from refold.fold.events import Event, Fact, NewEvent
from refold.storage.log.eventlog import Head
from refold.storage.log.schema import EVENTS_SCHEMA, events_to_table
from tests.log_helpers import _actions, _bad, _event, _file_of, _flip, _rewrite, _row, _store, mem  # noqa: F401


# -- the intact chain -----------------------------------------------------------------------------


def test_empty_log_verifies(tmp_path):
    mem = refold.init(tmp_path / "store")
    report = mem.verify()
    assert report.ok and report.events == 0 and report.head is None and report.first_bad_seq is None
    assert mem.head().seq == -1 and mem.head().link == GENESIS


def test_chain_fields_are_what_the_design_says(mem):
    events = mem.log_store.events()
    prev = GENESIS
    for e in events:
        assert len(e.salt) == 32 and e.prev_link == prev
        assert e.commitment == commitment_of(e)
        assert e.link == link_of(prev, e.commitment)
        prev = e.link
    assert len({e.salt for e in events}) == len(events)  # a fresh random salt per event
    head = mem.head()
    assert (head.seq, head.link, head.table_version) == (19, prev, 4)
    assert mem.verify().head == head


_text = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=40).filter(str.strip)
_ids = st.text("abcdef0123456789-", min_size=1, max_size=12)
_when = st.datetimes(min_value=datetime(1990, 1, 1), max_value=datetime(2090, 1, 1),
                     timezones=st.sampled_from([timezone.utc, timezone(timedelta(hours=-7, minutes=-30))]))


@st.composite
def _new_events(draw):
    kind = draw(st.sampled_from(["observation", "document", "chat_turn", "memory_written", "tool_call"]))
    fact = just = None
    if kind == "memory_written" or draw(st.booleans()):
        just = draw(_text)
    if kind == "memory_written":
        fact = Fact(draw(_text), draw(_text), draw(_text))
    valid_from = draw(st.none() | _when)
    valid_to = None if valid_from is None or draw(st.booleans()) else valid_from + timedelta(days=1)
    return NewEvent(
        kind=kind, content=draw(_text), source=draw(_text),
        tenant=draw(st.sampled_from(["default", "acme", "ünï"])),
        subjects=tuple(draw(st.lists(_text, max_size=3))),
        principals=tuple(draw(st.lists(_text, max_size=2))),
        trace_id=draw(st.none() | _text), justification=just, valid_from=valid_from,
        valid_to=valid_to, ingestion_run=draw(st.none() | _ids), fact=fact,
    )


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(_new_events(), min_size=1, max_size=6), min_size=1, max_size=5))
@pytest.mark.slow
def test_random_batches_chain_and_verify(batches):
    with tempfile.TemporaryDirectory() as tmp:
        mem = refold.init(Path(tmp) / "store")
        appended: list[NewEvent] = []
        for batch in batches:
            seqs = mem.log_store.append(batch)
            assert seqs == list(range(len(appended), len(appended) + len(batch)))
            appended.extend(batch)
        stored = mem.log_store.events()
        assert [e.seq for e in stored] == list(range(len(appended)))
        assert [e.event_id for e in stored] == [e.event_id for e in appended]
        prev = GENESIS
        for new, row in zip(appended, stored):
            assert new.same_input(row)  # every field survives the round trip through Delta
            assert row.prev_link == prev and row.link == link_of(prev, row.commitment)
            prev = row.link
        versions = [e.table_version for e in stored]
        assert versions == sorted(versions) and versions[-1] == len(batches)
        times = [e.recorded_at for e in stored]
        assert times == sorted(times)  # record time never runs backwards along seq
        report = mem.verify()
        assert report.ok, report.problems
        assert report.head.seq == len(appended) - 1 and report.head.link == prev


@settings(max_examples=200, deadline=None)
@given(_new_events(), st.integers(0, 10**9), st.integers(0, 10**6), _when, st.booleans())
@pytest.mark.slow
def test_fast_header_is_byte_identical_to_json_dumps(new, seq, version, when, cipher):
    event = Event(
        seq=seq, event_id=new.event_id, recorded_at=when, table_version=version, kind=new.kind,
        tenant=new.tenant, source=new.source, content=new.content, subjects=new.subjects,
        principals=new.principals, trace_id=new.trace_id, justification=new.justification,
        valid_from=new.valid_from, valid_to=new.valid_to, ingestion_run=new.ingestion_run,
        fact=new.fact, salt="ab" * 16, cipher="aes-gcm" if cipher else None,
        key_ids=("k1", "k2") if cipher else (), erasure_id=None,
    )
    assert header_bytes(event) == reference_header_bytes(event)
    json.loads(header_bytes(event))  # and it is JSON


# -- tampering ----------------------------------------------------------------------------------


def test_one_byte_of_content_changed(mem):
    def change(rows):
        row = _row(rows, 7)
        row["content"] = _flip(row["content"])
    _rewrite(_file_of(mem, 7), change)
    assert mem.log().filter(mem.log()["seq"] == 7)["content"][0] == "evext 7 says hello"
    _bad(mem, 7, "seq 7", "commitment")


@pytest.mark.parametrize(
    ("field", "change"),
    [
        ("source", lambda v: _flip(v, 1)),
        ("event_id", lambda v: _flip(v, 5)),
        ("kind", lambda v: "document"),
        ("tenant", lambda v: "other"),
        ("subjects", lambda v: v + ["subj-9"]),
        ("trace_id", lambda v: "t-1"),
        ("justification", lambda v: "because"),
        ("recorded_at", lambda v: v + timedelta(microseconds=1)),
        ("valid_from", lambda v: datetime(2024, 1, 1, tzinfo=timezone.utc)),
        ("table_version", lambda v: v + 1),
        ("salt", lambda v: ("1" if v[0] != "1" else "2") + v[1:]),  # another hex digit, always a change
        ("commitment", lambda v: ("1" if v[0] != "1" else "2") + v[1:]),
        ("prev_link", lambda v: ("1" if v[0] != "1" else "2") + v[1:]),
        ("link", lambda v: ("1" if v[0] != "1" else "2") + v[1:]),
        ("commitment", lambda v: "not a hash"),
        ("fact", lambda v: '{"object": "x", "relation": "y", "subject": "z"}'),
        ("fact", lambda v: "{not json"),
    ],
)
def test_a_change_in_any_stored_field(mem, field, change):
    def apply(rows):
        row = _row(rows, 12)
        row[field] = change(row[field])
    _rewrite(_file_of(mem, 12), apply)
    _bad(mem, 12, "seq 12")


def test_changed_seq_leaves_a_hole(mem):
    def apply(rows):
        _row(rows, 8)["seq"] = 1008
    _rewrite(_file_of(mem, 8), apply)
    _bad(mem, 8, "seq 8: missing")


def test_two_rows_swapped(mem):
    """Contents of seqs 7 and 8 exchanged (each row keeps its position and chain fields)."""
    def apply(rows):
        a, b = _row(rows, 7), _row(rows, 8)
        a["content"], b["content"] = b["content"], a["content"]
    _rewrite(_file_of(mem, 7), apply)
    _bad(mem, 7, "seq 7")


def test_two_rows_swapped_with_their_positions(mem):
    """Whole rows 6 and 8 exchanged, seq numbers included, so the order of the log changes."""
    def apply(rows):
        a, b = _row(rows, 6), _row(rows, 8)
        a["seq"], b["seq"] = 8, 6
    _rewrite(_file_of(mem, 6), apply)
    _bad(mem, 6, "seq 6")


def test_rows_swapped_across_data_files(mem):
    first, second = _file_of(mem, 3), _file_of(mem, 13)
    a = _row(pq.read_table(first).to_pylist(), 3)
    b = _row(pq.read_table(second).to_pylist(), 13)
    _rewrite(first, lambda rows: rows.__setitem__(rows.index(_row(rows, 3)), b | {"seq": 3}))
    _rewrite(second, lambda rows: rows.__setitem__(rows.index(_row(rows, 13)), a | {"seq": 13}))
    _bad(mem, 3, "seq 3")


def test_physical_row_order_does_not_matter(mem):
    """Reversing rows inside a file changes no position: the log is ordered by seq."""
    _rewrite(_file_of(mem, 7), lambda rows: rows.reverse())
    assert mem.verify().ok


def test_row_removed_through_deltalake(mem):
    DeltaTable(mem.layout.events).delete("seq = 7")
    assert mem.log().height == 19
    _bad(mem, 7, "seq 7: missing")


def test_newest_row_removed_through_deltalake(mem):
    DeltaTable(mem.layout.events).delete("seq = 19")
    _bad(mem, 19, "truncated")


def test_row_inserted_through_deltalake(mem):
    """A forged row claiming seq 9, written by a blind append that bypasses refold."""
    from deltalake import write_deltalake

    forged = [e.with_(content="I never said that", event_id="forged") for e in mem.log_store.events()
              if e.seq == 9]
    write_deltalake(mem.layout.events, events_to_table(forged), mode="append")
    _bad(mem, 9, "seq 9", "different rows")


def test_data_file_replaced_by_an_older_one(mem):
    """The file of seqs 10..14 overwritten with the (older) file of seqs 0..4."""
    shutil.copyfile(_file_of(mem, 0), _file_of(mem, 10))
    report = _bad(mem, 10, "seq 10: missing", "stored more than once")
    assert report.events == 20  # 0..4 twice, 10..14 gone


def test_commit_pointed_at_an_older_data_file(mem):
    """Version 3's add action edited to name version 1's file instead of its own."""
    log_dir = Path(mem.layout.events) / "_delta_log"
    old_path = _actions(mem)[0]["path"]
    commit = log_dir / f"{3:020d}.json"
    lines = []
    for line in commit.read_text().splitlines():
        action = json.loads(line)
        if "add" in action:
            action["add"]["path"] = old_path
        lines.append(json.dumps(action))
    commit.write_text("\n".join(lines) + "\n")
    # the table now lists version 1's file once, with version 3's statistics (seq 10..14): pruned
    # reads of seqs 0..4 skip the only file that holds them, which comes before the missing 10
    _bad(mem, 0, "seq 10: missing", "seq in [10, 14]")


def test_data_file_copied_in_again(mem):
    """An extra copy of an intact file: nothing missing, but events stored twice."""
    log_dir = Path(mem.layout.events) / "_delta_log"
    src = _file_of(mem, 5)
    shutil.copyfile(src, src.with_name("part-00000-copy.snappy.parquet"))
    action = {"add": {"path": "part-00000-copy.snappy.parquet", "partitionValues": {},
                      "size": src.stat().st_size, "modificationTime": 0, "dataChange": True}}
    (log_dir / f"{5:020d}.json").write_text(json.dumps(action) + "\n")
    _bad(mem, 5, "stored more than once")


def test_garbled_data_file(mem):
    """Bytes flipped at spread-out offsets of one data file: verify fails exactly when the rows
    read back differ (or cannot be read); a flip in padding or page statistics changes no event."""
    def decoded():  # the events as stored, whatever physical types the footer now claims
        return pq.read_table(path).select(EVENTS_SCHEMA.names).cast(EVENTS_SCHEMA).to_pylist()

    path = _file_of(mem, 10)
    original = path.read_bytes()
    rows = decoded()
    detected = 0
    for offset in range(4, len(original) - 8, max(1, len(original) // 24)):
        data = bytearray(original)
        data[offset] ^= 0xFF
        path.write_bytes(bytes(data))
        try:
            same = decoded() == rows
        except Exception:  # noqa: BLE001 - unreadable counts as changed
            same = False
        report = mem.verify()
        assert report.ok == same, (offset, report.problems)
        if not same:
            detected += 1
            assert report.first_bad_seq is not None and report.first_bad_seq <= 14, report.problems
    path.write_bytes(original)
    assert detected > 0 and mem.verify().ok


def test_data_file_deleted(mem):
    _file_of(mem, 5).unlink()
    _bad(mem, 5, "unreadable")


def test_newest_commit_file_removed(mem):
    """Truncated tail: the newest commit JSON deleted; the published head still says seq 19."""
    (Path(mem.layout.events) / "_delta_log" / f"{4:020d}.json").unlink()
    assert mem.log().height == 15 and mem.head().seq == 14
    _bad(mem, 15, "truncated", "seq 14", "seq 19")


def test_truncation_caught_by_a_head_kept_elsewhere(mem, tmp_path):
    saved = tmp_path / "head.json"
    saved.write_text(json.dumps(mem.head().as_json()))
    (Path(mem.layout.events) / "_delta_log" / f"{4:020d}.json").unlink()
    shutil.rmtree(mem.layout.heads)  # a careful attacker removes the published heads too
    assert mem.verify().ok  # the store alone cannot tell any more…
    _bad(mem, 15, "truncated", against=saved)  # …the head kept elsewhere can
    _bad(mem, 15, "truncated", against=Head.from_json(json.loads(saved.read_text())))


def test_consistent_rewrite_of_the_tail_caught_by_the_head(mem):
    """An attacker who re-seals every event after the one they changed keeps the chain
    internally valid; only a recorded head tells."""
    events = mem.log_store.events()
    prev = events[11].link
    forged = []
    for e in events[12:]:
        e = seal(e.with_(content=e.content.upper()) if e.seq == 12 else e, prev)
        prev = e.link
        forged.append(e)
    by_file: dict[Path, list[Event]] = {}
    for e in forged:
        by_file.setdefault(_file_of(mem, e.seq), []).append(e)
    for path, rows in by_file.items():
        keep = [r for r in pq.read_table(path).to_pylist() if r["seq"] < 12]
        table = pa.concat_tables([
            pa.Table.from_pylist(keep, schema=events_to_table(rows).schema), events_to_table(rows)
        ]) if keep else events_to_table(rows)
        pq.write_table(table, path)
    # every published head is checked (the first one past the rewrite, seq 14, tells), and so is
    # each commit's recorded head: the earliest commit the rewrite reached (3, head at seq 14)
    _bad(mem, 14, "seq 14: link differs from the recorded head",
         "commit 3: the head in its metadata (seq 14) has another link")


def test_verify_against_a_head_from_another_history(mem, tmp_path):
    other = _store(tmp_path / "other")
    _bad(mem, 19, "differs from the recorded head", against=other.head())


def test_verify_against_an_older_head_still_passes(mem):
    older = mem.head()
    mem.append(_event(99))
    assert mem.verify(against=older).ok
