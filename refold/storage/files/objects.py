"""The side files of a store (everything that is not a Delta table), on a folder or a bucket.

One small port, :class:`StoreFiles`, addresses objects by a ``/``-separated key relative to the
store root (``store.json``, ``receipts/heads/00000000000000000007.json``) and offers what the
side files need: read, atomic replace, create-if-absent, list a prefix, delete, exists. Two
adapters:

- :class:`LocalFiles` (a local path or ``file://``): writes go to a temporary file that is
  fsynced and renamed, create-if-absent is a hard link of that file (it fails on an existing
  name), every file and folder gets the store's private modes (:mod:`refold.storage.files.modes`)
  from the moment it exists. Not obstore's ``LocalStore``: it neither fsyncs before its rename
  (a crash could leave an empty receipt or journal) nor creates files and folders with a mode
  other than the umask's (0644/0755: readable by others until a later chmod), and its reads
  cost several times as much.
- :class:`ObjectFiles` (``s3://``, ``gs://``, ``az://``): obstore, the Python binding of the same
  Rust ``object_store`` crate delta-rs uses, so one ``storage_options`` dict (as deltalake names
  the keys: ``AWS_ENDPOINT_URL``, ``AWS_REGION``, ``AWS_ALLOW_HTTP``, ``conditional_put`` …)
  configures the tables and the side files alike. A put replaces an object atomically (an object
  store never shows half an object); create-if-absent is a conditional put
  (``If-None-Match: *``). Transient errors (5xx, dropped connections, timeouts) are retried with
  exponential backoff by obstore's own client (:data:`RETRY`), not by a loop here.

Errors are :class:`~refold.fold.errors.StoreError` naming the URI and what is missing (a bucket,
a permission, credentials, a setting); create-if-absent on an existing key raises
:class:`ObjectExistsError`. Reading a missing key returns None.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from datetime import timedelta
from pathlib import Path
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from refold.fold.errors import StoreError

from refold.storage.files.modes import file_mode, make_dirs

__all__ = ["LocalFiles", "ObjectExistsError", "ObjectFiles", "RETRY", "StoreFiles", "is_local_uri",
           "store_files"]

#: obstore's retry settings for every object-store client refold makes (transient errors only)
RETRY: dict[str, Any] = {"max_retries": 5, "retry_timeout": timedelta(seconds=60),
                         "backoff": {"init_backoff": timedelta(milliseconds=100),
                                     "max_backoff": timedelta(seconds=5), "base": 2}}


_UPDATE_ATTEMPTS = 50


class ObjectExistsError(StoreError):
    """:meth:`StoreFiles.create` found the key already there (another writer was first)."""


def is_local_uri(root: str) -> bool:
    """Whether ``root`` is a local path or a ``file://`` URI (else an object-store URI)."""
    return "://" not in root or root.startswith("file://")


@runtime_checkable
class StoreFiles(Protocol):
    """Side files under one store root. ``key``: a ``/``-separated path relative to the root."""

    uri: str

    def get(self, key: str) -> bytes | None:
        """The object's bytes, or None when there is none."""

    def put(self, key: str, data: bytes) -> None:
        """Write ``data`` at ``key``, replacing what is there; a reader sees the old or the new, never half."""

    def create(self, key: str, data: bytes) -> None:
        """Write ``data`` at ``key`` only if nothing is there; else :class:`ObjectExistsError`."""

    def list(self, prefix: str = "") -> list[str]:
        """Every key under ``prefix`` (a folder; recursive), sorted."""

    def delete(self, key: str) -> None:
        """Remove ``key`` (nothing when it is absent)."""

    def exists(self, key: str) -> bool:
        """Whether ``key`` holds an object."""

    def update(self, key: str, change: Callable[[bytes | None], bytes | None], *, lock: str | None = None) -> None:
        """Read-modify-write ``key`` with no lost update: ``change`` gets the current bytes (None:
        absent) and returns the new ones (None: leave it as it is). Locally under an exclusive
        file lock (filelock) on ``lock`` (default ``KEY.lock``); on object storage a conditional put
        (If-Match on the ETag read, If-None-Match when absent), retried with a fresh read when
        another writer changed the object in between — ``change`` may run more than once."""


