"""Reads over the state tables are pure and see the agent's own writes (issue #20 item 1,
docs/state.md "Reads"), on real stores.

A read answers from the tables at their tag plus the read overlay of the newer events
(refold.reads.overlay): it writes nothing (every file under the store keeps its name, size and
mtime) and calls no model. The only mock is the model: :class:`~tests.test_reads_pure.TinyModel`,
an in-test extractor under a non-rules spec (no model can run here).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

import refold
from refold.agent import tools
from refold.agent.mcp_server import ServerOptions, _warm_context
from refold.reads.tables import read_tables
from tests.test_reads_pure import WRITE, TinyModel, _files

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from snapshot_workload import events as workload  # noqa: E402

EMB = "hashing"


def _store(tmp_path, spec: str):
    mem = refold.init(tmp_path / "store")
    mem.append({"kind": "chat_turn", "content": "Bob: I work at Acme", "tenant": "acme", "source": "chat"})
    mem.fold(extractor=TinyModel() if spec == "model" else "rules")
    assert mem.state_store(mem.current_spec()).tag() is not None
    return mem


def _in_process(root: Path, code: str):
    """Run ``code`` (``m``: the store opened afresh) in another process; its last printed JSON."""
    prog = ("import json, refold; from refold.agent import tools; m = refold.open(%r); "
            "c = tools.ToolContext(memory=m, tenant='acme', embedder='hashing'); " % str(root)) + code
    out = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, env=os.environ)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("spec", ["rules", "model"])
@pytest.mark.search
@pytest.mark.slow
def test_state_table_reads_write_nothing_and_see_the_write(tmp_path, spec):
    mem = _store(tmp_path, spec)
    tag = mem.state_store(mem.current_spec()).tag()
    ctx = tools.ToolContext(memory=mem, tenant="acme", embedder=EMB)
    tools.handle("write_memory", WRITE, ctx)
    mem.append({"kind": "chat_turn", "content": "Bob: I work at Initech", "tenant": "acme", "source": "chat"})
    root = tmp_path / "store"
    before = _files(root)
    facts = mem.facts(current_only=True)
    assert ("Alice", "Berlin") in set(zip(facts["subject"].to_list(), facts["object"].to_list()))
    # the rules spec reads the chat turn in memory; the model spec's awaits a fold (no model call)
    assert ("Initech" in facts["object"].to_list()) == (spec == "rules")
    assert mem.pending() == (0 if spec == "rules" else 1)
    graph = mem.graph(subject="Alice")
    assert [graph.nodes[v]["name"] for _, v in graph.edges()] == ["Berlin"]
    [fid] = mem.facts(subject="Alice")["fact_id"].to_list()
    assert mem.why(fid)["fact"]["object"] == "Berlin"
    found = tools.handle("search_memory", {"query": "Alice lives in Berlin", "k": 5}, ctx)
    assert found["results"][0]["object"] == "Berlin"
    assert found["pending_extraction"] == mem.pending()
    assert tools.handle("why", {"fact_id": fid}, ctx)["pending_extraction"] == mem.pending()
    head = mem.head().recorded_at.isoformat()  # (the newest record time: no wall clock involved)
    listed = tools.handle("memory_as_of", {"as_of": head, "subject": "Alice"}, ctx)
    assert [f["object"] for f in listed["facts"]] == ["Berlin"]
    assert _files(root) == before
    assert mem.state_store(mem.current_spec()).tag() == tag  # no fold moved the tables
    # another process answers the same from the tables and the log, writing nothing either
    got = _in_process(root, "f = m.facts(current_only=True); s = tools.handle('search_memory', {'query': 'Alice'}, c); "
                            "print(json.dumps([sorted(f['object'].to_list()), [r['object'] for r in s['results']], "
                            "m.pending()]))")
    assert "Berlin" in got[0] and "Berlin" in got[1] and got[2] == (0 if spec == "rules" else 1)
    assert _files(root) == before


@pytest.mark.parametrize("spec", ["rules", "model"])
@pytest.mark.search
def test_a_retraction_after_the_tag_closes_the_fact_in_the_read(tmp_path, spec):
    mem = _store(tmp_path, spec)
    ctx = tools.ToolContext(memory=mem, tenant="acme", embedder=EMB)
    tools.handle("write_memory", WRITE, ctx)
    mem.fold(extractor=TinyModel() if spec == "model" else "rules")  # the fact in the tables
    [fid] = mem.facts(subject="Alice", current_only=True)["fact_id"].to_list()
    tools.handle("retract_memory", {"fact_id": fid, "justification": "wrong", "trace_id": "run-2"}, ctx)
    root = tmp_path / "store"
    before = _files(root)
    assert mem.facts(subject="Alice", current_only=True).is_empty()
    assert mem.facts(subject="Alice")["fact_id"].to_list() == [fid]  # closed, kept in history
    assert mem.pending() == 0
    assert not any(r["object"] == "Berlin" for r in
                   tools.handle("search_memory", {"query": "Alice lives in Berlin"}, ctx)["results"])
    got = _in_process(root, "print(json.dumps([m.facts(subject='Alice', current_only=True).height, "
                            "m.facts(subject='Alice').height]))")
    assert got == [0, 1]
    assert _files(root) == before


def test_a_cached_extraction_after_the_tag_is_read_without_a_model(tmp_path):
    """Another process extracted the newer event into the cache (a fold killed before its merge,
    or a Ray extraction job) but no fold merged it: a read uses the cache, counts nothing
    pending, writes nothing."""
    mem = _store(tmp_path, "model")
    mem.append({"kind": "chat_turn", "content": "Bob: I work at Initech", "tenant": "acme", "source": "chat"})
    assert mem.pending() == 1
    model, spec = TinyModel(), TinyModel().default_spec()
    newer = mem.events()[-1]
    mem.cache.put(model.extract([newer], spec), seqs={newer.event_id: newer.seq})
    assert model.calls == 1
    root = tmp_path / "store"
    before = _files(root)
    fresh = refold.open(root)
    assert fresh.pending() == 0
    assert "Initech" in fresh.facts(subject="Bob", current_only=True)["object"].to_list()
    assert _files(root) == before


def _comparable(frame: pl.DataFrame) -> list[dict]:
    return sorted(frame.to_dicts(), key=lambda r: r["fact_id"])


def test_the_overlay_answers_what_the_next_fold_does(tmp_path):
    """Equivalence: facts (merged and derived, history included) read through the overlay of
    newer events equal the facts read after a real partitioned fold of them."""
    mem = refold.init(tmp_path / "store")
    mem.append(list(workload(150, seed=5, people=12)))
    mem.fold()
    mem.append(list(workload(60, seed=6, people=12, start=150)))
    ctx = tools.ToolContext(memory=mem, embedder=EMB)
    tools.handle("write_memory", {**WRITE, "subject": "Person3"}, ctx)
    victim = mem.facts(current_only=True).filter(pl.col("derivation") == "extracted")["fact_id"][0]
    tools.handle("retract_memory", {"fact_id": victim, "justification": "wrong", "trace_id": "run-2"}, ctx)
    before = _files(tmp_path / "store")
    read = mem.facts()
    assert _files(tmp_path / "store") == before
    overlay = read_tables(mem.store, None, mem.current_spec())[2]  # the read answered from the tables' overlay
    assert overlay.overlaid == 62 and overlay.rows.height and overlay.pending == 0
    assert victim in read.filter(~pl.col("current"))["fact_id"].to_list()
    assert read.filter(pl.col("derivation") != "extracted").height  # roll-ups are in the comparison
    mem.fold()
    assert _comparable(read) == _comparable(refold.open(tmp_path / "store").facts())


def test_a_compose_rollup_of_one_subject_is_derived_from_the_overlaid_rows(tmp_path):
    """Compose roll-ups are derived by the read (refold.reads.rollups) from the rows as the
    overlay has them: an organisation that moved after the tag moves its staff's works_in in a
    one-subject read, and a new member's works_in appears, as the next fold has them."""
    mem = refold.init(tmp_path / "store")
    ctx = tools.ToolContext(memory=mem, embedder=EMB)

    def write(subject, relation, obj):
        tools.handle("write_memory", {**WRITE, "subject": subject, "relation": relation, "object": obj}, ctx)

    write("Alice", "works_at", "Acme")
    write("Acme", "located_in", "Paris")
    mem.fold()
    write("Acme", "located_in", "Oslo")
    write("Bob", "works_at", "Acme")

    def works_in():
        return {s: mem.facts(subject=s, relation="works_in", current_only=True)["object"].to_list()
                for s in ("Alice", "Bob")}

    before = _files(tmp_path / "store")
    read = works_in()
    assert _files(tmp_path / "store") == before
    assert read == {"Alice": ["Oslo"], "Bob": ["Oslo"]}
    # why of a roll-up only the overlaid rows derive: after the read that returned it (its inputs
    # remembered) and as a process that did not read it (a search of the overlaid inputs' join)
    from refold.reads import rollups as state_rollups
    bob = mem.facts(subject="Bob", relation="works_in", current_only=True)["fact_id"][0]
    assert mem.why(bob)["derivation"] == "works_in"
    state_rollups.forget_hints()
    answer = refold.open(tmp_path / "store").why(bob)
    assert answer["derivation"] == "works_in" and len(answer["inputs"]) == 2
    mem.fold()
    assert works_in() == read
    assert refold.open(tmp_path / "store").why(bob) == answer


