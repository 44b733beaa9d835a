"""The KMS adapter of the :class:`~refold.storage.keys.port.KeyStore` port: subject keys from AWS KMS.

Each key owner (a data subject, or a tenant for its subject-less events) gets a 256-bit *data
key* from KMS ``GenerateDataKey``. The store keeps only the data key *wrapped* (the ciphertext
blob KMS returns) in a small file per key, ``keys/ids/<key_id>``, laid out as the file adapter's
key files are (:class:`KmsKeyStore`, on a local store: see :class:`~refold.storage.keys.port.FileKeyStore`)
or, on object storage, as the key objects of :class:`~refold.storage.keys.objects.ObjectKeyStore`
are, through the store-files port (:class:`ObjectKmsKeyStore`); reading a key unwraps it with KMS
``Decrypt``. The plaintext data key exists only in this process's memory (a bounded cache, so a
read of many events asks KMS once per key, not once per event).

Why the wrapped key may live next to the data: it is ciphertext under a KMS key whose material
never leaves KMS, and ``Decrypt`` needs the caller's AWS credentials and permission on that KMS
key, checked (and logged in CloudTrail) on every call. A copy of the store, backups included, is
therefore unreadable without KMS access. The blob is also bound to its key id by an *encryption
context* (``refold-key-id``), so a wrapped key moved to another key's file does not open.

Erasing an owner deletes its wrapped key files (a real delete, as the file adapter does; on a
versioned bucket the erasure deletes the old versions under the store too): no
process can unwrap them again, and a cached plaintext is served only while its wrapped key file
still exists, so other processes stop reading the erased events at once, too. What destroys the
key *everywhere* (in copies and backups of the store as well) depends on the mode:

* one KMS key for the store (``key_id``, the default): deleting the wrapped key is the erasure.
  A backup taken before it still holds the wrapped key, which that same KMS key can unwrap; a
  backup is outside what refold reaches, and the receipt says so.
* one KMS key per owner (``key_per_subject=True``): the store creates a KMS key for each owner
  (``CreateKey``), and erasure also schedules that KMS key's deletion (``ScheduleKeyDeletion``,
  pending window 7–30 days, default 7). Once the window ends, no wrapped copy anywhere opens.
  During the window KMS refuses to use the key (state ``PendingDeletion``). The receipt names
  each scheduled deletion and the date KMS returned for it.

Permissions the store's AWS credentials need: ``kms:DescribeKey`` (checked at ``refold init``),
``kms:GenerateDataKey`` and ``kms:Decrypt`` on the store's key; in per-owner mode also
``kms:CreateKey``, ``kms:ScheduleKeyDeletion`` and ``kms:DescribeKey`` on the keys it creates.
Region, endpoint and credentials come from the store's settings (region, endpoint) or boto3's
usual sources (``AWS_REGION``, ``AWS_ENDPOINT_URL_KMS``/``AWS_ENDPOINT_URL``, ``AWS_PROFILE``,
instance roles …); credentials are never written into the store. Calls are retried by botocore's
own ``standard`` retry mode. Every KMS failure is a one-line
:class:`~refold.fold.errors.StoreError` naming the operation, the key and the endpoint, the
error code, and what to fix.
"""

from __future__ import annotations

import base64
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from refold.fold.errors import StoreError
from refold.storage.files.modes import make_dirs
from refold.storage.keys.port import KEY_BYTES, FileKeyStore, KeyOwner, owner_of
from refold.storage.keys.objects import ObjectKeyStore

WRAPPED_FORMAT = "refold-wrapped-key/v1"
#: the encryption context entry that binds a wrapped key to its key id
CONTEXT_KEY = "refold-key-id"
MIN_PENDING_DAYS, MAX_PENDING_DAYS = 7, 30

_HINTS = {
    "AccessDeniedException": "the AWS credentials in use lack kms:{op} on this key; grant it in the "
                             "key policy or an IAM policy",
    "NotFoundException": "no such KMS key or alias in region {region}; check --kms-key-id and the region",
    "DisabledException": "the KMS key is disabled; enable it (aws kms enable-key) or use another key",
    "KMSInvalidStateException": "the KMS key is not usable in its current state (pending deletion, "
                                "pending import …); check it with aws kms describe-key",
    "InvalidCiphertextException": "the wrapped key does not open with this KMS key and key id: a "
                                  "wrapped key file was altered or moved; run `refold verify`",
    "IncorrectKeyException": "the wrapped key was made under another KMS key than its file names",
    "UnrecognizedClientException": "the AWS credentials are not valid for this endpoint",
    "InvalidSignatureException": "the AWS secret key does not match the access key id",
    "ExpiredTokenException": "the AWS session token expired; refresh the credentials",
}


