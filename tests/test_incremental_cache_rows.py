"""The extraction cache's row encodings spelled out for speed (storage/cache_rows.py) give the
bytes the JSON encoder gives, and the fold's and the read overlay's file-by-file reads
(``ExtractionCache.get``, ``log_range.events_from``: the log's tail) give the rows the dataset
reads gave (real Delta tables in tmp_path)."""

from __future__ import annotations

import json
from datetime import timedelta, timezone

import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

import refold
from refold.fold.extract import ExtractedFact
from refold.storage.cache.rows import CACHE_SCHEMA, _facts_from_json, _facts_json, _meta_json
from refold.storage.delta.io import read_arrow
from refold.storage.log.ranges import events_from
from refold.storage.log.schema import EVENTS_SCHEMA, table_to_events
from refold.storage.delta.handles import shared_table
from tests.fold_helpers import fact_event
from tests.snapshot_helpers import CountingRules

ENCODER = json.JSONEncoder(ensure_ascii=False).encode
META_ENCODER = json.JSONEncoder(sort_keys=True, default=str).encode

text = st.text(st.characters(), max_size=12)  # every code point: quotes, controls, surrogates
zones = st.sampled_from([timezone.utc, timezone(timedelta(hours=2)), timezone(timedelta(hours=-5, minutes=-30))])
times = st.one_of(st.none(), st.datetimes(timezones=zones), st.datetimes())
confidences = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-3, 3), st.booleans())


class Name(str):
    """A str subclass: the encoder writes its value; the spelled-out path hands it back."""


def _encoded(facts) -> str:
    return ENCODER([{"subject": f.subject, "relation": f.relation, "object": f.object,
                     "valid_from": None if f.valid_from is None else f.valid_from.isoformat(),
                     "valid_to": None if f.valid_to is None else f.valid_to.isoformat(),
                     "confidence": f.confidence} for f in facts])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.builds(ExtractedFact, text, text, st.one_of(text, text.map(Name)), times, times, confidences),
                max_size=4))
def test_facts_json_is_the_encoders_text(facts):
    assert _facts_json(facts) == _encoded(facts)
    assert _facts_json(iter(facts)) == _encoded(facts)  # any iterable, as before


@settings(max_examples=100, deadline=None)
@given(st.lists(st.builds(ExtractedFact, text, text, text, st.one_of(st.none(), st.datetimes(timezones=zones)),
                          st.one_of(st.none(), st.datetimes(timezones=zones)), st.floats(0, 1)), max_size=3))
def test_facts_json_reads_back(facts):
    assert _facts_from_json(_facts_json(facts)) == tuple(facts)


values = st.one_of(text, st.tuples(text, text), st.integers(0, 2), st.floats(0, 2), st.booleans(), st.none(),
                   st.lists(text, max_size=2), st.tuples(st.integers(0, 1)))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(text, values), max_size=3))
def test_meta_json_is_the_encoders_text_every_time(meta):
    meta = tuple(meta)
    for _ in range(2):  # (the second time from the cache where it caches)
        assert _meta_json(meta) == (META_ENCODER(dict(meta)) if meta else "{}")


def test_equal_metas_of_different_types_keep_their_own_text():
    metas = [(("n", 1),), (("n", 1.0),), (("n", True),), (("n", ("1",)),), (("n", "1"),)]
    for _ in range(2):
        assert [_meta_json(m) for m in metas] == ['{"n": 1}', '{"n": 1.0}', '{"n": true}', '{"n": ["1"]}',
                                                  '{"n": "1"}']


def test_get_reads_the_rows_a_filtered_dataset_read_gives(tmp_path):
    mem = refold.init(tmp_path / "store")
    mem.append([fact_event(f"P{i}", "lives_in", f"City{i % 3}", day=i) for i in range(30)])
    mem.fold(extractor=CountingRules())
    spec = CountingRules().default_spec()
    cache = mem.cache
    ids = [e.event_id for e in mem.events() if e.kind == "memory_written"]
    wanted = ids[3:9] + ids[20:22] + ["absent-1", "zzz-absent"]
    got = cache.get(spec.hash, wanted)
    with shared_table(cache.path).view() as view:
        expected = read_arrow(view, CACHE_SCHEMA, filter=(pc.field("spec_hash") == spec.hash)
                              & pc.field("event_id").isin(wanted)).to_pylist()
    assert sorted(got) == sorted(r["event_id"] for r in expected) == sorted(ids[3:9] + ids[20:22])
    assert all(got[i].facts and got[i].spec_hash == spec.hash for i in got)
    assert cache.get("another-spec", wanted) == {}
    assert cache.get(spec.hash, ["absent"]) == {}


def test_the_logs_tail_reads_the_rows_a_dataset_read_gives(tmp_path):
    mem = refold.init(tmp_path / "store")
    for start in (0, 10, 20):  # three appends: three data files
        mem.append([fact_event(f"P{i}", "lives_in", "Oslo", day=i) for i in range(start, start + 10)])
    last = mem.events()[-1].seq
    for start in (0, 5, 15, last, last + 1):
        events = events_from(mem.log_store, start)
        with shared_table(mem.layout.events).view() as view:
            rows = read_arrow(view, EVENTS_SCHEMA, filter=pc.field("seq") >= start).sort_by("seq")
        assert events == list(table_to_events(rows)) and len(events) == max(last + 1 - start, 0)
