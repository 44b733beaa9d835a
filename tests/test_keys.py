"""KeyStore contract, run against every adapter: FileKeyStore, KmsKeyStore on the local KMS API
(moto, see tests/object_store.py) in both modes, and the in-memory TEST adapter."""

from __future__ import annotations

import multiprocessing as mp
import stat

import pytest

from refold.fold.errors import ErasedSubjectError, StoreError
from refold.storage.keys.port import KEY_BYTES, FileKeyStore, KeyOwner, KeyStore, MemoryKeyStore
from refold.storage.keys.kms import KmsKeyStore, KmsSettings


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

    def test_erased_owners_lists_every_marker_by_owner_digest(self, tmp_path):
        """What a shred-mode read checks before answering from derived state: every owner
        destroy was called for (subjects and tenants), named by digest, and nothing else."""
        ks = self.make(tmp_path)
        assert ks.erased_owners() == frozenset()
        ks.get_or_create("s-a")
        ks.get_or_create(KeyOwner.tenant("acme"))
        assert ks.erased_owners() == frozenset()
        ks.destroy("s-a", erasure_id="er-1")
        ks.destroy(KeyOwner.tenant("acme"))
        ks.destroy("never-seen")  # a marker without keys still counts: appends about it are refused
        assert ks.erased_owners() == frozenset({KeyOwner.subject("s-a").digest(), KeyOwner.tenant("acme").digest(),
                                                KeyOwner.subject("never-seen").digest()})
        ks.destroy("s-a")
        assert len(ks.erased_owners()) == 3

    def test_subject_and_tenant_owners_never_share_a_key(self, tmp_path):
        """Issue #16 item 8: subject "tenant:acme" is not tenant acme."""
        ks = self.make(tmp_path)
        tenant_id, tenant_key = ks.get_or_create(KeyOwner.tenant("acme"))
        subject_id, _ = ks.get_or_create("tenant:acme")
        assert subject_id != tenant_id
        assert ks.get_or_create(KeyOwner.subject("tenant:acme"))[0] == subject_id
        ks.destroy("tenant:acme")
        assert ks.get(tenant_id) == tenant_key and ks.key_ids(KeyOwner.tenant("acme")) == [tenant_id]

    def test_get_or_create_many_makes_each_owners_key_once(self, tmp_path):
        """One call for a batch's owners (repeats, a subject and a tenant of one name): one key
        per distinct owner, listed under it, and the same keys on the next call."""
        ks = self.make(tmp_path)
        owners = [f"s-{i % 7}" for i in range(20)] + [KeyOwner.tenant("s-1"), KeyOwner.subject("s-1")]
        got = ks.get_or_create_many(owners)
        assert set(got) == {KeyOwner.subject(f"s-{i}") for i in range(7)} | {KeyOwner.tenant("s-1")}
        for owner, (key_id, key) in got.items():
            assert ks.key_ids(owner) == [key_id] and ks.get(key_id) == key and len(key) == KEY_BYTES
        assert len({key_id for key_id, _ in got.values()}) == len(got)
        assert ks.get_or_create_many(reversed(owners)) == got
        assert ks.get_or_create("s-3") == got[KeyOwner.subject("s-3")]

    def test_get_or_create_many_keeps_existing_keys_and_adds_new_ones(self, tmp_path):
        ks = self.make(tmp_path)
        old = {s: ks.get_or_create(s) for s in ("s-a", "s-b")}
        got = ks.get_or_create_many(["s-a", "s-new", "s-b", "s-other"])
        assert got[KeyOwner.subject("s-a")] == old["s-a"] and got[KeyOwner.subject("s-b")] == old["s-b"]
        assert ks.key_ids("s-new") == [got[KeyOwner.subject("s-new")][0]]
        assert ks.key_ids("s-a") == [old["s-a"][0]]

    def test_get_or_create_many_refuses_an_erased_owner_before_making_keys(self, tmp_path):
        ks = self.make(tmp_path)
        ks.get_or_create("s-gone")
        ks.destroy("s-gone", erasure_id="er-9")
        with pytest.raises(ErasedSubjectError, match="er-9"):
            ks.get_or_create_many(["s-fresh", "s-gone"])
        assert ks.key_ids("s-fresh") == []
        assert ks.get_or_create_many([]) == {}

    def test_unknown_key_is_none(self, tmp_path):
        assert self.make(tmp_path).get("00" * 16) is None

    def test_empty_subject_is_rejected(self, tmp_path):
        with pytest.raises(StoreError):
            self.make(tmp_path).get_or_create("")

    def test_destruction_is_recorded_for_the_receipt(self, tmp_path):
        """The receipt says how the keys went; a rerun of the erasure reads the same record."""
        ks = self.make(tmp_path)
        ks.get_or_create("s-a")
        assert ks.destruction("s-a") is None
        ks.destroy("s-a", erasure_id="er-1")
        first = ks.destruction("s-a")
        assert first["erasure_id"] == "er-1" and first["key_store"] and first["how"]
        ks.destroy("s-a", erasure_id="er-1")
        assert ks.destruction("s-a") == first
        assert ks.destruction("s-b") is None


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

    @pytest.mark.slow
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


