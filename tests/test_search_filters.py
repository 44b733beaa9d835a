"""Filters before ranking, on a real store with many supersessions, two tenants and restricted events.

The 1,000-query loops use the hashing embedder (deterministic, no model: these tests are about
which ids may be ranked, not about meaning); tests/test_search_minilm.py uses the real model.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

import refold
from refold.fold.events import Event

EMB = "hashing"
CITIES = ["Paris", "Berlin", "Rome", "Madrid", "Lisbon", "Vienna", "Prague", "Oslo", "Dublin", "Athens"]
FIRMS = ["Acme", "Initech", "Umbrella", "Hooli", "Stark", "Wayne"]
HOBBIES = ["chess", "sailing", "opera", "climbing", "baking"]
T0 = datetime(2020, 1, 1, tzinfo=timezone.utc)


def _people(tenant: str) -> list[str]:
    first = ["Ada", "Bea", "Cyd", "Dov", "Eli", "Fay", "Gus", "Hal", "Ivo", "Jo", "Kai", "Lou", "Max", "Ned", "Oz"]
    return [f"{n} {tenant.capitalize()}{i}" for i, n in enumerate(first)]


def _fact_event(tenant, subject, relation, obj, day, *, principals=(), event_id=None):
    e = {"kind": "memory_written", "content": f"{subject} {relation.replace('_', ' ')} {obj}",
         "source": f"agent:{tenant}", "tenant": tenant, "fact": {"subject": subject, "relation": relation, "object": obj},
         "justification": "stated in a test", "trace_id": f"t-{day}",
         "valid_from": (T0 + timedelta(days=day)).isoformat()}
    if principals:
        e["principals"] = list(principals)
    if event_id:
        e["event_id"] = event_id
    return e


def _batches(seed: int = 7) -> list[list[dict]]:
    """Three batches (three table versions). Per person: 6 addresses, 3 employers, 2 hobbies, and
    restricted events: every third person's latest address is readable by 'hr' only, and a
    corroborating event restricted to ['hr', 'ops'] repeats some current employers."""
    rng = random.Random(seed)
    batches: list[list[dict]] = [[], [], []]
    for tenant in ("acme", "globex"):
        for p, person in enumerate(_people(tenant)):
            for step in range(6):
                principals = ("hr",) if (step == 5 and p % 3 == 0) else ()
                batches[step // 2].append(_fact_event(tenant, person, "lives_in", rng.choice(CITIES),
                                                      10 * step + p, principals=principals))
            for step in range(3):
                batches[step].append(_fact_event(tenant, person, "works_at", FIRMS[(p + step) % len(FIRMS)],
                                                 10 * step + p + 3))
            for h in range(2):
                batches[h].append(_fact_event(tenant, person, "likes", HOBBIES[(p + h) % len(HOBBIES)], p + h))
            if p % 4 == 0:
                batches[2].append(_fact_event(tenant, person, "works_at", FIRMS[(p + 2) % len(FIRMS)],
                                              500 + p, principals=("hr", "ops")))
    return batches


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    mem = refold.init(tmp_path_factory.mktemp("search") / "store")
    versions = []
    for batch in _batches():
        mem.append(batch)
        versions.append(mem.head().table_version)
    mem.fold()
    return mem, versions


def _visible(d: dict, principal: str | None) -> bool:
    return principal is None or all(not p or principal in p for p in d["source_principals"])


@pytest.mark.search
@pytest.mark.slow
def test_no_superseded_fact_among_candidates_of_1000_queries(store):
    mem, _ = store
    graph = mem.graph()
    edges = {d["fact_id"]: d for *_, d in graph.edges(data=True)}
    superseded = {f for f, d in edges.items() if d["valid_to"] is not None}
    assert len(superseded) > 200  # the log really has many supersessions
    view = mem.index(embedder=EMB)
    rng = random.Random(1)
    names = [n for t in ("acme", "globex") for n in _people(t)]
    filters = [(t, p) for t in (None, "acme", "globex") for p in (None, "hr", "ops", "nobody")]
    queries: dict[tuple, list[str]] = {}
    for _ in range(1000):
        text = f"{rng.choice(names)} {rng.choice(['lives in', 'works at', 'likes', 'moved to'])} " \
               f"{rng.choice(CITIES + FIRMS + HOBBIES)}"
        queries.setdefault(rng.choice(filters), []).append(text)
    checked = 0
    reopened = 0
    for (tenant, principal), texts in queries.items():
        cands = view.candidates(tenant=tenant, principal=principal)
        meta = view.indexes["facts"].meta
        allowed = set(meta.filter(meta["id"].is_in(cands.ids.tolist()))["key"].to_list())
        # as the principal sees the graph: a fact closed by one it may not read is still current
        # to it (issue #16 item 14; refold.fold.scoping)
        seen = {d["fact_id"]: d for *_, d in mem.graph(principal=principal).edges(data=True)}
        assert all(_visible(edges[f], principal) for f in seen)
        superseded = {f for f, d in seen.items() if d["valid_to"] is not None}
        expected = {f for f, d in seen.items() if d["valid_to"] is None and tenant in (None, d["tenant"])}
        reopened += len(expected - {f for f in expected if edges[f]["valid_to"] is None})
        assert allowed == expected and not (allowed & superseded)
        for frame in view.search_many(texts, k=10, tenant=tenant, principal=principal):
            assert frame.height == min(10, len(expected))
            assert frame["valid_to"].null_count() == frame.height
            assert not set(frame["fact_id"].to_list()) & superseded
            assert set(frame["fact_id"].to_list()) <= expected
            checked += 1
    assert checked == 1000
    assert reopened > 0  # the store really has public facts closed by restricted ones


@pytest.mark.slow
def test_cross_tenant_probe_returns_nothing_of_the_other_tenant(store):
    mem, _ = store
    view = mem.index(embedder=EMB)
    facts_a = mem.facts(tenant="acme")["fact_id"].to_list()
    a_texts = view.indexes["facts"].meta.filter(view.indexes["facts"].meta["tenant"] == "acme")["text"].to_list()
    a_texts += view.indexes["events"].meta.filter(view.indexes["events"].meta["tenant"] == "acme")["text"].to_list()
    rng = random.Random(2)
    probes = [rng.choice(a_texts) for _ in range(1000)]
    leaked = 0
    for kind in ("facts", "events"):
        for frame in view.search_many(probes, k=5, kind=kind, tenant="globex", history=True):
            assert frame.height == 5
            leaked += int((frame["tenant"] != "globex").sum())
            if kind == "facts":
                leaked += len(set(frame["fact_id"].to_list()) & set(facts_a))
    assert leaked == 0
    # the same probes without the tenant filter do find tenant A: the probe is a real one
    hits = view.search_many(probes[:50], k=1, kind="facts", history=True)
    assert sum(f["tenant"][0] == "acme" for f in hits) > 40


@pytest.mark.search
def test_principal_sees_only_facts_whose_every_source_it_may_read(tmp_path):
    mem = refold.init(tmp_path / "p")
    mem.append([
        _fact_event("t", "Zoe", "likes", "tea", 1),
        _fact_event("t", "Zoe", "likes", "tea", 2, principals=["bob"]),           # corroboration, restricted
        _fact_event("t", "Zoe", "likes", "jazz", 3, principals=["bob", "carol"]),
        _fact_event("t", "Zoe", "likes", "jazz", 4, principals=["carol"]),        # jazz: carol only
        _fact_event("t", "Zoe", "likes", "chess", 5),                             # public
    ])
    mem.fold()
    seen = {p: set(mem.search("Zoe likes", k=10, principal=p, embedder=EMB)["object"].to_list())
            for p in (None, "bob", "carol", "dave")}
    assert seen[None] == {"tea", "jazz", "chess"}
    assert seen["bob"] == {"tea", "chess"}
    assert seen["carol"] == {"jazz", "chess"}
    assert seen["dave"] == {"chess"}
    events = mem.search("Zoe likes", k=10, principal="dave", kind="events", embedder=EMB)
    assert events.height == 2 and set(events["text"].to_list()) == {"Zoe likes tea", "Zoe likes chess"}


def _as_input(e: Event) -> dict:
    out = {"kind": e.kind, "content": e.content, "source": e.source, "event_id": e.event_id, "tenant": e.tenant,
           "justification": e.justification, "trace_id": e.trace_id}
    if e.principals:
        out["principals"] = list(e.principals)
    if e.fact:
        out["fact"] = e.fact.as_dict()
    for name in ("valid_from", "valid_to"):
        if getattr(e, name):
            out[name] = getattr(e, name).isoformat()
    return {k: v for k, v in out.items() if v is not None}


@pytest.mark.search
@pytest.mark.slow
def test_as_of_search_equals_search_over_a_fold_of_the_log_prefix(store, tmp_path):
    mem, versions = store
    rng = random.Random(3)
    names = [n for t in ("acme", "globex") for n in _people(t)]
    texts = [f"{rng.choice(names)} lives in {rng.choice(CITIES)}" for _ in range(60)]
    today = mem.index(embedder=EMB)
    for version in versions[:2]:
        past = mem.index(embedder=EMB, as_of=version)
        prefix = [e for e in mem.events(as_of=version) if e.kind not in ("spec_changed", "erasure", "tombstone")]
        fresh = refold.init(tmp_path / f"prefix-{version}")
        fresh.append([_as_input(e) for e in prefix])
        fresh.fold()
        again = fresh.index(embedder=EMB)
        assert past.report.facts == again.report.facts and past.report.embedded == 0  # vectors reused
        for tenant, principal in ((None, None), ("acme", None), ("globex", "hr")):
            a = past.search_many(texts, k=8, tenant=tenant, principal=principal)
            b = again.search_many(texts, k=8, tenant=tenant, principal=principal)
            for x, y in zip(a, b):
                assert x["fact_id"].to_list() == y["fact_id"].to_list()
                assert np.allclose(x["score"].to_numpy(), y["score"].to_numpy(), atol=1e-5)
                assert x["valid_to"].to_list() == y["valid_to"].to_list()
        # and it is not today's index filtered afterwards: facts current then are superseded now
        then = set(past.search_many(texts, k=8)[0]["fact_id"].to_list())
        now_current = set(mem.facts(current_only=True)["fact_id"].to_list())
        assert then - now_current
        assert not set(today.search_many(texts, k=8)[0]["fact_id"].to_list()) - now_current
    # Memory.search with as_of goes through the same cache
    frame = mem.search(texts[0], k=8, as_of=versions[0], embedder=EMB)
    assert frame["fact_id"].to_list() == mem.index(embedder=EMB, as_of=versions[0]).search(texts[0], k=8)["fact_id"].to_list()


def test_valid_at_and_history(store):
    mem, _ = store
    view = mem.index(embedder=EMB)
    when = T0 + timedelta(days=25)
    graph_edges = [d for *_, d in mem.graph().edges(data=True)]
    valid = {d["fact_id"] for d in graph_edges
             if d["valid_from"] <= when and (d["valid_to"] is None or when < d["valid_to"])}
    frame = view.search("Ada Acme0 lives in Paris", k=20, valid_at=when)
    assert frame.height == 20 and set(frame["fact_id"].to_list()) <= valid
    everything = view.search("Ada Acme0 lives in Paris", k=20, history=True)
    assert everything["valid_to"].null_count() < everything.height  # superseded facts are back


@pytest.mark.search
def test_incremental_update_embeds_only_what_is_new(store, tmp_path):
    mem = refold.init(tmp_path / "inc")
    mem.append([_fact_event("t", "Ann", "lives_in", "Paris", 1), _fact_event("t", "Ann", "likes", "tea", 2)])
    first = mem.index(embedder=EMB).report
    assert first.embedded == first.facts + first.events
    mem.append(_fact_event("t", "Ann", "lives_in", "Rome", 3))
    second = mem.index(embedder=EMB).report
    # the Paris fact only got a valid_to: one new fact vector and one new event vector
    assert (second.added, second.embedded, second.removed) == (2, 2, 0)
    assert mem.index(embedder=EMB).report is second  # nothing moved: the cached view is reused
    reopened = refold.open(tmp_path / "inc").index(embedder=EMB).report
    assert reopened.embedded == 0 and reopened.facts == second.facts  # loaded from disk