@pytest.mark.search
def test_the_mcp_servers_warm_memory_sees_a_write_in_the_next_search(tmp_path):
    mem = _store(tmp_path, "rules")
    ctx = _warm_context(ServerOptions(store=str(mem.root), tenant="acme", embedder=EMB))
    tools.handle("search_memory", {"query": "Bob"}, ctx)
    tools.handle("write_memory", WRITE, ctx)
    before = _files(tmp_path / "store")
    found = tools.handle("search_memory", {"query": "Alice lives in Berlin"}, ctx)
    assert found["results"][0]["object"] == "Berlin" and found["pending_extraction"] == 0
    assert ctx.memory.facts(subject="Alice", current_only=True)["object"].to_list() == ["Berlin"]
    assert _files(tmp_path / "store") == before


@pytest.mark.slow
def test_a_read_of_the_state_tables_in_a_fresh_process_exits_cleanly_every_time(tmp_path):
    """A CLI read of the state tables once aborted at interpreter shutdown after its output was
    complete ("terminate called without an active exception", in about 1 run of 7): the table
    handles it kept had read through ``DeltaTable.to_pyarrow_dataset``. The abort is a race, so
    the command runs several times, a few at once (more scheduling noise)."""
    mem = _store(tmp_path, "model")
    tools.handle("write_memory", WRITE, tools.ToolContext(memory=mem, tenant="acme", embedder=EMB))
    mem.append({"kind": "chat_turn", "content": "Bob: I work at Initech", "tenant": "acme", "source": "chat"})
    refold_cli = str(Path(sys.executable).with_name("refold"))
    failures, runs, at_once = [], 12, 3
    for _ in range(0, runs, at_once):
        procs = [subprocess.Popen([refold_cli, "facts", str(mem.root), "--json"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(REPO)})
                 for _ in range(at_once)]
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            if proc.returncode != 0 or b"Berlin" not in out:
                failures.append((proc.returncode, err.decode(errors="replace")[-300:]))
    assert not failures, f"{len(failures)} of {runs} runs failed: {failures[:3]}"


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.slow
def test_a_warm_reads_overlay_advanced_by_each_append_equals_a_fresh_reads(tmp_path, seed, monkeypatch):
    """Equivalence of the advanced overlay: a warm Memory that read after every append advances
    its kept overlay by the appended events alone (it never reads the tail from the tag again),
    and answers every read as a fresh process does (the overlay of the whole tail), through
    supersession, retractions, organisations moving (compose roll-ups) and a fold by another
    process (new tables: the overlay is made again). Each step writes nothing."""
    import random

    from refold.reads import tables as read_path  # (the module whose reads call tail_after)
    root = tmp_path / "store"
    mem = refold.init(root)
    mem.append(list(workload(120, seed=seed, people=8)))
    mem.fold()
    ctx = tools.ToolContext(memory=mem, embedder=EMB)
    rng = random.Random(seed)
    whole_tails = []
    # a spy, on purpose: reading the whole tail again returns the same answer, so only a count
    # shows whether the warm read advanced its overlay by the appended events alone
    real_tail_after = read_path.tail_after
    monkeypatch.setattr(read_path, "tail_after", lambda *a, **k: whole_tails.append(1) or real_tail_after(*a, **k))
    assert mem.facts().height  # the first read overlays the (empty) tail from the tag
    start, tables_moved = 1000, False
    for step in range(12):
        roll = rng.random()
        if roll < 0.15:
            live = mem.facts(current_only=True).filter(pl.col("derivation") == "extracted")["fact_id"].to_list()
            tools.handle("retract_memory", {"fact_id": rng.choice(live), "justification": "wrong",
                                            "trace_id": f"run-{step}"}, ctx)
        elif roll < 0.3:
            tools.handle("write_memory", {**WRITE, "subject": f"Org{rng.randrange(3)}", "relation": "located_in",
                                          "object": rng.choice(["Oslo", "Paris", "Lima"])}, ctx)
        elif roll < 0.4 and step > 4:
            refold.open(root).fold()  # another process: the tables move on
            tables_moved = True
        else:
            n = rng.randrange(1, 6)
            mem.append(list(workload(n, seed=seed + 100 + step, people=8, start=start)))
            start += n
        calls = len(whole_tails)
        before = _files(root)
        warm = mem.facts()
        assert _files(root) == before
        fresh = refold.open(root).facts()
        assert _comparable(warm) == _comparable(fresh), f"step {step}"
        made_again = len(whole_tails) - calls - 1  # (the fresh process read the whole tail once)
        log_moved = not (0.3 <= roll < 0.4 and step > 4)  # (a fold moves the tables, not the log)
        # the warm read makes its overlay again only when the log moved over other tables
        assert made_again == (1 if log_moved and tables_moved else 0), f"step {step}"
        tables_moved = tables_moved and not log_moved
    mem.fold()
    assert _comparable(mem.facts()) == _comparable(warm)