class _KmsAdapter(KeyStoreContract):
    """KmsKeyStore against moto's KMS API; credentials come from the AWS environment, as in use."""

    per_subject = False

    @pytest.fixture(autouse=True)
    def _kms(self, aws_env, kms_key):
        self.server, self.kms_key = aws_env, kms_key

    def settings(self, **overrides) -> KmsSettings:
        values = dict(key_id=None if self.per_subject else self.kms_key, key_per_subject=self.per_subject,
                      endpoint=self.server.endpoint, region=self.server.region)
        return KmsSettings(**{**values, **overrides})

    def make(self, tmp_path, **options):
        return KmsKeyStore(tmp_path / "keys", self.settings(), **options)

    def test_key_files_hold_only_the_wrapped_key_and_reopen_through_kms(self, tmp_path):
        import json

        key_id, key = self.make(tmp_path).get_or_create("s-a")
        stored = (tmp_path / "keys" / "ids" / key_id).read_bytes()
        assert key not in stored and stored.count(b"s-a") == 0
        assert set(json.loads(stored)) == {"format", "kms_key_id", "wrapped"}
        assert self.make(tmp_path).get(key_id) == key  # a new process: unwrapped by KMS

    def test_unwrapped_keys_are_cached_and_bounded(self, tmp_path):
        ks = self.make(tmp_path)
        ids = [ks.get_or_create(f"s-{i}")[0] for i in range(3)]
        reader = self.make(tmp_path, cache_size=2)
        calls = []
        reader.kms._boto().meta.events.register("before-call.kms.Decrypt", lambda **kw: calls.append(1))
        keys = [reader.get(k) for k in ids]
        assert len(calls) == 3
        assert reader.get(ids[2]) == keys[2] and len(calls) == 3  # cached: no KMS call
        assert reader.get(ids[0]) == keys[0] and len(calls) == 4  # evicted (bound 2): unwrapped again
        assert len(reader._cache) == 2

    def test_a_cached_key_is_not_served_once_another_process_destroyed_it(self, tmp_path):
        reader, eraser = self.make(tmp_path), self.make(tmp_path)
        key_id, key = reader.get_or_create("s-a")
        assert reader.get(key_id) == key
        eraser.destroy("s-a", erasure_id="er-1")
        assert reader.get(key_id) is None and not reader.exists(key_id)

    def test_a_wrapped_key_moved_to_another_key_file_does_not_open(self, tmp_path):
        ks = self.make(tmp_path)
        a_id, _ = ks.get_or_create("s-a")
        b_id, _ = ks.get_or_create("s-b")
        ids = tmp_path / "keys" / "ids"
        (ids / b_id).write_bytes((ids / a_id).read_bytes())
        with pytest.raises(StoreError, match="InvalidCiphertextException.*altered or moved"):
            self.make(tmp_path).get(b_id)

    def test_an_unknown_kms_key_is_one_clean_error_naming_key_and_endpoint(self, tmp_path):
        ks = KmsKeyStore(tmp_path / "keys", self.settings(key_id="alias/no-such-key", key_per_subject=False))
        with pytest.raises(StoreError) as info:
            ks.get_or_create("s-a")
        message = str(info.value)
        assert "\n" not in message
        assert "alias/no-such-key" in message and self.server.endpoint in message
        assert "NotFoundException" in message and "--kms-key-id" in message
        assert not any((tmp_path / "keys" / "ids").iterdir())  # nothing half-written

    def test_an_unreachable_endpoint_is_one_clean_error(self, tmp_path):
        import socket

        with socket.socket() as s:  # a port nobody listens on
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        endpoint = f"http://127.0.0.1:{port}"
        settings = self.settings(endpoint=endpoint, max_attempts=1)
        with pytest.raises(StoreError, match=f"at {endpoint}.*EndpointConnectionError.*--kms-endpoint"):
            KmsKeyStore(tmp_path / "keys", settings).get_or_create("s-a")


