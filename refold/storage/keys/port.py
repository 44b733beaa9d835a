"""Subject keys for crypto-shredding: the :class:`KeyStore` port and its file adapter.

A shred-mode store encrypts each event under keys of its data subjects (see
:mod:`refold.storage.keys.crypto`). Erasing a subject destroys its keys, which makes every event that
needed them unreadable, in this table, in its old Delta versions and in any copy of it.

So the one thing a key store must do well is *delete*. That rules out Delta (its history keeps
every value it ever held) and leaves a store whose delete is real: a file per key, or an external
KMS behind the same port.

Contract (:class:`KeyStore`):

* ``get_or_create(subject_id)`` returns the subject's current ``(key_id, key)``, creating a random
  32-byte key the first time; concurrent callers for one subject get the same key.
* ``key_ids(subject_id)`` lists the subject's live key ids without creating one.
* ``get(key_id)`` returns the key bytes, or ``None`` once the key is destroyed (or never existed).
* ``destroy(subject_id, erasure_id=None)`` first records a durable *erased* marker for the
  subject (naming the erasure), then destroys every key of the subject and returns their ids;
  idempotent (an unknown or already destroyed subject returns ``[]``). The marker stays: a later
  ``get_or_create`` for that subject raises :class:`~refold.fold.errors.ErasedSubjectError`
  naming the erasure, so an append racing the erasure (or coming after it) can never get a fresh
  key and stay readable. New data about the person goes under a new subject id.
* ``erased(subject_id)`` is the erasure id of that marker (``""`` when none was named), or None.
* ``erased_owners()`` lists every erased marker: the :meth:`KeyOwner.digest` of each owner
  ``destroy`` was called for (a frozenset; one listing, no key read). Since the marker is written
  before the keys go, an owner whose keys are gone, or going, is in it: a shred-mode read checks
  it to know that the derived state it answers from predates no destruction (docs/erasure.md,
  "Keys destroyed outside an erasure").
* ``exists(key_id)`` is ``get(key_id) is not None`` without reading the key.
* ``destruction(subject_id)`` is what destroying the owner's keys did, as a JSON-able mapping for
  the erasure receipt (``{"key_store": "file" | "kms" | ..., "erasure_id": ..., ...}``; a KMS
  adapter adds the KMS key deletions it scheduled and their dates), or None while the owner is
  not erased. It is durable: a rerun of an erasure after a crash reads the same record.

Adapters: :class:`FileKeyStore` (key bytes in files under the store's ``keys/``),
:class:`refold.storage.keys.kms.KmsKeyStore` (data keys from AWS KMS, kept only wrapped), and
:class:`MemoryKeyStore` (tests only). :func:`refold.storage.keys.select.open_keystore` picks the
one a store was created with.

Key owners. A key belongs to a data subject or to a tenant (the key of the tenant's subject-less
events). Every method takes a :class:`KeyOwner`; a plain string means ``KeyOwner.subject(str)``.
The two kinds never share a name: an owner is stored under the SHA-256 of its kind and id,
length-prefixed (:meth:`KeyOwner.digest`), so a subject id ``"tenant:acme"`` is not tenant acme.
(Stores written before used ``sha256(subject id)`` and ``sha256("tenant:" + tenant)``, one name
space for both; those *legacy* files are still read and destroyed with the owner whose old name
they carry, and new keys are only ever made under the new names — see docs/erasure.md, "Key
owners".)

Key ids are opaque random strings, never derived from the subject id, so a key id in a stored
event row says nothing about who the event is about.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from refold.fold.errors import ErasedSubjectError, StoreError

from refold.storage.files.modes import file_mode, make_dirs

KEY_BYTES = 32
_LEGACY_TENANT_PREFIX = "tenant:"  # the old, shared name space (see KeyOwner.legacy_name)


@dataclass(frozen=True)
class KeyOwner:
    """Whose key: a data subject's, or a tenant's (for the tenant's subject-less events)."""

    kind: Literal["subject", "tenant"]
    id: str

    @classmethod
    def subject(cls, subject_id: str) -> "KeyOwner":
        return cls("subject", subject_id)

    @classmethod
    def tenant(cls, tenant: str) -> "KeyOwner":
        return cls("tenant", tenant)

    def digest(self) -> str:
        """The owner's storage name: SHA-256 of a versioned, typed, length-prefixed encoding
        (no two owners share it, whatever characters their ids hold)."""
        kind, ident = self.kind.encode("ascii"), self.id.encode("utf-8")
        raw = b"refold-key-owner/v2\x00" + len(kind).to_bytes(4, "big") + kind + len(ident).to_bytes(8, "big") + ident
        return hashlib.sha256(raw).hexdigest()

    def legacy_digest(self) -> str:
        """The name stores made before key owners were typed used: ``sha256(subject id)`` or
        ``sha256("tenant:" + tenant)`` (ambiguous: subject ``tenant:acme`` = tenant ``acme``)."""
        name = self.id if self.kind == "subject" else _LEGACY_TENANT_PREFIX + self.id
        return hashlib.sha256(name.encode("utf-8")).hexdigest()

    def __str__(self) -> str:
        return f"{self.kind} {self.id!r}"


@runtime_checkable
class KeyStore(Protocol):
    """Port: per-owner keys whose destruction is real (see the module docstring)."""

    def get_or_create(self, subject_id: "str | KeyOwner") -> tuple[str, bytes]: ...

    def key_ids(self, subject_id: "str | KeyOwner") -> list[str]: ...

    def get(self, key_id: str) -> bytes | None: ...

    def destroy(self, subject_id: "str | KeyOwner", *, erasure_id: str | None = None) -> list[str]: ...

    def erased(self, subject_id: "str | KeyOwner") -> str | None: ...

    def erased_owners(self) -> frozenset[str]: ...

    def exists(self, key_id: str) -> bool: ...

    def destruction(self, subject_id: "str | KeyOwner") -> Mapping[str, Any] | None: ...


def marks_fingerprint(marks: "Iterable[str]") -> str:
    """A short name of a set of erased markers (:meth:`KeyStore.erased_owners`): ``""`` for none,
    else ``"<count>:<sha256 of the sorted digests>"``. Derived state records the one its fold
    honoured; a read compares it with the markers listed now (markers are never removed, so an
    equal name means no owner was erased since)."""
    names = sorted(set(marks))
    if not names:
        return ""
    return f"{len(names)}:{hashlib.sha256(chr(10).join(names).encode('ascii')).hexdigest()}"


def _new_key_id() -> str:
    return secrets.token_hex(16)


def owner_of(subject_id: "str | KeyOwner") -> KeyOwner:
    """``subject_id`` as a :class:`KeyOwner` (a plain string is a subject id); checks it."""
    owner = subject_id if isinstance(subject_id, KeyOwner) else KeyOwner.subject(subject_id)
    if owner.kind not in ("subject", "tenant") or not isinstance(owner.id, str) or not owner.id:
        raise StoreError(f"a key owner needs a kind (subject or tenant) and a non-empty id, got {subject_id!r}")
    return owner


def _check_subject(subject_id: "str | KeyOwner") -> KeyOwner:
    return owner_of(subject_id)


def _refuse(owner: KeyOwner, erasure_id: str) -> ErasedSubjectError:
    by = f" by erasure {erasure_id}" if erasure_id else ""
    return ErasedSubjectError(
        f"{owner} was erased{by}: its key is destroyed and no new one is made, so this write is "
        "refused (nothing was written); record new data about this person under a new subject id"
    )


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FileKeyStore:
    """Keys as files under ``root`` (a store's ``keys/``)::

        root/ids/<key_id>          the 32 key bytes, mode 0600
        root/subjects/<KeyOwner.digest()>   the owner's key ids, one per line
        root/erased/<KeyOwner.digest()>     erased marker: the erasure id (no key, no name)
        root/.lock                 serialises creation and destruction across processes

    Writes go to a temp file, are fsync'd, renamed into place, and the directory is fsync'd, so
    a key that ``get_or_create`` returned survives a crash. ``destroy`` unlinks the key files and
    fsyncs the directory. It does not overwrite them first: on SSDs and copy-on-write file systems
    an overwrite lands in new blocks and does not reach the old ones, so it would only look
    safer. What remains on the medium after an unlink is the file system's and the disk's business
    (full-disk encryption covers it); no refold file can reach the key again.

    Subject files are named by a hash only to keep arbitrary subject ids filesystem-safe; they
    are unlinked with the keys. Erased markers are written (durably) before the keys go, and
    checked under the lock before a key is made.

    Subclasses change what a key file holds through three hooks (the KMS adapter keeps a wrapped
    key there): :meth:`_make_key`, :meth:`_open_key` and :meth:`_before_destroy`.
    """

    #: the ``key_store`` name :meth:`destruction` reports
    kind = "file"

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self._ids = self.root / "ids"
        self._subjects = self.root / "subjects"
        self._erased = self.root / "erased"
        self._thread_lock = threading.Lock()

    # -- paths and locking ------------------------------------------------------------------------

    def _subject_file(self, owner: KeyOwner) -> Path:
        return self._subjects / owner.digest()

    def _legacy_file(self, owner: KeyOwner) -> Path:
        return self._subjects / owner.legacy_digest()

    def _key_file(self, key_id: str) -> Path:
        if not key_id or not all(c in "0123456789abcdef" for c in key_id):
            raise StoreError(f"malformed key id {key_id!r}: expected lowercase hex")
        return self._ids / key_id

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        # the file lock serialises processes (filelock: flock on POSIX, Windows too); the thread
        # lock lets this process's threads wait their turn without polling the file
        from filelock import FileLock

        make_dirs(self._ids)
        make_dirs(self._subjects)
        with self._thread_lock, FileLock(self.root / ".lock", mode=file_mode(self.root), poll_interval=0.002):
            yield

    def _write_file(self, folder: Path, name: str, data: bytes) -> None:
        tmp = folder / f".tmp-{secrets.token_hex(8)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, file_mode(folder))
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, folder / name)
        _fsync_dir(folder)

    @staticmethod
    def _ids_in(path: Path) -> list[str]:
        try:
            text = path.read_text(encoding="ascii")
        except FileNotFoundError:
            return []
        return [line for line in text.splitlines() if line]

    def _read_ids(self, owner: KeyOwner) -> list[str]:
        """Key ids under the owner's name (newest last)."""
        return self._ids_in(self._subject_file(owner))

    def _legacy_ids(self, owner: KeyOwner) -> list[str]:
        return self._ids_in(self._legacy_file(owner))

    # -- the port ---------------------------------------------------------------------------------

    def key_ids(self, subject_id: "str | KeyOwner") -> list[str]:
        """Live key ids of the owner, those under its old (legacy) name included."""
        owner = _check_subject(subject_id)
        ids = dict.fromkeys([*self._legacy_ids(owner), *self._read_ids(owner)])
        return [k for k in ids if self.exists(k)]

    def erased(self, subject_id: "str | KeyOwner") -> str | None:
        owner = _check_subject(subject_id)
        try:
            return (self._erased / owner.digest()).read_text(encoding="ascii").strip()
        except FileNotFoundError:
            return None

    def erased_owners(self) -> frozenset[str]:
        try:  # (a marker is written to a temp name and renamed: only whole names are digests)
            return frozenset(n for n in os.listdir(self._erased) if not n.startswith("."))
        except FileNotFoundError:
            return frozenset()

    def get(self, key_id: str) -> bytes | None:
        try:
            data = self._key_file(key_id).read_bytes()
        except FileNotFoundError:
            return None
        return self._open_key(key_id, data)

    # -- what a key file holds (hooks for adapters that keep keys wrapped) -------------------------

    def _make_key(self, owner: KeyOwner, key_id: str) -> tuple[bytes, bytes]:
        """A new key for ``owner``: ``(key bytes, what the key file stores)``."""
        key = secrets.token_bytes(KEY_BYTES)
        return key, key

    def _open_key(self, key_id: str, stored: bytes) -> bytes:
        """The key bytes from a key file's content."""
        if len(stored) != KEY_BYTES:
            raise StoreError(f"key file {key_id} is {len(stored)} bytes, expected {KEY_BYTES}: damaged key store")
        return stored

    def _before_destroy(self, owner: KeyOwner, key_ids: list[str], erasure_id: str) -> None:
        """Called under the lock after the erased marker is durable and before the key files of
        ``key_ids`` (those still present) are unlinked."""

    def exists(self, key_id: str) -> bool:
        return self._key_file(key_id).exists()

    def get_or_create(self, subject_id: "str | KeyOwner") -> tuple[str, bytes]:
        """The owner's current key under its typed name (made the first time). A key under the
        owner's legacy name is never handed out for new writes: under that name a subject and a
        tenant could share it. Raises :class:`ErasedSubjectError` once the owner was erased."""
        owner = _check_subject(subject_id)
        found = self._current(owner)
        if found is not None:
            return found
        with self._locked():
            erased = self.erased(owner)
            if erased is not None:
                raise _refuse(owner, erased)
            found = self._current(owner)  # another process may have created it meanwhile
            if found is not None:
                return found
            key_id = _new_key_id()
            key, stored = self._make_key(owner, key_id)
            self._write_file(self._ids, key_id, stored)
            # the subject file is written last: a crash before it leaves an unused key, never a
            # used key the subject file does not name (which destroy would then miss)
            live = [k for k in self._read_ids(owner) if self.exists(k)]
            self._write_file(self._subjects, self._subject_file(owner).name,
                             ("\n".join([*live, key_id]) + "\n").encode("ascii"))
            return key_id, key

    def _current(self, owner: KeyOwner) -> tuple[str, bytes] | None:
        for key_id in reversed(self._read_ids(owner)):
            key = self.get(key_id)
            if key is not None:
                return key_id, key
        return None

    def destroy(self, subject_id: "str | KeyOwner", *, erasure_id: str | None = None) -> list[str]:
        """Mark the owner erased (durably, first), then destroy its keys, legacy ones included."""
        owner = _check_subject(subject_id)
        with self._locked():
            make_dirs(self._erased)
            if self.erased(owner) is None or erasure_id:
                self._write_file(self._erased, owner.digest(), (erasure_id or "").encode("ascii"))
            destroyed = []
            present = [k for k in dict.fromkeys([*self._legacy_ids(owner), *self._read_ids(owner)])
                       if self._key_file(k).exists()]
            self._before_destroy(owner, present, self.erased(owner) or "")
            for key_id in present:
                path = self._key_file(key_id)
                if path.exists():
                    path.unlink()
                    destroyed.append(key_id)
            _fsync_dir(self._ids)
            self._subject_file(owner).unlink(missing_ok=True)
            self._legacy_file(owner).unlink(missing_ok=True)
            _fsync_dir(self._subjects)
            return destroyed

    def destruction(self, subject_id: "str | KeyOwner") -> Mapping[str, Any] | None:
        erasure_id = self.erased(subject_id)
        if erasure_id is None:
            return None
        return {"key_store": self.kind, "erasure_id": erasure_id, "how": "key files deleted"}