@dataclass(frozen=True)
class KmsSettings:
    """How a store reaches KMS (kept in the store's settings, ``store.json``, under ``keys``).

    ``key_id``: ARN, key id or alias (``alias/NAME``) of the store's KMS key; required unless
    ``key_per_subject``, where the store creates one KMS key per owner instead. ``endpoint`` and
    ``region``: None means boto3's usual sources. ``pending_window_days``: the wait before KMS
    deletes a per-owner KMS key after its erasure (7–30). ``max_attempts``: botocore's retries.
    """

    key_id: str | None = None
    key_per_subject: bool = False
    endpoint: str | None = None
    region: str | None = None
    pending_window_days: int = MIN_PENDING_DAYS
    max_attempts: int = 5

    def __post_init__(self) -> None:
        if self.key_per_subject and self.key_id:
            raise StoreError(
                f"--kms-key-id {self.key_id} and --kms-key-per-subject exclude each other: per-subject "
                "mode creates one KMS key per data subject; drop one of the two options"
            )
        if not self.key_per_subject and not self.key_id:
            raise StoreError("a KMS key store needs --kms-key-id ARN_OR_ALIAS (or --kms-key-per-subject)")
        days = self.pending_window_days
        if isinstance(days, bool) or not isinstance(days, int) or not MIN_PENDING_DAYS <= days <= MAX_PENDING_DAYS:
            raise StoreError(f"the KMS pending window must be {MIN_PENDING_DAYS} to {MAX_PENDING_DAYS} "
                             f"days (KMS's own limits), got {days!r}")
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise StoreError(f"KMS max_attempts must be a positive integer, got {self.max_attempts!r}")

    def as_json(self) -> dict[str, Any]:
        return {"adapter": "kms", "kms_key_id": self.key_id, "kms_key_per_subject": self.key_per_subject,
                "kms_endpoint": self.endpoint, "kms_region": self.region,
                "kms_pending_window_days": self.pending_window_days, "kms_max_attempts": self.max_attempts}

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> "KmsSettings":
        return cls(key_id=value.get("kms_key_id"), key_per_subject=bool(value.get("kms_key_per_subject")),
                   endpoint=value.get("kms_endpoint"), region=value.get("kms_region"),
                   pending_window_days=value.get("kms_pending_window_days", MIN_PENDING_DAYS),
                   max_attempts=value.get("kms_max_attempts", 5))


class KmsClient:
    """The few KMS calls the key store makes, through boto3, with one-line errors."""

    def __init__(self, settings: KmsSettings, *, client: Any = None):
        self.settings = settings
        self._client = client
        self._lock = threading.Lock()

    @property
    def where(self) -> str:
        return self.settings.endpoint or "the AWS default KMS endpoint"

    def _boto(self) -> Any:
        with self._lock:
            if self._client is None:
                try:
                    import boto3
                    from botocore.config import Config
                except ImportError as exc:
                    raise StoreError("this store keeps its keys in AWS KMS, which needs boto3: "
                                     "pip install 'refold[kms]'") from exc
                # boto3 itself reads AWS_DEFAULT_REGION (and profiles); AWS_REGION is what the AWS
                # CLI v2, Lambda and delta-rs read, so it counts here too
                region = self.settings.region or _region_of(self.settings.key_id) or os.environ.get("AWS_REGION")
                config = Config(retries={"max_attempts": self.settings.max_attempts, "mode": "standard"},
                                connect_timeout=10, read_timeout=30)
                try:
                    # a session of its own: boto3's default session keeps the environment of
                    # whenever it was first made, which may predate this store's open
                    self._client = boto3.session.Session().client(
                        "kms", endpoint_url=self.settings.endpoint, region_name=region, config=config)
                except Exception as exc:  # noqa: BLE001 - botocore's NoRegionError & co., re-raised clean
                    raise self._error("client setup", self.settings.key_id, exc) from exc
            return self._client

    def call(self, op: str, key: str | None, **kwargs: Any) -> dict[str, Any]:
        """``op`` (the KMS operation name, e.g. ``"GenerateDataKey"``) with ``kwargs``."""
        client = self._boto()
        method = getattr(client, _snake(op))
        try:
            return method(**kwargs)
        except Exception as exc:  # noqa: BLE001 - ClientError / BotoCoreError, re-raised as StoreError
            raise self._error(op, key, exc) from exc

    def error_code(self, exc: BaseException) -> str | None:
        cause = exc.__cause__ if isinstance(exc, StoreError) else exc
        response = getattr(cause, "response", None)
        return (response or {}).get("Error", {}).get("Code") if isinstance(response, dict) else None

    def _error(self, op: str, key: str | None, exc: BaseException) -> StoreError:
        response = getattr(exc, "response", None)
        region = self.settings.region or _region_of(self.settings.key_id) or "(from the AWS environment)"
        if isinstance(response, dict) and "Error" in response:
            code = response["Error"].get("Code", "error")
            message = str(response["Error"].get("Message", "")).rstrip(".")
            hint = _HINTS.get(code, "see the AWS KMS documentation for this error code")
            detail = f"{code}: {message}" if message else code
        else:
            name = type(exc).__name__
            detail = f"{name}: {exc}"
            hint = {
                "NoCredentialsError": "no AWS credentials found; set AWS_ACCESS_KEY_ID and "
                                      "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE",
                "NoRegionError": "no AWS region; set AWS_REGION or pass --kms-region",
                "EndpointConnectionError": "the endpoint cannot be reached; check --kms-endpoint "
                                           "(or AWS_ENDPOINT_URL) and the network",
                "ConnectTimeoutError": "the endpoint did not answer; check --kms-endpoint and the network",
            }.get(name, "check the KMS settings in store.json and the AWS environment")
        what = f"key {key}" if key else "a new key"
        return StoreError(f"KMS {op} on {what} at {self.where} (region {region}) failed: {detail}; "
                          f"{hint.format(op=op, region=region)}")


