"""The columnar merge (refold.fold.columnar) gives exactly the reference partition merge's rows.

``merge_items`` merges the groups with a closed form as polars expressions and the others event
by event; for random logs of both kinds, and logs mixing them, its rows equal
``fold_partition``'s (which tests/test_fold_partition.py holds to the reference fold) column for
column, and the groups it calls simple are the ones the closed form covers.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refold.fold.columnar import split_simple
from refold.fold.events import Event, Fact
from refold.fold.extract import ExtractedFact
from refold.fold.partition import fold_partition, items_frame, items_of, merge_items
from refold.fold.spec import FoldSpec

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
SPEC = FoldSpec()
PEOPLE = ["Ada", "ada", " Ada ", "Bob", "Cy", "!!!"]  # ("!!!": no entity key: the merge rejects it)
PLACES = ["Acme", "acme", "Globex", "Paris", "Rome"]
RELATIONS = ["works_at", "employed_by", "lives_in", "likes", "--"]  # (aliases, multi-valued, no name)

simple_fact = st.tuples(st.sampled_from(PEOPLE), st.sampled_from(RELATIONS), st.sampled_from(PLACES),
                        st.sampled_from([0.5, 0.9, 1.0]))
simple_event = st.tuples(st.sampled_from(["t1", "t2"]), st.lists(simple_fact, min_size=0, max_size=3),
                         st.sampled_from([None, ("p1",), ("p1", "p2")]))
#: the rarer branches: a retraction, a stated start going back, a stated end
twist = st.one_of(st.none(), st.tuples(st.sampled_from(["retract", "back", "end"]), st.integers(0, 30)))


def _log(raw, twists=()) -> list[dict]:
    rows = []
    for seq, (tenant, facts, principals) in enumerate(raw):
        twist_ = twists[seq] if seq < len(twists) else None
        when = T0 + timedelta(hours=seq)
        valid_from = T0 + timedelta(hours=twist_[1]) if twist_ and twist_[0] == "back" else None
        valid_to = when + timedelta(days=1) if twist_ and twist_[0] == "end" else None
        retract = bool(twist_ and twist_[0] == "retract" and facts)
        event = Event(seq=seq, event_id=f"e{seq}", recorded_at=when, table_version=0, tenant=tenant,
                      source="test", principals=principals or (), content="text",
                      kind="retraction" if retract else "observation",
                      fact=Fact(*facts[0][:3]) if retract else None, valid_from=valid_from, valid_to=valid_to)
        rows += items_of(event, [ExtractedFact(s, r, o, confidence=c) for s, r, o, c in facts], 7)
    return rows


def _same(rows: list[dict]) -> None:
    items = items_frame(rows)
    got = merge_items(SPEC, items.sample(fraction=1.0, shuffle=True, seed=1), buckets=7)
    ordered = items.sort(["seq", "ordinal"])
    want = fold_partition(SPEC, ordered.iter_rows(named=True), buckets=7)
    assert got.to_dicts() == pl.from_dicts(want, schema=got.schema).to_dicts() if want else got.height == 0


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=st.lists(simple_event, max_size=30))
def test_logs_without_the_rarer_branches_merge_alike(raw):
    _same(_log(raw))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=st.lists(simple_event, max_size=30), twists=st.lists(twist, max_size=30))
def test_logs_mixing_both_kinds_of_group_merge_alike(raw, twists):
    _same(_log(raw, twists))


def test_the_closed_form_takes_plain_groups_and_leaves_the_others():
    raw = [("t1", [("Ada", "lives_in", "Paris", 1.0)], None),
           ("t1", [("Ada", "lives_in", "Rome", 1.0), ("Bob", "likes", "Rome", 1.0)], None),
           ("t1", [("Ada", "lives_in", "Rome", 0.5)], ("p1",)),
           ("t1", [("Bob", "works_at", "Acme", 1.0)], None),
           ("t1", [("Bob", "works_at", "Acme", 1.0)], None)]
    twists = [None, None, None, None, ("retract", 0)]
    simple, rest = split_simple(SPEC, items_frame(_log(raw, twists)))
    assert set(zip(simple["subject_node"], simple["_relation"])) == {("t1/ada", "lives_in"), ("t1/bob", "likes")}
    assert set(zip(rest["subject_node"], rest["relation"])) == {("t1/bob", "works_at")}
    merged = merge_items(SPEC, items_frame(_log(raw, twists)), buckets=7)
    ada = merged.filter(pl.col("subject") == "t1/ada").sort("recorded_seq")
    assert ada["object"].to_list() == ["t1/paris", "t1/rome"]
    assert ada["valid_to"].to_list() == [T0 + timedelta(hours=1), None]
    assert ada["sources"].to_list() == [["e0"], ["e1", "e2"]]
    assert ada["superseded_by"][0] == ada["fact_id"][1] and ada["ended_by"][0] == "e1"
    _same(_log(raw, twists))
