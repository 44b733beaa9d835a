"""Signed chain heads: Ed25519 signatures that a store writer without the key cannot make.

The chain is keyless: anyone who can write the store can append events that chain correctly, and
publish heads for them. What closes that hole is a key the store does not hold. The operator
keeps an Ed25519 private key outside the store (a file named by ``REFOLD_SIGNING_KEY``, read once
when a log is opened); every head an append publishes then carries a signature over

    "refold/head/v1\\n" ‖ canonical JSON {"link": …, "seq": …}

(the link commits to every event up to ``seq``). The store records the public key
(``receipts/heads/signing-key.pem``) so anyone can check; a third party who wants a check that a
store writer cannot fake pins the key's fingerprint, or the key itself (``verify --public-key``).
``verify --signed-heads`` then requires the log to end exactly at a correctly signed head: events
past the newest signed head were appended without the key.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from refold.fold.canonical import canonical_json
from refold.fold.errors import StoreError, ValidationError
from refold.storage.log.heads import Head
from refold.storage.layout import Layout

__all__ = ["KEY_ENV", "PUBLIC_KEY_FILE", "HeadSigner", "fingerprint", "head_message", "load_public_key",
           "recorded_public_key", "set_up_signing", "signer_from_env", "signature_ok"]

#: environment variable naming the private key file (kept outside the store)
KEY_ENV = "REFOLD_SIGNING_KEY"
#: where a store records its public key (under receipts/heads/)
PUBLIC_KEY_FILE = "signing-key.pem"
_DOMAIN = b"refold/head/v1\n"


def head_message(head: Head) -> bytes:
    """The bytes a head's signature covers. (Canonical JSON: a link is hex and a seq an int, so
    these are the bytes the ASCII-escaping encoder of earlier versions wrote.)"""
    return _DOMAIN + canonical_json({"link": head.link, "seq": head.seq})


def fingerprint(public: Ed25519PublicKey) -> str:
    """SHA-256 of the raw public key, hex: what a third party pins and compares."""
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


@dataclass(frozen=True)
class HeadSigner:
    """Signs published heads with the operator's private key."""

    private: Ed25519PrivateKey
    key: str  # the public key's fingerprint

    def sign(self, head: Head) -> dict[str, str]:
        """The fields a signed journal line adds to the head: ``sig`` (hex) and ``key``."""
        return {"sig": self.private.sign(head_message(head)).hex(), "key": self.key}


def signature_ok(public: Ed25519PublicKey, head: Head, signature: str) -> bool:
    try:
        public.verify(bytes.fromhex(signature), head_message(head))
        return True
    except (InvalidSignature, ValueError, TypeError):
        return False


def _public_key(layout: Layout) -> str:
    """The recorded public key's key under the store root (beside the published heads)."""
    return f"receipts/heads/{PUBLIC_KEY_FILE}"


def load_public_key(path: str | os.PathLike) -> Ed25519PublicKey:
    """An Ed25519 public key from a PEM file (ValidationError saying what is wrong)."""
    try:
        pem = Path(path).read_bytes()
    except OSError as exc:
        raise ValidationError(f"cannot read an Ed25519 public key (PEM) from {path}: {exc}") from None
    return _public_from_pem(pem, path)


def _public_from_pem(pem: bytes, path: str | os.PathLike) -> Ed25519PublicKey:
    try:
        key = serialization.load_pem_public_key(pem)
    except ValueError as exc:
        raise ValidationError(f"cannot read an Ed25519 public key (PEM) from {path}: {exc}") from None
    if not isinstance(key, Ed25519PublicKey):
        raise ValidationError(f"{path} holds a {type(key).__name__}, not an Ed25519 public key")
    return key


def recorded_public_key(layout: Layout) -> Ed25519PublicKey | None:
    """The public key the store records (None when signing was never set up)."""
    pem = layout.files().get(_public_key(layout))
    return None if pem is None else _public_from_pem(pem, f"{layout.heads}/{PUBLIC_KEY_FILE}")


def load_private(path: str | os.PathLike, origin: str) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise StoreError(f"cannot read the head-signing key {path} ({origin}): {exc}; it must be an "
                         "unencrypted Ed25519 private key in PEM, as `refold signing-key` writes") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise StoreError(f"the head-signing key {path} ({origin}) is a {type(key).__name__}, not Ed25519")
    return key


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def set_up_signing(layout: Layout, key_path: str | os.PathLike) -> str:
    """Record the public key of the private key at ``key_path`` in the store, creating the key
    (mode 0600) when the file does not exist; return its fingerprint. The key must lie outside
    the store: a key the store holds protects nothing. Refuses to replace another recorded key."""
    key_path = Path(key_path)
    if _inside(key_path, Path(layout.root)):
        raise ValidationError(f"{key_path} is inside the store {layout.root}: keep the signing key "
                              "elsewhere, or anyone who can write the store can sign")
    if key_path.exists():
        private = load_private(key_path, "given")
    else:
        private = Ed25519PrivateKey.generate()
        pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
        key_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
    public = private.public_key()
    pem = public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    files = layout.files()
    recorded = files.get(_public_key(layout))
    if recorded is None:
        files.put(_public_key(layout), pem)
    elif recorded != pem:
        raise ValidationError(f"{layout.root} already records another head-signing key "
                              f"({fingerprint(_public_from_pem(recorded, layout.heads))[:16]}…); a store has one key")
    return fingerprint(public)


def signer_from_env(layout: Layout) -> HeadSigner | None:
    """The signer named by ``REFOLD_SIGNING_KEY`` for this store (None when unset, or when the store
    records no public key: signing is set up per store with
    :func:`set_up_signing`). A key other than the recorded one fails here, when the log is
    opened, rather than at the next ``verify``."""
    path = os.environ.get(KEY_ENV)
    if not path:
        return None
    private = load_private(path, KEY_ENV)
    recorded = recorded_public_key(layout)
    key = fingerprint(private.public_key())
    if recorded is None:
        return None  # signing not set up for this store (`refold signing-key`): its heads stay unsigned
    if fingerprint(recorded) != key:
        raise StoreError(f"the key in {KEY_ENV} ({key[:16]}…) is not the one {layout.root} records "
                         f"({fingerprint(recorded)[:16]}…)")
    return HeadSigner(private, key)