class _KmsWrapping:
    """What the KMS adapter does with a key store's three hooks (``_make_key``, ``_open_key``,
    ``_before_destroy``), whichever store keeps the wrapped keys: the local key files
    (:class:`KmsKeyStore`) or key objects through the store-files port (:class:`ObjectKmsKeyStore`).

    A key file (object) holds ``{"format", "kms_key_id", "wrapped"}``: the wrapped data key
    (base64) and the ARN of the KMS key that wrapped it (which the blob names anyway; ``Decrypt``
    is told to expect it). ``keys/kms-deletions/<owner digest>`` records the KMS key deletions an
    erasure scheduled (ARNs and dates, no key, no name), so a rerun of that erasure reports them
    again. The store classes say where that record lives (``_read_deletions``,
    ``_write_deletions``) and how a key's stored bytes are read (``_stored``); this class comes
    first in their bases, so its hooks replace the store's plain-key ones.
    """

    kind = "kms"

    def _init_kms(self, settings: KmsSettings, client: Any, cache_size: int) -> None:
        self.settings = settings
        self.kms = KmsClient(settings, client=client)
        self._cache: OrderedDict[str, bytes] = OrderedDict()
        self._cache_size = cache_size
        self._cache_lock = threading.Lock()

    # -- the hooks of the key store ----------------------------------------------------------------

    def _make_key(self, owner: KeyOwner, key_id: str) -> tuple[bytes, bytes]:
        if self.settings.key_per_subject:
            # the description and tags say what the key is for, never whose it is
            meta = self.kms.call("CreateKey", None, Description="refold shred-mode key of one key owner",
                                 KeyUsage="ENCRYPT_DECRYPT", KeySpec="SYMMETRIC_DEFAULT",
                                 Tags=[{"TagKey": "refold", "TagValue": "shred-owner-key"}])["KeyMetadata"]
            kms_key = meta["Arn"]
        else:
            kms_key = self.settings.key_id
        out = self.kms.call("GenerateDataKey", kms_key, KeyId=kms_key, KeySpec="AES_256",
                            EncryptionContext={CONTEXT_KEY: key_id})
        key = out["Plaintext"]
        if len(key) != KEY_BYTES:
            raise StoreError(f"KMS GenerateDataKey on key {kms_key} returned {len(key)} bytes, expected {KEY_BYTES}")
        record = {"format": WRAPPED_FORMAT, "kms_key_id": out.get("KeyId") or kms_key,
                  "wrapped": base64.b64encode(out["CiphertextBlob"]).decode("ascii")}
        self._remember(key_id, key)
        return key, json.dumps(record, sort_keys=True).encode("ascii")

    def _open_key(self, key_id: str, stored: bytes) -> bytes:
        # reaching here means the wrapped key file still exists: only then is a cached key served
        with self._cache_lock:
            if key_id in self._cache:
                self._cache.move_to_end(key_id)
                return self._cache[key_id]
        record = self._record(key_id, stored)
        out = self.kms.call("Decrypt", record["kms_key_id"], KeyId=record["kms_key_id"],
                            CiphertextBlob=base64.b64decode(record["wrapped"]),
                            EncryptionContext={CONTEXT_KEY: key_id})
        key = out["Plaintext"]
        if len(key) != KEY_BYTES:
            raise StoreError(f"wrapped key {key_id} opened to {len(key)} bytes, expected {KEY_BYTES}: damaged key store")
        self._remember(key_id, key)
        return key

    def _before_destroy(self, owner: KeyOwner, key_ids: list[str], erasure_id: str) -> None:
        with self._cache_lock:
            for key_id in key_ids:
                self._cache.pop(key_id, None)
        if not self.settings.key_per_subject:
            return
        done = {d["kms_key_id"]: d for d in self._recorded_deletions(owner)}
        for key_id in key_ids:
            stored = self._stored(key_id)
            if stored is None:  # deleted meanwhile (a concurrent erasure of the same owner)
                continue
            kms_key = self._record(key_id, stored)["kms_key_id"]
            if kms_key not in done:
                done[kms_key] = self._schedule_deletion(kms_key)
        # durable before the wrapped keys go: a rerun after a crash still reports the deletions
        self._write_deletions(owner, json.dumps(sorted(done.values(), key=lambda d: d["kms_key_id"]),
                                                sort_keys=True).encode())

    # -- KMS key deletion -------------------------------------------------------------------------

    def _schedule_deletion(self, kms_key: str) -> dict[str, Any]:
        days = self.settings.pending_window_days
        # the bare key id: AWS takes an ARN or an id here, moto 5.2.5 only an id; a per-owner key
        # was created by this store in its own account and region, so both name the same key
        bare = kms_key.split(":key/", 1)[1] if kms_key.startswith("arn:") and ":key/" in kms_key else kms_key
        try:
            out = self.kms.call("ScheduleKeyDeletion", kms_key, KeyId=bare, PendingWindowInDays=days)
            when = out.get("DeletionDate")
        except StoreError as exc:
            code = self.kms.error_code(exc)
            if code == "KMSInvalidStateException":  # already pending deletion (a rerun): ask when
                meta = self.kms.call("DescribeKey", kms_key, KeyId=bare)["KeyMetadata"]
                if meta.get("KeyState") != "PendingDeletion":
                    raise
                when, days = meta.get("DeletionDate"), meta.get("PendingDeletionWindowInDays", days)
            elif code == "NotFoundException":  # deleted already: nothing is left to schedule
                return {"kms_key_id": kms_key, "deletion_date": None, "pending_window_days": None,
                        "state": "already deleted"}
            else:
                raise
        return {"kms_key_id": kms_key, "deletion_date": _iso(when), "pending_window_days": days,
                "state": "PendingDeletion"}

    def _recorded_deletions(self, owner: KeyOwner) -> list[dict[str, Any]]:
        data = self._read_deletions(owner)
        return [] if data is None else json.loads(data)

    def destruction(self, subject_id: "str | KeyOwner") -> Mapping[str, Any] | None:
        erasure_id = self.erased(subject_id)
        if erasure_id is None:
            return None
        out: dict[str, Any] = {
            "key_store": self.kind, "erasure_id": erasure_id, "how": "wrapped data keys deleted",
            "kms_endpoint": self.settings.endpoint, "kms_key_per_subject": self.settings.key_per_subject,
        }
        if self.settings.key_per_subject:
            out["kms_key_deletions"] = self._recorded_deletions(owner_of(subject_id))
        else:
            out["kms_key_id"] = self.settings.key_id
            out["note"] = ("the store's KMS key stays (other owners need it): a backup of keys/ made "
                           "before this erasure still unwraps with it")
        return out

    # -- helpers ----------------------------------------------------------------------------------

    def _record(self, key_id: str, stored: bytes) -> dict[str, Any]:
        try:
            record = json.loads(stored)
            if record.get("format") != WRAPPED_FORMAT or not record.get("kms_key_id") or not record.get("wrapped"):
                raise ValueError("not a wrapped key record")
            return record
        except (ValueError, AttributeError) as exc:
            raise StoreError(f"key file {key_id} is not a KMS-wrapped key ({exc}): damaged key store, or "
                             "a file-key store opened with KMS settings") from exc

    def _remember(self, key_id: str, key: bytes) -> None:
        with self._cache_lock:
            self._cache[key_id] = key
            self._cache.move_to_end(key_id)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)

    def kms_key_state(self, kms_key: str) -> str:
        """``KeyState`` of a KMS key (``"PendingDeletion"``, ``"Enabled"`` …), or ``"deleted"``
        once KMS no longer knows it (for :func:`refold.erasure.receipts.verify_receipt`)."""
        bare = kms_key.split(":key/", 1)[1] if kms_key.startswith("arn:") and ":key/" in kms_key else kms_key
        try:
            return self.kms.call("DescribeKey", kms_key, KeyId=bare)["KeyMetadata"].get("KeyState", "unknown")
        except StoreError as exc:
            if self.kms.error_code(exc) == "NotFoundException":
                return "deleted"
            raise

    def describe_store_key(self) -> dict[str, Any]:
        """Check the store's KMS key (single-key mode): it exists, is enabled and is a symmetric
        encryption key. Returns its metadata; raises a one-line StoreError otherwise."""
        key = self.settings.key_id
        meta = self.kms.call("DescribeKey", key, KeyId=key)["KeyMetadata"]
        if meta.get("KeyState") != "Enabled":
            raise StoreError(f"KMS key {key} at {self.kms.where} is {meta.get('KeyState')}, not Enabled; "
                             "enable it or choose another key")
        # (an emulator may leave KeyUsage out; AWS always sends it)
        if meta.get("KeyUsage") not in (None, "ENCRYPT_DECRYPT") or meta.get("KeySpec", "SYMMETRIC_DEFAULT") != "SYMMETRIC_DEFAULT":
            raise StoreError(f"KMS key {key} is a {meta.get('KeySpec')} {meta.get('KeyUsage')} key; shred mode "
                             "needs a symmetric encryption key (SYMMETRIC_DEFAULT, ENCRYPT_DECRYPT)")
        return meta


