"""Shred mode: event content encrypted under keys of the event's data subjects (AES-256-GCM).

What is encrypted: ``content``, ``justification`` and ``fact``, as one JSON payload. The stored
row keeps ``content`` = base64(nonce ‖ ciphertext ‖ tag), ``justification`` = ``fact`` = NULL,
``cipher`` = ``"aes256gcm-v1"`` and ``key_ids`` = the ids of the keys it needs. The commitment
and the chain are computed over the stored (encrypted) row, so ``verify`` never needs a key and
still passes after a key is destroyed.

Event key. ``HKDF-SHA256(ikm = k_1 ‖ … ‖ k_n, info = "refold/event-key/v1" ‖ 0 ‖ event_id)``
where ``k_i`` are the 32-byte keys of ALL the event's subjects, sorted by key id. Without any one
of them the event key cannot be derived, so destroying one subject's key makes every event that
concerns that subject unreadable, including events shared with other subjects (their shared text
goes too: it was about the erased person as well). Putting the event id in ``info`` gives every
event its own key, so random 96-bit nonces never repeat under one key.

Events without subjects are encrypted under a per-tenant key (key owner
``KeyOwner.tenant(tenant)`` in the key store, a name space of its own: a subject id
``"tenant:acme"`` is a subject, never tenant acme): destroying it shreds every subject-less event
of that tenant, and there is no per-event key to lose or to keep in sync. Subject-bearing events
do not depend on the tenant key.

Associated data binds the ciphertext to its row: cipher version, event id, subjects, tenant and
key ids (canonical JSON). Moving a ciphertext to another row, or editing its subjects, makes
decryption fail with :class:`IntegrityError` (tampering is not erasure).

Stays in clear, by design: ``event_id``, ``kind``, ``tenant``, ``subjects`` (opaque ids),
``source``, ``principals``, ``trace_id``, ``ingestion_run``, ``valid_from``/``valid_to``, and the
chain fields. The log needs them to order, de-duplicate and route events without keys. So in a
shred-mode store **``source``, ``trace_id`` and ``ingestion_run`` must not carry personal data**
(use ``chat#7``, not ``chat with Alice``), and subject ids must be opaque (``s-3f9c``, not an email).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from refold.fold.canonical import canonical_json
from refold.fold.errors import IntegrityError, StoreError
from refold.fold.events import Event, Fact, NewEvent
from refold.storage.keys.port import KeyOwner, KeyStore
from refold.storage.layout import Layout, read_settings

if TYPE_CHECKING:
    import polars as pl

CIPHER = "aes256gcm-v1"
SCHEMA_VERSION = 1
NONCE_BYTES = 12
#: the prefix stores made before typed key owners used for tenant keys (legacy names only)
TENANT_PREFIX = "tenant:"
_INFO = b"refold/event-key/v1\x00"


def key_subjects(subjects: Sequence[str], tenant: str) -> list[KeyOwner]:
    """The key owners an event's keys belong to: its subjects, or its tenant."""
    if subjects:
        return [KeyOwner.subject(s) for s in sorted(set(subjects))]
    return [KeyOwner.tenant(tenant)]


def marked_events(rows: "pl.DataFrame", marks: frozenset[str]) -> set[str]:
    """Ids of the encrypted events among ``rows`` (columns ``event_id``, ``subjects``, ``tenant``,
    ``cipher``, as in the log) one of whose key owners (:func:`key_subjects`) has an erased
    marker among ``marks`` (:meth:`KeyStore.erased_owners`). Such an event is erased whatever
    keys remain: the marker is written before the keys are destroyed, so a reader that honours
    markers never shows what a destruction under way is about to shred. Each distinct owner is
    hashed once."""
    import polars as pl

    if not marks or rows.height == 0:
        return set()
    rows = rows.filter(pl.col("cipher").is_not_null())
    has_subjects = pl.col("subjects").list.len().fill_null(0) > 0
    by_subject = rows.filter(has_subjects).select("event_id", "subjects").explode("subjects")
    by_tenant = rows.filter(~has_subjects).select("event_id", pl.col("tenant").fill_null(""))
    subjects = [s for s in by_subject["subjects"].unique().to_list() if KeyOwner.subject(s).digest() in marks]
    tenants = [t for t in by_tenant["tenant"].unique().to_list() if KeyOwner.tenant(t).digest() in marks]
    return {*by_subject.filter(pl.col("subjects").is_in(subjects))["event_id"].to_list(),
            *by_tenant.filter(pl.col("tenant").is_in(tenants))["event_id"].to_list()}


def marked_in_log(log, marks: frozenset[str], *, since: int = 0, until: int | None = None) -> set[str]:
    """:func:`marked_events` of the log's rows with ``since <= seq <= until`` (None: the head);
    reads four clear columns of the files that can hold them, never a key."""
    import polars as pl

    if not marks:
        return set()
    rows = log.arrow(columns=["event_id", "subjects", "tenant", "cipher"], prune=[{"seq": (since, until)}])
    return marked_events(pl.from_arrow(rows), marks)


def event_key(keys: Sequence[tuple[str, bytes]], event_id: str) -> bytes:
    """Derive the event key from ``(key_id, key)`` pairs (order-independent: sorted by key id)."""
    return _expand(_extract(keys), event_id)


