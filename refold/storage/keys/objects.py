"""Shred-mode keys as objects under a store on object storage (``keys/``): the file key store's
layout and contract (:class:`refold.storage.keys.port.FileKeyStore`) where there is no ``flock``.

    keys/ids/<key_id>               the 32 key bytes
    keys/subjects/<owner digest>    the owner's key ids, one per line; ``erased`` once destroyed
    keys/erased/<owner digest>      erased marker: the erasure id

No lock service: the owner's subject object is the point every writer agrees on. Creating a key
puts the key object (a fresh id: create-if-absent), then adds its id to the subject object with a
conditional put (:meth:`StoreFiles.update`: If-Match on the ETag read); destroying writes the
marker, then replaces the subject object by ``erased`` the same way, then deletes the key objects
it named. Whichever of two racing writers loses the conditional put re-reads: a creation that
finds ``erased`` deletes its key object and refuses, and a destruction sees every id that any
creation acknowledged. A delete on object storage is real for the current object; on a versioned
bucket the old versions are deleted by the erasure too (see :mod:`refold.storage.files.versions`).

What a key object holds goes through the same three hooks as the file key store's
(:meth:`_make_key`, :meth:`_open_key`, :meth:`_before_destroy`), so the KMS adapter keeps its
wrapped keys here as well (:class:`refold.storage.keys.kms.KmsKeyStore`).
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from refold.fold.errors import ErasedSubjectError, StoreError

from refold.storage.keys.port import KEY_BYTES, KeyOwner, KeyStore, _check_subject, _new_key_id, _refuse, each

__all__ = ["ObjectKeyStore"]

_ERASED_LINE = "erased"


class ObjectKeyStore(KeyStore):
    """The :class:`~refold.storage.keys.port.KeyStore` port on a store's side files (object storage)."""

    kind = "file"

    def __init__(self, files, prefix: str = "keys"):
        self.files = files
        self.prefix = prefix.strip("/")
        self._thread_lock = threading.Lock()

    def _key(self, key_id: str) -> str:
        if not key_id or not all(c in "0123456789abcdef" for c in key_id):
            raise StoreError(f"malformed key id {key_id!r}: expected lowercase hex")
        return f"{self.prefix}/ids/{key_id}"

    def _subject(self, owner: KeyOwner, legacy: bool = False) -> str:
        return f"{self.prefix}/subjects/{owner.legacy_digest() if legacy else owner.digest()}"

    def _ids(self, owner: KeyOwner) -> list[str]:
        ids: list[str] = []
        for legacy in (True, False):
            text = self.files.get_text(self._subject(owner, legacy)) or ""
            ids += [line for line in text.splitlines() if line and line != _ERASED_LINE]
        return list(dict.fromkeys(ids))

    # -- the port ---------------------------------------------------------------------------------

    def key_ids(self, subject_id: "str | KeyOwner") -> list[str]:
        return [k for k in self._ids(_check_subject(subject_id)) if self.exists(k)]

    def erased(self, subject_id: "str | KeyOwner") -> str | None:
        text = self.files.get_text(f"{self.prefix}/erased/{_check_subject(subject_id).digest()}")
        return None if text is None else text.strip()

    def erased_owners(self) -> frozenset[str]:
        folder = f"{self.prefix}/erased/"
        names = (key[len(folder):] for key in self.files.list(folder) if key.startswith(folder))
        return frozenset(n for n in names if n and "/" not in n and not n.startswith("."))

    def get(self, key_id: str) -> bytes | None:
        data = self._stored(key_id)
        return None if data is None else self._open_key(key_id, data)

    # -- what a key object holds (hooks for adapters that keep keys wrapped) -----------------------

    def _stored(self, key_id: str) -> bytes | None:
        """The key object's content as stored (None: absent)."""
        return self.files.get(self._key(key_id))

    def _make_key(self, owner: KeyOwner, key_id: str) -> tuple[bytes, bytes]:
        """A new key for ``owner``: ``(key bytes, what the key object stores)``."""
        key = secrets.token_bytes(KEY_BYTES)
        return key, key

    def _open_key(self, key_id: str, stored: bytes) -> bytes:
        """The key bytes from a key object's content."""
        if len(stored) != KEY_BYTES:
            raise StoreError(f"key object {key_id} is {len(stored)} bytes, expected {KEY_BYTES}: damaged key store")
        return stored

    def _before_destroy(self, owner: KeyOwner, key_ids: list[str], erasure_id: str) -> None:
        """Called after the erased marker is written and the subject object closed, before the
        key objects of ``key_ids`` (those still present) are deleted."""

    def exists(self, key_id: str) -> bool:
        return self.files.exists(self._key(key_id))

    def get_or_create(self, subject_id: "str | KeyOwner") -> tuple[str, bytes]:
        owner = _check_subject(subject_id)
        return self.get_or_create_many([owner])[owner]

    def get_or_create_many(self, owners: "Iterable[str | KeyOwner]") -> dict[KeyOwner, tuple[str, bytes]]:
        """:meth:`get_or_create` of each distinct owner, several owners' requests in flight at
        once (each owner's reads and conditional update are its own; see the module docstring).
        The erased markers are listed first: an erased owner refuses the call before any key is
        made (one made meanwhile loses its conditional update and is refused there)."""
        wanted = list(dict.fromkeys(map(_check_subject, owners)))
        with self._thread_lock:
            marks = self.erased_owners()
            for owner in wanted:
                if owner.digest() in marks:
                    raise _refuse(owner, self.erased(owner) or "")
            return dict(zip(wanted, each(self._get_or_create, wanted)))

    def _get_or_create(self, owner: KeyOwner) -> tuple[str, bytes]:
        """:meth:`get_or_create` of one owner (the caller holds the thread lock)."""
        for key_id in reversed(self._ids(owner)):
            key = self.get(key_id)
            if key is not None:
                return key_id, key
        erased = self.erased(owner)
        if erased is not None:
            raise _refuse(owner, erased)
        key_id = _new_key_id()
        key, stored = self._make_key(owner, key_id)
        self.files.create(self._key(key_id), stored)

        def add(data: bytes | None) -> bytes:
            lines = (data or b"").decode("ascii").splitlines()
            if _ERASED_LINE in lines:
                raise _refuse(owner, self.erased(owner) or "")
            return ("\n".join([*lines, key_id]) + "\n").encode("ascii")

        try:
            self.files.update(self._subject(owner), add)
        except ErasedSubjectError:
            self.files.delete(self._key(key_id))  # destroyed meanwhile: this key was never handed out
            raise
        return key_id, key

    def destroy(self, subject_id: "str | KeyOwner", *, erasure_id: str | None = None) -> list[str]:
        owner = _check_subject(subject_id)
        with self._thread_lock:
            marker = f"{self.prefix}/erased/{owner.digest()}"
            if self.erased(owner) is None or erasure_id:
                self.files.put(marker, (erasure_id or "").encode("ascii"))
            named: list[str] = []

            def close(data: bytes | None) -> bytes:
                named[:] = [line for line in (data or b"").decode("ascii").splitlines()
                            if line and line != _ERASED_LINE]
                return (_ERASED_LINE + "\n").encode("ascii")

            self.files.update(self._subject(owner), close)  # no creation can add an id after this
            destroyed = []
            present = [k for k in dict.fromkeys([*self._ids(owner), *named]) if self.exists(k)]
            self._before_destroy(owner, present, self.erased(owner) or "")
            for key_id in present:
                if self.exists(key_id):
                    self.files.delete(self._key(key_id))
                    destroyed.append(key_id)
            self.files.delete(self._subject(owner, legacy=True))
            return destroyed

    def destruction(self, subject_id: "str | KeyOwner") -> Mapping[str, Any] | None:
        erasure_id = self.erased(subject_id)
        if erasure_id is None:
            return None
        return {"key_store": self.kind, "erasure_id": erasure_id, "how": "key objects deleted"}
