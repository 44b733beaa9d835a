"""Checkpoints: the Merkle tree's size and root as a C2SP signed note, signed with the store's key.

A checkpoint (c2sp.org/tlog-checkpoint) is the text

    <origin>
    <tree size, decimal>
    <root hash, base64>

signed as a note (c2sp.org/signed-note): the text, a blank line, and one line per signature,
``— <key name> base64(key ID ‖ Ed25519 signature of the text)``, where the key ID is the first
four bytes of SHA-256(key name ‖ 0x0A ‖ 0x01 ‖ 32-byte public key). The key is the one that signs
the store's heads (:mod:`refold.storage.log.signing`: ``refold signing-key``; the private key stays
outside the store). The origin and the key name are ``refold/`` followed by the first 16 hex
digits of the key's fingerprint, so they name the log and the key together and stay the same
wherever the store moves. An auditor's tools for transparency logs read these notes as they are
(Go's ``golang.org/x/mod/sumdb/note`` with the verifier key ``refold checkpoint --verifier-key``
prints).

Publication: every head published with a signature (each append while ``REFOLD_SIGNING_KEY`` is
set, ``sign-head``, ``signing-key``) carries the checkpoint of the tree of ``seq + 1`` leaves in its
line (``"checkpoint"``); ``verify`` checks each one against the log. The parsing and checking
here need no store: ``refold proof verify`` uses them with a key the auditor pinned.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from refold.fold.errors import IntegrityError, NotFoundError, ValidationError
from refold.storage.log.heads import Head, store_head_lines
from refold.storage.log.signing import HeadSigner, fingerprint, load_public_key, recorded_public_key

__all__ = ["Checkpoint", "CheckpointError", "Verifier", "checkpoint_fields", "key_id", "load_verifier",
           "open_checkpoint", "open_note", "origin_for", "parse_verifier_key", "parse_checkpoint", "published_checkpoints", "sign_checkpoint",
           "store_checkpoint", "verifier_key"]

_DASH = "\u2014 "
_ED25519 = b"\x01"
#: the most signature lines a note may carry (signed-note: verifiers must accept at least 16)
MAX_SIGNATURES = 64
MAX_NOTE_BYTES = 64 * 1024


class CheckpointError(IntegrityError):
    """A checkpoint or signed note that is malformed or not signed by the expected key."""


@dataclass(frozen=True)
class Checkpoint:
    """The tree of ``size`` leaves has root ``root``, says the log ``origin``; ``note`` is the
    signed note it was read from or signed into (None: not signed)."""

    origin: str
    size: int
    root: bytes
    note: str | None = None

    def text(self) -> str:
        """The checkpoint's note text (what is signed)."""
        return f"{self.origin}\n{self.size}\n{base64.b64encode(self.root).decode()}\n"

    def as_json(self) -> dict[str, Any]:
        return {"origin": self.origin, "tree_size": self.size, "root": base64.b64encode(self.root).decode(),
                "note": self.note}


def origin_for(public: Ed25519PublicKey) -> str:
    """The origin (and key name) of a store whose heads ``public`` signs."""
    return f"refold/{fingerprint(public)[:16]}"


def _raw(public: Ed25519PublicKey) -> bytes:
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id(name: str, public: Ed25519PublicKey) -> bytes:
    """SHA-256(name ‖ 0x0A ‖ 0x01 ‖ public key)[:4], the signed-note key ID of an Ed25519 key."""
    return hashlib.sha256(name.encode() + b"\n" + _ED25519 + _raw(public)).digest()[:4]


def verifier_key(public: Ed25519PublicKey, name: str | None = None) -> str:
    """The signed-note verifier key: ``<name>+<key ID hex>+base64(0x01 ‖ public key)``."""
    name = name or origin_for(public)
    return f"{name}+{key_id(name, public).hex()}+{base64.b64encode(_ED25519 + _raw(public)).decode()}"


@dataclass(frozen=True)
class Verifier:
    """A key that checks notes: its Ed25519 public key and, from a verifier key, its name (None:
    a bare public key, whose name is taken to be the checkpoint's origin)."""

    public: Ed25519PublicKey
    name: str | None = None

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.public)


def _valid_name(name: str) -> bool:
    return bool(name) and not any(c.isspace() or c == "+" for c in name)


