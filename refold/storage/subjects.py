"""The subject registry: opaque subject id → display name, aliases and identifiers.

Events carry only opaque subject ids (``s-3f9c``); the registry is the one place that says who
an id is. It is what an operator searches when a request names a person, what
:func:`find_mentions` uses to find events that mention a subject without being tagged, and what
the residue scan looks for after an erasure. It is personal data itself, so erasure removes the
subject's entry (the file is rewritten atomically; no history is kept).

Stored as ``subjects.json`` at the store root::

    {"format": 1, "subjects": {"s-3f9c": {"name": "…", "aliases": […], "identifiers": […]}}}

Writes are read-modify-write under an exclusive lock file, then an atomic replace, so concurrent
registrations from several processes are not lost.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from refold.fold.errors import NotFoundError, StoreError, ValidationError
from refold.fold.events import Event

FORMAT = 1


@dataclass(frozen=True)
class Subject:
    """One registered data subject."""

    subject_id: str
    name: str
    aliases: tuple[str, ...] = ()
    identifiers: tuple[str, ...] = ()

    @property
    def needles(self) -> tuple[str, ...]:
        """Every string that names this subject (name, aliases, identifiers), de-duplicated."""
        seen: dict[str, None] = {}
        for text in (self.name, *self.aliases, *self.identifiers):
            if text and text.strip():
                seen.setdefault(text.strip(), None)
        return tuple(seen)

    def as_json(self) -> dict:
        return {"name": self.name, "aliases": list(self.aliases), "identifiers": list(self.identifiers)}


def _clean(values: Iterable[str], what: str) -> tuple[str, ...]:
    out = []
    for v in values:
        if not isinstance(v, str) or not v.strip():
            raise ValidationError(f"{what}: expected non-empty strings, got {v!r}")
        if v.strip() not in out:
            out.append(v.strip())
    return tuple(out)


class SubjectRegistry:
    """The registry of one store: its ``subjects.json`` (``path``), read and written through the
    store's side-file port (a folder or a bucket; see :meth:`of`)."""

    def __init__(self, path: str | os.PathLike, *, files=None, key: str = "subjects.json"):
        self.path = str(path)
        if files is None:  # a local registry file given by its path
            from refold.storage.files.objects import LocalFiles

            files, key = LocalFiles(Path(path).parent), Path(path).name
        self._files, self._key = files, key

    @classmethod
    def of(cls, layout) -> "SubjectRegistry":
        """The registry of the store ``layout`` names (local or on object storage)."""
        return cls(layout.subjects, files=layout.files(), key="subjects.json")

    def _load(self) -> dict[str, dict]:
        return self._parse(self._files.get(self._key))

    def _parse(self, data: bytes | None) -> dict[str, dict]:
        if data is None:
            return {}
        try:
            parsed = json.loads(data)
        except ValueError as exc:
            raise StoreError(f"{self.path} is not valid JSON ({exc}); restore it or remove it") from exc
        return dict(parsed.get("subjects", {}))

    def _change(self, edit) -> bool:
        """Apply ``edit(subjects) -> bool`` (True: changed) as one read-modify-write; returns it."""
        changed = [False]

        def change(data: bytes | None) -> bytes | None:
            subjects = self._parse(data)
            changed[0] = edit(subjects)
            if not changed[0]:
                return None
            return json.dumps({"format": FORMAT, "subjects": subjects}, indent=2, sort_keys=True,
                              default=str).encode()

        self._files.update(self._key, change)
        return changed[0]

    # -- the API ----------------------------------------------------------------------------------

    def register(self, subject_id: str, name: str, *, aliases: Sequence[str] = (),
                 identifiers: Sequence[str] = ()) -> Subject:
        """Add or replace the entry of ``subject_id``; returns it."""
        if not isinstance(subject_id, str) or not subject_id.strip():
            raise ValidationError("subject id: expected a non-empty opaque id, e.g. 's-3f9c'")
        (name,) = _clean([name], "name")
        subject = Subject(subject_id, name, _clean(aliases, "aliases"), _clean(identifiers, "identifiers"))
        self._change(lambda subjects: subjects.update({subject_id: subject.as_json()}) or True)
        return subject

    def get(self, subject_id: str) -> Subject | None:
        entry = self._load().get(subject_id)
        return None if entry is None else _subject(subject_id, entry)

    def require(self, subject_id: str) -> Subject:
        subject = self.get(subject_id)
        if subject is None:
            raise NotFoundError(f"no subject {subject_id!r} in {self.path}; list them with `refold subjects`")
        return subject

    def list(self) -> list[Subject]:
        return [_subject(sid, entry) for sid, entry in sorted(self._load().items())]

    def remove(self, subject_id: str) -> bool:
        """Remove the entry; True when there was one (idempotent)."""
        return self._change(lambda subjects: subjects.pop(subject_id, None) is not None)

    def __contains__(self, subject_id: str) -> bool:
        return subject_id in self._load()


def _subject(subject_id: str, entry: dict) -> Subject:
    return Subject(subject_id, entry["name"], tuple(entry.get("aliases", ())),
                   tuple(entry.get("identifiers", ())))


@dataclass(frozen=True)
class Mentions:
    """Events tagged with a subject, and events that name it without the tag."""

    tagged: tuple[Event, ...]
    untagged: tuple[Event, ...]

    def __iter__(self) -> Iterator[tuple[Event, ...]]:  # ``tagged, untagged = find_mentions(...)``
        return iter((self.tagged, self.untagged))


def _pattern(needles: Iterable[str]) -> re.Pattern[str] | None:
    parts = [re.escape(n) for n in sorted(set(needles), key=len, reverse=True) if n]
    if not parts:
        return None
    # whole words only, so "Ann" does not match "Annual"; identifiers such as emails also match
    return re.compile(r"(?<!\w)(?:" + "|".join(parts) + r")(?!\w)", re.IGNORECASE)


def _texts(event: Event) -> Iterator[str]:
    for text in (event.content, event.justification, event.source):
        if text:
            yield text
    if event.fact:
        yield from (event.fact.subject, event.fact.object)


def find_mentions(events: Iterable[Event | None], subject: Subject) -> Mentions:
    """Split ``events`` (readable: plain text or opened) into tagged and untagged mentions.

    Tagged: events whose ``subjects`` contain the subject id. Untagged mentions: other events
    whose content, justification, source or fact names the subject's name, an alias or an
    identifier as a whole word (case-insensitive). ``None`` entries (erased events) and
    tombstones are skipped.
    """
    pattern = _pattern(subject.needles)
    tagged, untagged = [], []
    for event in events:
        if event is None or event.is_tombstone:
            continue
        if subject.subject_id in event.subjects:
            tagged.append(event)
        elif pattern is not None and any(pattern.search(t) for t in _texts(event)):
            untagged.append(event)
    return Mentions(tuple(tagged), tuple(untagged))
