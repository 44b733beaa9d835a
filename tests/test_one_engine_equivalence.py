"""The state tables answer what the reference fold of the same events answers (issue #33 item 5).

Random logs on real stores: people living somewhere, working somewhere (a single-valued relation:
supersession, also of facts about the past), liking things (many-valued: corroboration when
several events state the same fact), organisations located in cities under another surface now
and then (entity resolution, and the compose roll-up ``works_in`` joins a person's row with the
organisation's, in another bucket), retractions, stated valid_from/valid_to, events shared by two
data subjects. The store folds after some of the appends and not after others, so reads answer
from tagged state versions plus the overlay of the events after them.

Every answer is held to :func:`refold.fold.reference.reference_fold` (merge + roll-ups of the
event list on one graph), row for row: ``facts()``, ``facts(valid_at=)``, ``facts(as_of=)`` of
every past log version (the reference fold of that prefix), ``graph()`` (every edge attribute,
node names); after an erasure of a data subject (the reference: the log without their events);
and in shred mode right after a subject's key is destroyed outside an erasure, before any fold
(the reference: the log without the events that need that key).
"""

from __future__ import annotations

import json
import tempfile
from datetime import timedelta
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import refold
from refold.fold.merge import is_current
from tests.fold_helpers import T0, fact_event, reference_facts, reference_of, without_subjects

PEOPLE = ["Ann", "Bo", "Cy"]
ORGS = ["Acme", "Globex"]
CITIES = ["Oslo", "Rome", "Paris"]
EDGE_KEYS = ("fact_id", "tenant", "subject", "relation", "object", "valid_from", "valid_to", "recorded_seq",
             "recorded_at", "sources", "source_seqs", "source_principals", "derivation", "inputs", "confidence",
             "superseded_by", "ended_by")

day = st.one_of(st.none(), st.integers(0, 40))
person_fact = st.tuples(st.sampled_from(PEOPLE), st.sampled_from(["lives_in", "works_at", "likes"]))
org_fact = st.tuples(st.sampled_from(ORGS + ["the Acme"]), st.just("located_in"))
step = st.fixed_dictionaries({
    "fact": st.one_of(person_fact, person_fact, org_fact),
    "object": st.integers(0, 5),  # picked from the relation's range
    "day": day,
    "lasts": st.one_of(st.none(), st.none(), st.integers(1, 20)),  # a stated valid_to, days after day
    "retract": st.sampled_from([False] * 6 + [True]),
    "shared": st.sampled_from([False] * 5 + [True]),  # the event is also about another person
})
batches = st.lists(st.lists(step, min_size=1, max_size=6), min_size=2, max_size=5)


def _event(s: dict) -> dict:
    subject, relation = s["fact"]
    objects = {"lives_in": CITIES, "located_in": CITIES, "works_at": ORGS, "likes": ["tea", "chess"]}[relation]
    extra = {}
    if s["day"] is not None and s["lasts"] is not None:
        extra["valid_to"] = (T0 + timedelta(days=s["day"] + s["lasts"])).isoformat()
    if subject in PEOPLE:  # a person's events are about that data subject (organisations': no one)
        other = PEOPLE[(PEOPLE.index(subject) + 1) % len(PEOPLE)]
        extra["subjects"] = [f"s-{subject.lower()}"] + ([f"s-{other.lower()}"] if s["shared"] else [])
    event = fact_event(subject, relation, objects[s["object"] % len(objects)], day=s["day"], **extra)
    if s["retract"]:
        event["kind"] = "retraction"
    return event


def _rows(frame: pl.DataFrame) -> list[str]:
    """The facts as a sorted list of canonical rows (every column: subject, relation, object,
    valid time, sources, derivation, fact id, ...)."""
    return sorted(json.dumps(r, default=str, sort_keys=True) for r in frame.to_dicts())


def _same(got: pl.DataFrame, want: pl.DataFrame, what) -> None:
    got_rows, want_rows = _rows(got), _rows(want)
    assert got_rows == want_rows, (what, sorted(set(got_rows) - set(want_rows)), sorted(set(want_rows) - set(got_rows)))


def _edges(graph) -> list[str]:
    return sorted(json.dumps({k: d[k] for k in EDGE_KEYS}, default=str, sort_keys=True)
                  for _, _, d in graph.edges(data=True))


def _same_graph(got, want, what) -> None:
    assert _edges(got) == _edges(want), what
    assert dict(got.nodes(data="name")) == dict(want.nodes(data="name")), what


