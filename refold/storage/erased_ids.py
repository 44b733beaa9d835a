"""What stays of an erased event's id: a keyed hash (its *pseudonym*), never the id itself.

Callers choose event ids, and an id can be personal data (``ann.smith@example.org``). Erasure
must not keep it anywhere, yet it must keep idempotency: a caller retrying an append with the id
of an event erased since must get the tombstone's seq back, not a resurrected event. So a
tombstone, a receipt and every Delta statistic written after the erasure hold
``pseudonym(id) = "erased:" + BLAKE2b-128(key, id)`` (hex), where the key is 32 random bytes
kept in one file at the store root (:data:`KEY_FILE`), created by the first erasure. With the
key, the appender and the fold's snapshot check map an id to its pseudonym; without it (a
receipt or a copied tombstone outside the store) a pseudonym cannot be tested against guessed
ids. Someone who holds the whole store, key included, can still test a guessed id — as they
could test a guess against any deduplication scheme. User event ids may not start with
:data:`PREFIX` (validated on input), so a pseudonym never collides with a live id.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Iterable
from pathlib import Path

from refold.fold.events import ERASED_ID_PREFIX as PREFIX
from .filemodes import file_mode

__all__ = ["KEY_FILE", "PREFIX", "Pseudonyms", "is_pseudonym", "pseudonyms"]

#: the key's file name, at the store root (not a Delta table: no history keeps an old copy)
KEY_FILE = "erased-ids.key"
_KEY_BYTES = 32


def is_pseudonym(event_id: str | None) -> bool:
    return bool(event_id) and event_id.startswith(PREFIX)  # type: ignore[union-attr]


class Pseudonyms:
    """``id → pseudonym`` under one store's key (callable; pseudonyms map to themselves)."""

    def __init__(self, key: bytes):
        if len(key) != _KEY_BYTES:
            raise ValueError("an erased-id key is 32 bytes")
        self._key = key

    def __call__(self, event_id: str) -> str:
        if is_pseudonym(event_id):
            return event_id
        digest = hashlib.blake2b(event_id.encode("utf-8"), key=self._key, digest_size=16)
        return PREFIX + digest.hexdigest()

    def of(self, event_ids: Iterable[str]) -> dict[str, str]:
        """``{pseudonym: id}`` of ``event_ids`` (an append hashes its batch's ids with it once the
        log holds a pseudonym: ~0.6-0.8 us an id, one C call each)."""
        key, blake2b = self._key, hashlib.blake2b
        return {(i if i.startswith(PREFIX) else
                 PREFIX + blake2b(i.encode("utf-8"), key=key, digest_size=16).hexdigest()): i
                for i in event_ids}


def pseudonyms(root: str, *, create: bool = False) -> Pseudonyms | None:
    """The pseudonyms of the local store at ``root``; None when it has no key yet (no erasure
    has run) and ``create`` is false. Creating is put-if-absent: racing erasures agree on one key."""
    if "://" in root and not root.startswith("file://"):
        return None  # erasure needs a local store: a remote one has no erased ids
    path = Path(root.removeprefix("file://")) / KEY_FILE
    try:
        return Pseudonyms(path.read_bytes())
    except FileNotFoundError:
        if not create:
            return None
    staged = path.with_name(f".{KEY_FILE}.{uuid.uuid4().hex}")
    fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL, file_mode(path.parent))  # 0600, 0660 in a group-shared store
    try:
        os.write(fd, os.urandom(_KEY_BYTES))
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(staged, path)  # fails if another process linked its key first: use that one
    except FileExistsError:
        pass
    finally:
        staged.unlink(missing_ok=True)
    return Pseudonyms(path.read_bytes())
