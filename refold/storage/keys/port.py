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
* ``get_or_create_many(owners)`` is ``get_or_create`` for every distinct owner of ``owners`` at
  once, as ``{KeyOwner: (key_id, key)}``: what an append calls, once per batch. An erased owner
  among them raises :class:`~refold.fold.errors.ErasedSubjectError` before any key is made. The
  port's default asks ``get_or_create`` per owner; the adapters do it in one go (one lock, the
  new keys written and made durable together).
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
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

from refold.fold.errors import ErasedSubjectError, StoreError

from refold.storage.files.modes import file_mode, make_dirs

KEY_BYTES = 32
#: owners' current keys a :class:`FileKeyStore` keeps in memory (oldest dropped first): one
#: append of 1,000 events about as many subjects then checks its keys with a ``stat`` each
KNOWN_KEYS = 65_536
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

    def get_or_create_many(self, owners: "Iterable[str | KeyOwner]") -> dict[KeyOwner, tuple[str, bytes]]:
        """:meth:`get_or_create` of each distinct owner in ``owners`` (default: one call each;
        an adapter that subclasses the port inherits it)."""
        return {owner: self.get_or_create(owner) for owner in dict.fromkeys(map(owner_of, owners))}

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


_HEX = frozenset("0123456789abcdef")


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


_T = TypeVar("_T")
_R = TypeVar("_R")
#: threads for a batch of key writes or KMS calls: waits on the disk or the network (fsync,
#: GenerateDataKey), so several in flight cost little more than one
_WORKERS = 8


def each(fn: Callable[[_T], _R], items: Sequence[_T]) -> list[_R]:
    """``fn`` of each item, in order; in a few threads when there are several (for IO that
    waits: an fsync, a KMS or object-store call), each taking every n-th item in turn (a task
    per thread, not per item). The first error raised is re-raised."""
    workers = min(_WORKERS, len(items))
    if workers < 2:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        parts = list(pool.map(lambda first: [fn(x) for x in items[first::workers]], range(workers)))
    out: list[_R] = [None] * len(items)  # type: ignore[list-item]
    for first, part in enumerate(parts):
        out[first::workers] = part
    return out


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


