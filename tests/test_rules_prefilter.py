"""The rules extractor's pre-filter (a pattern runs only on sentences holding its ``needs``
words) changes nothing: :func:`match_text` equals a scan of every pattern on every sentence, on
random sentences made of the patterns' own vocabulary, on mutated documented examples, and on
every LoCoMo turn (real chat text; that part is skipped with a message when
../shared/data/locomo10.zip is absent). Pure: no store, no model.
"""

from __future__ import annotations

import re
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refold.fold.extractors import rules
from refold.fold.extractors.patterns import PATTERNS, RULES_VERSION
from refold.fold.extractors.rules import _FOLD, _match_every_pattern, match_text
from tests.locomo_helpers import conversations

def named(found) -> list[tuple[str, str, str, str]]:
    return [(pattern.name, subject, relation, obj) for pattern, subject, relation, obj in found]


def same(text: str, *, speaker: str = "Caroline", patterns=PATTERNS) -> list[tuple[str, str, str, str]]:
    """Assert that the filtered and the full scan agree on ``text``; return the matches."""
    filtered = named(match_text(text, speaker=speaker, patterns=patterns))
    assert filtered == named(_match_every_pattern(text, speaker=speaker, patterns=patterns)), text
    return filtered


# ---------------------------------------------------------------------------------------------
# The table


def test_the_table_version_is_unchanged_by_the_prefilter():
    """Cached extractions stay valid: the pre-filter changes which patterns run, not the output."""
    assert RULES_VERSION == "1"


def test_every_pattern_names_what_it_needs_in_lower_case():
    for pattern in PATTERNS:
        assert pattern.needs and all(pattern.needs), pattern.name
        for group in pattern.needs:
            assert all(word and word == word.lower() and not re.search(r"\s", word) for word in group)


def test_the_needs_of_each_example_are_met_and_it_runs_there():
    for pattern in PATTERNS:
        sentence = pattern.example
        assert pattern in rules._DEFAULT_TABLE.candidates(sentence), pattern.name


def test_case_folding_covers_every_character_that_matches_an_ascii_letter_ignoring_case():
    """The needs words are looked for in ``sentence.translate(_FOLD).lower()``: that must turn
    every character that ``(?i:x)`` matches for an ASCII letter x into x (else a needs word
    could be missed where the regex matches), checked over every code point."""
    any_letter = re.compile(r"(?i:[a-z])")
    odd = [c for c in map(chr, range(0x80, sys.maxunicode + 1)) if any_letter.fullmatch(c)]
    assert {ord(c) for c in odd} == set(_FOLD)
    for c in odd:
        letter = c.translate(_FOLD).lower()
        assert len(letter) == 1 and letter.isascii() and re.fullmatch(f"(?i:{letter})", c)
    for letter in "abcdefghijklmnopqrstuvwxyz":
        assert letter.upper().lower() == letter


def test_odd_case_variants_still_match():
    """Dotless i, long s, Kelvin sign and capitals in a ``(?i:...)`` verb: the regex matches them,
    and so the pre-filter must let the pattern run."""
    for text in ("I l\u0131ve in Boston.", "I L\u0130VE in Boston.", "I re\u017fide in Oslo.",
                 "I WOR\u212a at Acme.", "I work at Acme.", "My FAVOURITE color is blue."):
        assert same(text), text


def test_a_table_of_its_own_is_filtered_the_same_way():
    mine = PATTERNS[:3] + PATTERNS[-3:]
    for text in ("I live in Boston.", "Jon moved to Chicago.", "I met Rob at the gym.", "nothing here"):
        same(text, patterns=mine)


# ---------------------------------------------------------------------------------------------
# Random sentences


def _vocabulary() -> list[str]:
    words = {w for p in PATTERNS for group in p.needs for w in group}
    for p in PATTERNS:
        words.update(re.findall(r"[\w'’]+", p.example))
    words.update("I I'm I’m I've I’ve i im my My we We Alice Mary Ann Lee Tom Bob Acme Boston "
                 "and but so , ; : . ! really just also a an the to in at for from as of with is "
                 "was am named called name years old two 32 if not would hope never sister dog "
                 "things what which who the idea more".split())
    return sorted(words)


VOCABULARY = _vocabulary()
ODD = {"i": "\u0131", "I": "\u0130", "s": "\u017f", "k": "\u212a", "K": "\u212a"}


@st.composite
def odd_words(draw, words):
    """A word from ``words``, sometimes in capitals, title case or with odd case-equal letters."""
    word = draw(st.sampled_from(words))
    how = draw(st.sampled_from(("as is", "as is", "as is", "upper", "title", "odd")))
    if how == "upper":
        return word.upper()
    if how == "title":
        return word.title()
    if how == "odd":
        return "".join(ODD.get(c, c) if draw(st.booleans()) else c for c in word)
    return word


@settings(max_examples=400, deadline=None)
@given(st.lists(st.lists(odd_words(VOCABULARY), min_size=1, max_size=14), min_size=1, max_size=3),
       st.sampled_from(("Caroline", "user")))
def test_random_sentences_of_the_patterns_vocabulary(sentences, speaker):
    text = " ".join(" ".join(words) + "." for words in sentences)
    same(text, speaker=speaker)


@st.composite
def mutated_examples(draw):
    """A documented example with words inserted, dropped or recased (so most still match)."""
    words = draw(st.sampled_from(PATTERNS)).example.split()
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(words)))
        op = draw(st.sampled_from(("insert", "drop", "odd")))
        if op == "insert":
            words.insert(at, draw(odd_words(VOCABULARY)))
        elif words and at < len(words):
            if op == "drop":
                del words[at]
            else:
                words[at] = draw(odd_words([words[at]]))
    return " ".join(words)


@settings(max_examples=400, deadline=None)
@given(mutated_examples(), mutated_examples())
def test_mutated_documented_examples(first, second):
    same(first)
    same(f"{first} {second}")


def test_the_unmutated_examples_all_match():
    text = " ".join(p.example for p in PATTERNS)
    assert len(same(text)) >= len(PATTERNS)


# ---------------------------------------------------------------------------------------------
# Real chat text


def _locomo_texts() -> list[str]:
    texts = []
    for conv in conversations():
        for key in sorted(k for k in conv if re.fullmatch(r"session_\d+", k)):
            texts.extend(turn["text"] for turn in conv[key] if turn.get("text"))
    return texts


@pytest.mark.slow
def test_every_locomo_turn_gives_the_same_matches():
    texts = _locomo_texts()
    assert len(texts) > 5000
    found = sum(len(same(text)) for text in texts)
    assert found > 200  # real matches were compared (240 in the LoCoMo-10 release), not just empty lists


def test_locomo_turns_in_capitals_give_the_same_matches():
    """Upper case leaves only the ``(?i:...)`` verbs to match: the case folding at work."""
    texts = _locomo_texts()[::7]
    for text in texts:
        same(text.upper().replace("I'M", "I'm"))
