"""Checkpoints as C2SP signed notes (refold.storage.log.checkpoints, issue #36).

The note format is checked against the example of the signed-note spec itself (c2sp.org/signed-note:
its verifier key and the note it verifies), then refold's own checkpoints: signed and opened with a
PEM key or a verifier key, other keys' signatures ignored, and every malformed or altered note
refused with a message saying what is wrong (garbage before or after, a changed line, CRLF line
ends, a missing blank line, a bad signature by the right key, no signature by it).
"""

from __future__ import annotations

import base64
import hashlib

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from refold.fold.errors import IntegrityError, ValidationError
from refold.storage.log.checkpoints import (Checkpoint, CheckpointError, Verifier, key_id, load_verifier, open_checkpoint,
                                        open_note, origin_for, parse_checkpoint, parse_verifier_key, sign_checkpoint,
                                        verifier_key)
from refold.storage.log.signing import fingerprint

# c2sp.org/signed-note, "Verifier keys", Example (C2SP/C2SP signed-note.md)
SPEC_VKEY = "example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k"
SPEC_NOTE = ("This is an example message.\n\n— example.com/foo "
             "Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfXppzi2ONncAlTgK7Ztg1ERYNZXsYjOBH3mFXmRKuwHjG1Yu72IneyaQM=\n")

ROOT = hashlib.sha256(b"a root").digest()


def test_the_signed_note_specs_example_verifies():
    verifier = parse_verifier_key(SPEC_VKEY)
    assert verifier.name == "example.com/foo"
    assert key_id("example.com/foo", verifier.public).hex() == "530d903a"  # the spec's key ID rule
    assert verifier_key(verifier.public, "example.com/foo") == SPEC_VKEY
    note, text = open_note(SPEC_NOTE, verifier)
    assert note == SPEC_NOTE and text == "This is an example message.\n"
    with pytest.raises(CheckpointError, match="does not verify"):
        open_note(SPEC_NOTE.replace("example message", "exemplary message"), verifier)
    with pytest.raises(CheckpointError, match="an origin, a tree size and a root hash"):
        open_checkpoint(SPEC_NOTE, verifier)  # a signed note, but not a checkpoint


def test_verifier_keys_are_checked():
    with pytest.raises(CheckpointError, match="does not match"):
        parse_verifier_key(SPEC_VKEY.replace("530d903a", "530d903b"))
    with pytest.raises(CheckpointError, match="does not match"):
        parse_verifier_key(SPEC_VKEY.replace("example.com/foo", "example.com/bar"))
    with pytest.raises(CheckpointError, match="NAME"):
        parse_verifier_key("just text")
    with pytest.raises(CheckpointError, match="not an Ed25519"):
        parse_verifier_key("example.com/foo+530d903a+" + base64.b64encode(b"\x02" + b"k" * 32).decode())


@pytest.fixture(scope="module")
def key():
    return Ed25519PrivateKey.generate()


def test_a_checkpoint_signs_and_opens(key):
    cp = sign_checkpoint(41, ROOT, key)
    origin = origin_for(key.public_key())
    assert origin == "refold/" + fingerprint(key.public_key())[:16] == cp.origin
    assert cp.note == (f"{origin}\n41\n{base64.b64encode(ROOT).decode()}\n\n— {origin} "
                       + cp.note.rsplit(" ", 1)[1])
    opened = open_checkpoint(cp.note, key.public_key())
    assert (opened.origin, opened.size, opened.root, opened.note) == (origin, 41, ROOT, cp.note)
    vkey = Verifier(key.public_key(), origin)
    assert open_checkpoint(cp.note.encode(), vkey) == opened
    assert parse_verifier_key(verifier_key(key.public_key())).fingerprint == fingerprint(key.public_key())
    assert sign_checkpoint(0, hashlib.sha256(b"").digest(), key).size == 0  # the empty tree
    assert cp.as_json() == {"origin": origin, "tree_size": 41, "root": base64.b64encode(ROOT).decode(),
                            "note": cp.note}
    assert Checkpoint(origin, 41, ROOT).text() == cp.note.split("\n\n")[0] + "\n"