class FileKeyStore(KeyStore):
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
    checked under the lock before a key is made. The keys an object read or made stay in its
    memory (:data:`KNOWN_KEYS` of them) and are served only while their key file exists.

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
        self._known: OrderedDict[KeyOwner, tuple[str, bytes]] = OrderedDict()  # see _current
        self._known_lock = threading.Lock()

    # -- paths and locking ------------------------------------------------------------------------

    def _subject_file(self, owner: KeyOwner) -> Path:
        return self._subjects / owner.digest()

    def _legacy_file(self, owner: KeyOwner) -> Path:
        return self._subjects / owner.legacy_digest()

    def _key_file(self, key_id: str) -> Path:
        if not key_id or not _HEX.issuperset(key_id):
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
        self._write_files([(folder, name, data)])

    @staticmethod
    def _write_files(files: Sequence[tuple[Path, str, bytes]]) -> None:
        """Write each ``(folder, name, data)`` durably: temp files written and fsync'd (several
        at once: the disk merges concurrent flushes into one), renamed into place in order, then
        each folder fsync'd once."""
        def write(file: tuple[Path, str, bytes]) -> str:
            folder, _, data = file
            tmp = os.path.join(folder, f".tmp-{secrets.token_hex(8)}")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, file_mode(folder))
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            return tmp

        for tmp, (folder, name, _) in zip(each(write, files), files):
            os.replace(tmp, os.path.join(folder, name))
        for folder in dict.fromkeys(folder for folder, _, _ in files):
            _fsync_dir(folder)

    @staticmethod
    def _ids_in(path: "Path | str") -> list[str]:
        try:
            with open(path, "rb") as f:  # (builtin open on a str: a third of pathlib's cost per read)
                text = f.read().decode("ascii")
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
            with open(self._key_file(key_id), "rb") as f:
                data = f.read()
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
        return self.get_or_create_many([owner])[owner]

    def get_or_create_many(self, owners: "Iterable[str | KeyOwner]") -> dict[KeyOwner, tuple[str, bytes]]:
        """:meth:`get_or_create` of each distinct owner: the keys that exist are read without the
        lock; the missing ones are made under one lock turn, after one listing of the erased
        markers (an erased owner refuses the whole call before any key is made), their key files
        and subject files written in one round (:meth:`_write_files`)."""
        wanted = list(dict.fromkeys(map(_check_subject, owners)))
        found = {owner: self._current(owner) for owner in wanted}
        if all(found.values()):
            return found  # type: ignore[return-value]
        with self._locked():
            missing = [owner for owner in wanted if found[owner] is None]
            marks = self.erased_owners()
            for owner in missing:
                if owner.digest() in marks:
                    raise _refuse(owner, self.erased(owner) or "")
            for owner in missing:  # another process may have created it meanwhile
                found[owner] = self._current(owner)
            new = [owner for owner in missing if found[owner] is None]
            ids = [_new_key_id() for _ in new]
            made = each(lambda pair: self._make_key(*pair), list(zip(new, ids)))
            # key files and subject files in one round, all durable before any key is handed
            # out; a crash in between leaves an unused key, or a subject file naming a key that
            # is not there (skipped: the next call makes another), never a used key unnamed. A
            # new owner's subject file names only the new key: _current found no live one there
            self._write_files([(self._ids, key_id, stored) for key_id, (_, stored) in zip(ids, made)]
                              + [(self._subjects, owner.digest(), (key_id + "\n").encode("ascii"))
                                 for owner, key_id in zip(new, ids)])
            for owner, key_id, (key, _) in zip(new, ids, made):
                found[owner] = self._keep_current(owner, key_id, key)
        return found  # type: ignore[return-value]

    def _current(self, owner: KeyOwner) -> tuple[str, bytes] | None:
        """The owner's newest live key under its typed name, or None. A key this object read or
        made before is served while its key file exists (one ``stat`` instead of reading the
        subject file and the key file): destroying the owner unlinks it, and no other key is
        made for an owner that has one, so it is still the current one."""
        known = self._known.get(owner)
        if known is not None:
            if os.path.exists(os.path.join(self._ids, known[0])):
                return known
            self._forget(owner)
        for key_id in reversed(self._read_ids(owner)):
            key = self.get(key_id)
            if key is not None:
                return self._keep_current(owner, key_id, key)
        return None

    def _keep_current(self, owner: KeyOwner, key_id: str, key: bytes) -> tuple[str, bytes]:
        with self._known_lock:
            self._known[owner] = (key_id, key)
            if len(self._known) > KNOWN_KEYS:
                self._known.popitem(last=False)
        return key_id, key

    def _forget(self, owner: KeyOwner) -> None:
        with self._known_lock:
            self._known.pop(owner, None)

    def destroy(self, subject_id: "str | KeyOwner", *, erasure_id: str | None = None) -> list[str]:
        """Mark the owner erased (durably, first), then destroy its keys, legacy ones included."""
        owner = _check_subject(subject_id)
        with self._locked():
            self._forget(owner)
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


class MemoryKeyStore(KeyStore):
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
        return self.get_or_create_many([owner])[owner]

    def get_or_create_many(self, owners: "Iterable[str | KeyOwner]") -> dict[KeyOwner, tuple[str, bytes]]:
        wanted = list(dict.fromkeys(map(_check_subject, owners)))
        with self._lock:
            found = {owner: self._current(owner) for owner in wanted}
            for owner in wanted:
                if found[owner] is None and owner in self._erased:
                    raise _refuse(owner, self._erased[owner])
            for owner in wanted:
                if found[owner] is None:
                    key_id = _new_key_id()
                    self._keys[key_id] = secrets.token_bytes(KEY_BYTES)
                    self._by_subject.setdefault(owner, []).append(key_id)
                    found[owner] = (key_id, self._keys[key_id])
            return found  # type: ignore[return-value]

    def _current(self, owner: KeyOwner) -> tuple[str, bytes] | None:
        for key_id in reversed(self._by_subject.get(owner, [])):
            if key_id in self._keys:
                return key_id, self._keys[key_id]
        return None

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
