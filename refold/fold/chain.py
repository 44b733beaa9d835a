"""The hash chain: commitments and links (pure functions).

Each event stores a random ``salt`` and

    commitment = H("refold/commit/v1" ‖ canonical(header) ‖ H(salt ‖ content))
    link       = H(prev_link ‖ commitment)          (prev_link of seq 0 is GENESIS)

with H = SHA-256 (hex). The header is every stored field except content, salt and the chain
fields, in canonical JSON, so a changed byte anywhere in a row changes its commitment, and a
reordered, removed or inserted row breaks a link. The functions here are the definition; the log
seals whole batches column by column (storage/sealing.py), and tests hold the two byte-identical.

Tombstones (erased events) keep seq, commitment, prev_link and link, replace event_id by its
keyed-hash pseudonym (refold.storage.erased_ids) and drop content, salt and every personal field,
so their commitment cannot be recomputed; verify checks their link
instead, and that an ``erasure`` event in the log names their erasure id. The salt makes the
commitment of a short, guessable text (a name, a yes/no) useless for a dictionary attack once the
content is gone.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from datetime import datetime, timezone
from json.encoder import encode_basestring as _enc  # the C escaper json.dumps uses

from refold.fold.canonical import canonical_json
from refold.fold.events import Event, Fact

GENESIS = "0" * 64
#: the prefix of every commitment's input (names the scheme and its version)
DOMAIN = b"refold/commit/v1"
_DOMAIN_HASH = hashlib.sha256(DOMAIN)
#: the header's keys in the order canonical JSON writes them (sorted)
HEADER_FIELDS = (
    "cipher", "erasure_id", "event_id", "fact", "ingestion_run", "justification", "key_ids", "kind",
    "principals", "recorded_at", "seq", "source", "subjects", "table_version", "tenant", "trace_id",
    "valid_from", "valid_to",
)


def new_salt() -> str:
    return os.urandom(16).hex()


def canonical_time(value: datetime | None) -> str | None:
    """A timestamp as the header writes it: UTC, ISO-8601, microseconds."""
    return None if value is None else value.astimezone(timezone.utc).isoformat(timespec="microseconds")


_iso = canonical_time


def header_bytes(event: Event, *, stored_times: Mapping[str, str] | None = None) -> bytes:
    """Canonical JSON of the fields the commitment covers besides content.

    Canonical means :func:`~refold.fold.canonical.canonical_json` of the header dict;
    :func:`canonical_header` writes those exact bytes without building a
    dict, because the log seals every appended event with it. ``stored_times`` gives the canonical
    text of a ``valid_from``/``valid_to`` the event could not hold as a datetime (a stored time
    outside Python's range, read back clamped).
    """
    times = stored_times or {}
    return canonical_header(
        seq=event.seq, event_id=event.event_id, recorded_at=_iso(event.recorded_at),
        table_version=event.table_version, kind=event.kind, tenant=event.tenant,
        source=event.source, subjects=event.subjects, principals=event.principals,
        trace_id=event.trace_id, justification=event.justification,
        valid_from=times.get("valid_from", _iso(event.valid_from)),
        valid_to=times.get("valid_to", _iso(event.valid_to)),
        ingestion_run=event.ingestion_run, fact=event.fact, cipher=event.cipher,
        key_ids=event.key_ids, erasure_id=event.erasure_id,
    )


def _s(value: str | None) -> str:
    return "null" if value is None else _enc(value)


def _l(values) -> str:
    return "[" + ",".join(map(_enc, values)) + "]"


def canonical_header(*, seq: int, event_id: str, recorded_at: str | None, table_version: int,
                     kind: str, tenant: str, source: str | None, subjects, principals,
                     trace_id: str | None, justification: str | None, valid_from: str | None,
                     valid_to: str | None, ingestion_run: str | None, fact: Fact | None,
                     cipher: str | None, key_ids, erasure_id: str | None) -> bytes:
    """The canonical header from field values (timestamps already as :func:`_iso` strings).

    Keys in sorted order, compact separators, strings escaped by the same C encoder that
    ``json.dumps(..., ensure_ascii=False)`` uses: byte for byte what ``json.dumps`` would write.
    """
    fact_text = "null" if fact is None else (
        '{"object":' + _enc(fact.object) + ',"relation":' + _enc(fact.relation)
        + ',"subject":' + _enc(fact.subject) + "}"
    )
    return (
        f'{{"cipher":{_s(cipher)},"erasure_id":{_s(erasure_id)},"event_id":{_enc(event_id)},'
        f'"fact":{fact_text},"ingestion_run":{_s(ingestion_run)},'
        f'"justification":{_s(justification)},"key_ids":{_l(key_ids)},"kind":{_enc(kind)},'
        f'"principals":{_l(principals)},"recorded_at":{_s(recorded_at)},"seq":{int(seq)},'
        f'"source":{_s(source)},"subjects":{_l(subjects)},"table_version":{int(table_version)},'
        f'"tenant":{_s(tenant)},"trace_id":{_s(trace_id)},"valid_from":{_s(valid_from)},'
        f'"valid_to":{_s(valid_to)}}}'
    ).encode()


def reference_header_bytes(event: Event) -> bytes:
    """``header_bytes`` the slow, obvious way (canonical JSON of a dict); tests compare the two."""
    header = {
        "seq": event.seq,
        "event_id": event.event_id,
        "recorded_at": _iso(event.recorded_at),
        "table_version": event.table_version,
        "kind": event.kind,
        "tenant": event.tenant,
        "source": event.source,
        "subjects": list(event.subjects),
        "principals": list(event.principals),
        "trace_id": event.trace_id,
        "justification": event.justification,
        "valid_from": _iso(event.valid_from),
        "valid_to": _iso(event.valid_to),
        "ingestion_run": event.ingestion_run,
        "fact": event.fact.as_dict() if event.fact else None,
        "cipher": event.cipher,
        "key_ids": list(event.key_ids),
        "erasure_id": event.erasure_id,
    }
    return canonical_json(header)


def content_digest(salt: str, content: str) -> bytes:
    return hashlib.sha256(bytes.fromhex(salt) + content.encode("utf-8")).digest()


def commitment_of(event: Event, *, stored_times: Mapping[str, str] | None = None) -> str:
    """Recompute the commitment of a non-tombstone event from its stored fields."""
    if event.salt is None or event.content is None:
        raise ValueError(f"seq {event.seq}: only events with content and salt have a computable commitment")
    return commitment_from(header_bytes(event, stored_times=stored_times), event.salt, event.content)


def commitment_from(header: bytes, salt: str, content: str) -> str:
    """H(domain ‖ header ‖ H(salt ‖ content)), hex."""
    h = _DOMAIN_HASH.copy()
    h.update(header)
    h.update(content_digest(salt, content))
    return h.hexdigest()


def link_of(prev_link: str, commitment: str) -> str:
    return hashlib.sha256(bytes.fromhex(prev_link) + bytes.fromhex(commitment)).hexdigest()


def seal(event: Event, prev_link: str) -> Event:
    """Return ``event`` with commitment, prev_link and link filled in."""
    commitment = commitment_of(event)
    return event.with_(commitment=commitment, prev_link=prev_link, link=link_of(prev_link, commitment))