class TestKmsKeyStore(_KmsAdapter):
    """One KMS key for the store: a data key per owner, wrapped by it."""

    def test_destroy_deletes_the_wrapped_keys_and_keeps_the_store_key(self, tmp_path):
        ks = self.make(tmp_path)
        key_id, _ = ks.get_or_create("s-a")
        ks.destroy("s-a", erasure_id="er-1")
        how = ks.destruction("s-a")
        assert how["key_store"] == "kms" and how["kms_key_id"] == self.kms_key
        assert "kms_key_deletions" not in how and "backup" in how["note"]
        state = self.server.client("kms").describe_key(KeyId=self.kms_key)["KeyMetadata"]["KeyState"]
        assert state == "Enabled"


class TestKmsKeyStorePerSubject(_KmsAdapter):
    """A KMS key per owner, whose deletion an erasure schedules."""

    per_subject = True

    def test_destroy_schedules_the_owners_kms_key_deletion_and_records_its_date(self, tmp_path):
        import json
        from datetime import datetime, timedelta, timezone

        ks = self.make(tmp_path)
        a_id, _ = ks.get_or_create("s-a")
        ks.get_or_create("s-b")
        kms_a = json.loads((tmp_path / "keys" / "ids" / a_id).read_bytes())["kms_key_id"]
        ks.destroy("s-a", erasure_id="er-1")
        (deletion,) = ks.destruction("s-a")["kms_key_deletions"]
        assert deletion["kms_key_id"] == kms_a and deletion["pending_window_days"] == 7
        kms = self.server.client("kms")
        meta = kms.describe_key(KeyId=kms_a)["KeyMetadata"]
        assert meta["KeyState"] == "PendingDeletion"
        assert datetime.fromisoformat(deletion["deletion_date"]) == meta["DeletionDate"]
        assert meta["DeletionDate"] - datetime.now(timezone.utc) > timedelta(days=6)
        # the other owner's KMS key is untouched
        others = [k["KeyId"] for k in kms.list_keys()["Keys"]]
        states = {kms.describe_key(KeyId=k)["KeyMetadata"]["KeyState"] for k in others if k not in kms_a}
        assert "Enabled" in states


def test_both_kms_options_at_once_are_refused():
    with pytest.raises(StoreError, match="exclude each other"):
        KmsSettings(key_id="alias/x", key_per_subject=True)


@pytest.mark.parametrize("days", [6, 31, "7"])
def test_a_pending_window_outside_kms_limits_is_refused(days):
    with pytest.raises(StoreError, match="7 to 30 days"):
        KmsSettings(key_per_subject=True, pending_window_days=days)


@pytest.mark.parametrize("variable", ["AWS_REGION", "AWS_DEFAULT_REGION"])
def test_kms_region_from_either_aws_variable_and_endpoint_from_aws_endpoint_url(tmp_path, aws_env, monkeypatch,
                                                                               variable):
    """Settings without region or endpoint: boto3 reads only AWS_DEFAULT_REGION, but AWS_REGION
    (AWS CLI v2, Lambda, delta-rs) must work too; the endpoint comes from AWS_ENDPOINT_URL."""
    monkeypatch.delenv("AWS_REGION")
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    monkeypatch.setenv(variable, aws_env.region)
    settings = KmsSettings(key_per_subject=True)
    ks = KmsKeyStore(tmp_path / "keys", settings)
    key_id, key = ks.get_or_create("s-a")
    assert ks.kms._boto().meta.region_name == aws_env.region
    assert KmsKeyStore(tmp_path / "keys", settings).get(key_id) == key
