"""Events: the frozen values the log stores, and validation of user input (JSON Lines).

An input event names what happened (``kind``), what was said or written (``content``) and where it
came from (``source``), plus optional provenance. :func:`parse_jsonl` turns JSON Lines into
:class:`NewEvent` values or raises :class:`EventValidationError` naming the line and field; one bad
line rejects the whole batch. The format is published as a JSON Schema (:func:`input_schema`,
``refold schema``); :func:`validate_event` checks what it states, with messages of its own, plus
the rules a schema cannot state. :class:`Event` is a stored row: a ``NewEvent`` plus its position
(``seq``), record time, salt and hash chain fields.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from operator import attrgetter
from typing import Any

from refold.fold.errors import EventValidationError

#: Kinds a user may append.
USER_KINDS = frozenset(
    {"observation", "document", "chat_turn", "memory_written", "tool_call", "retraction"}
)
#: Kinds only refold itself writes (``memory_read``: what a traced search returned; never extracted).
SYSTEM_KINDS = frozenset({"spec_changed", "erasure", "tombstone", "memory_read"})
KINDS = USER_KINDS | SYSTEM_KINDS
#: Kinds that must carry a ``fact`` object and a non-empty justification.
FACT_KINDS = frozenset({"memory_written", "retraction"})

DEFAULT_MAX_CONTENT_BYTES = 1 << 20  # 1 MiB
#: What an erased event's id becomes in its tombstone and receipt (a keyed hash, see
#: refold.storage.erased_ids); reserved: no input id may start with it.
ERASED_ID_PREFIX = "erased:"
#: The range every timestamp an event states must fall in, compared in UTC. Python's datetime
#: ends at 0001-01-01 and 9999-12-31 *in whatever offset it carries*, so a time within a day of
#: either end overflows when converted to UTC (the chain's canonical form, Arrow's
#: timestamp[us, UTC] column read back as datetimes) or to a reader's local time. A day of margin
#: at each end makes every accepted value convertible to any offset (offsets are under 24 h);
#: Arrow's int64 microseconds span ±292,000 years, so this range is the narrowest layer's.
MIN_TIME = datetime(1, 1, 2, tzinfo=timezone.utc)
MAX_TIME = datetime(9999, 12, 30, 23, 59, 59, 999999, tzinfo=timezone.utc)
FACT_FIELDS = ("subject", "relation", "object")
_OPTIONAL_STR = ("event_id", "tenant", "trace_id", "justification", "ingestion_run")
_KNOWN_FIELDS = frozenset(
    {"kind", "content", "source", "subjects", "principals", "valid_from", "valid_to", "fact"}
    | set(_OPTIONAL_STR)
)


def new_event_id() -> str:
    """A time-ordered id (UUIDv7 layout: 48-bit Unix milliseconds, then random bits).

    Time-ordered ids keep Delta's min/max statistics on ``event_id`` tight, so idempotency
    look-ups skip most files.
    """
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & ((1 << 48) - 1)) << 80 | (0x7 << 76) | ((rand >> 68) & 0xFFF) << 64
    value |= (0b10 << 62) | (rand & ((1 << 62) - 1))
    return str(uuid.UUID(int=value))


@dataclass(frozen=True, slots=True)
class Fact:
    """A (subject, relation, object) triple as stated by an event or extracted from one."""

    subject: str
    relation: str
    object: str

    def as_dict(self) -> dict[str, str]:
        return {"subject": self.subject, "relation": self.relation, "object": self.object}


@dataclass(frozen=True, slots=True)
class NewEvent:
    """A validated event that is not yet in the log."""

    kind: str
    content: str
    source: str
    event_id: str = field(default_factory=new_event_id)
    tenant: str = "default"
    subjects: tuple[str, ...] = ()
    principals: tuple[str, ...] = ()
    trace_id: str | None = None
    justification: str | None = None
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    ingestion_run: str | None = None
    fact: Fact | None = None

    def as_input(self) -> dict[str, Any]:
        """This event in the JSONL input format (for re-validation of hand-built values)."""
        raw: dict[str, Any] = {"kind": self.kind, "content": self.content, "source": self.source,
                               "event_id": self.event_id, "tenant": self.tenant}
        for name in ("trace_id", "justification", "ingestion_run"):
            if getattr(self, name) is not None:
                raw[name] = getattr(self, name)
        for name in ("subjects", "principals"):
            if getattr(self, name):
                raw[name] = list(getattr(self, name))
        for name in ("valid_from", "valid_to"):
            value = getattr(self, name)
            if value is not None:
                raw[name] = value.isoformat() if isinstance(value, datetime) else value
        if self.fact is not None:
            raw["fact"] = self.fact.as_dict() if isinstance(self.fact, Fact) else self.fact
        return raw

    def same_input(self, other: "NewEvent | Event") -> bool:
        """True when ``other`` carries the same user-supplied values (used for idempotent retries)."""
        return all(getattr(self, name) == getattr(other, name) for name in _COMPARED)


_COMPARED = (
    "kind", "content", "source", "event_id", "tenant", "subjects", "principals", "trace_id",
    "justification", "valid_from", "valid_to", "fact",
)


@dataclass(frozen=True, slots=True)
class Event:
    """A stored event: one row of the log.

    ``content`` is ``None`` for tombstones (erased events); ``cipher`` names the encryption of
    ``content`` in shred-mode stores (``None`` for plain text).
    """

    seq: int
    event_id: str
    recorded_at: datetime
    table_version: int
    kind: str
    tenant: str
    source: str | None
    content: str | None
    subjects: tuple[str, ...] = ()
    principals: tuple[str, ...] = ()
    trace_id: str | None = None
    justification: str | None = None
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    ingestion_run: str | None = None
    fact: Fact | None = None
    salt: str | None = None
    cipher: str | None = None
    key_ids: tuple[str, ...] = ()
    erasure_id: str | None = None
    commitment: str = ""
    prev_link: str = ""
    link: str = ""

    @property
    def is_tombstone(self) -> bool:
        return self.kind == "tombstone"

    def with_(self, **changes: Any) -> "Event":
        return replace(self, **changes)


# ---------------------------------------------------------------------------------------------
# Validation


def parse_time(value: Any, *, line: int | None, name: str) -> datetime:
    """Parse a timezone-aware ISO-8601 timestamp or raise a clear error."""
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise EventValidationError(
                f"'{value}' is not an ISO-8601 timestamp; write e.g. 2024-05-01T12:00:00+00:00",
                line=line, field=name,
            ) from None
    else:
        raise EventValidationError(
            f"expected an ISO-8601 string, got {type(value).__name__}", line=line, field=name
        )
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise EventValidationError(
            f"'{value}' has no timezone; add one, e.g. {parsed.isoformat()}+00:00",
            line=line, field=name,
        )
    check_time_range(parsed, line=line, name=name)
    return parsed


def check_time_range(value: datetime, *, line: int | None, name: str) -> None:
    """Raise :class:`EventValidationError` unless ``value`` lies within [MIN_TIME, MAX_TIME].

    Compared without converting (aware datetimes compare by their UTC instant), because the
    conversion itself is what overflows near the ends of the calendar.
    """
    try:
        inside = MIN_TIME <= value <= MAX_TIME
    except (OverflowError, TypeError):  # a naive datetime, or an exotic tzinfo that fails
        inside = False
    if not inside:
        raise EventValidationError(
            f"{value.isoformat()} is outside the supported range {MIN_TIME.date()} .. "
            f"{MAX_TIME.date()} (UTC); timestamps that close to the ends of the calendar cannot "
            "be stored safely: use a time inside the range, or leave the field out",
            line=line, field=name,
        )


def check_times(batch: Sequence["NewEvent"]) -> None:
    """Check the timestamps of :class:`NewEvent` values built by hand (``validate_event`` checked
    parsed ones), so a bad value fails its own caller before anything is sealed or queued.

    Distinct values are checked once (a batch usually states few), after a C-level gather.
    """
    for name in ("valid_from", "valid_to"):
        values = set(map(attrgetter(name), batch))
        values.discard(None)
        for value in values:
            try:
                if isinstance(value, datetime) and value.utcoffset() is not None:
                    check_time_range(value, line=None, name=name)
                    continue
                message = "expected a timezone-aware datetime"
            except EventValidationError as exc:
                message = exc.reason
            line = next(i for i, e in enumerate(batch, start=1) if getattr(e, name) is value
                        or getattr(e, name) == value)
            raise EventValidationError(message, line=line, field=name)


_ID_NOUN = {"subjects": "subject id", "principals": "principal"}


def _str_list(value: Any, *, line: int | None, name: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise EventValidationError(
            "expected a list of non-empty strings", line=line, field=name
        )
    if not all(map(str.strip, value)):  # whitespace only: an id no one can name again (or erase)
        index, item = next((i, v) for i, v in enumerate(value) if not v.strip())
        noun = _ID_NOUN.get(name, "item")
        raise EventValidationError(
            f"item {index} is blank ({item!r}): a {noun} needs a character that is not whitespace; "
            f"write the {noun} or drop the item", line=line, field=name,
        )
    return tuple(value)


def validate_event(
    raw: Mapping[str, Any],
    *,
    line: int | None = None,
    max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES,
    allowed_kinds: frozenset[str] = USER_KINDS,
    ingestion_run: str | None = None,
) -> NewEvent:
    """Validate one input object and return a :class:`NewEvent`; raise naming the field."""
    if not isinstance(raw, Mapping):
        raise EventValidationError(
            f"expected a JSON object, got {type(raw).__name__}", line=line
        )
    unknown = sorted(set(raw) - _KNOWN_FIELDS)
    if unknown:
        raise EventValidationError(
            f"unknown field(s) {unknown}; allowed: {sorted(_KNOWN_FIELDS)}", line=line,
            field=unknown[0],
        )
    _check_text(raw, line=line)
    kind = raw.get("kind")
    if kind is None:
        raise EventValidationError("missing; one of " + ", ".join(sorted(allowed_kinds)),
                                   line=line, field="kind")
    if not isinstance(kind, str) or kind not in allowed_kinds:
        raise EventValidationError(
            f"unknown kind {kind!r}; use one of {', '.join(sorted(allowed_kinds))}",
            line=line, field="kind",
        )
    for name in ("source", "content"):
        if name not in raw or raw[name] is None:
            raise EventValidationError("missing (required for every event)", line=line, field=name)
        if not isinstance(raw[name], str):
            raise EventValidationError(
                f"expected a string, got {type(raw[name]).__name__}", line=line, field=name
            )
    if not raw["source"].strip():
        raise EventValidationError("is empty; name where the event came from, e.g. 'chat#7'",
                                   line=line, field="source")
    content = raw["content"]
    if not content.strip():
        raise EventValidationError("is empty; an event must say something", line=line,
                                   field="content")
    size = len(content.encode("utf-8"))
    if size > max_content_bytes:
        raise EventValidationError(
            f"is {size} bytes, over the limit of {max_content_bytes}; split the document or raise "
            "max_content_bytes", line=line, field="content",
        )
    values: dict[str, Any] = {}
    for name in _OPTIONAL_STR:
        if raw.get(name) is not None:
            if not isinstance(raw[name], str) or not raw[name].strip():
                raise EventValidationError("expected a non-empty string", line=line, field=name)
            values[name] = raw[name]
    if values.get("event_id", "").startswith(ERASED_ID_PREFIX):
        raise EventValidationError(
            f"starts with {ERASED_ID_PREFIX!r}, which refold reserves for the ids of erased events; "
            "choose another id (or leave it out: refold generates one)", line=line, field="event_id",
        )
    for name in ("subjects", "principals"):
        if raw.get(name) is not None:
            values[name] = _str_list(raw[name], line=line, name=name)
    for name in ("valid_from", "valid_to"):
        if raw.get(name) is not None:
            values[name] = parse_time(raw[name], line=line, name=name)
    if "valid_from" in values and "valid_to" in values and values["valid_to"] < values["valid_from"]:
        raise EventValidationError(
            f"valid_to {values['valid_to'].isoformat()} is before valid_from "
            f"{values['valid_from'].isoformat()}", line=line, field="valid_to",
        )
    if kind in FACT_KINDS:
        values["fact"] = _validate_fact(raw.get("fact"), line=line)
        if not values.get("justification"):
            raise EventValidationError(
                f"required and non-empty for kind '{kind}': say why the agent believes this",
                line=line, field="justification",
            )
    elif raw.get("fact") is not None:
        raise EventValidationError(
            f"only events of kind {sorted(FACT_KINDS)} carry a fact", line=line, field="fact"
        )
    if ingestion_run and "ingestion_run" not in values:
        values["ingestion_run"] = ingestion_run
    return NewEvent(kind=kind, content=content, source=raw["source"], **values)


def _check_text(raw: Mapping[str, Any], *, line: int | None) -> None:
    """Every string must be encodable text: JSON's "\\ud800" escapes decode to lone surrogates."""
    for name, value in raw.items():
        items = value if isinstance(value, list) else (
            list(value.values()) if isinstance(value, Mapping) else [value])
        for item in items:
            if isinstance(item, str):
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError as exc:
                    raise EventValidationError(
                        f"holds a lone UTF-16 surrogate at character {exc.start}, which is not "
                        "text; fix the encoding where the line was produced", line=line, field=name,
                    ) from None


