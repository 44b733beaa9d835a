"""One CLI dialect (issue #20 item 7): ``--json`` prints one JSON document for a single result and
JSON Lines for a list, on every command; every time in CLI output is ISO-8601; ``refold log``
decrypts a shred-mode store where the key exists (``--raw``: as stored); ``erase`` without a
needle says it scanned for nothing; receipts record the erasure refold's extraction calls.
Real stores in tmp_path, the CLI through click's runner.
"""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

import refold
from refold.cli import main
from refold.demo import ingest_sample
from refold.erasure.receipts import list_receipts

#: str(datetime) — the form the CLI must never print
SPACE_TIME = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d")
ISO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?\+00:00")


def _run(*args, code: int = 0) -> str:
    result = CliRunner(env={"COLUMNS": "300"}).invoke(main, [str(a) for a in args])  # wide: tables unwrapped
    assert result.exit_code == code, (args, result.output, result.exception)
    return result.stdout


def _document(text: str) -> dict | list:
    """One JSON document: the whole output parses, and it is indented (more than one line)."""
    assert len(text.strip().splitlines()) > 1, text
    return json.loads(text)


def _lines(text: str) -> list[dict]:
    """JSON Lines: every line is one JSON object."""
    rows = [json.loads(line) for line in text.splitlines()]
    assert rows and all(isinstance(r, dict) for r in rows), text
    return rows


@pytest.fixture
def folded(tmp_path):
    mem = refold.init(tmp_path / "store")
    ingest_sample(mem)
    mem.fold()
    mem.register_subject("s-maria", "Maria Santos")
    return mem


@pytest.mark.search
@pytest.mark.slow
def test_lists_are_json_lines_and_single_results_one_document_with_iso_times(folded, tmp_path):
    root = folded.root
    batch = tmp_path / "batch.jsonl"
    batch.write_text(json.dumps({"kind": "chat_turn", "content": "Maria: hi", "source": "chat#99"}) + "\n")
    facts = _lines(_run("facts", root, "--json"))
    fact_id = next(f["fact_id"] for f in facts if f["valid_to"] is not None)
    outputs = {
        # lists: JSON Lines
        "log": _lines(_run("log", root, "--json")),
        "facts": facts,
        "search": _lines(_run("search", root, "Where does Maria live?", "--embedder", "hashing", "--json")),
        "append": _lines(_run("append", root, batch, "--json")),
        "subjects": _lines(_run("subjects", root, "--json")),
        # single results: one document
        "why": _document(_run("why", root, fact_id, "--json")),
        "fold": _document(_run("fold", root, "--no-progress", "--json")),
        "verify": _document(_run("verify", root, "--json")),
        "head": _document(_run("head", root, "--json")),
    }
    assert {o["event_id"] for o in outputs["append"]} and outputs["subjects"][0]["subject_id"] == "s-maria"
    text = json.dumps(outputs)
    assert not SPACE_TIME.search(text), SPACE_TIME.search(text)
    for name in ("log", "facts", "search", "why"):
        assert ISO_TIME.search(json.dumps(outputs[name])), name
    assert ISO_TIME.fullmatch(outputs["log"][0]["recorded_at"])
    assert ISO_TIME.fullmatch(outputs["why"]["valid_to"])
    # tables too
    for table in (_run("log", root), _run("facts", root), _run("why", root, fact_id)):
        assert not SPACE_TIME.search(table) and re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d", table)


def test_find_is_json_lines(folded):
    found = _lines(_run("find", folded.root, "--subject", "s-maria", "--json"))
    assert {r["match"] for r in found} <= {"tagged", "untagged_mention"} and "event_id" in found[0]