def _build(root: Path, logs: list[list[dict]], folds: set[int], *, mode: str = "delete"):
    """A store of ``logs`` (one append each), folded after the appends numbered in ``folds``;
    the log version after each append."""
    mem = refold.init(root, mode=mode)
    versions = []
    for number, batch in enumerate(logs):
        mem.append(batch)
        versions.append(mem.log_store.version())
        if number in folds:
            mem.fold()
    return mem, versions


def _check_reads(mem, versions, events, when, label) -> None:
    """Every read named in the module docstring against the reference fold of ``events`` (the
    store's events as the reads must see them) and of their prefixes."""
    spec = mem.current_spec()
    whole = reference_of(mem, events=events, spec=spec)
    _same(mem.facts(), reference_facts(whole), (label, "facts"))
    _same(mem.facts(valid_at=when.isoformat()), reference_facts(whole, valid_at=when), (label, "valid_at", when))
    for person in PEOPLE:
        _same(mem.facts(subject=person), reference_facts(whole, subject=person), (label, "subject", person))
    _same_graph(mem.graph(), whole.graph, (label, "graph"))
    valid = mem.graph(valid_at=when.isoformat())
    assert sorted(valid.edges(keys=True)) == sorted(
        (u, v, k) for u, v, k, d in whole.graph.edges(keys=True, data=True) if is_current(d, valid_at=when)), label
    for version in versions:
        prefix = [e for e in events if e.table_version <= version]
        _same(mem.facts(as_of=version), reference_facts(reference_of(mem, events=prefix, spec=spec)),
              (label, "as_of", version))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(logs=batches, data=st.data())
@pytest.mark.slow
def test_reads_of_the_state_tables_equal_the_reference_fold_also_after_an_erasure(logs, data):
    logs = [[_event(s) for s in batch] for batch in logs]
    folds = set(data.draw(st.lists(st.integers(0, len(logs) - 1), min_size=1, max_size=3), label="fold after"))
    when = T0 + timedelta(days=data.draw(st.integers(0, 60), label="valid_at day"))
    with tempfile.TemporaryDirectory() as tmp:
        mem, versions = _build(Path(tmp) / "store", logs, folds)
        events = mem.events()
        event("reads overlay events after the tag" if max(folds) < len(logs) - 1 else "reads at the tag")
        _check_reads(mem, versions, events, when, "reads")
        # a fresh process reads the same from the tables at their tag and the overlay
        _same(refold.open(mem.root).facts(), mem.facts(), "fresh process")

        mentioned = sorted({s for e in events for s in e.subjects})
        if not mentioned:
            return
        erased = data.draw(st.sampled_from(mentioned), label="erased subject")
        event("erased a subject")
        mem.erase(erased)  # (by the events' subject ids: no registry entry needed)
        survivors = without_subjects(events, [erased])
        # (the erasure's own events state no fact: the reference folds the surviving events)
        _check_reads(mem, versions, survivors, when, ("erased", erased))
        assert mem.facts(subject=erased.removeprefix("s-").title()).height == 0


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(logs=batches, data=st.data())
@pytest.mark.slow
def test_a_shred_mode_read_after_a_key_destroyed_outside_an_erasure_equals_the_reference_fold(logs, data):
    logs = [[_event(s) for s in batch] for batch in logs]
    folds = set(data.draw(st.lists(st.integers(0, len(logs) - 1), min_size=1, max_size=2), label="fold after"))
    when = T0 + timedelta(days=data.draw(st.integers(0, 60), label="valid_at day"))
    with tempfile.TemporaryDirectory() as tmp:
        mem, versions = _build(Path(tmp) / "store", logs, folds, mode="shred")
        events = mem.events()  # (decrypted)
        assert all(e.content is not None for e in events)
        _check_reads(mem, versions, events, when, "shred")
        mentioned = sorted({s for e in events for s in e.subjects})
        if not mentioned:
            return
        destroyed = data.draw(st.sampled_from(mentioned), label="destroyed key")
        event("destroyed a key")
        mem.key_store.destroy(destroyed)  # not refold's erasure: no receipt, no fold
        survivors = without_subjects(events, [destroyed])
        _check_reads(mem, versions, survivors, when, ("destroyed", destroyed))
        fresh = refold.open(mem.root)  # another process: the same answer
        _same(fresh.facts(), reference_facts(reference_of(fresh, events=survivors)), "fresh process")