class MemoryKeyStore:
    """TEST ADAPTER ONLY: keys in a dict, gone with the process. Never use it for a real store.

    It exists so unit tests of the crypto need no files (and it passes the same contract tests
    as the file and KMS adapters).
    """

    def __init__(self) -> None:
        self._keys: dict[str, bytes] = {}
        self._by_subject: dict[KeyOwner, list[str]] = {}
        self._erased: dict[KeyOwner, str] = {}
        self._lock = threading.Lock()

    def get_or_create(self, subject_id: "str | KeyOwner") -> tuple[str, bytes]:
        owner = _check_subject(subject_id)
        with self._lock:
            for key_id in reversed(self._by_subject.get(owner, [])):
                if key_id in self._keys:
                    return key_id, self._keys[key_id]
            if owner in self._erased:
                raise _refuse(owner, self._erased[owner])
            key_id = _new_key_id()
            self._keys[key_id] = secrets.token_bytes(KEY_BYTES)
            self._by_subject.setdefault(owner, []).append(key_id)
            return key_id, self._keys[key_id]

    def key_ids(self, subject_id: "str | KeyOwner") -> list[str]:
        owner = _check_subject(subject_id)
        return [k for k in self._by_subject.get(owner, []) if k in self._keys]

    def erased(self, subject_id: "str | KeyOwner") -> str | None:
        return self._erased.get(_check_subject(subject_id))

    def erased_owners(self) -> frozenset[str]:
        return frozenset(owner.digest() for owner in self._erased)

    def get(self, key_id: str) -> bytes | None:
        return self._keys.get(key_id)

    def exists(self, key_id: str) -> bool:
        return key_id in self._keys

    def destroy(self, subject_id: "str | KeyOwner", *, erasure_id: str | None = None) -> list[str]:
        owner = _check_subject(subject_id)
        with self._lock:
            if owner not in self._erased or erasure_id:
                self._erased[owner] = erasure_id or ""
            ids = self._by_subject.pop(owner, [])
            return [k for k in ids if self._keys.pop(k, None) is not None]

    def destruction(self, subject_id: "str | KeyOwner") -> Mapping[str, Any] | None:
        erasure_id = self.erased(subject_id)
        if erasure_id is None:
            return None
        return {"key_store": "memory", "erasure_id": erasure_id, "how": "keys dropped from memory"}
