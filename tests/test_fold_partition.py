"""The partitioned fold equals the reference fold (refold.fold.reference: merge + roll-ups on one
networkx graph).

The oracle: for random logs (supersession, retraction, corroboration, aliases, two tenants,
compose and inverse roll-ups, erased events, log prefixes for as_of, valid_at filters) the fold
partition by partition, with roll-ups as a join stage, gives exactly the reference fold's edges
and nodes, attribute for attribute, whatever the bucket count.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refold.fold.events import Event, Fact
from refold.fold.extract import ExtractedFact, Extraction
from refold.fold.merge import is_current
from refold.fold.partition import fold_pairs
from refold.fold.reference import reference_fold
from refold.fold.spec import FoldSpec

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
SPEC = FoldSpec()
PEOPLE = ["Ada", "ada", "The Ada", " Ada ", "Bob", "Cy", "Dee", "!!!"]  # ("!!!": no entity key: rejected)
PLACES = ["Acme", "acme", "Globex", "Paris", "Rome", "Oslo", 'Zoë "Z" Ltd']
RELATIONS = ["works_at", "employed_by", "located_in", "lives_in", "moved_to", "likes", "--"]  # ("--": no name)

fact_st = st.tuples(st.sampled_from(PEOPLE + PLACES), st.sampled_from(RELATIONS), st.sampled_from(PLACES),
                    st.one_of(st.none(), st.integers(0, 40)), st.one_of(st.none(), st.integers(0, 40)),
                    st.sampled_from([0.5, 0.9, 1.0]))
event_st = st.tuples(
    st.sampled_from(["fact", "fact", "fact", "retraction", "erased"]),
    st.sampled_from(["t1", "t2"]),
    st.lists(fact_st, min_size=0, max_size=3),
    st.one_of(st.none(), st.integers(0, 40)),
    st.integers(0, 3),  # event_id reuse: the same event id may repeat its own fact
)


def _day(n):
    return None if n is None else T0 + timedelta(days=n)


def build_log(raw) -> list[tuple[Event, Extraction | None]]:
    pairs = []
    for seq, (kind, tenant, facts, event_day, _) in enumerate(raw):
        base = dict(seq=seq, event_id=f"e{seq}", recorded_at=T0 + timedelta(hours=seq), table_version=0,
                    tenant=tenant, source="test", principals=(f"p{seq % 2}",), valid_from=_day(event_day))
        if kind == "retraction" and facts:
            s, r, o = facts[0][:3]
            pairs.append((Event(kind="retraction", content="retract", fact=Fact(s, r, o), **base), None))
            continue
        content = None if kind == "erased" else "text"
        extraction = Extraction(event_id=f"e{seq}", spec_hash=SPEC.hash, facts=tuple(
            ExtractedFact(s, r, o, valid_from=_day(vf), valid_to=_day(vt) if vt and vf and vt > vf else None,
                          confidence=c) for s, r, o, vf, vt, c in facts))
        pairs.append((Event(kind="observation", content=content, **base), extraction))
    return pairs


def reference(pairs):
    return reference_fold(SPEC, [e for e, _ in pairs], {e.event_id: x for e, x in pairs if x is not None}).graph


def edge_set(dicts):
    keys = ("fact_id", "tenant", "subject", "relation", "object", "valid_from", "valid_to", "recorded_seq",
            "recorded_at", "sources", "source_seqs", "source_principals", "derivation", "inputs", "confidence",
            "superseded_by", "ended_by")
    return sorted(json.dumps({k: d[k] for k in keys}, default=str, sort_keys=True) for d in dicts)


def check(pairs, buckets, valid_at=None):
    graph = reference(pairs)
    merged, derived, entities = fold_pairs(SPEC, pairs, buckets=buckets)
    rows = merged.to_dicts() + derived.to_dicts()
    want = [d for _, _, d in graph.edges(data=True)]
    if valid_at is not None:
        rows = [r for r in rows if is_current(r, valid_at=valid_at)]
        want = [d for d in want if is_current(d, valid_at=valid_at)]
    assert edge_set(rows) == edge_set(want)
    nodes = {n: {"tenant": d["tenant"], "name": d["name"], "key": d["key"], "aliases": d["aliases"],
                 "summary": d["summary"], "summary_sources": d["summary_sources"]}
             for n, d in graph.nodes(data=True)}
    got = {r["node"]: {"tenant": r["tenant"], "name": r["name"], "key": r["key"], "aliases": r["aliases"],
                       "summary": json.loads(r["summary"]), "summary_sources": r["summary_sources"]}
           for r in entities.to_dicts()}
    assert got == nodes
    # (the summary string is json.dumps's, byte for byte, names with quotes and accents included)
    assert {r["node"]: r["summary"] for r in entities.to_dicts()} == \
        {n: json.dumps(d["summary"], ensure_ascii=False) for n, d in graph.nodes(data=True)}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=st.lists(event_st, min_size=0, max_size=25), buckets=st.sampled_from([1, 2, 3, 7, 64]),
       cut=st.integers(0, 25), valid_day=st.one_of(st.none(), st.integers(0, 45)))
def test_partitioned_fold_equals_reference(raw, buckets, cut, valid_day):
    pairs = build_log(raw)
    check(pairs, buckets)
    check(pairs[:cut], buckets, valid_at=_day(valid_day))  # as_of: the fold of a log prefix


def test_compose_rollup_crosses_partitions():
    """A works_at in one bucket and the employer's located_in in another still compose."""
    raw = [("fact", "t1", [("Ada", "works_at", "Acme", 1, None, 1.0)], None, 0),
           ("fact", "t1", [("Acme", "located_in", "Paris", 0, None, 1.0)], None, 0),
           ("fact", "t1", [("Acme", "located_in", "Rome", 5, None, 1.0)], None, 0)]
    pairs = build_log(raw)
    merged, derived, _ = fold_pairs(SPEC, pairs, buckets=64)
    assert merged.filter(merged["subject"] == "t1/ada")["bucket"][0] != \
        merged.filter(merged["subject"] == "t1/acme")["bucket"][0]
    works_in = derived.filter(derived["relation"] == "works_in").sort("valid_from")
    assert works_in["object"].to_list() == ["t1/paris", "t1/rome"]
    assert works_in["sources"].to_list() == [["e0", "e1"], ["e0", "e2"]]
    check(pairs, 64)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=st.lists(event_st, min_size=0, max_size=25))
