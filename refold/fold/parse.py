"""The one parser of model output: raw text → grounded facts, and a rejection for everything else.

:func:`parse_output` never raises on model output and never drops anything silently. Either the
whole output is refused with exactly one output-level :class:`Rejection` (``empty``,
``invalid_json``, or ``schema`` when the top level is not ``{"facts": [...]}``), or every item of
the ``facts`` array ends up either as an :class:`ExtractedFact` or as one item-level rejection
(``schema``, ``ungrounded``, ``degenerate`` — subject and object are the same — or
``duplicate``) whose detail starts with ``fact[i]`` and quotes the item, so
``len(facts) + len(rejected) == len(items)``.

Grounding: a subject or object is kept only when enough of its words occur in the event text.
Both sides are normalised (Unicode NFKC, casefold, words = runs of letters/digits, articles
dropped from the entity); the share of the entity's words found among the text's words must be at
least ``spec.model.grounding_threshold``. First person ("I", "me", "my", ...) grounds to the
speaker when the content reads ``Name: text`` (a chat turn), and the fact then names the speaker.
A fact's ``valid_from`` is grounded when its year is written in the text or it is the event's
own ``valid_from`` date. A fact's confidence is the lower of its subject's and object's grounding
shares. Relations are canonicalised with ``spec.canonical_relation`` (aliases resolved) before
duplicates are detected.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from datetime import date, datetime, timezone
from typing import Any

from jsonschema import Draft202012Validator

from refold.fold.events import Event
from refold.fold.extract import ExtractedFact, Rejection
from refold.fold.prompts import fact_schema
from refold.fold.spec import FoldSpec, ModelSpec

__all__ = ["GroundingResult", "ground", "normalise_words", "parse_output", "speaker_of"]

_WORD = re.compile(r"\w+")
_ARTICLES = frozenset({"the", "a", "an"})
_FIRST_PERSON = frozenset({"i", "me", "my", "mine", "myself"})
#: "Caroline: ..." or "Mary Ann: ..." at the start of the content (one to four capitalised words).
_SPEAKER = re.compile(r"^\s*((?:[A-Z][\w'’.-]*)(?:\s+[A-Z][\w'’.-]*){0,3})\s*:\s+\S")
_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n?(.*?)\n?```$", re.DOTALL)
_QUOTE_LIMIT = 200


@dataclass(frozen=True)
class GroundingResult:
    """How well one entity is grounded in an event text."""

    share: float
    name: str  # the entity as the fact will name it (the speaker for first person)
    detail: str = ""


def normalise_words(text: str) -> list[str]:
    """Words of ``text`` after NFKC and casefolding (punctuation and spacing removed)."""
    return _WORD.findall(unicodedata.normalize("NFKC", text).casefold().replace("’", "'"))


def speaker_of(content: str) -> str | None:
    """The speaker of a ``Name: text`` chat turn, or ``None``."""
    match = _SPEAKER.match(content)
    return match.group(1) if match else None


def ground(entity: str, text_words: frozenset[str], speaker: str | None) -> GroundingResult:
    """Share of ``entity``'s words found in ``text_words`` (first person resolves to ``speaker``)."""
    words = normalise_words(entity)
    if words and set(words) <= _FIRST_PERSON:
        if speaker is None:
            return GroundingResult(0.0, entity, "first person, but the text names no speaker")
        return GroundingResult(1.0, speaker)
    content_words = [w for w in words if w not in _ARTICLES] or words
    if not content_words:
        return GroundingResult(0.0, entity, "has no words")
    found = sum(1 for w in content_words if w in text_words)
    share = found / len(content_words)
    missing = [w for w in content_words if w not in text_words]
    return GroundingResult(share, entity.strip(), f"missing {missing}" if missing else "")


