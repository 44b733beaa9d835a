"""Validation of input events: one test per rule.

Every rejected batch must (a) raise an error naming the input line and field and (b) leave the
Delta table exactly as it was: same version, same rows, no new files anywhere in the store.
Real Delta tables in tmp_path; nothing is mocked.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from deltalake import DeltaTable

import refold
from refold.cli import main
from refold.fold.errors import EventValidationError

GOOD = {"kind": "chat_turn", "content": "I live in Paris", "source": "chat#1"}
FACT = {
    "kind": "memory_written",
    "content": "User said they live in Paris",
    "source": "agent#1",
    "fact": {"subject": "user", "relation": "lives_in", "object": "Paris"},
    "justification": "stated in chat#1",
}


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def _state(mem: refold.Memory) -> tuple[int, int, set[str]]:
    """Table version, row count and every file under the store."""
    dt = DeltaTable(mem.layout.events)
    return dt.version(), mem.log().height, _files(Path(mem.root))


@pytest.fixture()
def mem(tmp_path):
    m = refold.init(tmp_path / "store")
    m.append([GOOD, FACT])  # a non-empty log, so "unchanged" means something
    return m


def _lines(*events) -> list[str]:
    return [e if isinstance(e, str) else json.dumps(e) for e in events]


def _reject(mem, lines, *, line, field, words):
    """Append ``lines`` (bad event on ``line``) and check the error and that nothing changed."""
    before = _state(mem)
    with pytest.raises(EventValidationError) as info:
        mem.append_jsonl(lines)
    err = info.value
    assert err.line == line
    assert err.field == field
    message = str(err)
    assert f"line {line}" in message
    if field is not None:
        assert f"field '{field}'" in message
    for word in words:
        assert word in message, message
    assert "nothing was written" in message
    assert _state(mem) == before
    return err


# -- one test per rule --------------------------------------------------------------------------


def test_unknown_kind(mem):
    _reject(mem, _lines(GOOD, GOOD | {"kind": "gossip"}), line=2, field="kind",
            words=["unknown kind 'gossip'", "chat_turn"])


def test_system_kind_is_not_user_appendable(mem):
    _reject(mem, _lines(GOOD | {"kind": "tombstone"}), line=1, field="kind",
            words=["unknown kind 'tombstone'"])


def test_missing_kind(mem):
    bad = {k: v for k, v in GOOD.items() if k != "kind"}
    _reject(mem, _lines(GOOD, GOOD, bad), line=3, field="kind", words=["missing"])


def test_missing_source(mem):
    bad = {k: v for k, v in GOOD.items() if k != "source"}
    _reject(mem, _lines(bad, GOOD), line=1, field="source", words=["missing"])


def test_blank_source(mem):
    _reject(mem, _lines(GOOD | {"source": "   "}), line=1, field="source", words=["empty"])


def test_missing_content(mem):
    bad = {k: v for k, v in GOOD.items() if k != "content"}
    _reject(mem, _lines(GOOD, bad), line=2, field="content", words=["missing"])


def test_null_content(mem):
    _reject(mem, _lines(GOOD | {"content": None}), line=1, field="content", words=["missing"])


def test_empty_content(mem):
    _reject(mem, _lines(GOOD | {"content": ""}), line=1, field="content", words=["empty"])


def test_whitespace_content(mem):
    _reject(mem, _lines(GOOD, GOOD | {"content": " \n\t "}), line=2, field="content",
            words=["empty"])


def test_oversize_content_default_limit(mem):
    big = "x" * ((1 << 20) + 1)
    _reject(mem, _lines(GOOD | {"content": big}), line=1, field="content",
            words=[f"{(1 << 20) + 1} bytes", f"limit of {1 << 20}"])


def test_oversize_content_configurable_limit(tmp_path):
    refold.init(tmp_path / "store").append(GOOD)
    small = refold.Memory(tmp_path / "store", max_content_bytes=10)
    small.append_jsonl(_lines(GOOD | {"content": "0123456789"}))  # exactly at the limit: fine
    # bytes, not characters: 4 × 'é' is 8 bytes, 6 × 'é' is 12
    small.append_jsonl(_lines(GOOD | {"content": "éééé"}))
    _reject(small, _lines(GOOD | {"content": "éééééé"}), line=1, field="content",
            words=["12 bytes", "limit of 10", "max_content_bytes"])


def test_naive_timestamp(mem):
    _reject(mem, _lines(GOOD | {"valid_from": "2024-05-01T12:00:00"}), line=1,
            field="valid_from", words=["no timezone", "+00:00"])


def test_malformed_timestamp(mem):
    _reject(mem, _lines(GOOD, GOOD | {"valid_to": "next tuesday"}), line=2, field="valid_to",
            words=["not an ISO-8601 timestamp"])


def test_impossible_date(mem):
    _reject(mem, _lines(GOOD | {"valid_from": "2024-02-30T00:00:00+00:00"}), line=1,
            field="valid_from", words=["not an ISO-8601 timestamp"])


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("content", 42, ["expected a string, got int"]),
        ("source", ["chat#1"], ["expected a string, got list"]),
        ("subjects", "alice", ["list of non-empty strings"]),
        ("subjects", ["alice", 7], ["list of non-empty strings"]),
        ("principals", [""], ["list of non-empty strings"]),
        ("tenant", 3, ["non-empty string"]),
        ("event_id", True, ["non-empty string"]),
        ("trace_id", {"id": 1}, ["non-empty string"]),
        ("valid_from", 1714564800, ["expected an ISO-8601 string, got int"]),
    ],
)
def test_wrong_types(mem, field, value, words):
    _reject(mem, _lines(GOOD, GOOD | {field: value}), line=2, field=field, words=words)


def test_lone_surrogate_is_not_text(mem):
    # valid JSON, but "\ud800" decodes to a lone surrogate that cannot be stored as UTF-8
    _reject(mem, [json.dumps(GOOD), '{"kind": "chat_turn", "content": "a\\ud800b", "source": "s"}'],
            line=2, field="content", words=["lone UTF-16 surrogate"])
    _reject(mem, _lines(GOOD | {"subjects": ["\udfff"]}), line=1, field="subjects",
            words=["surrogate"])
    assert mem.append_jsonl(['{"kind": "chat_turn", "content": "ok \\ud83d\\ude00", "source": "s"}']) == [2]


def test_unknown_field(mem):
    _reject(mem, _lines(GOOD | {"contnet": "typo"}), line=1, field="contnet",
            words=["unknown field"])


def test_not_an_object(mem):
    _reject(mem, _lines(GOOD, "[1, 2]"), line=2, field=None, words=["expected a JSON object"])


def test_valid_to_before_valid_from(mem):
    bad = GOOD | {"valid_from": "2024-05-02T00:00:00+00:00", "valid_to": "2024-05-01T00:00:00Z"}
    _reject(mem, _lines(bad), line=1, field="valid_to", words=["before valid_from"])


def test_valid_to_before_valid_from_across_timezones(mem):
    # 10:00+02:00 is 08:00Z: before 09:00Z although the wall-clock digits are larger
    bad = GOOD | {"valid_from": "2024-05-01T09:00:00Z", "valid_to": "2024-05-01T10:00:00+02:00"}
    _reject(mem, _lines(bad), line=1, field="valid_to", words=["before valid_from"])


def test_memory_written_without_fact(mem):
    bad = {k: v for k, v in FACT.items() if k != "fact"}
    _reject(mem, _lines(GOOD, bad), line=2, field="fact", words=["subject, relation, object"])


def test_memory_written_with_incomplete_fact(mem):
    bad = FACT | {"fact": {"subject": "user", "relation": "lives_in"}}
    _reject(mem, _lines(bad), line=1, field="fact.object", words=["non-empty string"])


def test_memory_written_without_justification(mem):
    bad = {k: v for k, v in FACT.items() if k != "justification"}
    _reject(mem, _lines(bad), line=1, field="justification",
            words=["required and non-empty for kind 'memory_written'"])


def test_memory_written_with_empty_justification(mem):
    _reject(mem, _lines(GOOD, FACT | {"justification": "  "}), line=2, field="justification",
            words=["non-empty"])


def test_fact_on_other_kind(mem):
    _reject(mem, _lines(GOOD | {"fact": FACT["fact"]}), line=1, field="fact",
            words=["carry a fact"])


def test_bad_json_line(mem):
    _reject(mem, _lines(GOOD, GOOD, '{"kind": "chat_turn", "content": "oops"'), line=3,
            field=None, words=["not valid JSON"])


def test_line_numbers_count_blank_lines(mem):
    # blank lines are skipped but still counted, so the number matches the user's editor
    _reject(mem, [json.dumps(GOOD), "", "   ", "{nope}"], line=4, field=None,
            words=["not valid JSON"])


def test_same_id_twice_with_different_content(mem):
    a = GOOD | {"event_id": "e-1"}
    _reject(mem, _lines(a, a | {"content": "other"}), line=2, field="event_id",
            words=["also on line 1"])


def test_append_dicts_names_the_position(mem):
    """Memory.append(list of dicts) counts positions from 1 like lines."""
    before = _state(mem)
    with pytest.raises(EventValidationError) as info:
        mem.append([GOOD, GOOD, GOOD | {"kind": "nope"}])
    assert info.value.line == 3 and info.value.field == "kind"
    assert _state(mem) == before


def test_valid_batch_is_written(mem):
    """The control case: the same helpers see a change when the batch is good."""
    before = _state(mem)
    extra = GOOD | {"valid_from": "2024-05-01T12:00:00+02:00", "valid_to": "2024-06-01T00:00:00Z",
                    "subjects": ["subj-1"], "principals": ["alice"], "trace_id": "t-1",
                    "tenant": "acme", "ingestion_run": "run-1"}
    seqs = mem.append_jsonl(_lines(GOOD, extra, FACT))
    assert seqs == [2, 3, 4]
    after = _state(mem)
    assert after[0] == before[0] + 1 and after[1] == before[1] + 3
    row = mem.log(since=3, until=4).row(0, named=True)
    assert row["tenant"] == "acme" and row["subjects"] == ["subj-1"]
    assert row["valid_from"].isoformat() == "2024-05-01T10:00:00+00:00"


# -- through the CLI ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "expected"),
    [
        (GOOD | {"kind": "gossip"}, "line 2, field 'kind'"),
        ({"kind": "chat_turn", "content": "x"}, "line 2, field 'source'"),
        (GOOD | {"valid_from": "2024-05-01T12:00:00"}, "line 2, field 'valid_from'"),
        ('{"kind": ', "line 2: not valid JSON"),
    ],
)
def test_cli_rejects_and_writes_nothing(mem, tmp_path, bad, expected):
    path = tmp_path / "batch.jsonl"
    path.write_text("\n".join(_lines(GOOD, bad)) + "\n", encoding="utf-8")
    before = _state(mem)
    result = CliRunner().invoke(main, ["append", mem.root, str(path)])
    assert result.exit_code == 2, result.output
    assert expected in result.stderr
    assert "nothing was written" in result.stderr
    assert result.stdout == ""
    assert _state(mem) == before


def test_cli_rejects_from_stdin(mem):
    before = _state(mem)
    stdin = "\n".join(_lines(GOOD, FACT | {"justification": ""})) + "\n"
    result = CliRunner().invoke(main, ["append", mem.root, "-"], input=stdin)
    assert result.exit_code == 2
    assert "line 2, field 'justification'" in result.stderr
    assert _state(mem) == before


def test_cli_subprocess_rejects(mem, tmp_path):
    """The installed console script, in its own process, exits 2 with one clean line."""
    import subprocess
    import sys

    path = tmp_path / "batch.jsonl"
    path.write_text("\n".join(_lines(GOOD, GOOD | {"content": ""})) + "\n", encoding="utf-8")
    before = _state(mem)
    script = str(Path(sys.executable).parent / "refold")
    proc = subprocess.run([script, "append", mem.root, str(path)],
                          capture_output=True, text=True, env=os.environ | {"PYTHONWARNINGS": "ignore"})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("refold: error: line 2, field 'content'")
    assert "Traceback" not in proc.stderr
    assert _state(mem) == before
