"""Subject keys for crypto-shredding: the :class:`KeyStore` port and its file adapter.

A shred-mode store encrypts each event under keys of its data subjects (see
:mod:`refold.storage.crypto`). Erasing a subject destroys its keys, which makes every event that
needed them unreadable, in this table, in its old Delta versions and in any copy of it.

So the one thing a key store must do well is *delete*. That rules out Delta (its history keeps
every value it ever held) and leaves a store whose delete is real: a file per key, or an external
KMS behind the same port.

Contract (:class:`KeyStore`):

* ``get_or_create(subject_id)`` returns the subject's current ``(key_id, key)``, creating a random
  32-byte key the first time; concurrent callers for one subject get the same key.
* ``key_ids(subject_id)`` lists the subject's live key ids without creating one.
* ``get(key_id)`` returns the key bytes, or ``None`` once the key is destroyed (or never existed).
* ``destroy(subject_id)`` destroys every key of the subject and returns their ids; idempotent
  (an unknown or already destroyed subject returns ``[]``). A later ``get_or_create`` makes a
  *new* key: erasure erases the past, not the future.
* ``exists(key_id)`` is ``get(key_id) is not None`` without reading the key.

Key ids are opaque random strings, never derived from the subject id, so a key id in a stored
event row says nothing about who the event is about.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import secrets
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol, runtime_checkable

from refold.fold.errors import StoreError

from .filemodes import file_mode, make_dirs

KEY_BYTES = 32


@runtime_checkable
class KeyStore(Protocol):
    """Port: per-subject keys whose destruction is real (see the module docstring)."""

    def get_or_create(self, subject_id: str) -> tuple[str, bytes]: ...

    def key_ids(self, subject_id: str) -> list[str]: ...

    def get(self, key_id: str) -> bytes | None: ...

    def destroy(self, subject_id: str) -> list[str]: ...

    def exists(self, key_id: str) -> bool: ...


def _new_key_id() -> str:
    return secrets.token_hex(16)


def _check_subject(subject_id: str) -> None:
    if not isinstance(subject_id, str) or not subject_id:
        raise StoreError("a subject id must be a non-empty string")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FileKeyStore:
    """Keys as files under ``root`` (a store's ``keys/``)::

        root/ids/<key_id>          the 32 key bytes, mode 0600
        root/subjects/<sha256(subject_id)>   the subject's key ids, one per line
        root/.lock                 serialises creation and destruction across processes

    Writes go to a temp file, are fsync'd, renamed into place, and the directory is fsync'd, so
    a key that ``get_or_create`` returned survives a crash. ``destroy`` unlinks the key files and
    fsyncs the directory. It does not overwrite them first: on SSDs and copy-on-write file systems
    an overwrite lands in new blocks and does not reach the old ones, so it would only look
    safer. What remains on the medium after an unlink is the file system's and the disk's business
    (full-disk encryption covers it); no refold file can reach the key again.

    Subject files are named by a hash only to keep arbitrary subject ids filesystem-safe; they
    are unlinked with the keys.
    """

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self._ids = self.root / "ids"
        self._subjects = self.root / "subjects"
        self._thread_lock = threading.Lock()

    # -- paths and locking ------------------------------------------------------------------------

    def _subject_file(self, subject_id: str) -> Path:
        return self._subjects / hashlib.sha256(subject_id.encode("utf-8")).hexdigest()

    def _key_file(self, key_id: str) -> Path:
        if not key_id or not all(c in "0123456789abcdef" for c in key_id):
            raise StoreError(f"malformed key id {key_id!r}: expected lowercase hex")
        return self._ids / key_id

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        # flock serialises processes; the thread lock serialises threads of this process
        # (flock locks belong to the open file description, not the thread).
        make_dirs(self._ids)
        make_dirs(self._subjects)
        with self._thread_lock:
            fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT, file_mode(self.root))
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)

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

    def _read_ids(self, subject_id: str) -> list[str]:
        try:
            text = self._subject_file(subject_id).read_text(encoding="ascii")
        except FileNotFoundError:
            return []
        return [line for line in text.splitlines() if line]

    # -- the port ---------------------------------------------------------------------------------

    def key_ids(self, subject_id: str) -> list[str]:
        _check_subject(subject_id)
        return [k for k in self._read_ids(subject_id) if self.exists(k)]

    def get(self, key_id: str) -> bytes | None:
        try:
            data = self._key_file(key_id).read_bytes()
        except FileNotFoundError:
            return None
        if len(data) != KEY_BYTES:
            raise StoreError(f"key file {key_id} is {len(data)} bytes, expected {KEY_BYTES}: damaged key store")
        return data

    def exists(self, key_id: str) -> bool:
        return self._key_file(key_id).exists()

    def get_or_create(self, subject_id: str) -> tuple[str, bytes]:
        _check_subject(subject_id)
        found = self._current(subject_id)
        if found is not None:
            return found
        with self._locked():
            found = self._current(subject_id)  # another process may have created it meanwhile
            if found is not None:
                return found
            key_id, key = _new_key_id(), secrets.token_bytes(KEY_BYTES)
            self._write_file(self._ids, key_id, key)
            # the subject file is written last: a crash before it leaves an unused key, never a
            # used key the subject file does not name (which destroy would then miss)
            live = [k for k in self._read_ids(subject_id) if self.exists(k)]
            self._write_file(self._subjects, self._subject_file(subject_id).name,
                             ("\n".join([*live, key_id]) + "\n").encode("ascii"))
            return key_id, key

    def _current(self, subject_id: str) -> tuple[str, bytes] | None:
        for key_id in reversed(self._read_ids(subject_id)):
            key = self.get(key_id)
            if key is not None:
                return key_id, key
        return None

    def destroy(self, subject_id: str) -> list[str]:
        _check_subject(subject_id)
        if not self._subject_file(subject_id).exists():
            return []
        with self._locked():
            ids = self._read_ids(subject_id)
            destroyed = []
            for key_id in ids:
                path = self._key_file(key_id)
                if path.exists():
                    path.unlink()
                    destroyed.append(key_id)
            _fsync_dir(self._ids)
            self._subject_file(subject_id).unlink(missing_ok=True)
            _fsync_dir(self._subjects)
            return destroyed


class MemoryKeyStore:
    """TEST ADAPTER ONLY: keys in a dict, gone with the process. Never use it for a real store.

    It exists so the contract tests run against two adapters (as a KMS adapter would be the
    third) and so unit tests of the crypto need no files.
    """

    def __init__(self) -> None:
        self._keys: dict[str, bytes] = {}
        self._by_subject: dict[str, list[str]] = {}
        self._lock = threading.Lock()

    def get_or_create(self, subject_id: str) -> tuple[str, bytes]:
        _check_subject(subject_id)
        with self._lock:
            for key_id in reversed(self._by_subject.get(subject_id, [])):
                if key_id in self._keys:
                    return key_id, self._keys[key_id]
            key_id = _new_key_id()
            self._keys[key_id] = secrets.token_bytes(KEY_BYTES)
            self._by_subject.setdefault(subject_id, []).append(key_id)
            return key_id, self._keys[key_id]

    def key_ids(self, subject_id: str) -> list[str]:
        _check_subject(subject_id)
        return [k for k in self._by_subject.get(subject_id, []) if k in self._keys]

    def get(self, key_id: str) -> bytes | None:
        return self._keys.get(key_id)

    def exists(self, key_id: str) -> bool:
        return key_id in self._keys

    def destroy(self, subject_id: str) -> list[str]:
        _check_subject(subject_id)
        with self._lock:
            ids = self._by_subject.pop(subject_id, [])
            return [k for k in ids if self._keys.pop(k, None) is not None]