def test_compose_rows_of_one_subject_equal_the_full_join(raw):
    """What a read derives for one subject (its rows, and its objects' rows: two pruned reads)
    is exactly the full join's rows of that subject (ids, validity, lineage)."""
    import polars as pl

    from refold.fold.partition import derive_for_subjects, derive_frame, read_time_rules

    merged, _, _ = fold_pairs(SPEC, build_log(raw), buckets=7)
    full = derive_frame(read_time_rules(SPEC.rollups), merged, buckets=7)
    for subject in sorted(set(merged["subject"].to_list())):
        rows = merged.filter(pl.col("subject") == subject)
        partners = merged.filter(pl.col("subject").is_in(rows["object"].implode()))
        got = derive_for_subjects(SPEC.rollups, rows, partners, [subject], buckets=7)
        assert edge_set(got.to_dicts()) == edge_set(full.filter(pl.col("subject") == subject).to_dicts())
        assert got["bucket"].to_list() == full.filter(pl.col("subject") == subject)["bucket"].to_list()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=st.lists(event_st, min_size=0, max_size=25))
def test_the_search_for_a_derived_id_finds_the_inputs_of_every_compose_row(raw):
    """``why`` of a compose-derived id finds its inputs with an interval join
    (refold.reads.rollups.pairs_deriving): exactly the pairs of the full join's rows."""
    import polars as pl

    from refold.fold.partition import derive_frame, read_time_rules
    from refold.reads.rollups import pairs_deriving

    merged, _, _ = fold_pairs(SPEC, build_log(raw), buckets=7)
    for rule in read_time_rules(SPEC.rollups):
        full = derive_frame((rule,), merged, buckets=7)
        ids = set(full["fact_id"].to_list())
        first, second = (merged.filter(pl.col("relation") == r) for r in rule.inputs)
        found = pairs_deriving(rule, first, second, ids | {"f_unknown"})
        assert sorted(found) == sorted(tuple(i) for i in full["inputs"].to_list())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=st.lists(event_st, min_size=0, max_size=25), cut=st.integers(0, 25))
@pytest.mark.slow
def test_advancing_the_open_rows_of_a_prefix_gives_the_fold_of_the_whole_log(raw, cut):
    """An incremental fold hands the merge only the touched subjects' open rows: the merge never
    changes a closed row, so the prefix's closed rows plus the open ones advanced by the rest of
    the log are exactly the merged rows of the whole log, and the ids it reports as changed are
    the rows that differ from the prefix's."""
    from refold.fold.partition import advance_subjects, items_of

    pairs = build_log(raw)
    head, _, _ = fold_pairs(SPEC, pairs[:cut], buckets=3)
    whole, _, _ = fold_pairs(SPEC, pairs, buckets=3)
    items = sorted((i for event, extraction in pairs[cut:]
                    for i in items_of(event, None if extraction is None else extraction.facts, 3)),
                   key=lambda i: (i["seq"], i["ordinal"]))
    rows = head.to_dicts()
    opened = [r for r in rows if r["valid_to"] is None]
    advanced, changed = advance_subjects(SPEC, opened, items, buckets=3)
    assert edge_set([r for r in rows if r["valid_to"] is not None] + advanced) == edge_set(whole.to_dicts())
    before = {r["fact_id"]: edge_set([r]) for r in opened}
    assert changed == {r["fact_id"] for r in advanced if before.get(r["fact_id"]) != edge_set([r])}