def test_removed_commands_and_flags_say_what_replaces_them(folded):
    """refold 0.2 has one engine: `refold snapshot` and `--engine` fail with one line naming
    the replacement (exit 2), and write nothing."""
    before = folded.head()
    for args, replacement in ((("snapshot", folded.root), "refold fold STORE"),
                              (("snapshot", folded.root, "--list", "--json"), "refold fold STORE"),
                              (("fold", folded.root, "--engine", "graph"), "one engine")):
        result = CliRunner().invoke(main, [str(a) for a in args])
        assert result.exit_code == 2, (args, result.output)
        assert "removed in refold 0.2" in result.output and replacement in result.output, result.output
    assert folded.head() == before


def test_log_of_a_shred_store_is_readable_where_the_key_exists(tmp_path):
    mem = refold.init(tmp_path / "s", mode="shred")
    mem.append([{"kind": "chat_turn", "content": "Ann: I live in Oslo.", "source": "chat#1", "subjects": ["s-ann"],
                 "event_id": "e-ann"},
                {"kind": "memory_written", "content": "Bo likes jazz", "source": "agent#1", "subjects": ["s-bo"],
                 "fact": {"subject": "Bo", "relation": "likes", "object": "jazz"}, "justification": "Bo said so",
                 "event_id": "e-bo"}])
    rows = {r["event_id"]: r for r in _lines(_run("log", mem.root, "--json"))}
    assert rows["e-ann"]["content"] == "Ann: I live in Oslo." and rows["e-ann"]["cipher"] is None
    assert rows["e-bo"]["justification"] == "Bo said so"
    assert json.loads(rows["e-bo"]["fact"]) == {"subject": "Bo", "relation": "likes", "object": "jazz"}
    assert "Ann: I live in Oslo." in _run("log", mem.root)
    raw = {r["event_id"]: r for r in _lines(_run("log", mem.root, "--raw", "--json"))}
    assert raw["e-ann"]["cipher"] and "Oslo" not in raw["e-ann"]["content"]

    mem.erase("s-ann")
    after = {r["event_id"]: r for r in _lines(_run("log", mem.root, "--json"))}
    assert after["e-ann"]["content"] is None and after["e-ann"]["cipher"]  # the key is gone: unreadable
    assert after["e-bo"]["content"] == "Bo likes jazz"
    assert "(shredded: key destroyed)" in _run("log", mem.root)


def test_erase_without_needles_says_it_scanned_for_nothing_and_receipts_carry_extraction_calls(folded):
    folded.append({"kind": "chat_turn", "content": "Zed: I live in Riga.", "source": "chat#50",
                   "subjects": ["s-zed"]})
    folded.fold()
    out = _run("erase", folded.root, "--subject", "s-zed")  # not registered, no --canary
    assert "residue scan: no needles given (pass --canary or register the subject's name)" in out
    assert "0 hit(s) for 0 needle(s)" not in out
    assert "refold: 0 extraction call(s)" in out  # surviving extractions came from the cache
    erasure_id = out.strip().splitlines()[-1].split()[-1]
    receipt = _document(_run("receipt", "show", folded.root, erasure_id, "--json"))
    assert receipt["extraction_calls"] == 0
    shown = _run("receipt", "show", folded.root, erasure_id)
    assert "refold: 0 extraction call(s)" in shown and "no needles given" in shown
    verified = _run("receipt", "verify", folded.root, erasure_id)
    assert "info refold (as recorded): 0 extraction call(s)" in verified
    assert _document(_run("receipt", "verify", folded.root, erasure_id, "--json"))["extraction_calls"] == 0


def test_erase_with_a_registered_name_counts_its_needles(folded):
    folded.append([{"kind": "chat_turn", "content": "Zorblatt: I live in Riga.", "source": "chat#50",
                    "subjects": ["s-zed"]},
                   {"kind": "chat_turn", "content": "Ivo: I live in Split.", "source": "chat#51"}])
    folded.register_subject("s-zed", "Zorblatt")
    out = _run("erase", folded.root, "--subject", "s-zed")
    assert "residue scan: 0 hit(s) for 1 needle(s)" in out
    [receipt] = list_receipts(folded.layout)
    assert receipt.subject_id == "s-zed" and receipt.extraction_calls == 1  # Ivo's event was never folded