def parse_verifier_key(text: str) -> Verifier:
    """A verifier key (``name+hex id+base64 key``); CheckpointError saying what is wrong."""
    parts = text.strip().split("+", 2)  # (the base64 key may hold '+'; a name and an ID cannot)
    if len(parts) != 3 or not _valid_name(parts[0]):
        raise CheckpointError("not a verifier key: expected NAME+KEYID+BASE64KEY")
    name, hex_id, key = parts
    try:
        raw = base64.b64decode(key, validate=True)
        wanted = bytes.fromhex(hex_id)
    except (binascii.Error, ValueError):
        raise CheckpointError("not a verifier key: its key ID is not hex or its key not base64") from None
    if len(raw) != 33 or raw[:1] != _ED25519:
        raise CheckpointError("the verifier key is not an Ed25519 key (type 0x01, 32 bytes)")
    public = Ed25519PublicKey.from_public_bytes(raw[1:])
    if len(wanted) != 4 or key_id(name, public) != wanted:
        raise CheckpointError(f"the verifier key's ID {hex_id} does not match its name and key")
    return Verifier(public, name)


def load_verifier(path: str | os.PathLike) -> Verifier:
    """The key in ``path``: an Ed25519 public key in PEM (as the store records it), or a signed-note
    verifier key (``refold checkpoint STORE --verifier-key``). ValidationError when unreadable."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ValidationError(f"cannot read the public key {path}: {exc.strerror or exc}") from None
    if b"-----BEGIN" in data:
        return Verifier(load_public_key(path))
    try:
        return parse_verifier_key(data.decode("utf-8"))
    except (UnicodeDecodeError, CheckpointError) as exc:
        raise ValidationError(f"{path} is neither an Ed25519 public key in PEM nor a verifier key ({exc})") from None


def sign_checkpoint(size: int, root: bytes, private: Ed25519PrivateKey) -> Checkpoint:
    """The checkpoint of the tree of ``size`` leaves and ``root``, signed with ``private``."""
    public = private.public_key()
    origin = origin_for(public)
    unsigned = Checkpoint(origin, size, root)
    text = unsigned.text()
    signature = key_id(origin, public) + private.sign(text.encode())
    note = f"{text}\n{_DASH}{origin} {base64.b64encode(signature).decode()}\n"
    return Checkpoint(origin, size, root, note)


def checkpoint_fields(signer: HeadSigner, size: int, root: bytes) -> dict[str, str]:
    """What a signed head line carries for the checkpoint of ``size`` leaves (see heads.py)."""
    return {"checkpoint": sign_checkpoint(size, root, signer.private).note or ""}


def parse_checkpoint(text: str) -> Checkpoint:
    """The checkpoint in a note's text (origin, size, root, and extension lines, which are
    ignored); CheckpointError saying what is wrong. Nothing is trusted before its signature is."""
    if not text.endswith("\n"):
        raise CheckpointError("the checkpoint text does not end with a newline")
    lines = text[:-1].split("\n")
    if len(lines) < 3:
        raise CheckpointError(f"a checkpoint has an origin, a tree size and a root hash line; this one has "
                              f"{len(lines)} line(s)")
    if any(not line for line in lines):
        raise CheckpointError("a checkpoint has no empty lines")
    origin, size_text, root_text = lines[:3]
    if not size_text.isascii() or not size_text.isdigit() or (size_text != "0" and size_text.startswith("0")):
        raise CheckpointError(f"the checkpoint's second line {size_text[:40]!r} is not a tree size (decimal, no "
                              "leading zeros); is something before the origin line?")
    try:
        root = base64.b64decode(root_text, validate=True)
    except (binascii.Error, ValueError):
        raise CheckpointError("the checkpoint's third line is not a base64 root hash") from None
    if len(root) != 32 or base64.b64encode(root).decode() != root_text:
        raise CheckpointError("the checkpoint's root hash is not 32 bytes in canonical base64")
    return Checkpoint(origin, int(size_text), root)


def open_checkpoint(note: bytes | str, verifier: Verifier | Ed25519PublicKey) -> Checkpoint:
    """The checkpoint in the signed ``note``, once a signature by ``verifier`` checks out (see
    :func:`open_note`; a bare public key's name is the checkpoint's origin). CheckpointError
    saying what is wrong: the text is read first (what is malformed is named), then the
    signature is checked."""
    text, body, lines = _split_note(note)
    checkpoint = parse_checkpoint(body)
    _verify_note(body, lines, verifier, checkpoint.origin)
    return Checkpoint(checkpoint.origin, checkpoint.size, checkpoint.root, text)


def open_note(note: bytes | str, verifier: Verifier | Ed25519PublicKey) -> tuple[str, str]:
    """(the whole note, its text) once a signature by ``verifier`` (with its name) checks out,
    by the rules of c2sp.org/signed-note: signatures by other keys are ignored, a failing one by
    this key rejects the note, and one by this key must be there."""
    text, body, lines = _split_note(note)
    _verify_note(body, lines, verifier, None)
    return text, body


def _split_note(note: bytes | str) -> tuple[str, str, list[str]]:
    """(the note, its text, its signature lines), checked for the signed-note format only."""
    if isinstance(note, str):
        note = note.encode("utf-8")
    if len(note) > MAX_NOTE_BYTES:
        raise CheckpointError(f"the note is {len(note)} bytes; a checkpoint is a few hundred")
    try:
        text = note.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CheckpointError(f"the note is not UTF-8 text (byte {exc.start})") from None
    if text.startswith("\ufeff"):
        raise CheckpointError("the note starts with a byte-order mark; save it as plain UTF-8")
    bad = next((c for c in text if c < " " and c != "\n"), None)
    if bad is not None:
        raise CheckpointError(f"the note holds the control character {bad!r} (a signed note may hold newlines "
                              "only); was it saved with Windows line ends?")
    if not text.endswith("\n"):
        raise CheckpointError("the note does not end with a newline (is it cut short?)")
    split = text.rfind("\n\n")
    if split < 0:
        raise CheckpointError("the note has no blank line between its text and its signatures")
    lines = text[split + 2:-1].split("\n")
    if len(lines) > MAX_SIGNATURES:
        raise CheckpointError(f"the note has {len(lines)} signature lines, more than {MAX_SIGNATURES}")
    return text, text[:split + 1], lines


def _verify_note(body: str, lines: list[str], verifier: Verifier | Ed25519PublicKey, origin: str | None) -> None:
    if isinstance(verifier, Ed25519PublicKey):
        verifier = Verifier(verifier)
    name = verifier.name or origin
    if not name:
        raise CheckpointError("no key name to check the note with: use a verifier key (NAME+ID+KEY)")
    wanted = key_id(name, verifier.public)
    verified = False
    for number, line in enumerate(lines, start=1):
        if not line.startswith(_DASH):
            raise CheckpointError(f"signature line {number} does not start with '— ' (garbage after the note?)")
        parts = line[len(_DASH):].split(" ")
        if len(parts) != 2 or not _valid_name(parts[0]):
            raise CheckpointError(f"signature line {number} is not '— NAME SIGNATURE'")
        try:
            signature = base64.b64decode(parts[1], validate=True)
        except (binascii.Error, ValueError):
            raise CheckpointError(f"signature line {number}'s signature is not base64") from None
        if len(signature) < 5:
            raise CheckpointError(f"signature line {number}'s signature is too short")
        if parts[0] != name or signature[:4] != wanted:
            continue  # another key's signature (a witness, a rotated key): ignored
        try:
            verifier.public.verify(signature[4:], body.encode())
        except InvalidSignature:
            raise CheckpointError(f"the signature by {name} (key {verifier.fingerprint[:16]}…) does not verify: "
                                  "the checkpoint was altered, or signed by another key with that name") from None
        verified = True
    if not verified:
        raise CheckpointError(f"the note carries no signature by {name} with key {verifier.fingerprint[:16]}…; "
                              "check that you have the operator's key for this log")


# -- a store's checkpoints ------------------------------------------------------------------------------------


def published_checkpoints(layout) -> list[tuple[str, Head, str]]:
    """(where, head, note) of every head line that carries a checkpoint, in journal order."""
    return [(line.where, line.head, line.checkpoint) for line in store_head_lines(layout)
            if line.head is not None and line.checkpoint]


def store_checkpoint(log, size: int | None = None, *, signed: bool = True) -> Checkpoint:
    """A checkpoint of ``log``'s tree. ``signed``: the newest published checkpoint (of ``size``
    leaves when given) whose signature checks out with the key the store records; NotFoundError
    when there is none. Otherwise the unsigned checkpoint of the tree of ``size`` leaves (default:
    the whole log), its origin from the recorded key (``refold/unsigned`` without one)."""
    from refold.storage.log.tree_views import tree_view

    public = recorded_public_key(log.layout)
    if not signed:
        view = tree_view(log, size)
        return Checkpoint(origin_for(public) if public is not None else "refold/unsigned", view.size, view.root())
    if public is None:
        raise NotFoundError(f"{log.layout.root} has no signed checkpoints: it records no signing key",
                            cli=f"{log.layout.root} has no signed checkpoints: set up a key with `refold signing-key "
                                f"{log.layout.root} --key PATH` (or print an unsigned one with --unsigned)")
    best: Checkpoint | None = None
    for _, _, note in published_checkpoints(log.layout):
        try:
            found = open_checkpoint(note, public)
        except CheckpointError:
            continue  # verify reports it
        if (size is None or found.size == size) and (best is None or found.size >= best.size):
            best = found
    if best is None:
        which = f"of size {size} " if size is not None else ""
        raise NotFoundError(f"no signed checkpoint {which}is published in {log.layout.root}",
                            cli=f"no signed checkpoint {which}is published in {log.layout.root}; sign the current "
                                f"one with `refold sign-head {log.layout.root}` (or print it unsigned with --unsigned)")
    return best
