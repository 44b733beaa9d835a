"""The rules extractor: every documented pattern, what it must not extract, speaker resolution,
memory_written facts, the registry. Pure: no store, no model."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from datetime import datetime, timezone

import pytest

from refold.extractors import _REGISTRY, available_extractors, get_extractor
from refold.fold.errors import ExtractionError, ValidationError
from refold.fold.events import Event, Fact
from refold.fold.extractors.patterns import MAX_OBJECT_CHARS, PATTERNS, RULES_VERSION, clean_object
from refold.fold.extractors.rules import MAX_FACTS_PER_EVENT, RulesExtractor, speaker_of
from refold.fold.spec import FoldSpec

T0 = datetime(2024, 5, 1, tzinfo=timezone.utc)
T1 = datetime(2024, 9, 1, tzinfo=timezone.utc)
SPEC = FoldSpec()


def ev(content: str | None, *, kind: str = "chat_turn", source: str = "chat#1", seq: int = 0,
       subjects: tuple[str, ...] = (), **extra) -> Event:
    return Event(seq=seq, event_id=f"ev-{seq}", recorded_at=T0, table_version=0, kind=kind,
                 tenant="default", source=source, content=content, subjects=subjects, **extra)


def triples(content: str, **kw) -> list[tuple[str, str, str]]:
    [extraction] = RulesExtractor().extract([ev(content, **kw)], SPEC)
    return [(f.subject, f.relation, f.object) for f in extraction.facts]


# ---------------------------------------------------------------------------------------------
# Patterns


@pytest.mark.parametrize("pattern", PATTERNS, ids=[p.name for p in PATTERNS])
def test_each_documented_example_gives_its_fact(pattern):
    assert pattern.expected in triples(f"Caroline: {pattern.example}")


def test_pattern_names_are_unique_and_confidences_in_range():
    names = [p.name for p in PATTERNS]
    assert len(names) == len(set(names))
    assert all(0.6 <= p.confidence <= 0.8 for p in PATTERNS)


@pytest.mark.parametrize("text, expected", [
    ("I live in New York City with my wife.", ("user", "lives_in", "New York City")),
    ("I really live in the Netherlands now!", ("user", "lives_in", "Netherlands")),
    ("I moved to Berlin, which I love.", ("user", "lives_in", "Berlin")),
    ("Maria Lopez lives in Madrid.", ("Maria Lopez", "lives_in", "Madrid")),
    ("Melanie moved to Denver in 2021.", ("Melanie", "lives_in", "Denver")),
    ("I work for Bank of America.", ("user", "works_at", "Bank of America")),
    ("Ann works at Globex since 2020.", ("Ann", "works_at", "Globex")),
    ("I'm an architect.", ("user", "is_a", "architect")),
    ("I am a software engineer at Globex.", ("user", "is_a", "software engineer")),
    ("I have a cat named Whiskers.", ("user", "has_cat", "Whiskers")),
    ("I adopted a little black kitten called Luna!", ("user", "has_kitten", "Luna")),
    ("My favourite color is blue.", ("user", "favorite_color", "blue")),
    ("My email is ann@example.com.", ("user", "email", "ann@example.com")),
    ("My email is tom.becker@example.org by the way.", ("user", "email", "tom.becker@example.org")),
    ("I like jazz.", ("user", "likes", "jazz")),
    ("I enjoy hiking and biking.", ("user", "likes", "hiking")),
    ("I love sci-fi and fantasy books.", ("user", "likes", "sci-fi and fantasy books")),
    ("I was born in Lagos, Nigeria.", ("user", "born_in", "Lagos")),
    ("My risk tolerance is low.", ("user", "risk_tolerance", "low")),
    ("Paris is France's capital.", ("France", "capital", "Paris")),
    ("Yesterday I met Rob at the gym.", ("user", "met", "Rob")),
])
def test_more_examples(text, expected):
    assert expected in triples(text)


@pytest.mark.parametrize("text", [
    "Do you live in Paris?",                     # a question
    "I don't live in Paris anymore.",            # negated
    "If I lived in Paris I would be happy.",     # conditional
    "I wish I worked at Google.",                # a wish
    "I would love to live in Rome.",             # hedged
    "I think I am a genius.",                    # a guess
    "I love the idea!",                          # points into the context
    "I love that!",                              # a pronoun
    "I love how you did that.",                  # not a thing
    "I love hiking with you.",                   # involves the listener
    "I love listening to jazz.",                 # the gerund's object is cut away
    "I'm a bit tired.",                          # a state, not a role
    "I'm a big fan.",                            # no object
    "My life is great.",                         # no attribute
    "My car is awesome.",                        # an opinion
    "I live in a small town.",                   # an uncapitalised place
    "She lives in Paris.",                       # an unresolved pronoun
    "The things I love make me happy.",          # a relative clause
    "I went to a place.",                        # too generic
    "I like the smell of rain.",                 # unclear head noun
    "Thanks, that's great to hear!",             # nothing stated
])
def test_does_not_extract(text):
    assert triples(text) == []


def test_objects_are_normalised():
    assert triples("I live in Boston!!!") == [("user", "lives_in", "Boston")]
    assert triples("I work at the Acme Corp.") == [("user", "works_at", "Acme Corp")]
    assert triples("I moved to Oslo but I miss Rome.") == [("user", "lives_in", "Oslo")]
    assert triples("I joined a chess club last week.") == [("user", "joined", "chess club")]


def test_long_objects_are_dropped_not_truncated():
    long_name = "Xy" + "z" * MAX_OBJECT_CHARS
    assert triples(f"I live in {long_name}.") == []
    assert clean_object("Boston", "place") == "Boston"
    assert clean_object("Bostonian Federated Republic Of Many Words Here", "place") is None


def test_several_sentences_give_facts_in_reading_order():
    got = triples("Ann: I live in Oslo. My favorite food is sushi! Do you cook? I work at Telenor.")
    assert got == [("Ann", "lives_in", "Oslo"), ("Ann", "favorite_food", "sushi"),
                   ("Ann", "works_at", "Telenor")]


def test_duplicate_facts_in_one_event_are_kept_once():
    assert triples("I live in Oslo. Yes, I live in Oslo.") == [("user", "lives_in", "Oslo")]


def test_at_most_max_facts_per_event():
    text = " ".join(f"I joined club{i}." for i in range(MAX_FACTS_PER_EVENT + 4))
    assert len(triples(text)) == MAX_FACTS_PER_EVENT


def test_relations_go_through_the_spec_aliases():
    spec = FoldSpec(relation_aliases=(("likes", "enjoys"),))
    [x] = RulesExtractor().extract([ev("I like jazz.")], spec)
    assert [(f.relation, f.object) for f in x.facts] == [("enjoys", "jazz")]
    assert x.spec_hash == spec.hash


def test_pattern_facts_take_valid_time_from_the_event_and_name_their_pattern():
    [x] = RulesExtractor().extract([ev("I live in Oslo.", valid_from=T0, valid_to=T1)], SPEC)
    [fact] = x.facts
    assert (fact.valid_from, fact.valid_to, fact.confidence) == (T0, T1, 0.8)
    assert dict(x.meta) == {"patterns": ("i_live_in",), "speaker": "user"}
    assert (x.engine, x.request, x.model_id) == ("rules", None, None)


@pytest.mark.parametrize("kind", ["chat_turn", "document", "observation", "tool_call"])
def test_every_text_kind_is_matched(kind):
    assert triples("Ann: I live in Oslo.", kind=kind) == [("Ann", "lives_in", "Oslo")]


# ---------------------------------------------------------------------------------------------
# Speaker resolution


@pytest.mark.parametrize("content, source, subjects, speaker", [
    ("Caroline: I live in Boston.", "chat#7", ("s-1", "s-2"), "Caroline"),   # content prefix wins
    ("Mary Ann: I live in Boston.", "chat#7", (), "Mary Ann"),
    ("I live in Boston.", "chat#7:Caroline", (), "Caroline"),                 # source suffix
    ("I live in Boston.", "chat#7", ("subject-42",), "subject-42"),           # one subject id
    ("I live in Boston.", "chat#7", ("a", "b"), "user"),                      # ambiguous
    ("I live in Boston.", "chat#7", (), "user"),
    ("Note: I live in Boston.", "chat#7", (), "user"),                         # a label, not a name
    ("I live in Boston.", "locomo:26:D1:3", (), "user"),                       # dia id, not a name
    ("re: I live in Boston.", "chat#7", (), "user"),                           # lowercase: no name
])
def test_speaker_resolution(content, source, subjects, speaker):
    event = ev(content, source=source, subjects=subjects)
    assert speaker_of(event) == speaker
    assert triples(content, source=source, subjects=subjects) == [(speaker, "lives_in", "Boston")]


def test_third_person_subject_is_the_named_person_not_the_speaker():
    assert triples("Caroline: Melanie lives in Portland.") == [("Melanie", "lives_in", "Portland")]


# ---------------------------------------------------------------------------------------------
# Stated facts and kinds without facts


def test_memory_written_fact_is_returned_as_stated_with_canonical_relation():
    event = ev("Ann said she works for Acme.", kind="memory_written", valid_from=T0, valid_to=T1,
               fact=Fact("Ann", "works for", "Acme"), justification="Ann told me")
    [x] = RulesExtractor().extract([event], SPEC)
    [fact] = x.facts
    assert (fact.subject, fact.relation, fact.object) == ("Ann", "works_at", "Acme")
    assert (fact.valid_from, fact.valid_to, fact.confidence) == (T0, T1, 1.0)
    assert x.spec_hash == SPEC.hash and x.engine == "rules" and x.request is None


def test_memory_written_content_is_not_pattern_matched():
    event = ev("I live in Oslo.", kind="memory_written", fact=Fact("user", "likes", "tea"),
               justification="said so")
    assert triples_of(event) == [("user", "likes", "tea")]


@pytest.mark.parametrize("kind, content, fact", [
    ("retraction", "I live in Oslo.", Fact("user", "lives_in", "Oslo")),
    ("tombstone", None, None),
    ("erasure", "I live in Oslo.", None),
    ("spec_changed", "I live in Oslo.", None),
    ("chat_turn", None, None),
    ("memory_written", None, Fact("user", "lives_in", "Oslo")),  # erased after the fact
])
def test_kinds_and_events_without_facts(kind, content, fact):
    [x] = RulesExtractor().extract([ev(content, kind=kind, fact=fact)], SPEC)
    assert x.facts == () and x.event_id == "ev-0" and x.spec_hash == SPEC.hash


def triples_of(event: Event) -> list[tuple[str, str, str]]:
    [x] = RulesExtractor().extract([event], SPEC)
    return [(f.subject, f.relation, f.object) for f in x.facts]


# ---------------------------------------------------------------------------------------------
# Batches, determinism, pickling


def test_one_extraction_per_event_in_order():
    events = [ev(f"I live in City{i}.", seq=i) if i % 2 else ev(None, kind="tombstone", seq=i)
              for i in range(10)]
    out = RulesExtractor().extract(events, SPEC)
    assert [x.event_id for x in out] == [e.event_id for e in events]
    assert [bool(x.facts) for x in out] == [bool(i % 2) for i in range(10)]


_SAMPLE = ["Ann: I live in Oslo and I work at Telenor.", "Bob: I'm a nurse. I love jazz.",
           "Cy: My favorite color is green.", "Dee: I have a dog named Rex."]


def test_deterministic_across_calls_pickles_and_processes():
    events = [ev(text, seq=i) for i, text in enumerate(_SAMPLE)]
    extractor = RulesExtractor()
    first = extractor.extract(events, SPEC)
    assert first == extractor.extract(events, SPEC)
    assert first == pickle.loads(pickle.dumps(extractor)).extract(events, SPEC)
    code = (
        "import json; from datetime import datetime, timezone; from refold.fold.events import Event;"
        "from refold.fold.extractors.rules import RulesExtractor; from refold.fold.spec import FoldSpec;"
        f"texts = {_SAMPLE!r}; t = datetime(2024, 5, 1, tzinfo=timezone.utc);"
        "evs = [Event(seq=i, event_id=f'ev-{i}', recorded_at=t, table_version=0, kind='chat_turn',"
        " tenant='default', source='chat#1', content=c) for i, c in enumerate(texts)];"
        "out = RulesExtractor().extract(evs, FoldSpec());"
        "print(json.dumps([[[f.subject, f.relation, f.object, f.confidence] for f in x.facts] for x in out]))"
    )
    fresh = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    here = [[[f.subject, f.relation, f.object, f.confidence] for f in x.facts] for x in first]
    assert json.loads(fresh.stdout) == here


def test_default_spec_names_the_table_version():
    spec = RulesExtractor().default_spec()
    assert (spec.extractor, spec.extractor_version) == ("rules", RULES_VERSION)


# ---------------------------------------------------------------------------------------------
# Registry


def test_registry_returns_the_rules_extractor():
    assert isinstance(get_extractor("rules"), RulesExtractor)
    assert available_extractors() == ("llamacpp", "openai", "rules", "vllm")


def test_unknown_extractor_names_the_available_ones():
    with pytest.raises(ValidationError, match="unknown extractor 'nope'.*llamacpp, openai, rules, vllm"):
        get_extractor("nope")


def test_bad_option_is_a_validation_error():
    with pytest.raises(ValidationError, match="bad option"):
        get_extractor("rules", temperature=0.5)


def test_adapter_modules_are_imported_lazily(monkeypatch):
    """A registered adapter whose module is missing fails on use, with an install hint."""
    monkeypatch.setitem(_REGISTRY, "ghost", "refold.extractors.ghost_adapter:Ghost")
    with pytest.raises(ExtractionError, match="pip install"):
        get_extractor("ghost")
