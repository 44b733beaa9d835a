"""Signed heads (issue #16, item 1): a forged tail that chains correctly, with a head published for
it, passes every keyless check; only a head signed with a key kept outside the store tells.

The key lives in tmp_path beside the store, named by REFOLD_SIGNING_KEY (set with monkeypatch, as
an operator sets it in the environment); the forger writes with plain deltalake and file edits.
Real stores, real Ed25519 keys; nothing is mocked.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import refold
from refold.fold.errors import IntegrityError, StoreError, ValidationError
from refold.storage.log import heads as heads_module
from refold.storage.log.signing import KEY_ENV, HeadSigner, fingerprint, set_up_signing
from refold.storage.log.verify import sign_current_head
from tests.log_helpers import _event, _store
from tests.test_verify_tamper import _forge_tail_erasure


def _refold(*args, env=None, code=0) -> subprocess.CompletedProcess:
    script = str(Path(sys.executable).parent / "refold")
    proc = subprocess.run([script, *map(str, args)], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    return proc


def _public_pem(key_path: Path, out: Path) -> Path:
    private = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    out.write_bytes(private.public_key().public_bytes(serialization.Encoding.PEM,
                                                      serialization.PublicFormat.SubjectPublicKeyInfo))
    return out


@pytest.fixture()
def signed(tmp_path, monkeypatch):
    """A store of 20 events whose signing was set up (what `refold signing-key` does), then 5
    more appended by a process holding the key: (memory, key path, pinned public key file)."""
    mem = _store(tmp_path / "store")
    key = tmp_path / "operator" / "head-key.pem"
    set_up_signing(mem.layout, key)
    assert sign_current_head(mem.log_store, key).seq == 19 and (key.stat().st_mode & 0o777) == 0o600
    monkeypatch.setenv(KEY_ENV, str(key))
    writer = refold.Memory(mem.root)
    writer.append([_event(20 + i) for i in range(5)])
    return writer, key, _public_pem(key, tmp_path / "operator.pub.pem")


def _append_forged_head_line(mem: refold.Memory) -> None:
    """What a forger publishes for their tail: an unsigned head line that matches the log."""
    head = refold.Memory(mem.root).log_store.head()
    journal = Path(mem.layout.heads) / "heads.jsonl"
    journal.write_text(journal.read_text() + "\n" + json.dumps(head.as_json()))


def test_signing_key_command_records_the_key_and_signs_the_head(tmp_path):
    mem = _store(tmp_path / "store", batches=(3,))
    key = tmp_path / "operator" / "head-key.pem"
    out = json.loads(_refold("signing-key", mem.root, "--key", key, "--json").stdout)
    assert out["signed_head"]["seq"] == 2 and (key.stat().st_mode & 0o777) == 0o600
    assert out["key"] == fingerprint(serialization.load_pem_private_key(key.read_bytes(), None).public_key())
    assert mem.verify(signed_heads=True).ok


def test_signed_store_verifies_with_the_recorded_and_the_pinned_key(signed):
    mem, key, pinned = signed
    lines = [json.loads(x) for x in (Path(mem.layout.heads) / "heads.jsonl").read_text().split("\n") if x]
    assert [x["seq"] for x in lines if "sig" in x] == [19, 24]
    report = mem.verify(signed_heads=True)
    assert report.ok, report.problems
    assert report.signed["signed_seq"] == 24 and report.signed["key_from"] == "store"
    assert mem.verify(public_key=pinned).signed["key_from"] == "pinned"
    result = _refold("verify", mem.root, "--public-key", pinned)
    assert "signed by key" in result.stdout


def test_forged_tail_erasure_with_a_published_head_is_caught_only_by_signed_heads(signed, monkeypatch):
    mem, _, pinned = signed
    monkeypatch.delenv(KEY_ENV)  # the forger has no key
    _forge_tail_erasure(mem, 3)
    _append_forged_head_line(mem)
    assert mem.verify().ok  # every keyless check passes: this is what signed heads are for
    report = mem.verify(public_key=pinned)
    assert not report.ok and report.first_bad_seq == 3, report.problems
    text = "\n".join(report.problems)
    assert "events 25..25 are not covered by a head signed" in text
    assert "seq 3: erased by erasure 'forged-erasure' recorded at seq 25, after the newest signed head" in text
    result = _refold("verify", mem.root, "--signed-heads", "--json", code=1)
    assert json.loads(result.stdout)["first_bad_seq"] == 3


def test_a_head_signed_with_another_key_is_reported_with_its_line(signed, tmp_path):
    mem, _, _ = signed
    intruder = Ed25519PrivateKey.generate()
    head = mem.head()
    line = {**head.as_json(), **HeadSigner(intruder, fingerprint(intruder.public_key())).sign(head)}
    journal = Path(mem.layout.heads) / "heads.jsonl"
    journal.write_text(journal.read_text() + "\n" + json.dumps(line))
    report = mem.verify(signed_heads=True)
    assert not report.ok and report.first_bad_seq is None
    assert any("heads.jsonl line" in p and "signed by another key" in p for p in report.problems)


def test_a_replaced_recorded_key_fools_only_a_check_without_a_pinned_key(signed, tmp_path, monkeypatch):
    """A store writer swaps the recorded public key for their own and signs their tail: the
    store's own key then vouches for it; the operator's pinned key does not."""
    mem, _, pinned = signed
    monkeypatch.delenv(KEY_ENV)
    (Path(mem.layout.heads) / "signing-key.pem").unlink()
    forger_key = tmp_path / "forger.pem"
    set_up_signing(mem.layout, forger_key)
    _forge_tail_erasure(mem, 3)
    (Path(mem.layout.heads) / "heads.jsonl").write_text("")  # the operator's signed heads go
    sign_current_head(refold.Memory(mem.root).log_store, forger_key)
    assert mem.verify(signed_heads=True).ok
    report = mem.verify(public_key=pinned)
    assert not report.ok and report.first_bad_seq == 0, report.problems
    assert "signed by another key" in report.problems[0] and "events 0..25 are not covered" in report.problems[1]


@pytest.mark.slow
def test_an_unsigned_append_is_reported_until_the_operator_signs_the_head(signed, monkeypatch):
    """A process without the key (or a crash before its head was published) leaves a tail no
    signed head covers; `refold sign-head` vouches for it after a full verify."""
    mem, key, pinned = signed
    monkeypatch.delenv(KEY_ENV)
    refold.Memory(mem.root).append([_event(25)])
    report = mem.verify(signed_heads=True)
    assert not report.ok and report.first_bad_seq == 25 and "events 25..25 are not covered" in report.problems[0]
    assert mem.verify().ok
    _refold("sign-head", mem.root, "--key", key)
    assert mem.verify(public_key=pinned).ok


def test_sign_head_refuses_a_log_that_does_not_verify(signed):
    mem, key, _ = signed
    _forge_tail_erasure(mem, 3)  # no published head for the tail: plain verify fails
    with pytest.raises(IntegrityError, match="does not verify"):
        sign_current_head(mem.log_store, key)
    result = _refold("sign-head", mem.root, "--key", key, code=2)
    assert result.stderr.count("\n") == 1


def test_rotation_keeps_the_signatures(signed, monkeypatch):
    mem, _, pinned = signed
    monkeypatch.setattr(heads_module, "ROTATE_AT", 3000)  # ~15 heads: the appends below rotate
    for i in range(30):
        mem.append([_event(100 + i)])
    lines = [x for x in (Path(mem.layout.heads) / "heads.jsonl").read_text().split("\n") if x]
    assert len(lines) < 30 and all('"sig"' in x for x in lines)  # rotated, signatures kept
    assert mem.verify(public_key=pinned).ok


def test_key_set_up_is_checked(signed, tmp_path, monkeypatch):
    mem, key, _ = signed
    with pytest.raises(ValidationError, match="inside the store"):
        set_up_signing(mem.layout, Path(mem.root) / "key.pem")
    with pytest.raises(ValidationError, match="already records another"):
        set_up_signing(mem.layout, tmp_path / "second.pem")
    monkeypatch.setenv(KEY_ENV, str(tmp_path / "second.pem"))
    with pytest.raises(StoreError, match="is not the one"):
        refold.Memory(mem.root)
    monkeypatch.setenv(KEY_ENV, str(tmp_path / "missing.pem"))
    with pytest.raises(StoreError, match="cannot read the head-signing key"):
        refold.Memory(mem.root)
