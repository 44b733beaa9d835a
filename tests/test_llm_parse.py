"""parse_output: never raises, keeps only grounded facts, and accounts for every item it drops."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refold.fold.extract import Rejection
from refold.fold.parse import ground, normalise_words, parse_output, speaker_of
from refold.fold.prompts import default_model_spec
from refold.fold.spec import FoldSpec
from tests.test_extractor_contract import make_event

SPEC = FoldSpec(extractor="llamacpp", model=default_model_spec("m", max_facts=4))
TEXT = "Caroline: I moved to Boston last May. My sister Ines works at St. Mary's Hospital."
EVENT = make_event(1, "chat_turn", TEXT)


def _out(*facts, **top) -> str:
    return json.dumps({"facts": list(facts), **top})


def _f(s, r, o, **extra) -> dict:
    return {"subject": s, "relation": r, "object": o, **extra}


def _parse(raw, event=EVENT, spec=SPEC):
    return parse_output(raw, event, spec)


def _items(raw: str) -> list | None:
    """The facts array when the top level is well formed, else None."""
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if isinstance(value, dict) and set(value) == {"facts"} and isinstance(value["facts"], list):
        return value["facts"]
    return None


def _assert_accounted(raw: str, facts, rejected) -> None:
    items = _items(raw.strip()) if raw.strip() else None
    if items is None:
        assert facts == () and len(rejected) == 1
        assert rejected[0].reason in {"empty", "invalid_json", "schema"}
        assert rejected[0].detail.startswith("output:")
    else:
        assert len(facts) + len(rejected) == len(items)
        assert all(r.detail.startswith("fact[") for r in rejected)
        indices = [int(r.detail[5:r.detail.index("]")]) for r in rejected]
        assert len(set(indices)) == len(indices)


# -- properties ----------------------------------------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
_words = st.sampled_from(["Caroline", "I", "me", "Boston", "sister", "Ines", "St. Mary's Hospital",
                          "Paris", "the hospital", "", "  ", "Mary", "boston!", "2023"])
_fact = st.fixed_dictionaries(
    {"subject": _words, "relation": st.sampled_from(["lives_in", "moved to", "Works-At", "", "x"]),
     "object": _words},
    optional={"valid_from": st.sampled_from(["2023-05-01", "1000-10-10", "2023-13-01", "May"]),
              "extra": st.integers()},
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(_json)
@pytest.mark.slow
def test_any_json_value_is_parsed_or_rejected_never_raised(value):
    raw = json.dumps(value)
    facts, rejected = _parse(raw)
    _assert_accounted(raw, facts, rejected)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_fact, _json), max_size=7), st.booleans())
@pytest.mark.slow
def test_every_fact_item_ends_up_kept_or_rejected(items, extra_key):
    raw = _out(*items, **({"note": 1} if extra_key else {}))
    facts, rejected = _parse(raw)
    _assert_accounted(raw, facts, rejected)
    for fact in facts:  # what is kept is grounded, canonical and not degenerate
        assert fact.relation == SPEC.canonical_relation(fact.relation)
        assert fact.subject != fact.object
        assert 0.6 <= fact.confidence <= 1.0


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60), st.text(max_size=80))
def test_arbitrary_text_never_raises(raw, content):
    facts, rejected = _parse(raw, event=make_event(1, "document", content or "x"))
    _assert_accounted(raw, facts, rejected)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["alpha", "Beta", "gamma", "Delta", "epsilon"]), min_size=2, max_size=5, unique=True))
def test_entities_copied_from_the_text_are_grounded(words):
    event = make_event(1, "document", " ".join(words) + ".")
    facts, rejected = _parse(_out(_f(words[0], "knows", words[-1])), event=event)
    assert rejected == ()
    assert [(f.subject, f.object, f.confidence) for f in facts] == [(words[0], words[-1], 1.0)]


# -- output-level rejections ---------------------------------------------------------------------

def test_invalid_json_is_one_counted_rejection_that_quotes_the_output():
    facts, rejected = _parse('{"facts": [{"subject": "Caroline", "rel')
    assert facts == ()
    assert [r.reason for r in rejected] == ["invalid_json"]
    assert '{"facts": [{"subject": "Caroline"' in rejected[0].detail


def test_empty_output_is_rejected_as_empty():
    assert _parse("  \n") == ((), (Rejection("empty", "output: the model returned no text"),))
    assert _parse(None)[1][0].reason == "empty"


def test_top_level_shape_is_checked():
    for raw, needle in [("[]", "expected an object"), ('{"fact": []}', "'facts' is a required"),
                        ('{"facts": {}}', "must be an array"), (_out(note="x"), "unexpected key")]:
        facts, rejected = _parse(raw)
        assert facts == () and [r.reason for r in rejected] == ["schema"], raw
        assert needle in rejected[0].detail


def test_markdown_fence_around_json_is_accepted():
    facts, rejected = _parse("```json\n" + _out(_f("Caroline", "lives_in", "Boston")) + "\n```")
    assert [(f.subject, f.object) for f in facts] == [("Caroline", "Boston")] and rejected == ()


# -- item-level rejections -----------------------------------------------------------------------

def test_schema_violations_per_item():
    raw = _out(_f("Caroline", "lives_in", "Boston"), {"subject": "Ines"}, _f("Ines", "", "Boston"),
               _f("Ines", "x", "Boston", mood="happy"), "just a string", _f("Ines", "works_at", "Hospital"))
    facts, rejected = _parse(raw)
    assert [(f.subject, f.relation, f.object) for f in facts] == [("Caroline", "lives_in", "Boston")]
    assert [r.reason for r in rejected] == ["schema"] * 4 + ["schema"]  # 5th item beyond maxItems 4
    assert rejected[0].detail.startswith("fact[1]") and "'relation' is a required property" in rejected[0].detail
    assert "beyond maxItems 4" in rejected[-1].detail


def test_ungrounded_subject_or_object_is_rejected_with_the_missing_words():
    facts, rejected = _parse(_out(_f("Maria", "lives_in", "Lisbon"), _f("Caroline", "lives_in", "Boston")))
    assert [f.object for f in facts] == ["Boston"]
    assert rejected[0].reason == "ungrounded"
    assert "subject 'Maria' grounded 0.00" in rejected[0].detail and "missing ['lisbon']" in rejected[0].detail


def test_partial_span_match_uses_the_threshold():
    # "St Mary's General Hospital": 4 of 5 words in the text (0.8) → kept at 0.6, rejected at 0.9
    raw = _out(_f("Ines", "works_at", "St Mary's General Hospital"))
    facts, _ = _parse(raw)
    assert facts[0].object == "St Mary's General Hospital" and facts[0].confidence == 0.8
    strict = SPEC.with_(model=replace(SPEC.model, grounding_threshold=0.9))
    facts, rejected = _parse(raw, spec=strict)
    assert facts == () and rejected[0].reason == "ungrounded"


def test_relations_are_canonicalised_and_duplicates_counted():
    raw = _out(_f("I", "Moved To", "Boston"), _f("Caroline", "lives_in", "boston"), _f("Ines", "Works-At", "St. Mary's Hospital"))
    facts, rejected = _parse(raw)
    assert [(f.subject, f.relation, f.object) for f in facts] == [
        ("Caroline", "lives_in", "Boston"), ("Ines", "works_at", "St. Mary's Hospital")]
    assert [r.reason for r in rejected] == ["duplicate"] and rejected[0].detail.startswith("fact[1]")


def test_subject_equal_to_object_is_degenerate():
    facts, rejected = _parse(_out(_f("Boston", "lives_in", "boston")))
    assert facts == () and [r.reason for r in rejected] == ["degenerate"]


def test_valid_from_must_be_a_date_stated_by_the_event():
    dated = make_event(1, "chat_turn", "Ann: In 2021 I moved to Oslo.", valid_from=datetime(2024, 2, 3, tzinfo=timezone.utc))
    raw = _out(_f("Ann", "lives_in", "Oslo", valid_from="2021-06-01"),   # year in the text
               _f("Ann", "likes", "Oslo", valid_from="2024-02-03"),      # the event's own date
               _f("Ann", "visited", "Oslo", valid_from="1000-10-10"),    # invented
               _f("Ann", "left", "Oslo", valid_from="2021-13-01"))       # not a date
    facts, rejected = _parse(raw, event=dated)
    assert [(f.relation, f.valid_from) for f in facts] == [
        ("lives_in", datetime(2021, 6, 1, tzinfo=timezone.utc)), ("likes", datetime(2024, 2, 3, tzinfo=timezone.utc))]
    assert [r.reason for r in rejected] == ["ungrounded", "schema"]
    assert "valid_from 1000-10-10" in rejected[0].detail and "not a calendar date" in rejected[1].detail


# -- grounding units -----------------------------------------------------------------------------

def test_normalisation_casefolds_and_strips_punctuation():
    assert normalise_words("St. Mary’s HOSPITAL!") == ["st", "mary", "s", "hospital"]
    assert normalise_words("Straße") == ["strasse"]
    assert normalise_words("ﬁle") == ["file"]  # NFKC


def test_ground_shares_and_articles():
    words = frozenset(normalise_words(TEXT))
    assert ground("Boston", words, None).share == 1.0
    assert ground("the Boston", words, None).share == 1.0  # articles do not count
    assert ground("Boston Harbor", words, None).share == 0.5
    assert ground("!!!", words, None).share == 0.0 and "no words" in ground("!!!", words, None).detail


def test_first_person_grounds_to_the_speaker():
    assert speaker_of("Caroline: I moved.") == "Caroline"
    assert speaker_of("Mary Ann Lee: hi") == "Mary Ann Lee"
    assert speaker_of("I moved to Boston.") is None
    assert speaker_of("note:lowercase") is None
    words = frozenset(normalise_words(TEXT))
    assert ground("me", words, "Caroline") == ground("I", words, "Caroline")
    assert ground("My", words, "Caroline").name == "Caroline"
    no_speaker = ground("I", words, None)
    assert no_speaker.share == 0.0 and "no speaker" in no_speaker.detail
    facts, _ = _parse(_out(_f("I", "lives_in", "Boston")))
    assert facts[0].subject == "Caroline"
    facts, rejected = _parse(_out(_f("I", "lives_in", "Boston")), event=make_event(2, "document", "I live in Boston."))
    assert facts == () and rejected[0].reason == "ungrounded"


def test_spec_without_model_uses_default_threshold():
    facts, rejected = parse_output(_out(_f("Caroline", "lives_in", "Boston")), EVENT, FoldSpec())
    assert len(facts) == 1 and rejected == ()