class _Helpers:
    """Text and JSON on top of the byte methods (shared by both adapters)."""

    def get_text(self, key: str) -> str | None:
        data = self.get(key)  # type: ignore[attr-defined]
        return None if data is None else data.decode("utf-8")

    def get_json(self, key: str) -> Any:
        data = self.get(key)  # type: ignore[attr-defined]
        return None if data is None else json.loads(data)

    def put_json(self, key: str, value: Any) -> None:
        self.put(key, json.dumps(value, indent=2, sort_keys=True, default=str).encode())  # type: ignore[attr-defined]

    def url(self, key: str) -> str:
        return f"{self.uri.rstrip('/')}/{key}"  # type: ignore[attr-defined]


class LocalFiles(_Helpers):
    """Side files in a local folder, with the store's file modes."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(str(root).removeprefix("file://"))
        self.uri = str(root)

    def path(self, key: str) -> Path:
        return self.root / key

    def get(self, key: str) -> bytes | None:
        try:
            return self.path(key).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise _local_error(self.url(key), "read", exc) from None

    def _staged(self, key: str, data: bytes) -> tuple[Path, Path]:
        """``data`` in a fsynced temporary file beside ``key``'s path, with the folder's mode;
        returns (path, temporary file)."""
        path = self.path(key)
        try:
            make_dirs(path.parent)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)  # 0600
        except OSError as exc:
            raise _local_error(self.url(key), "write", exc) from None
        try:
            os.fchmod(fd, file_mode(path.parent))
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path, Path(tmp)

    def put(self, key: str, data: bytes) -> None:
        path, tmp = self._staged(key, data)
        try:
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def create(self, key: str, data: bytes) -> None:
        # stage then link: O_EXCL alone would let a reader see the file before its bytes
        path, tmp = self._staged(key, data)
        try:
            os.link(tmp, path)  # fails when the name exists: the local put-if-absent
        except FileExistsError:
            raise ObjectExistsError(f"{self.url(key)} already exists") from None
        finally:
            tmp.unlink(missing_ok=True)

    def list(self, prefix: str = "") -> list[str]:
        base = self.path(prefix) if prefix else self.root
        out = []
        for folder, _, files in os.walk(base):
            for name in files:
                out.append(Path(folder, name).relative_to(self.root).as_posix())
        return sorted(out)

    def delete(self, key: str) -> None:
        try:
            self.path(key).unlink()
        except (FileNotFoundError, NotADirectoryError):
            pass

    def exists(self, key: str) -> bool:
        return self.path(key).is_file()

    def update(self, key: str, change: Callable[[bytes | None], bytes | None], *, lock: str | None = None) -> None:
        from filelock import FileLock

        lock_path = self.path(lock or f"{key}.lock")
        make_dirs(lock_path.parent)
        with FileLock(lock_path, mode=file_mode(lock_path.parent), poll_interval=0.002):
            new = change(self.get(key))
            if new is not None:
                self.put(key, new)


def _local_error(url: str, action: str, exc: OSError) -> StoreError:
    if isinstance(exc, PermissionError):
        return StoreError(f"cannot {action} {url}: permission denied; check the folder's owner and modes")
    return StoreError(f"cannot {action} {url}: {exc.strerror or exc}")


#: storage_options keys that configure obstore's HTTP client, not the store (deltalake mixes them)
_CLIENT_KEYS = frozenset({
    "allow_http", "allow_invalid_certificates", "connect_timeout", "default_content_type",
    "http1_only", "http2_only", "pool_idle_timeout", "pool_max_idle_per_host", "proxy_url",
    "proxy_ca_certificate", "proxy_excludes", "randomize_addresses", "read_timeout", "timeout",
    "user_agent",
})
#: storage_options keys only delta-rs knows (its commit locking), meaningless to a plain object put
_DELTA_ONLY = ("aws_s3_locking_provider", "delta_dynamo_table_name", "dynamo_", "aws_s3_allow_unsafe_rename",
               "aws_copy_if_not_exists_")
_BOOLEAN = frozenset({"allow_http", "allow_invalid_certificates", "http1_only", "http2_only",
                      "randomize_addresses"})


def _split_options(scheme: str, options: dict[str, str] | None
                   ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """deltalake ``storage_options`` as obstore's (store config, client options, retry config).

    Retry keys (``max_retries``, ``retry_timeout``, ``backoff_config.*``) set obstore's retry
    config, over :data:`RETRY`, so one set of options bounds the retries of both libraries.
    Store keys are given their scheme's prefix (``conditional_put`` → ``aws_conditional_put``):
    obstore rejects an unknown prefixed key with an error, where a bare one aborts."""
    prefix = {"s3": "aws_", "s3a": "aws_", "gs": "google_"}.get(scheme, "azure_")
    config: dict[str, Any] = {}
    client: dict[str, Any] = {}
    retry: dict[str, Any] = {**RETRY, "backoff": dict(RETRY["backoff"])}
    for key, value in (options or {}).items():
        low = key.lower()
        bare = low
        for known in ("aws_", "google_", "azure_"):
            bare = bare.removeprefix(known)
        if bare in _CLIENT_KEYS:
            client[bare] = (str(value).lower() == "true") if bare in _BOOLEAN else value
        elif bare == "max_retries":
            retry["max_retries"] = int(value)
        elif bare == "retry_timeout":
            retry["retry_timeout"] = _duration(value)
        elif bare.startswith("backoff_config."):
            name = bare.removeprefix("backoff_config.")
            retry["backoff"][name] = float(value) if name == "base" else _duration(value)
        elif not low.startswith(_DELTA_ONLY):
            config[low if low.startswith(prefix) else prefix + low] = value
    # obstore reads the store's settings (AWS_ENDPOINT_URL, credentials…) from the environment,
    # but not its HTTP client's, which delta-rs does read (AWS_ALLOW_HTTP=true for an http:// endpoint)
    for bare in sorted(_CLIENT_KEYS - client.keys()):
        value = os.environ.get(f"{prefix}{bare}".upper())
        if value is not None:
            client[bare] = (value.lower() == "true") if bare in _BOOLEAN else value
    return config, client, retry


def _duration(value: Any) -> timedelta:
    """``"200ms"``, ``"10s"``, ``"2m"`` (object_store's notation) or seconds as a number."""
    if isinstance(value, timedelta):
        return value
    text = str(value).strip().lower()
    for unit, scale in (("ms", 0.001), ("s", 1), ("m", 60), ("h", 3600)):
        if text.endswith(unit) and text[:-len(unit)].replace(".", "", 1).isdigit():
            return timedelta(seconds=float(text[:-len(unit)]) * scale)
    try:
        return timedelta(seconds=float(text))
    except ValueError:
        raise StoreError(f"storage option duration {value!r} is not a duration; write e.g. 200ms, 10s or 2m") from None


class ObjectFiles(_Helpers):
    """Side files under a bucket prefix, through obstore (one client per store, thread-safe)."""

    def __init__(self, uri: str, storage_options: dict[str, str] | None = None):
        from obstore.exceptions import BaseError
        from obstore.store import from_url

        self.uri = uri.rstrip("/")
        config, client, retry = _split_options(uri.split("://", 1)[0].lower(), storage_options)
        try:
            self.store = from_url(self.uri, config=config or None, client_options=client or None,
                                  retry_config=retry)  # type: ignore[arg-type]
        except BaseError as exc:
            raise StoreError(f"cannot open {self.uri}: {_first_line(exc)}; check the URI and its storage_options "
                             "(the keys deltalake documents, e.g. AWS_REGION, AWS_ENDPOINT_URL)") from None

    def get(self, key: str) -> bytes | None:
        import obstore
        from obstore.exceptions import NotFoundError

        try:
            return bytes(obstore.get(self.store, key).bytes())
        except (NotFoundError, FileNotFoundError):
            return None
        except Exception as exc:
            raise _object_error(self.url(key), "read", exc) from None

    def put(self, key: str, data: bytes) -> None:
        import obstore

        try:
            obstore.put(self.store, key, data)
        except Exception as exc:
            raise _object_error(self.url(key), "write", exc) from None

    def create(self, key: str, data: bytes) -> None:
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        try:
            obstore.put(self.store, key, data, mode="create")  # If-None-Match: *
        except (AlreadyExistsError, PreconditionError, FileExistsError):
            raise ObjectExistsError(f"{self.url(key)} already exists") from None
        except Exception as exc:
            raise _object_error(self.url(key), "write", exc) from None

    def list(self, prefix: str = "") -> list[str]:
        import obstore

        try:
            pages = obstore.list(self.store, prefix.rstrip("/") + "/" if prefix else None)
            return sorted(meta["path"] for page in pages for meta in page)
        except Exception as exc:
            raise _object_error(self.url(prefix), "list", exc) from None

    def delete(self, key: str) -> None:
        import obstore
        from obstore.exceptions import NotFoundError

        try:
            obstore.delete(self.store, key)
        except (NotFoundError, FileNotFoundError):
            pass
        except Exception as exc:
            raise _object_error(self.url(key), "delete", exc) from None

    def exists(self, key: str) -> bool:
        import obstore
        from obstore.exceptions import NotFoundError

        try:
            obstore.head(self.store, key)
            return True
        except (NotFoundError, FileNotFoundError):
            return False
        except Exception as exc:
            raise _object_error(self.url(key), "read", exc) from None

    def update(self, key: str, change: Callable[[bytes | None], bytes | None], *, lock: str | None = None) -> None:
        import obstore
        from obstore.exceptions import AlreadyExistsError, NotFoundError, PreconditionError
        from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_incrementing

        changed = (PreconditionError, AlreadyExistsError, FileExistsError)  # by another writer

        def attempt() -> None:
            try:
                got = obstore.get(self.store, key)
                current, mode = bytes(got.bytes()), {"e_tag": got.meta["e_tag"]}
            except (NotFoundError, FileNotFoundError):
                current, mode = None, "create"
            except Exception as exc:
                raise _object_error(self.url(key), "read", exc) from None
            new = change(current)
            if new is None:
                return
            try:
                obstore.put(self.store, key, new, mode=mode)  # type: ignore[arg-type]
            except changed:
                raise
            except Exception as exc:
                raise _object_error(self.url(key), "write", exc) from None

        try:  # changed in between: read again, 10 ms more wait each time
            Retrying(retry=retry_if_exception_type(changed), stop=stop_after_attempt(_UPDATE_ATTEMPTS),
                     wait=wait_incrementing(start=0.01, increment=0.01), reraise=True)(attempt)
        except changed:
            raise StoreError(f"{self.url(key)} kept changing under {_UPDATE_ATTEMPTS} attempts to update it; "
                             "try again") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _object_error(url: str, action: str, exc: Exception) -> StoreError:
    """What went wrong, in the words a user can act on (the object store's code, not a trace);
    access denied names the S3 permission the ``action`` needs."""
    from obstore.exceptions import PermissionDeniedError

    from refold.storage.files.options import cause_of, said

    cause = cause_of(exc)
    if isinstance(exc, PermissionDeniedError) or (cause is not None and "access denied" in cause[0]):
        verb = {"read": "s3:GetObject", "write": "s3:PutObject", "list": "s3:ListBucket",
                "delete": "s3:DeleteObject"}[action]
        hint = f"the credentials were refused (access denied); they need permission to {action} (on S3: {verb})"
    elif cause is not None:
        hint = f"{cause[0]}; {cause[1]}"
    else:
        return StoreError(f"cannot {action} {url}: {_first_line(exc)}")
    return StoreError(f"cannot {action} {url}: {hint} (the object store said: {said(exc)})")


_CACHE: dict[tuple, StoreFiles] = {}
_CACHE_LOCK = threading.Lock()


def store_files(root: str, storage_options: dict[str, str] | None = None) -> StoreFiles:
    """The side-file port for the store at ``root`` (one client per root and options, reused)."""
    if is_local_uri(root):
        return LocalFiles(root)
    key = (root, tuple(sorted((storage_options or {}).items())))
    with _CACHE_LOCK:
        files = _CACHE.get(key)
        if files is None:
            files = _CACHE[key] = ObjectFiles(root, storage_options)
        return files
