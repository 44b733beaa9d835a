"""CLI: refold fold / facts / why, and the main job (python -m refold.demo)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from refold.cli import main
from refold.demo import ingest_sample

ROOT = Path(__file__).parents[1]


def _run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_fold_facts_why_round_trip(mem):
    ingest_sample(mem)
    out = _run("fold", mem.root, "--json", "--no-progress")
    assert out.exit_code == 0
    counts = json.loads(out.output)
    assert counts["events_folded"] == 33 and counts["extraction_calls"] > 0
    assert counts["facts"] > 10 and counts["derived_facts"] > 0 and counts["rejected_outputs"] == 0
    again = json.loads(_run("fold", mem.root, "--json", "--no-progress").output)
    assert again["extraction_calls"] == 0

    lines = _run("facts", mem.root, "--subject", "Maria Santos", "--relation", "lives_in",
                 "--format", "jsonl").output.splitlines()
    rows = [json.loads(line) for line in lines]
    assert [r["object"] for r in rows if r["current"]] == ["Berlin"] and len(rows) == 4

    table = _run("facts", mem.root, "--subject", "Maria Santos", "--current").output
    assert "Berlin" in table and "Lisbon" not in table

    old = _run("facts", mem.root, "--subject", "Maria Santos", "--relation", "risk_tolerance",
               "--as-of", "1", "--current", "--json").output
    assert [json.loads(x)["object"] for x in old.splitlines()] == ["low"]
    valid = _run("facts", mem.root, "--relation", "risk_tolerance", "--valid-at",
                 "2022-01-01T00:00:00+00:00", "--json").output
    assert [json.loads(x)["object"] for x in valid.splitlines()] == ["low"]

    berlin = next(r for r in rows if r["current"])
    why = _run("why", mem.root, berlin["fact_id"])
    assert why.exit_code == 0 and "Anmeldung" in why.output and "trace-0007" in why.output
    why_json = json.loads(_run("why", mem.root, berlin["fact_id"], "--json").output)
    assert why_json["events"][0]["event_id"] == "demo-026"


def test_bad_input_exits_2_with_one_clean_line(mem):
    result = CliRunner().invoke(main, ["why", mem.root, "f_missing"])
    assert result.exit_code == 2 and "no fact with id 'f_missing'" in result.output
    result = CliRunner().invoke(main, ["facts", mem.root, "--valid-at", "soon"])
    assert result.exit_code == 2 and "valid_at 'soon'" in result.output
    result = CliRunner().invoke(main, ["fold", mem.root, "--extractor", "nope"])
    assert result.exit_code == 2 and "unknown extractor 'nope'" in result.output
    result = CliRunner().invoke(main, ["facts", str(Path(mem.root).parent / "missing")])
    assert result.exit_code == 2 and "no refold store at" in result.output and "refold init" in result.output


@pytest.mark.slow
def test_main_job_runs_end_to_end(tmp_path):
    store = tmp_path / "demo-store"
    out = subprocess.run([sys.executable, "-m", "refold.demo", str(store)], capture_output=True,
                         text=True, cwd=ROOT, env={"COLUMNS": "160", "PATH": "/usr/bin:/bin"}, timeout=300)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "lives_in history" in text and "Anmeldung" in text
    assert "as of table version 1" in text and "low" in text and "high" in text
    assert "chain intact" in text
    # rerunning starts fresh rather than appending the sample twice
    again = subprocess.run([sys.executable, "-m", "refold.demo", str(store)], capture_output=True,
                           text=True, cwd=ROOT, env={"COLUMNS": "160", "PATH": "/usr/bin:/bin"}, timeout=300)
    assert again.returncode == 0 and "33 events" in again.stdout