def test_other_signatures_are_ignored_but_one_by_the_key_is_required(key):
    cp = sign_checkpoint(7, ROOT, key)
    witness = Ed25519PrivateKey.generate()
    text = cp.note.split("\n\n")[0] + "\n"
    cosigned = cp.note + f"— witness.example {base64.b64encode(b'abcd' + witness.sign(text.encode())).decode()}\n"
    assert open_checkpoint(cosigned, key.public_key()).size == 7
    other = Ed25519PrivateKey.generate()
    with pytest.raises(CheckpointError, match="no signature by"):
        open_checkpoint(cp.note, other.public_key())
    forged = sign_checkpoint(7, ROOT, other).note.replace(origin_for(other.public_key()), cp.origin)
    with pytest.raises(CheckpointError):
        open_checkpoint(forged, key.public_key())


@pytest.mark.parametrize("change, words", [
    (lambda n: "garbage\n" + n, "not a tree size"),
    (lambda n: n + "garbage\n", "does not start with"),
    (lambda n: n + "garbage", "does not end with a newline"),
    (lambda n: n[:-1], "does not end with a newline"),
    (lambda n: n.replace("\n", "\r\n"), "control character"),
    (lambda n: "\ufeff" + n, "byte-order mark|not a tree size"),
    (lambda n: n.replace("\n\n", "\n"), "no blank line"),
    (lambda n: n.replace("\n41\n", "\n42\n"), "does not verify"),
    (lambda n: n.replace("\n41\n", "\n041\n"), "not a tree size"),
    (lambda n: n.replace("\n41\n", "\n-41\n"), "not a tree size"),
    (lambda n: n.replace("refold/", "refolx/", 1), "no signature by"),
    (lambda n: n.replace("\n\n", "\nextension\n\n"), "does not verify"),
    (lambda n: n.replace("\n\n", "\n\n\n"), "does not start with|no empty lines"),
    (lambda n: n.replace("— ", "-- "), "does not start with"),
    (lambda n: n[:-6] + "!!!=\n", "not base64"),
    (lambda n: n.split("\n\n")[0] + "\n", "no blank line"),
    (lambda n: n.replace(n.split("\n")[2], base64.b64encode(b"r" * 31).decode()), "32 bytes"),
    (lambda n: "x" * 70_000, "bytes"),
])
def test_malformed_or_altered_notes_are_refused(key, change, words):
    note = sign_checkpoint(41, ROOT, key).note
    with pytest.raises(CheckpointError, match=words):
        open_checkpoint(change(note), key.public_key())


def test_checkpoint_text_rules():
    assert parse_checkpoint(f"o\n0\n{base64.b64encode(ROOT).decode()}\n").size == 0
    assert parse_checkpoint(f"o\n5\n{base64.b64encode(ROOT).decode()}\next\n").size == 5  # extension lines
    for text in ("o\n5\n", f"o\n5\n{base64.b64encode(ROOT).decode()}", f"o\n\n5\n{base64.b64encode(ROOT).decode()}\n",
                 f"o\n５\n{base64.b64encode(ROOT).decode()}\n"):
        with pytest.raises(CheckpointError):
            parse_checkpoint(text)
    assert issubclass(CheckpointError, IntegrityError)


def test_keys_load_from_pem_or_a_verifier_key(tmp_path, key):
    pem = tmp_path / "k.pem"
    pem.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                  serialization.PublicFormat.SubjectPublicKeyInfo))
    assert load_verifier(pem).name is None and load_verifier(pem).fingerprint == fingerprint(key.public_key())
    vkey = tmp_path / "k.vkey"
    vkey.write_text(verifier_key(key.public_key()) + "\n")
    assert load_verifier(vkey).name == origin_for(key.public_key())
    (tmp_path / "bad").write_text("nonsense")
    private = tmp_path / "private.pem"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    for path, words in ((tmp_path / "missing", "cannot read"), (tmp_path / "bad", "neither"), (private, "PEM")):
        with pytest.raises(ValidationError, match=words):
            load_verifier(path)