def parse_output(raw: str | None, event: Event, spec: FoldSpec) -> tuple[tuple[ExtractedFact, ...],
                                                                           tuple[Rejection, ...]]:
    """Parse one model answer for ``event`` under ``spec``; see the module docstring."""
    model = spec.model or ModelSpec(model_id="")
    text = (raw or "").strip()
    fenced = _FENCE.match(text)
    if fenced:  # some servers wrap JSON in a Markdown fence; the raw output is kept verbatim anyway
        text = fenced.group(1).strip()
    if not text:
        return (), (Rejection("empty", "output: the model returned no text"),)
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        msg = getattr(exc, "msg", type(exc).__name__)
        pos = getattr(exc, "pos", None)
        return (), (Rejection("invalid_json", f"output: {msg} at char {pos}: {_quote(text)}"),)
    top = _top_level_problem(value)
    if top:
        return (), (Rejection("schema", f"output: {top}: {_quote(text)}"),)

    item_validator = _item_validator(model.max_facts)
    content = event.content or ""
    text_words = frozenset(normalise_words(content))
    speaker = speaker_of(content)
    facts: list[ExtractedFact] = []
    rejected: list[Rejection] = []
    seen: set[tuple[str, str, str]] = set()
    for index, item in enumerate(value["facts"]):
        where = f"fact[{index}] {_quote(item)}"
        if index >= model.max_facts:
            rejected.append(Rejection("schema", f"{where}: beyond maxItems {model.max_facts}"))
            continue
        errors = sorted(item_validator.iter_errors(item), key=lambda e: list(e.absolute_path))
        if errors:
            first = errors[0]
            at = "/".join(str(p) for p in first.absolute_path) or "item"
            rejected.append(Rejection("schema", f"{where}: {at}: {first.message}"))
            continue
        relation = spec.canonical_relation(item["relation"])
        if not _WORD.search(relation):
            rejected.append(Rejection("schema", f"{where}: relation has no words"))
            continue
        valid_from, problem = _date(item.get("valid_from"))
        if problem:
            rejected.append(Rejection("schema", f"{where}: valid_from {problem}"))
            continue
        subject = ground(item["subject"], text_words, speaker)
        obj = ground(item["object"], text_words, speaker)
        weak = [f"{role} {g.name!r} grounded {g.share:.2f} < {model.grounding_threshold} ({g.detail})"
                for role, g in (("subject", subject), ("object", obj))
                if g.share < model.grounding_threshold]
        if valid_from is not None and not _date_grounded(valid_from, text_words, event):
            weak.append(f"valid_from {item['valid_from']}: neither its year is in the text nor is "
                        "it the event's own date")
        if weak:
            rejected.append(Rejection("ungrounded", f"{where}: {'; '.join(weak)}"))
            continue
        s_key, o_key = " ".join(normalise_words(subject.name)), " ".join(normalise_words(obj.name))
        if s_key == o_key:
            rejected.append(Rejection("degenerate", f"{where}: subject and object are the same"))
            continue
        key = (s_key, relation, o_key)
        if key in seen:
            rejected.append(Rejection("duplicate", f"{where}: repeats an earlier fact"))
            continue
        seen.add(key)
        facts.append(ExtractedFact(
            subject=subject.name, relation=relation, object=obj.name, valid_from=valid_from,
            confidence=round(min(subject.share, obj.share), 4),
        ))
    return tuple(facts), tuple(rejected)


def _top_level_problem(value: Any) -> str:
    if not isinstance(value, dict):
        return f"expected an object {{\"facts\": [...]}}, got {type(value).__name__}"
    if "facts" not in value:
        return "'facts' is a required property"
    extra = sorted(set(value) - {"facts"})
    if extra:
        return f"unexpected key(s) {extra}"
    if not isinstance(value["facts"], list):
        return f"'facts' must be an array, got {type(value['facts']).__name__}"
    return ""


_VALIDATORS: dict[int, Draft202012Validator] = {}


def _item_validator(max_items: int) -> Draft202012Validator:
    if max_items not in _VALIDATORS:
        schema = fact_schema(max(max_items, 0))["properties"]["facts"]["items"]
        _VALIDATORS[max_items] = Draft202012Validator(schema)
    return _VALIDATORS[max_items]


def _date(value: str | None) -> tuple[datetime | None, str]:
    if value is None:
        return None, ""
    try:
        day = date.fromisoformat(value)
    except ValueError:
        return None, f"{value!r} is not a calendar date"
    return datetime(day.year, day.month, day.day, tzinfo=timezone.utc), ""


def _date_grounded(value: datetime, text_words: frozenset[str], event: Event) -> bool:
    """A fact's valid_from must come from the event: its year is written in the text, or it is
    the date the event itself states (small models invent dates otherwise)."""
    if event.valid_from is not None and event.valid_from.date() == value.date():
        return True
    return str(value.year) in text_words


def _quote(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= _QUOTE_LIMIT else text[:_QUOTE_LIMIT] + "…"
