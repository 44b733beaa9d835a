"""Reads are pure and see the agent's own writes (issue #20 item 1), on real stores.

A read (``facts``, ``graph``, ``why``, ``state``, ``pending``, ``search``, the tools) writes nothing
and calls no model: proven by every file under the store (names, sizes, mtimes) being unchanged
(the tests run as root, which ignores file modes, so a read-only mount cannot be used here).
A ``write_memory`` is visible to the next ``search_memory``/``facts`` in this process and in
another one, under the rules spec and under a model spec folded earlier. The "model" is the only
mock: :class:`TinyModel`, an in-test Extractor under a non-rules spec (no model can run here),
which states ``memory_written`` facts as every adapter does and finds one fact in other text.

Every read answers from the state tables at their tag plus the overlay of the newer events;
tests/test_reads_pure_state.py holds the overlay's own cases (cached extractions, roll-ups,
the warm overlay advanced by each append).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import refold
from refold.agent import tools
from refold.fold.extract import ExtractedFact, Extraction
from refold.fold.spec import FoldSpec
from refold.fold.stated import stated_extraction

EMB = "hashing"
WRITE = {"subject": "Alice", "relation": "lives_in", "object": "Berlin", "trace_id": "run-1",
         "justification": "Alice said so in chat #7"}


class TinyModel:
    """A stand-in for a model extractor (the mock: no model here). ``only``: the texts it may be
    asked about; any other raises (an event whose extraction must come from the cache).
    ``calls``: the texts it answered (tests/test_reads_pure_state.py reads it)."""

    name = "tiny"

    def __init__(self, only: set[str] | None = None) -> None:
        self.only = only
        self.calls = 0

    def default_spec(self) -> FoldSpec:
        return FoldSpec(extractor="tiny")

    def extract(self, events, spec):
        out = []
        for e in events:
            stated = stated_extraction(e, spec)
            if stated is not None:
                out.append(stated)
                continue
            if self.only is not None and e.content not in self.only:
                raise AssertionError(f"the model was asked about {e.content!r}, which it had answered")
            self.calls += 1
            facts = (ExtractedFact("Bob", "works_at", e.content.split()[-1]),) if e.content else ()
            out.append(Extraction(event_id=e.event_id, spec_hash=spec.hash, engine="tiny", facts=facts))
        return out


def _files(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()}


def _store(tmp_path, spec: str):
    mem = refold.init(tmp_path / "store")
    mem.append({"kind": "chat_turn", "content": "Bob: I work at Acme", "tenant": "acme", "source": "chat"})
    mem.fold(extractor=TinyModel() if spec == "model" else "rules")
    return mem


def _reads(mem, ctx):
    """Every read the issue names; returns what they saw."""
    facts = {(r["subject"], r["object"]) for r in mem.facts(current_only=True).to_dicts()}
    mem.graph()
    state = mem.state()
    found = tools.handle("search_memory", {"query": "Alice lives in Berlin", "k": 5}, ctx)
    fid = found["results"][0]["fact_id"]
    mem.why(fid)
    tools.handle("why", {"fact_id": fid}, ctx)
    return facts, state, found


@pytest.mark.parametrize("spec", ["rules", "model"])
@pytest.mark.search
@pytest.mark.slow
def test_reads_write_nothing_and_see_the_write(tmp_path, spec):
    mem = _store(tmp_path, spec)
    ctx = tools.ToolContext(memory=mem, tenant="acme", embedder=EMB)
    tools.handle("search_memory", {"query": "Bob"}, ctx)  # the index after the fold (a fold's cache)
    tools.handle("write_memory", WRITE, ctx)
    mem.append({"kind": "chat_turn", "content": "Bob: I work at Initech", "tenant": "acme", "source": "chat"})
    before = _files(tmp_path / "store")
    facts, state, found = _reads(mem, ctx)
    assert _files(tmp_path / "store") == before
    assert ("Alice", "Berlin") in facts
    assert any(r["object"] == "Berlin" for r in found["results"])
    # the model spec's chat turn awaits a fold; the rules spec's is read in memory (no model)
    assert state.pending == found["pending_extraction"] == (1 if spec == "model" else 0)
    # a fresh process's reads write nothing either
    _files_unchanged_in_subprocess(tmp_path / "store", before)


def _files_unchanged_in_subprocess(root: Path, before) -> None:
    code = ("import json, refold; from refold.agent import tools; m = refold.open(%r); "
            "c = tools.ToolContext(memory=m, tenant='acme', embedder='hashing'); "
            "f = m.facts(current_only=True); s = tools.handle('search_memory', {'query': 'Alice'}, c); "
            "print(json.dumps([sorted(f['object'].to_list()), [r['object'] for r in s['results']], "
            "s['pending_extraction']]))" % str(root))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ, check=True)
    objects, hits, _ = json.loads(out.stdout.strip().splitlines()[-1])
    assert "Berlin" in objects and "Berlin" in hits
    assert _files(root) == before


@pytest.mark.parametrize("spec", ["rules", "model"])
@pytest.mark.search
def test_a_retraction_is_read_before_any_fold(tmp_path, spec):
    mem = _store(tmp_path, spec)
    ctx = tools.ToolContext(memory=mem, tenant="acme", embedder=EMB)
    tools.handle("write_memory", WRITE, ctx)
    [fid] = mem.facts(subject="Alice", current_only=True)["fact_id"].to_list()
    tools.handle("retract_memory", {"fact_id": fid, "justification": "wrong", "trace_id": "run-2"}, ctx)
    before = _files(tmp_path / "store")
    assert mem.facts(subject="Alice", current_only=True).is_empty()
    assert not any(r["object"] == "Berlin" for r in
                   tools.handle("search_memory", {"query": "Alice lives in Berlin"}, ctx)["results"])
    code = ("import refold; m = refold.open(%r); "
            "print(m.facts(subject='Alice', current_only=True).height, m.facts(subject='Alice').height)"
            % str(tmp_path / "store"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ, check=True)
    assert out.stdout.split() == ["0", "1"]  # closed, kept in history
    assert _files(tmp_path / "store") == before


def test_a_model_specs_pending_event_is_extracted_by_the_next_fold(tmp_path):
    mem = _store(tmp_path, "model")
    mem.append({"kind": "chat_turn", "content": "Bob: I work at Initech", "tenant": "acme", "source": "chat"})
    assert mem.pending() == 1
    assert "Initech" not in mem.facts()["object"].to_list()  # a read calls no model
    model = TinyModel(only={"Bob: I work at Initech"})  # (the first chat turn's facts are cached)
    report = mem.fold(extractor=model, spec=model.default_spec())
    assert report.extraction_calls == 1 and mem.pending() == 0
    assert "Initech" in mem.facts(current_only=True)["object"].to_list()


@pytest.mark.slow
def test_cli_facts_reports_pending_and_writes_nothing(tmp_path):
    mem = _store(tmp_path, "model")
    tools.handle("write_memory", WRITE, tools.ToolContext(memory=mem, tenant="acme", embedder=EMB))
    mem.append({"kind": "chat_turn", "content": "Bob: I work at Initech", "tenant": "acme", "source": "chat"})
    before = _files(tmp_path / "store")
    out = subprocess.run([sys.executable, "-c", "from refold.cli import main; main()", "facts",
                          str(tmp_path / "store"), "--json"], capture_output=True, text=True, env=os.environ)
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert {r["object"] for r in rows if r["derivation"] == "extracted"} == {"Acme", "Berlin"}
    assert {r["pending_extraction"] for r in rows} == {1}
    assert _files(tmp_path / "store") == before
    table = subprocess.run([sys.executable, "-c", "from refold.cli import main; main()", "facts",
                            str(tmp_path / "store")], capture_output=True, text=True, env=os.environ)
    assert table.returncode == 0 and "1 newer event(s) await extraction" in table.stdout
    assert "--extractor tiny" in table.stdout  # the fold that extracts them is the model spec's
    assert _files(tmp_path / "store") == before
