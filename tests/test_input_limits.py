"""Input limits: times near the ends of the calendar, bytes that are not UTF-8, absurdly deep JSON.

Each rejected input must raise (or, from the CLI, exit 2 with one line) naming the line and
field, with the store unchanged. A store that already holds such a time (written by an older
refold, made here through plain deltalake/pyarrow) must still read, fold and verify. Real Delta
tables in tmp_path, the installed CLI in subprocesses; nothing is mocked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

import refold
from refold.agent import tools
from refold.fold.chain import canonical_header, commitment_from, link_of, new_salt
from refold.fold.errors import EventValidationError, ValidationError
from refold.fold.events import NewEvent
from refold.storage.log.group import GroupCommit
from refold.storage.log.schema import EVENTS_SCHEMA

GOOD = {"kind": "chat_turn", "content": "Alice lives in Paris", "source": "chat#1"}
#: each is inside Python's datetime as written, and outside it once converted to UTC
EDGES = ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "0001-01-01T00:00:00+00:00",
         "9999-12-31T23:59:59+00:00"]
REFOLD = str(Path(sys.executable).with_name("refold"))


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def _state(mem: refold.Memory):
    return DeltaTable(mem.layout.events).version(), mem.log().height, _files(Path(mem.root))


@pytest.fixture()
def mem(tmp_path):
    m = refold.init(tmp_path / "store")
    m.append([GOOD])
    return m


def _cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.run([REFOLD, *args], input=stdin, capture_output=True, env=env, timeout=120)


# -- times ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 20])  # 20: the batch sealer (>= 16 events) once stored it
@pytest.mark.parametrize("field", ["valid_from", "valid_to"])
@pytest.mark.parametrize("edge", EDGES)
def test_a_time_at_the_ends_of_the_calendar_is_refused_before_anything_is_written(mem, edge, field, size):
    before = _state(mem)
    batch = [GOOD | {"content": f"event {i}"} for i in range(size)]
    batch[size // 2] = batch[size // 2] | {field: edge}
    with pytest.raises(EventValidationError) as info:
        mem.append(batch)
    assert (info.value.line, info.value.field) == (size // 2 + 1, field)
    assert "outside the supported range 0001-01-02 .. 9999-12-30" in str(info.value)
    with pytest.raises(EventValidationError):
        mem.append_jsonl([json.dumps(e) for e in batch])
    assert _state(mem) == before


def test_the_range_ends_are_accepted_and_read_back(mem):
    first, last = "0001-01-02T00:00:00+00:00", "9999-12-30T23:59:59.999999+00:00"
    mem.append([GOOD | {"valid_from": first, "valid_to": last},
                GOOD | {"valid_from": "9999-12-31T00:30:00+01:00"}])  # 9999-12-30T23:30 UTC
    rows = mem.events()[-2:]
    assert rows[0].valid_from.isoformat() == first and rows[0].valid_to.isoformat() == last
    assert rows[1].valid_from == datetime(9999, 12, 30, 23, 30, tzinfo=timezone.utc)
    assert mem.verify().ok
    assert mem.fold().events_folded == mem.head().seq + 1


def test_hand_built_events_are_checked_by_the_log_itself(mem):
    """NewEvent values built in code skip validate_event: EventLog.append checks their times."""
    before = _state(mem)
    bad = NewEvent(kind="chat_turn", content="x", source="s",
                   valid_from=datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1))))
    good = [NewEvent(kind="chat_turn", content=f"e{i}", source="s") for i in range(20)]
    with pytest.raises(EventValidationError) as info:
        mem.log_store.append(good[:5] + [bad] + good[5:])
    assert (info.value.line, info.value.field) == (6, "valid_from")
    naive = NewEvent(kind="chat_turn", content="x", source="s", valid_to=datetime(2024, 1, 1))
    with pytest.raises(EventValidationError, match="timezone-aware"):
        mem.log_store.append([naive])
    assert _state(mem) == before


def test_write_memory_refuses_the_time_with_a_validation_error(mem):
    ctx = tools.ToolContext(memory=mem)
    args = {"subject": "Alice", "relation": "lives_in", "object": "Paris", "trace_id": "run-1",
            "justification": "she said so", "valid_from": "0001-01-01T00:00:00+01:00"}
    before = _state(mem)
    with pytest.raises(ValidationError) as info:
        tools.handle("write_memory", args, ctx)
    assert "valid_from" in str(info.value) and "outside the supported range" in str(info.value)
    assert _state(mem) == before


def test_under_group_commit_a_bad_event_fails_only_its_own_caller(tmp_path):
    mem = refold.init(tmp_path / "store")
    gc = GroupCommit(mem.log_store)
    bad = NewEvent(kind="chat_turn", content="bad", source="s", event_id="bad",
                   valid_from=datetime(9999, 12, 31, 23, 59, tzinfo=timezone(-timedelta(hours=1))))
    batches = [[NewEvent(kind="chat_turn", content=f"good {i}", source="s", event_id=f"g{i}")]
               for i in range(6)]
    batches.insert(3, [bad])
    results: list = [None] * len(batches)
    gate = threading.Barrier(len(batches))

    def call(i: int) -> None:
        gate.wait()
        try:
            results[i] = gc.append(batches[i])
        except Exception as exc:  # noqa: BLE001 - checked below
            results[i] = exc

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(batches))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert isinstance(results[3], EventValidationError) and results[3].field == "valid_from"
    good = [r for i, r in enumerate(results) if i != 3]
    assert all(isinstance(r, list) for r in good), results
    assert sorted(s for r in good for s in r) == list(range(6))
    assert "bad" not in mem.log()["event_id"].to_list() and mem.verify().ok


# -- bytes and nesting ----------------------------------------------------------------------------

DEEP = ("[" * 100_000 + "]" * 100_000).encode()
LATIN1 = json.dumps(GOOD | {"content": "Zoë"}, ensure_ascii=False).encode().replace("ë".encode(), "ë".encode("latin-1"))


@pytest.mark.parametrize("payload, words", [
    (LATIN1, ["line 2", "not UTF-8", "\\xeb"]),
    (DEEP, ["line 2", "nested too deeply"]),
])
def test_python_api_refuses_bad_bytes_and_deep_json(mem, tmp_path, payload, words):
    path = tmp_path / "in.jsonl"
    path.write_bytes(json.dumps(GOOD).encode() + b"\n" + payload + b"\n")
    before = _state(mem)
    for source in (path, path.read_bytes().splitlines()):
        with pytest.raises(EventValidationError) as info:
            mem.append_jsonl(source) if isinstance(source, Path) else refold.fold.events.parse_jsonl(source)
        assert all(w in str(info.value) for w in words), str(info.value)
    with open(path, encoding="utf-8") as text:  # a text stream decodes ahead: the line is approximate
        with pytest.raises(EventValidationError, match="not UTF-8|nested too deeply"):
            mem.append_jsonl(text)
    assert _state(mem) == before


@pytest.mark.parametrize("payload, words", [
    (LATIN1, ["line 2", "not UTF-8"]),
    (DEEP, ["line 2", "nested too deeply"]),
])
@pytest.mark.parametrize("via", ["file", "stdin"])
@pytest.mark.slow
def test_cli_append_refuses_bad_bytes_and_deep_json_with_one_line(mem, tmp_path, payload, words, via):
    data = json.dumps(GOOD).encode() + b"\n" + payload + b"\n"
    path = tmp_path / "in.jsonl"
    path.write_bytes(data)
    before = _state(mem)
    out = _cli("append", mem.root, str(path) if via == "file" else "-", stdin=data if via == "stdin" else None)
    err = out.stderr.decode()
    assert out.returncode == 2, err
    assert err.count("\n") == 1 and err.startswith("refold: error:") and "Traceback" not in err
    assert all(w in err for w in words), err
    assert _state(mem) == before


# -- a store written by an older refold -----------------------------------------------------------


def _append_raw_row(mem: refold.Memory, valid_from_us: int) -> str:
    """Append one sealed event whose valid_from (microseconds since the epoch, UTC) Python's
    datetime cannot hold, the way refold before the range check did: with plain deltalake."""
    head = mem.head()
    dt = DeltaTable(mem.layout.events)
    stored = pa.array([valid_from_us], pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    text = pa.compute.strftime(stored, format="%Y-%m-%dT%H:%M:%S+00:00")[0].as_py()
    salt, content, now = new_salt(), "an event from long ago", datetime.now(timezone.utc)
    fields = dict(seq=head.seq + 1, event_id="old-edge", table_version=dt.version() + 1, kind="chat_turn",
                  tenant="default", source="chat#9", subjects=(), principals=(), trace_id=None,
                  justification=None, ingestion_run=None, fact=None, cipher=None, key_ids=(), erasure_id=None)
    header = canonical_header(recorded_at=now.isoformat(timespec="microseconds"), valid_from=text,
                              valid_to=None, **fields)
    commitment = commitment_from(header, salt, content)
    row = {name: [None] for name in EVENTS_SCHEMA.names}
    row.update({k: [list(v) if isinstance(v, tuple) else v] for k, v in fields.items()})
    row.update(recorded_at=[now], content=[content], salt=[salt], commitment=[commitment],
               prev_link=[head.link], link=[link_of(head.link, commitment)])
    table = pa.table({k: v for k, v in row.items() if k != "valid_from"},
                     schema=pa.schema([f for f in EVENTS_SCHEMA if f.name != "valid_from"]))
    table = table.add_column(EVENTS_SCHEMA.get_field_index("valid_from"), EVENTS_SCHEMA.field("valid_from"), stored)
    write_deltalake(dt, table, mode="append")
    return text


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_HOUR = 3_600_000_000


@pytest.mark.parametrize("micros, printed", [  # as stored from 0001-01-01T00:00+01:00 and 9999-12-31T23:59:59-01:00
    ((datetime(1, 1, 1, tzinfo=timezone.utc) - _EPOCH) // timedelta(microseconds=1) - _HOUR, "0000-12-31T23:00:00"),
    ((datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone.utc) - _EPOCH) // timedelta(microseconds=1) + _HOUR,
     "10000-01-01T00:59:59"),
])
@pytest.mark.slow
def test_a_store_holding_such_a_time_still_reads_folds_and_verifies(mem, micros, printed):
    text = _append_raw_row(mem, micros)
    assert text.startswith(printed)
    mem.append([GOOD | {"content": "after it"}])  # and appends go on after it
    for args in (["verify"], ["log"], ["log", "--format", "jsonl"], ["fold"], ["facts"], ["log", "--json"]):
        out = _cli(*args, mem.root)
        assert out.returncode == 0, (args, out.stderr.decode())
        assert "Traceback" not in out.stderr.decode()
    jsonl = _cli("log", mem.root, "--format", "jsonl").stdout.decode().splitlines()
    assert printed in json.loads(jsonl[1])["valid_from"]  # printed as stored
    again = refold.open(mem.root)
    report = again.verify()
    assert report.ok and report.events == again.head().seq + 1, report.problems
    with pytest.warns(RuntimeWarning, match="outside 0001-01-02 .. 9999-12-30 UTC"):
        [old] = [e for e in again.events() if e.event_id == "old-edge"]
    assert old.valid_from in (datetime(1, 1, 2, tzinfo=timezone.utc),
                              datetime(9999, 12, 30, 23, 59, 59, 999999, tzinfo=timezone.utc))
