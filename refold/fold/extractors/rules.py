"""The ``rules`` extractor: deterministic, no model, no network.

* ``memory_written`` events already carry their fact (``event.fact``): it is returned as is, with
  the relation canonicalised by the spec, the event's valid time, and confidence 1.0.
* ``chat_turn``, ``document``, ``observation`` and ``tool_call`` events are matched sentence by
  sentence against the English patterns of :mod:`refold.fold.extractors.patterns`.
* every other kind (``retraction``, ``tombstone``, ``erasure``, ``spec_changed``) and any event
  whose ``content`` is ``None`` gives an empty extraction. Retractions are applied by the merge
  from ``event.fact``, not by extraction.

First person ("I", "my") is the speaker, resolved by :func:`speaker_of` (see there).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from refold.fold.events import Event
from refold.fold.extract import ExtractedFact, Extraction
from refold.fold.spec import FoldSpec
from refold.fold.extractors.patterns import HEDGE, PATTERNS, RELATIVE, RULES_VERSION, Pattern, clean_object, relation_word

__all__ = ["RulesExtractor", "speaker_of", "split_speaker", "DEFAULT_SPEAKER", "TEXT_KINDS"]

#: Kinds whose content is matched against the patterns.
TEXT_KINDS = frozenset({"chat_turn", "document", "observation", "tool_call"})
#: The speaker when nothing names one.
DEFAULT_SPEAKER = "user"
#: At most this many facts from one event (the first ones, in reading order).
MAX_FACTS_PER_EVENT = 8

#: "Caroline: I live in Boston" — one to three capitalised words, a colon, then the text.
_PREFIX = re.compile(r"^\s*(?P<name>[A-Z][\w.'’-]*(?: [A-Z][\w.'’-]*){0,2}):\s+(?P<text>.*)\Z", re.S)
#: "chat#7:Caroline" — a source whose last ':'-separated part is a capitalised name.
_SOURCE_NAME = re.compile(r":(?P<name>[A-Z][A-Za-z.'’-]*(?: [A-Z][A-Za-z.'’-]*){0,2})\s*\Z")
#: Prefixes that label a line rather than name who speaks ("Note: I moved ...").
_LABELS = frozenset(
    "note notes summary subject re fwd title update q a question answer todo fyi ps edit "
    "warning error info debug http https tl;dr".split()
)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")


def split_speaker(event: Event) -> tuple[str, str]:
    """Return ``(speaker, text)`` for a text event; ``text`` has any ``"Name: "`` prefix removed.

    The speaker, first rule that applies:

    1. the content starts with ``"Name: "`` (one to three capitalised words, not a label such as
       "Note" or "Summary") → ``Name``;
    2. the source ends with ``":Name"`` (``"chat#7:Caroline"``) → ``Name``;
    3. the event has exactly one subject id → that id;
    4. otherwise ``"user"``.
    """
    content = event.content or ""
    prefix = _PREFIX.match(content)
    if prefix and prefix.group("name").lower() not in _LABELS:
        return prefix.group("name"), prefix.group("text")
    source = _SOURCE_NAME.search(event.source or "")
    if source and source.group("name").lower() not in _LABELS:
        return source.group("name"), content
    if len(event.subjects) == 1:
        return event.subjects[0], content
    return DEFAULT_SPEAKER, content


def speaker_of(event: Event) -> str:
    """Who "I" and "my" refer to in ``event`` (the rules are in :func:`split_speaker`)."""
    return split_speaker(event)[0]


class RulesExtractor:
    """Deterministic extractor: ``memory_written`` facts plus the documented English patterns.

    Plain and picklable; it holds no resources. Output depends only on the events, the spec
    (relation canonicalisation) and :data:`RULES_VERSION` of the pattern table.
    """

    name = "rules"
    version = RULES_VERSION

    def __repr__(self) -> str:
        return f"RulesExtractor(version={self.version!r})"

    def default_spec(self) -> FoldSpec:
        """The spec a fold with this extractor uses when none is given (names the table version)."""
        return FoldSpec(extractor=self.name, extractor_version=self.version)

    def extract(self, events: Sequence[Event], spec: FoldSpec) -> list[Extraction]:
        """One :class:`Extraction` per event, in the order given."""
        return [self._one(event, spec) for event in events]

    def _one(self, event: Event, spec: FoldSpec) -> Extraction:
        if event.content is not None:
            if event.kind == "memory_written":
                if event.fact is not None:
                    fact = ExtractedFact(
                        subject=event.fact.subject,
                        relation=spec.canonical_relation(event.fact.relation),
                        object=event.fact.object,
                        valid_from=event.valid_from,
                        valid_to=event.valid_to,
                        confidence=1.0,
                    )
                    return Extraction(event_id=event.event_id, spec_hash=spec.hash, facts=(fact,),
                                      engine="rules", meta=(("patterns", ("memory_written",)),))
            elif event.kind in TEXT_KINDS:
                return self._from_text(event, spec)
        return Extraction(event_id=event.event_id, spec_hash=spec.hash, engine="rules")

    def _from_text(self, event: Event, spec: FoldSpec) -> Extraction:
        speaker, text = split_speaker(event)
        found = match_text(text, speaker=speaker)
        facts: list[ExtractedFact] = []
        names: list[str] = []
        seen: set[tuple[str, str, str]] = set()
        for pattern, subject, relation, obj in found:
            relation = spec.canonical_relation(relation)
            key = (subject, relation, obj.lower())
            if key in seen:
                continue
            seen.add(key)
            facts.append(ExtractedFact(subject=subject, relation=relation, object=obj,
                                       valid_from=event.valid_from, valid_to=event.valid_to,
                                       confidence=pattern.confidence))
            names.append(pattern.name)
            if len(facts) == MAX_FACTS_PER_EVENT:
                break
        return Extraction(event_id=event.event_id, spec_hash=spec.hash, facts=tuple(facts),
                          engine="rules",
                          meta=(("patterns", tuple(names)), ("speaker", speaker)))


def match_text(text: str, *, speaker: str,
               patterns: Sequence[Pattern] = PATTERNS) -> list[tuple[Pattern, str, str, str]]:
    """All ``(pattern, subject, relation, object)`` matches in ``text``.

    Order: sentence by sentence; within a sentence, table order, then position. Relations are as
    the table builds them (not yet canonicalised by a spec). Questions, matches that their
    sentence hedges before them, and matches inside a relative clause are skipped.

    A pattern runs only on sentences that hold its ``needs`` (see :class:`Pattern`); the result is
    the same as running every pattern on every sentence.
    """
    table = _DEFAULT_TABLE if patterns is PATTERNS else _Prefilter(patterns)
    return _scan(text, speaker, table.candidates)


def _match_every_pattern(text: str, *, speaker: str,
                         patterns: Sequence[Pattern] = PATTERNS) -> list[tuple[Pattern, str, str, str]]:
    """:func:`match_text` without the pre-filter: every pattern on every sentence (the reference
    the tests compare :func:`match_text` with)."""
    return _scan(text, speaker, lambda sentence: patterns)


def _scan(text: str, speaker: str, candidates: Callable[[str], Sequence[Pattern]]
          ) -> list[tuple[Pattern, str, str, str]]:
    """Each sentence's matches of the patterns ``candidates`` names for it (questions skipped)."""
    out: list[tuple[Pattern, str, str, str]] = []
    for sentence in _SENTENCE.split(text):
        sentence = sentence.strip()
        if not sentence or sentence.endswith("?"):
            continue
        for pattern in candidates(sentence):
            _match(pattern, sentence, speaker, out)
    return out