def _validate_fact(value: Any, *, line: int | None) -> Fact:
    if not isinstance(value, Mapping):
        raise EventValidationError(
            "required: an object {subject, relation, object}", line=line, field="fact"
        )
    extra = sorted(set(value) - set(FACT_FIELDS))
    if extra:
        raise EventValidationError(f"unknown key(s) {extra}", line=line, field="fact")
    parts = {}
    for name in FACT_FIELDS:
        part = value.get(name)
        if not isinstance(part, str) or not part.strip():
            raise EventValidationError("expected a non-empty string", line=line,
                                       field=f"fact.{name}")
        parts[name] = part.strip()
    return Fact(**parts)


def parse_jsonl(
    lines: Iterable[str | bytes],
    *,
    max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES,
    ingestion_run: str | None = None,
) -> list[NewEvent]:
    """Parse JSON Lines into events; blank lines are skipped, line numbers count from 1.

    ``lines`` may be text or bytes (UTF-8, decoded here so a bad byte is reported with its line).
    Raises :class:`EventValidationError` for the first bad line: bytes that are not UTF-8, text
    that is not JSON or is nested too deep for the parser, or an invalid event. The batch is all
    or nothing.
    """
    events: list[NewEvent] = []
    seen: dict[str, int] = {}
    for number, text in _numbered(lines):
        if isinstance(text, (bytes, bytearray)):
            try:
                text = text.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise _not_utf8(exc, line=number) from None
        if not text.strip():
            continue
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise EventValidationError(f"not valid JSON ({exc.msg} at column {exc.colno})",
                                       line=number) from None
        except RecursionError:  # the parser recurses once per level: "[[[[…" runs out of stack
            raise EventValidationError(
                "JSON nested too deeply to parse; an event is an object of strings, lists of "
                "strings and one 'fact' object", line=number,
            ) from None
        event = validate_event(raw, line=number, max_content_bytes=max_content_bytes,
                               ingestion_run=ingestion_run)
        if event.event_id in seen and not event.same_input(events[seen[event.event_id]]):
            raise EventValidationError(
                f"event_id {event.event_id} also on line {seen[event.event_id] + 1} "
                "with different content", line=number, field="event_id",
            )
        seen.setdefault(event.event_id, len(events))
        events.append(event)
    return events