class KmsKeyStore(_KmsWrapping, FileKeyStore):
    """Key owners' data keys from AWS KMS, kept wrapped in files under ``root`` (a local store's
    ``keys/``, laid out and locked as :class:`~refold.storage.keys.port.FileKeyStore`'s); see the module
    docstring for the modes and the permissions, :class:`_KmsWrapping` for what a key file holds.

    ``client``: a boto3 KMS client to use instead of one built from ``settings`` (tests).
    ``cache_size``: plaintext data keys kept in memory, least recently used dropped first.
    """

    def __init__(self, root, settings: KmsSettings, *, client: Any = None, cache_size: int = 4096):
        FileKeyStore.__init__(self, root)
        self._init_kms(settings, client, cache_size)
        self._deletions = self.root / "kms-deletions"

    def _stored(self, key_id: str) -> bytes | None:
        try:
            return self._key_file(key_id).read_bytes()
        except FileNotFoundError:
            return None

    def _read_deletions(self, owner: KeyOwner) -> bytes | None:
        try:
            return (self._deletions / owner.digest()).read_bytes()
        except FileNotFoundError:
            return None

    def _write_deletions(self, owner: KeyOwner, data: bytes) -> None:
        make_dirs(self._deletions)
        self._write_file(self._deletions, owner.digest(), data)


