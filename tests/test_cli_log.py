"""The log commands of the ``refold`` console script: init, append, log, verify, head.

Most tests drive click's CliRunner in-process; one runs the installed script end to end in a
subprocess, as a shell user would, including a pipe into ``append -``. Real stores in tmp_path.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from deltalake import DeltaTable

import refold
from refold.cli import main

LINES = [
    {"kind": "chat_turn", "content": "I moved to Lyon", "source": "chat#1", "event_id": "e-1"},
    {"kind": "document", "content": "Lease signed in Lyon", "source": "doc#4",
     "valid_from": "2024-03-01T00:00:00+01:00"},
    {"kind": "memory_written", "content": "User lives in Lyon", "source": "agent#1",
     "fact": {"subject": "user", "relation": "lives_in", "object": "Lyon"},
     "justification": "chat#1 and doc#4", "trace_id": "trace-9"},
]


def run(*args: str, input: str | None = None, code: int = 0):
    result = CliRunner().invoke(main, [str(a) for a in args], input=input)
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr, result.exception)
    return result


@pytest.fixture()
def store(tmp_path) -> Path:
    path = tmp_path / "store"
    run("init", path)
    return path


@pytest.fixture()
def batch(tmp_path) -> Path:
    path = tmp_path / "batch.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in LINES), encoding="utf-8")
    return path


# -- init -----------------------------------------------------------------------------------------


def test_init(tmp_path):
    result = run("init", tmp_path / "s")
    assert "created delete-mode store" in result.stdout
    assert refold.Memory(tmp_path / "s").head().seq == -1


def test_init_json(tmp_path):
    out = json.loads(run("init", tmp_path / "s", "--json").stdout)
    assert out == {"store": str(tmp_path / "s"), "mode": "delete"}


def test_init_twice_is_an_error(store):
    result = run("init", store, code=2)
    assert "already a refold store" in result.stderr


def test_commands_on_a_missing_store_say_how_to_create_one(tmp_path):
    for command in (["log"], ["verify"], ["head"]):
        result = run(*command, tmp_path / "nope", code=2)
        assert "refold init" in result.stderr


# -- append ---------------------------------------------------------------------------------------


def test_append_from_file(store, batch):
    result = run("append", store, batch)
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["0", "1", "2"]
    assert lines[0] == "0 e-1"
    ids = refold.Memory(store).log()["event_id"].to_list()
    assert [line.split()[1] for line in lines] == ids


def test_append_from_stdin(store, batch):
    result = run("append", store, "-", input=batch.read_text())
    assert len(result.stdout.splitlines()) == 3
    assert refold.Memory(store).log().height == 3


def test_append_json_and_ingestion_run(store, batch):
    out = [json.loads(line) for line in
           run("append", store, batch, "--ingestion-run", "run-7", "--json").stdout.splitlines()]  # JSON Lines
    assert [row["seq"] for row in out] == [0, 1, 2] and out[0]["event_id"] == "e-1"
    assert refold.Memory(store).log()["ingestion_run"].to_list() == ["run-7"] * 3


def test_append_again_is_idempotent_for_events_with_ids(store, tmp_path):
    path = tmp_path / "ids.jsonl"
    path.write_text(json.dumps(LINES[0]) + "\n")
    assert run("append", store, path).stdout == "0 e-1\n"
    version = DeltaTable(str(store / "events")).version()
    assert run("append", store, path).stdout == "0 e-1\n"
    assert DeltaTable(str(store / "events")).version() == version


def test_append_conflicting_id_exits_2(store, tmp_path):
    path = tmp_path / "ids.jsonl"
    path.write_text(json.dumps(LINES[0]) + "\n")
    run("append", store, path)
    path.write_text(json.dumps(LINES[0] | {"content": "changed my mind"}) + "\n")
    result = run("append", store, path, code=2)
    assert "e-1" in result.stderr and "different content" in result.stderr


def test_append_empty_input_writes_nothing(store):
    assert run("append", store, "-", input="\n\n").stdout == ""
    assert DeltaTable(str(store / "events")).version() == 0


# -- log ------------------------------------------------------------------------------------------


@pytest.fixture()
def filled(store, batch) -> Path:
    run("append", store, batch)  # version 1: seqs 0..2
    run("append", store, "-", input=json.dumps(
        {"kind": "observation", "content": "later", "source": "sensor"}) + "\n")  # version 2: seq 3
    return store


def test_log_table(filled):
    narrow = run("log", filled).stdout  # cells wrap at the terminal width (80 when not a tty)
    assert "seq" in narrow and "4 event(s)" in narrow
    assert max(len(line) for line in narrow.splitlines()) <= 80
    result = CliRunner(env={"COLUMNS": "250"}).invoke(main, ["log", str(filled)])
    out = result.stdout
    assert result.exit_code == 0
    for cell in ("I moved to Lyon", "later", "chat#1", "memory_written", "e-1", "default"):
        assert cell in out
    assert out.rstrip().endswith("4 event(s)")


def test_log_jsonl(filled):
    rows = [json.loads(line) for line in run("log", filled, "--format", "jsonl").stdout.splitlines()]
    assert [r["seq"] for r in rows] == [0, 1, 2, 3]
    assert rows[2]["trace_id"] == "trace-9"
    assert json.loads(rows[2]["fact"]) == LINES[2]["fact"]
    assert rows[1]["valid_from"] == "2024-02-29T23:00:00+00:00"  # ISO-8601, in UTC
    assert "T" in rows[0]["recorded_at"]


def test_log_json_is_jsonl(filled):
    assert run("log", filled, "--json").stdout == run("log", filled, "--format", "jsonl").stdout


def test_log_since(filled):
    rows = run("log", filled, "--since", "2", "--json").stdout.splitlines()
    assert [json.loads(r)["seq"] for r in rows] == [2, 3]
    assert "2 event(s)" in run("log", filled, "--since", "2").stdout


def test_log_as_of_version(filled):
    rows = run("log", filled, "--as-of", "1", "--json").stdout.splitlines()
    assert [json.loads(r)["seq"] for r in rows] == [0, 1, 2]
    assert run("log", filled, "--as-of", "0", "--json").stdout == ""


def test_log_as_of_time_reads_back_a_printed_time(filled):
    rows = [json.loads(r) for r in run("log", filled, "--json").stdout.splitlines()]
    cut = rows[0]["recorded_at"]  # as printed: the record time of the first commit
    back = run("log", filled, "--as-of", cut, "--json").stdout.splitlines()
    assert [json.loads(r)["seq"] for r in back] == [0, 1, 2]


def test_log_bad_as_of(filled):
    result = run("log", filled, "--as-of", "last week", code=2)
    assert "neither a table version nor an ISO-8601 time" in result.stderr


# -- verify and head ------------------------------------------------------------------------------


def _tamper(store: Path, seq: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    dt = DeltaTable(str(store / "events"))
    for uri in dt.file_uris():
        table = pq.read_table(uri)
        rows = table.to_pylist()
        if any(r["seq"] == seq for r in rows):
            for r in rows:
                if r["seq"] == seq:
                    r["content"] = r["content"] + "!"
            pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), uri)


def test_verify_ok(filled):
    assert run("verify", filled).stdout.strip() == "ok: 4 event(s), chain intact, head seq 3"
    out = json.loads(run("verify", filled, "--json").stdout)
    assert out["ok"] is True and out["events"] == 4 and out["first_bad_seq"] is None
    assert out["head"]["seq"] == 3 and out["problems"] == []


def test_verify_tampered_exits_1_naming_the_first_bad_seq(filled):
    _tamper(filled, 1)
    result = run("verify", filled, code=1)
    assert "first bad seq 1" in result.stderr
    assert "seq 1:" in result.stderr
    out = json.loads(run("verify", filled, "--json", code=1).stdout)
    assert out["ok"] is False and out["first_bad_seq"] == 1 and out["problems"]


def test_verify_against_a_saved_head(filled, tmp_path):
    saved = tmp_path / "head.json"
    saved.write_text(run("head", filled, "--json").stdout)
    assert run("verify", filled, "--against", saved).exit_code == 0
    # truncate: drop the newest commit and the published heads
    (filled / "events" / "_delta_log" / f"{2:020d}.json").unlink()
    for path in (filled / "receipts" / "heads").glob("*.json*"):  # the journal and any per-version files
        path.unlink()
    shutil.rmtree(filled / "merkle")  # the Merkle tree's edge remembers the log's size too
    run("verify", filled)  # exit 0: nothing in the store remembers seq 3
    result = run("verify", filled, "--against", saved, code=1)
    assert "first bad seq 3" in result.stderr and "truncated" in result.stderr


def test_verify_against_a_file_that_is_not_a_head(filled, tmp_path):
    bogus = tmp_path / "bogus.json"
    bogus.write_text("{}")
    result = run("verify", filled, "--against", bogus, code=2)
    assert "cannot read a chain head" in result.stderr


def test_head(filled):
    for args in ([], ["--json"]):
        out = json.loads(run("head", filled, *args).stdout)
        assert set(out) == {"seq", "link", "recorded_at", "table_version"}
        assert out["seq"] == 3 and out["table_version"] == 2 and len(out["link"]) == 64
    mem = refold.Memory(filled)
    assert out == mem.head().as_json()


def test_head_of_an_empty_store(store):
    out = json.loads(run("head", store).stdout)
    assert out["seq"] == -1 and out["table_version"] == 0 and out["link"] == "0" * 64


# -- the installed script, end to end ----------------------------------------------------------------


@pytest.mark.slow
def test_console_script_end_to_end(tmp_path, batch):
    script = str(Path(sys.executable).parent / "refold")
    store = tmp_path / "s"

    def sh(*args, input=None, code=0):
        proc = subprocess.run([script, *map(str, args)], input=input, capture_output=True, text=True)
        assert proc.returncode == code, proc.stderr
        assert "Traceback" not in proc.stderr
        return proc

    sh("init", store)
    assert sh("append", store, "-", input=batch.read_text()).stdout.splitlines()[0] == "0 e-1"
    head = json.loads(sh("head", store, "--json").stdout)
    assert head["seq"] == 2
    assert json.loads(sh("verify", store, "--json").stdout)["ok"] is True
    _tamper(store, 2)
    assert "first bad seq 2" in sh("verify", store, code=1).stderr