def _numbered(lines: Iterable[str | bytes]) -> Iterable[tuple[int, str | bytes]]:
    """``enumerate(lines, 1)``, turning a decoding error of a text file being read into a
    validation error (a text stream decodes ahead in chunks: the line is approximate)."""
    it = iter(lines)
    number = 0
    while True:
        try:
            text = next(it)
        except StopIteration:
            return
        except UnicodeDecodeError as exc:
            raise _not_utf8(exc, line=number + 1, approximate=True) from None
        number += 1
        yield number, text


def _not_utf8(exc: UnicodeDecodeError, *, line: int, approximate: bool = False) -> EventValidationError:
    where = f"at or after this line, byte {exc.object[exc.start:exc.start + 1]!r}" if approximate \
        else f"byte {exc.object[exc.start:exc.start + 1]!r} at offset {exc.start}"
    return EventValidationError(
        f"not UTF-8 text ({where}); JSON Lines input must be UTF-8: convert it, e.g. with "
        "`iconv -f LATIN1 -t UTF-8`", line=line,
    )


def input_schema_text() -> str:
    """The JSON Schema of the JSON Lines input (``refold/data/event.schema.json``, printed by
    ``refold schema``), as shipped. It states what :func:`validate_event` checks; the rules JSON
    Schema cannot state (content bytes, the time range, ``valid_to`` after ``valid_from``, lone
    surrogates, one id with two contents in a batch) are listed in its ``$comment``."""
    from importlib.resources import files

    return files("refold").joinpath("data", "event.schema.json").read_text(encoding="utf-8")


def input_schema() -> dict[str, Any]:
    """:func:`input_schema_text`, parsed."""
    return json.loads(input_schema_text())


def event_to_json(event: Event) -> dict[str, Any]:
    """A JSON-ready dict of a stored event (timestamps as ISO-8601)."""
    out: dict[str, Any] = {}
    for name in Event.__slots__:  # type: ignore[attr-defined]
        value = getattr(event, name)
        if isinstance(value, datetime):
            value = value.isoformat()
        elif isinstance(value, tuple):
            value = list(value)
        elif isinstance(value, Fact):
            value = value.as_dict()
        out[name] = value
    return out