def _match(pattern: Pattern, sentence: str, speaker: str, out: list[tuple[Pattern, str, str, str]]) -> None:
    """Append ``pattern``'s matches in ``sentence`` to ``out`` (see :func:`match_text`)."""
    for match in pattern.regex.finditer(sentence):
        before = sentence[: match.start()]
        if HEDGE.search(before) or RELATIVE.search(before):
            continue
        groups = match.groupdict()
        relation = pattern.relation
        if "{n}" in relation:
            word = relation_word(groups.get("n") or "")
            if word is None:
                continue
            relation = relation.format(n=word)
        obj = clean_object(groups["obj"], pattern.kind)
        if obj is None:
            continue
        subject = groups.get("subj") or speaker
        out.append((pattern, subject, relation, obj))


#: The characters that case-insensitive matching takes for an ASCII letter although ``str.lower``
#: does not turn them into it (dotted and dotless i, long s, Kelvin sign; the tests check every
#: code point): mapped before lower-casing, so a ``needs`` word is found wherever ``(?i:...)``
#: matches it.
_FOLD = str.maketrans({"\u0130": "i", "\u0131": "i", "\u017f": "s", "\u212a": "k"})


class _Prefilter:
    """Which patterns of a table can match a sentence, from the ``needs`` words it contains.

    Looking for each word of the table in the lower-cased sentence costs a few microseconds; the
    table order of the patterns whose every group is met is then kept per set of words found.
    """

    #: at most this many sets of found words are kept (a few dozen occur in practice)
    MAX_KEPT = 4096

    def __init__(self, patterns: Sequence[Pattern]) -> None:
        self.patterns = tuple(patterns)
        self.words = tuple(sorted({w for p in self.patterns for group in p.needs for w in group}))
        self._kept: dict[tuple[str, ...], tuple[Pattern, ...]] = {}

    def candidates(self, sentence: str) -> tuple[Pattern, ...]:
        """The patterns (in table order) whose ``needs`` the sentence meets."""
        low = (sentence if sentence.isascii() else sentence.translate(_FOLD)).lower()
        found = tuple([w for w in self.words if w in low])
        kept = self._kept.get(found)
        if kept is None:
            if len(self._kept) >= self.MAX_KEPT:
                self._kept.clear()
            have = set(found)
            kept = self._kept[found] = tuple(
                p for p in self.patterns if all(have.intersection(group) for group in p.needs))
        return kept


_DEFAULT_TABLE = _Prefilter(PATTERNS)
