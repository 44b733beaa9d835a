"""Which :class:`~refold.storage.keys.port.KeyStore` adapter a shred-mode store uses.

A store picks its key store once, at ``refold init``, and records the choice in its settings
(``store.json``, under ``keys``); every later open reads it from there, so no caller can open a
KMS store with file keys by mistake (or the other way round):

* no ``keys`` entry: :class:`~refold.storage.keys.port.FileKeyStore` (key files under ``keys/``), or
  on object storage :class:`~refold.storage.keys.objects.ObjectKeyStore` (key objects there);
* ``{"adapter": "kms", ...}``: :class:`~refold.storage.keys.kms.KmsKeyStore` with the
  :class:`~refold.storage.keys.kms.KmsSettings` stored there (wrapped key files under ``keys/``),
  or on object storage :class:`~refold.storage.keys.kms.ObjectKmsKeyStore` (wrapped key objects).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from refold.fold.errors import StoreError
from refold.storage.keys.port import FileKeyStore, KeyStore
from refold.storage.layout import Layout


def key_settings(mode: str, *, kms_key_id: str | None = None, kms_key_per_subject: bool = False,
                 kms_endpoint: str | None = None, kms_region: str | None = None,
                 kms_pending_window_days: int | None = None, check: bool = True) -> dict[str, Any] | None:
    """The ``keys`` entry of a new store's settings, or None for the file adapter.

    Validates the options (KMS options need shred mode) and, with ``check``, asks KMS whether the
    store's key is there and usable (``DescribeKey``), so that ``init`` fails before it writes
    anything rather than at the first append.
    """
    wants_kms = bool(kms_key_id or kms_key_per_subject)
    if not wants_kms:
        if kms_endpoint or kms_region or kms_pending_window_days is not None:
            raise StoreError("--kms-endpoint, --kms-region and --kms-pending-days need --kms-key-id "
                             "(or --kms-key-per-subject)")
        return None
    if kms_pending_window_days is not None and not kms_key_per_subject:
        raise StoreError("--kms-pending-days is the wait before KMS deletes an erased subject's own "
                         "KMS key: it needs --kms-key-per-subject (the store's one KMS key is never deleted)")
    if mode != "shred":
        raise StoreError(f"a KMS key store is for shred mode (keys destroyed on erasure); this store is "
                         f"{mode}-mode: add --mode shred, or drop the KMS options")
    from refold.storage.keys.kms import MIN_PENDING_DAYS, KmsKeyStore, KmsSettings

    settings = KmsSettings(key_id=kms_key_id, key_per_subject=kms_key_per_subject, endpoint=kms_endpoint,
                           region=kms_region, pending_window_days=kms_pending_window_days or MIN_PENDING_DAYS)
    if check and not settings.key_per_subject:
        KmsKeyStore("unused", settings).describe_store_key()
    return settings.as_json()


def open_keystore(layout: Layout, settings: Mapping[str, Any]) -> KeyStore:
    """The key store of the store at ``layout`` whose settings are ``settings``."""
    keys = settings.get("keys")
    if not keys and not layout.is_local:  # key objects in the bucket, beside the rest of the store
        from refold.storage.keys.objects import ObjectKeyStore

        return ObjectKeyStore(layout.files(), "keys")
    if not keys:
        return FileKeyStore(layout.keys)
    if keys.get("adapter") == "kms":
        from refold.storage.keys.kms import KmsKeyStore, KmsSettings, ObjectKmsKeyStore

        if not layout.is_local:  # wrapped key objects under keys/, beside the rest of the store
            return ObjectKmsKeyStore(layout.files(), KmsSettings.from_json(keys), "keys")
        return KmsKeyStore(layout.keys, KmsSettings.from_json(keys))
    raise StoreError(f"{layout.root}/store.json names an unknown key store {keys.get('adapter')!r}; "
                     "this refold knows 'kms' (and the file store, when no key store is named)")
