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
from collections.abc import Iterable

from refold.fold.events import ERASED_ID_PREFIX as PREFIX

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


def pseudonyms(root: str, *, create: bool = False, files=None) -> Pseudonyms | None:
    """The pseudonyms of the store at ``root``; None when it has no key yet (no erasure has run)
    and ``create`` is false. ``files``: the store's side files (:meth:`Layout.files`; needed for
    a store on object storage, else the local folder ``root``). Creating is put-if-absent
    (``O_EXCL``-style link locally, a conditional put on object storage): racing erasures agree
    on one key."""
    if files is None:
        if "://" in root and not root.startswith("file://"):
            return None  # no way to reach a remote store's key without its storage_options
        from refold.storage.files.objects import LocalFiles

        files = LocalFiles(root)
    key = files.get(KEY_FILE)
    if key is None:
        if not create:
            return None
        from refold.storage.files.objects import ObjectExistsError

        try:
            files.create(KEY_FILE, os.urandom(_KEY_BYTES))  # 0600, 0660 in a group-shared store
        except ObjectExistsError:
            pass  # another erasure created it first: use that one
        key = files.get(KEY_FILE)
    return Pseudonyms(key)
