"""KeyStore contract, run against every adapter (FileKeyStore, and the in-memory TEST adapter)."""

from __future__ import annotations

import multiprocessing as mp
import stat

import pytest

from refold.fold.errors import ErasedSubjectError, StoreError
from refold.storage.keys import KEY_BYTES, FileKeyStore, KeyOwner, KeyStore, MemoryKeyStore


class KeyStoreContract:
    """Every KeyStore adapter must pass these (subclass once per adapter, define ``make``)."""

    def make(self, tmp_path) -> KeyStore:  # pragma: no cover - overridden
        raise NotImplementedError

    def test_is_a_keystore(self, tmp_path):
        assert isinstance(self.make(tmp_path), KeyStore)

    def test_get_or_create_is_stable(self, tmp_path):
        ks = self.make(tmp_path)
        key_id, key = ks.get_or_create("s-1")
        assert len(key) == KEY_BYTES
        assert ks.get_or_create("s-1") == (key_id, key)
        assert ks.get(key_id) == key and ks.exists(key_id)
        assert ks.key_ids("s-1") == [key_id]

    def test_subjects_get_different_random_keys_and_opaque_ids(self, tmp_path):
        ks = self.make(tmp_path)
        a_id, a = ks.get_or_create("alice@example.org")
        b_id, b = ks.get_or_create("bob")
        assert a_id != b_id and a != b
        assert "alice" not in a_id and "example" not in a_id

    def test_destroy_removes_every_key_of_the_subject_only(self, tmp_path):
        ks = self.make(tmp_path)
        a_id, _ = ks.get_or_create("s-a")
        b_id, b = ks.get_or_create("s-b")
        assert ks.destroy("s-a") == [a_id]
        assert ks.get(a_id) is None and not ks.exists(a_id)
        assert ks.key_ids("s-a") == []
        assert ks.get(b_id) == b

    def test_destroy_is_idempotent_and_unknown_subjects_are_fine(self, tmp_path):
        ks = self.make(tmp_path)
        ks.get_or_create("s-a")
        ks.destroy("s-a")
        assert ks.destroy("s-a") == []
        assert ks.destroy("never-seen") == []

    def test_a_destroyed_subject_gets_no_new_key(self, tmp_path):
        """Issue #16 item 7: a fresh key after the destruction would leave an append racing the
        erasure readable. The erased marker stays and names the erasure."""
        ks = self.make(tmp_path)
        old_id, _ = ks.get_or_create("s-a")
        assert ks.erased("s-a") is None
        ks.destroy("s-a", erasure_id="er-1")
        assert ks.erased("s-a") == "er-1"
        with pytest.raises(ErasedSubjectError, match="er-1.*new subject id"):
            ks.get_or_create("s-a")
        assert ks.get(old_id) is None and ks.key_ids("s-a") == []
        ks.destroy("s-a")  # a rerun keeps the erasure's name
        assert ks.erased("s-a") == "er-1"
        assert ks.get_or_create("s-b")[0]  # other owners are unaffected

    def test_subject_and_tenant_owners_never_share_a_key(self, tmp_path):
        """Issue #16 item 8: subject "tenant:acme" is not tenant acme."""
        ks = self.make(tmp_path)
        tenant_id, tenant_key = ks.get_or_create(KeyOwner.tenant("acme"))
        subject_id, _ = ks.get_or_create("tenant:acme")
        assert subject_id != tenant_id
        assert ks.get_or_create(KeyOwner.subject("tenant:acme"))[0] == subject_id
        ks.destroy("tenant:acme")
        assert ks.get(tenant_id) == tenant_key and ks.key_ids(KeyOwner.tenant("acme")) == [tenant_id]

    def test_unknown_key_is_none(self, tmp_path):
        assert self.make(tmp_path).get("00" * 16) is None

    def test_empty_subject_is_rejected(self, tmp_path):
        with pytest.raises(StoreError):
            self.make(tmp_path).get_or_create("")


class TestFileKeyStore(KeyStoreContract):
    def make(self, tmp_path):
        return FileKeyStore(tmp_path / "keys")

    def test_key_files_are_private_and_gone_after_destroy(self, tmp_path):
        ks = self.make(tmp_path)
        key_id, key = ks.get_or_create("s-a")
        path = tmp_path / "keys" / "ids" / key_id
        assert path.read_bytes() == key
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        ks.destroy("s-a", erasure_id="er-1")
        assert not path.exists()
        leftovers = [p for p in (tmp_path / "keys").rglob("*") if p.is_file() and p.name != ".lock"]
        # only the erased marker: a hash for a name, the erasure id for content (no key bytes)
        assert [p.parent.name for p in leftovers] == ["erased"]
        assert leftovers[0].read_bytes() == b"er-1"

    def test_keys_under_legacy_names_are_listed_and_destroyed_never_reused(self, tmp_path):
        """Stores made before typed owners named a subject's key file sha256(subject id)."""
        import hashlib

        root = tmp_path / "keys"
        (root / "ids").mkdir(parents=True)
        (root / "subjects").mkdir()
        legacy_id = "ab" * 16
        (root / "ids" / legacy_id).write_bytes(b"k" * KEY_BYTES)
        (root / "subjects" / hashlib.sha256(b"s-old").hexdigest()).write_text(legacy_id + "\n")
        ks = FileKeyStore(root)
        assert ks.key_ids("s-old") == [legacy_id] and ks.get(legacy_id) == b"k" * KEY_BYTES
        new_id, _ = ks.get_or_create("s-old")  # new writes: a key under the typed name
        assert new_id != legacy_id and set(ks.key_ids("s-old")) == {legacy_id, new_id}
        assert set(ks.destroy("s-old")) == {legacy_id, new_id}
        assert ks.get(legacy_id) is None and not (root / "subjects" / hashlib.sha256(b"s-old").hexdigest()).exists()

    def test_survives_reopening(self, tmp_path):
        key_id, key = self.make(tmp_path).get_or_create("s-a")
        assert FileKeyStore(tmp_path / "keys").get(key_id) == key

    def test_malformed_key_id_is_rejected(self, tmp_path):
        with pytest.raises(StoreError):
            self.make(tmp_path).get("../../etc/passwd")

    def test_processes_racing_on_one_subject_share_one_key(self, tmp_path):
        root = str(tmp_path / "keys")
        with mp.get_context("spawn").Pool(4) as pool:
            results = pool.map(_create, [root] * 8)
        assert len(set(results)) == 1
        assert FileKeyStore(root).key_ids("s-race") == [results[0][0]]


def _create(root: str) -> tuple[str, bytes]:
    return FileKeyStore(root).get_or_create("s-race")


class TestMemoryKeyStore(KeyStoreContract):
    """The in-memory TEST adapter must keep the same contract (it stands in for a KMS in unit tests)."""

    def make(self, tmp_path):
        return MemoryKeyStore()
