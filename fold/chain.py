"""The hash chain: commitments and links (pure functions).

Each event stores a random ``salt`` and

    commitment = H("refold/commit/v1" ‖ canonical(header) ‖ H(salt ‖ content))
    link       = H(prev_link ‖ commitment)          (prev_link of seq 0 is GENESIS)

with H = SHA-256 (hex). The header is every stored field except content, salt and the chain
fields, in canonical JSON, so a changed byte anywhere in a row changes its commitment, and a
reordered, removed or inserted row breaks a link.

Tombstones (erased events) keep seq, event_id, commitment, prev_link and link but drop content,
salt and every personal field, so their commitment cannot be recomputed; verify checks their link
instead, and that an ``erasure`` event in the log names their erasure id. The salt makes the
commitment of a short, guessable text (a name, a yes/no) useless for a dictionary attack once the
content is gone.
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import datetime, timezone

from .events import Event

GENESIS = "0" * 64
_DOMAIN = b"refold/commit/v1"


def new_salt() -> str:
    return os.urandom(16).hex()


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(timezone.utc).isoformat(timespec="microseconds")


def header_bytes(event: Event) -> bytes:
    """Canonical JSON of the fields the commitment covers besides content."""
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
    return json.dumps(header, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def content_digest(salt: str, content: str) -> bytes:
    return hashlib.sha256(bytes.fromhex(salt) + content.encode("utf-8")).digest()


def commitment_of(event: Event) -> str:
    """Recompute the commitment of a non-tombstone event from its stored fields."""
    if event.salt is None or event.content is None:
        raise ValueError(f"seq {event.seq}: only events with content and salt have a computable commitment")
    h = hashlib.sha256(_DOMAIN)
    h.update(header_bytes(event))
    h.update(content_digest(event.salt, event.content))
    return h.hexdigest()


def link_of(prev_link: str, commitment: str) -> str:
    return hashlib.sha256(bytes.fromhex(prev_link) + bytes.fromhex(commitment)).hexdigest()


def seal(event: Event, prev_link: str) -> Event:
    """Return ``event`` with commitment, prev_link and link filled in."""
    commitment = commitment_of(event)
    return event.with_(commitment=commitment, prev_link=prev_link, link=link_of(prev_link, commitment))
