"""What a principal may see (issue #16, item 14): a public fact closed by a fact (or retraction)
the reader may not see shows as still open to that reader, `why` never names facts the reader
may not see, through the Python API, search, the agent tools and the CLI; a tool context must
name a tenant. Search uses the deterministic hashing embedder."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

import refold
from refold.agent import tools
from refold.fold.errors import NotFoundError, ValidationError
from tests.fold_helpers import T0, fact_event

EMB = "hashing"
REPO = Path(__file__).resolve().parents[1]


def _fact_id(mem, obj: str) -> str:
    frame = mem.facts()
    return frame.filter(frame["object"] == obj)["fact_id"][0]


def _extracted(frame):
    return frame.filter(frame["derivation"] == "extracted")


@pytest.fixture
def store(tmp_path):
    """Zoe lives in Oslo (public), then in Rome (HR only); Zoe likes tea (public), retracted by an
    HR-only event; Zoe works at Acme (public, about the past: it ends where the HR-only Initech
    fact recorded before it begins)."""
    mem = refold.init(tmp_path / "s")
    retract = fact_event("Zoe", "likes", "tea", day=6, event_id="ev-retract", principals=["hr"])
    retract["kind"] = "retraction"
    mem.append([
        fact_event("Zoe", "lives_in", "Oslo", day=1, event_id="ev-oslo"),
        fact_event("Zoe", "lives_in", "Rome", day=5, event_id="ev-rome", principals=["hr"]),
        fact_event("Zoe", "likes", "tea", day=2, event_id="ev-tea"),
        retract,
        fact_event("Zoe", "works_at", "Initech", day=10, event_id="ev-initech", principals=["hr"]),
        fact_event("Zoe", "works_at", "Acme", day=3, event_id="ev-acme"),
    ])
    mem.fold()
    return mem


def test_a_fact_closed_by_what_the_reader_may_not_see_is_open_to_that_reader(store):
    everything = _extracted(store.facts())
    closed = set(everything.filter(~everything["current"])["object"].to_list())
    assert closed == {"Oslo", "tea", "Acme"}  # for a trusted caller: all three were closed
    dave = store.facts(principal="dave")
    assert sorted(_extracted(dave)["object"].to_list()) == ["Acme", "Oslo", "tea"]
    assert dave["current"].all() and dave["valid_to"].null_count() == dave.height
    # the roll-up of the Acme fact (Acme employs Zoe) follows its input as the reader sees it
    assert dave.filter(dave["derivation"] != "extracted")["subject"].to_list() == ["Acme"]
    current = _extracted(store.facts(principal="dave", current_only=True))
    assert sorted(current["object"].to_list()) == ["Acme", "Oslo", "tea"]
    later = (T0 + timedelta(days=30)).isoformat()
    valid = _extracted(store.facts(principal="dave", valid_at=later))
    assert sorted(valid["object"].to_list()) == ["Acme", "Oslo", "tea"]
    hr = _extracted(store.facts(principal="hr"))
    assert set(hr.filter(~hr["current"])["object"].to_list()) == {"Oslo", "tea", "Acme"}


def test_why_names_nothing_the_reader_may_not_see(store):
    oslo, rome = _fact_id(store, "Oslo"), _fact_id(store, "Rome")
    assert store.why(oslo)["superseded_by"] == rome  # trusted caller: the whole story
    answer = store.why(oslo, principal="dave")
    assert answer["valid_to"] is None and answer["superseded_by"] is None and answer["ended_by"] is None
    text = json.dumps(answer, default=str)
    assert rome not in text and "ev-rome" not in text and "Rome" not in text
    tea = store.why(_fact_id(store, "tea"), principal="dave")
    assert tea["ended_by"] is None and "ev-retract" not in json.dumps(tea, default=str)
    with pytest.raises(NotFoundError):
        store.why(rome, principal="dave")
    assert store.why(oslo, principal="hr")["superseded_by"] == rome


@pytest.mark.search
def test_search_shows_such_facts_as_current_without_their_closing(store):
    seen = store.search("Zoe lives in", k=10, principal="dave", embedder=EMB)
    assert seen["object"].to_list().count("Oslo") == 1 and "Rome" not in seen["object"].to_list()
    assert seen["valid_to"].null_count() == seen.height
    history = store.search("Zoe", k=10, principal="dave", history=True, embedder=EMB)
    assert set(_extracted(history)["object"].to_list()) == {"Oslo", "tea", "Acme"}
    assert history["valid_to"].null_count() == history.height
    later = (T0 + timedelta(days=30)).isoformat()
    at = store.search("Zoe", k=10, principal="dave", valid_at=later, embedder=EMB)
    assert set(_extracted(at)["object"].to_list()) == {"Oslo", "tea", "Acme"}
    # the trusted caller still sees the closings
    trusted = _extracted(store.search("Zoe", k=10, history=True, embedder=EMB))
    closed = trusted.filter(trusted["valid_to"].is_not_null())
    assert set(closed["object"].to_list()) == {"Oslo", "tea", "Acme"}


def test_the_why_tool_answers_as_the_context_principal_sees(store):
    ctx = tools.ToolContext(memory=store, tenant="default", principal="dave", embedder=EMB)
    oslo, rome = _fact_id(store, "Oslo"), _fact_id(store, "Rome")
    answer = tools.handle("why", {"fact_id": oslo}, ctx)
    assert answer["superseded_by"] is None and rome not in json.dumps(answer)
    with pytest.raises(NotFoundError):
        tools.handle("why", {"fact_id": rome}, ctx)


@pytest.mark.parametrize("tenant", [None, "", "  "])
def test_a_tool_context_must_name_a_tenant(store, tenant):
    with pytest.raises(ValidationError, match="must name a tenant"):
        tools.ToolContext(memory=store, tenant=tenant)
    with pytest.raises(ValidationError, match="must name a tenant"):
        tools.handle("search_memory", {"query": "Zoe"}, {"memory": store, "tenant": tenant})


def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from refold.cli import main; main()", *map(str, args)],
                          cwd=REPO, capture_output=True, text=True, timeout=240)


@pytest.mark.slow
def test_cli_facts_and_why_take_a_principal(store):
    out = _cli("facts", store.root, "--principal", "dave", "--json")
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert sorted(r["object"] for r in rows if r["derivation"] == "extracted") == ["Acme", "Oslo", "tea"]
    assert all(r["valid_to"] is None and r["current"] for r in rows)
    oslo, rome = _fact_id(store, "Oslo"), _fact_id(store, "Rome")
    why = _cli("why", store.root, oslo, "--principal", "dave", "--json")
    assert why.returncode == 0, why.stderr
    assert rome not in why.stdout and json.loads(why.stdout)["superseded_by"] is None
    hidden = _cli("why", store.root, rome, "--principal", "dave")
    assert hidden.returncode == 2 and hidden.stderr.strip().count("\n") == 0 and rome in hidden.stderr
