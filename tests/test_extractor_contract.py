"""The extractor port's contract, as a test class that every adapter subclasses once.

How to use it for a new adapter (``llamacpp``, ``openai``, ``vllm``)::

    from tests.test_extractor_contract import ExtractorContract   # import the base class only

    class TestLlamaCppContract(ExtractorContract):
        deterministic = True          # False where the same input may give different facts

        @pytest.fixture(scope="class")   # class scope: build an expensive extractor once
        def extractor(self):
            return get_extractor("llamacpp")

        @pytest.fixture
        def spec(self, extractor):    # optional: the spec the adapter folds under
            return extractor.default_spec()

Do not import the ``Test...`` subclasses of this module elsewhere, or pytest collects them twice.

The contract (see refold.fold.extract): ``extract(events, spec)`` returns exactly one
:class:`Extraction` per event, in order, each carrying the event id and the spec hash; facts are
well formed with canonical relations; tombstones, erased content (``None``) and refold's own kinds
give no facts; an extractor survives a pickle round trip (it runs in Ray actors) and, where the
adapter is deterministic, gives the same output for the same input, pickled or not.
"""

from __future__ import annotations

import pickle
from datetime import datetime, timezone

import pytest

from refold.extractors import get_extractor
from refold.fold.events import Event, Fact
from refold.fold.extract import ExtractedFact, Extraction, Extractor
from refold.fold.spec import FoldSpec

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)


def make_event(seq: int, kind: str, content: str | None, *, source: str = "chat#1",
               subjects: tuple[str, ...] = (), fact: Fact | None = None, **extra) -> Event:
    """A stored-looking event for extractor tests (no log needed: extractors read events only)."""
    return Event(seq=seq, event_id=f"ev-{seq:04d}", recorded_at=T0, table_version=seq, kind=kind,
                 tenant="default", source=source, content=content, subjects=subjects, fact=fact,
                 **extra)


def contract_events() -> list[Event]:
    """A small mixed batch: text kinds, a stated fact, and kinds that must give no facts."""
    return [
        make_event(0, "chat_turn", "Caroline: I live in Boston and I work at Acme Corp.",
                   subjects=("Caroline",)),
        make_event(1, "document", "Melanie lives in Portland. She works for Nike."),
        make_event(2, "memory_written", "User said their risk tolerance is high.",
                   fact=Fact("user", "risk_tolerance", "high"), justification="user said so"),
        make_event(3, "tombstone", None),
        make_event(4, "observation", "The weather was fine today."),
        make_event(5, "chat_turn", None, subjects=("Caroline",)),  # erased content
        make_event(6, "spec_changed", '{"extractor": "rules"}', source="refold"),
        make_event(7, "tool_call", "Dave: I moved to Chicago last year."),
    ]


#: Positions in contract_events() that must give no facts.
NO_FACT_POSITIONS = (3, 5, 6)


def _facts(extractions: list[Extraction]) -> list[tuple[ExtractedFact, ...]]:
    return [x.facts for x in extractions]


class ExtractorContract:
    """Tests every adapter of the extractor port must pass. Subclasses provide ``extractor``."""

    #: Whether the same input must give the same facts (rules, greedy decoding with a fixed seed).
    deterministic: bool = True

    @pytest.fixture
    def extractor(self) -> Extractor:  # pragma: no cover - always overridden
        raise NotImplementedError("subclass ExtractorContract and define an `extractor` fixture")

    @pytest.fixture
    def spec(self) -> FoldSpec:
        return FoldSpec()

    @pytest.fixture
    def events(self) -> list[Event]:
        return contract_events()

    def test_satisfies_the_protocol(self, extractor):
        assert isinstance(extractor, Extractor)
        assert isinstance(extractor.name, str) and extractor.name

    def test_one_extraction_per_event_in_order_with_spec_hash(self, extractor, events, spec):
        out = extractor.extract(events, spec)
        assert isinstance(out, list)
        assert [x.event_id for x in out] == [e.event_id for e in events]
        assert all(isinstance(x, Extraction) for x in out)
        assert {x.spec_hash for x in out} == {spec.hash}

    def test_empty_batch_gives_empty_list(self, extractor, spec):
        assert extractor.extract([], spec) == []

    def test_facts_are_well_formed(self, extractor, events, spec):
        for extraction in extractor.extract(events, spec):
            assert isinstance(extraction.facts, tuple)
            for fact in extraction.facts:
                assert isinstance(fact, ExtractedFact)
                assert fact.subject.strip() and fact.relation.strip() and fact.object.strip()
                assert spec.canonical_relation(fact.relation) == fact.relation
                assert 0.0 <= fact.confidence <= 1.0

    def test_no_facts_for_tombstones_erased_content_and_system_kinds(self, extractor, events, spec):
        out = extractor.extract(events, spec)
        for position in NO_FACT_POSITIONS:
            assert out[position].facts == (), events[position].kind

    def test_order_does_not_leak_between_events(self, extractor, events, spec):
        """Each extraction depends on its own event: reversing the batch reverses the output."""
        forward = extractor.extract(events, spec)
        backward = extractor.extract(list(reversed(events)), spec)
        assert [x.event_id for x in backward] == [x.event_id for x in reversed(forward)]
        if self.deterministic:
            assert _facts(backward) == list(reversed(_facts(forward)))

    def test_survives_a_pickle_round_trip(self, extractor, events, spec):
        copy = pickle.loads(pickle.dumps(extractor))
        assert copy.name == extractor.name
        out = copy.extract(events, spec)
        assert [x.event_id for x in out] == [e.event_id for e in events]
        if self.deterministic:
            assert _facts(out) == _facts(extractor.extract(events, spec))

    def test_same_input_same_output(self, extractor, events, spec):
        first = extractor.extract(events, spec)
        second = extractor.extract(events, spec)
        assert [x.event_id for x in first] == [x.event_id for x in second]
        if self.deterministic:
            assert _facts(first) == _facts(second)


class TestRulesContract(ExtractorContract):
    """The deterministic rules adapter against the port's contract."""

    deterministic = True

    @pytest.fixture
    def extractor(self):
        return get_extractor("rules")

    def test_contract_batch_gives_the_expected_facts(self, extractor, events, spec):
        """The contract batch is not vacuous for rules: text and stated facts do give facts."""
        out = extractor.extract(events, spec)
        triples = [{(f.subject, f.relation, f.object) for f in x.facts} for x in out]
        assert triples[0] == {("Caroline", "lives_in", "Boston"), ("Caroline", "works_at", "Acme Corp")}
        assert ("Melanie", "lives_in", "Portland") in triples[1]
        assert triples[2] == {("user", "risk_tolerance", "high")}
        assert triples[7] == {("Dave", "lives_in", "Chicago")}