def _extract(keys: Sequence[tuple[str, bytes]]) -> bytes:
    """HKDF's extract step over the keys (sorted by key id): the same for every event that
    needs the same keys, so a batch computes it once per key set."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    if not keys:
        raise StoreError("an encrypted event needs at least one key")
    return HKDF.extract(hashes.SHA256(), None, b"".join(key for _, key in sorted(keys)))


def _expand(prk: bytes, event_id: str) -> bytes:
    """HKDF's expand step: the event's own key."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand

    return HKDFExpand(hashes.SHA256(), 32, _INFO + event_id.encode("utf-8")).derive(prk)


def associated_data(*, event_id: str, subjects: Sequence[str], tenant: str,
                    key_ids: Sequence[str]) -> bytes:
    value = {
        "cipher": CIPHER, "schema": SCHEMA_VERSION, "event_id": event_id,
        "subjects": list(subjects), "tenant": tenant, "key_ids": sorted(key_ids),
    }
    return canonical_json(value)


def encrypt_events(events: Sequence[NewEvent], keystore: KeyStore) -> dict[str, list[Any]]:
    """Stored columns that replace the readable fields of ``events`` by their ciphertext, one
    value per event (a :data:`refold.storage.log.eventlog.Protector`'s answer): ``content`` the
    base64 of nonce ‖ ciphertext ‖ tag, ``justification`` and ``fact`` None, ``cipher``
    :data:`CIPHER`, ``key_ids`` the sorted ids of the keys each event needs.

    The keys of every owner in the batch come from one :meth:`KeyStore.get_or_create_many` call
    (raises :class:`~refold.fold.errors.ErasedSubjectError` when one of them was erased). Each
    event still gets its own key (:func:`event_key`), random nonce and associated data.
    """
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    # what events with the same subjects and tenant share: owners, key ids and HKDF's extract
    sets = {(e.subjects, e.tenant) for e in events}
    owners = {key: key_subjects(*key) for key in sets}
    keys = keystore.get_or_create_many([o for some in owners.values() for o in some])
    shared = {}
    for (subjects, tenant), some in owners.items():
        pairs = [keys[o] for o in some]
        ids = tuple(sorted(k for k, _ in pairs))
        shared[(subjects, tenant)] = (ids, _extract(pairs))
    nonces = os.urandom(NONCE_BYTES * len(events))
    contents, key_ids = [], []
    for i, event in enumerate(events):
        ids, prk = shared[(event.subjects, event.tenant)]
        nonce = nonces[NONCE_BYTES * i: NONCE_BYTES * (i + 1)]
        payload = canonical_json({"content": event.content, "justification": event.justification,
                                  "fact": event.fact.as_dict() if event.fact else None})
        aad = associated_data(event_id=event.event_id, subjects=event.subjects, tenant=event.tenant, key_ids=ids)
        sealed = AESGCM(_expand(prk, event.event_id)).encrypt(nonce, payload, aad)
        contents.append(base64.b64encode(nonce + sealed).decode("ascii"))
        key_ids.append(ids)
    n = len(events)
    return {"content": contents, "justification": [None] * n, "fact": [None] * n,
            "cipher": [CIPHER] * n, "key_ids": key_ids}


def shred_protector(layout: Layout, *, keystore: KeyStore | None = None):
    """The :data:`refold.storage.log.eventlog.Protector` of a shred-mode store (default ``keystore``: the
    one the store was created with, see :func:`refold.storage.keys.select.open_keystore`)."""
    if keystore is None:
        from refold.storage.keys.select import open_keystore

        keystore = open_keystore(layout, read_settings(layout))
    store = keystore

    def protect(events: Sequence[NewEvent]) -> dict[str, list[Any]]:
        return encrypt_events(events, store)

    return protect


def open_event(event: Event, keystore: KeyStore) -> Event | None:
    """``event`` with plaintext content, justification and fact; ``None`` when it is erased.

    Erased means: a tombstone, or an encrypted event one of whose keys is gone. A plain-text
    event is returned unchanged. The returned event has ``cipher=None`` (its fields are plain
    text now); it is for reading and folding, not for ``verify``. Raises
    :class:`IntegrityError` when the keys are all there but the ciphertext does not open
    (tampered bytes or associated data), and :class:`StoreError` for an unknown cipher.
    """
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    if event.is_tombstone:
        return None
    if event.cipher is None:
        return event
    if event.cipher != CIPHER:
        raise StoreError(f"seq {event.seq}: unknown cipher {event.cipher!r}; this refold reads {CIPHER}")
    keys = []
    for key_id in event.key_ids:
        key = keystore.get(key_id)
        if key is None:
            return None
        keys.append((key_id, key))
    if not keys or event.content is None:
        raise IntegrityError(f"seq {event.seq}: encrypted event without keys or ciphertext",
                             first_bad_seq=event.seq)
    try:
        blob = base64.b64decode(event.content, validate=True)
        aad = associated_data(event_id=event.event_id, subjects=event.subjects,
                              tenant=event.tenant, key_ids=event.key_ids)
        plain = AESGCM(event_key(keys, event.event_id)).decrypt(
            blob[:NONCE_BYTES], blob[NONCE_BYTES:], aad)
    except (InvalidTag, binascii.Error, ValueError) as exc:
        raise IntegrityError(
            f"seq {event.seq}: ciphertext does not open with its keys (tampered row?); run `refold verify`",
            first_bad_seq=event.seq,
        ) from exc
    payload = json.loads(plain)
    fact = payload.get("fact")
    return event.with_(content=payload["content"], justification=payload.get("justification"),
                       fact=Fact(**fact) if fact else None, cipher=None)


def open_events(events: Sequence[Event], keystore: KeyStore) -> list[Event | None]:
    """:func:`open_event` for each event (same order)."""
    return [open_event(e, keystore) for e in events]