class ObjectKmsKeyStore(_KmsWrapping, ObjectKeyStore):
    """:class:`KmsKeyStore` on a store's side files (object storage): the wrapped keys are key
    objects under ``prefix`` (``keys/ids/<key_id>`` …), created, listed and deleted as
    :class:`~refold.storage.keys.objects.ObjectKeyStore`'s are (a conditional update of the
    owner's subject object settles a creation racing a destruction), and the scheduled KMS key
    deletions are recorded in ``keys/kms-deletions/<owner digest>`` there.

    In per-owner mode a creation that loses that race to an erasure leaves the KMS key it made
    unused (its data key is never handed out; the wrapped key object is deleted).
    """

    def __init__(self, files, settings: KmsSettings, prefix: str = "keys", *, client: Any = None,
                 cache_size: int = 4096):
        ObjectKeyStore.__init__(self, files, prefix)
        self._init_kms(settings, client, cache_size)

    def _read_deletions(self, owner: KeyOwner) -> bytes | None:
        return self.files.get(f"{self.prefix}/kms-deletions/{owner.digest()}")

    def _write_deletions(self, owner: KeyOwner, data: bytes) -> None:
        self.files.put(f"{self.prefix}/kms-deletions/{owner.digest()}", data)


def _snake(op: str) -> str:
    return "".join("_" + c.lower() if c.isupper() and i else c.lower() for i, c in enumerate(op))


def _region_of(key_id: str | None) -> str | None:
    """The region inside a KMS ARN (``arn:aws:kms:REGION:ACCOUNT:key/...``), else None."""
    parts = (key_id or "").split(":")
    return parts[3] if len(parts) > 5 and parts[0] == "arn" and parts[3] else None


def _iso(value: Any) -> str | None:
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    return None if value is None else str(value)
