"""Shred-mode keys as objects in a bucket (refold.storage.keys.objects) keep the key-store
contract every adapter passes (tests/test_keys.py), on the local S3 API."""

from __future__ import annotations

import pytest

from refold.fold.errors import ErasedSubjectError
from refold.storage.keys.objects import ObjectKeyStore
from refold.storage.files.objects import store_files
from tests.test_keys import KeyStoreContract


class TestObjectKeyStore(KeyStoreContract):
    @pytest.fixture(autouse=True)
    def _bucket(self, s3_bucket):
        self.bucket = s3_bucket

    def make(self, tmp_path):
        return ObjectKeyStore(store_files(f"{self.bucket.uri}/store", self.bucket.storage_options))

    def test_destroy_deletes_the_key_objects_for_real(self, tmp_path):
        ks = self.make(tmp_path)
        key_id, _ = ks.get_or_create("s-a")
        assert f"store/keys/ids/{key_id}" in self.bucket.keys()
        assert ks.destroy("s-a", erasure_id="e-1") == [key_id]
        assert not any(k.startswith("store/keys/ids/") for k in self.bucket.keys())
        assert ks.destruction("s-a")["how"] == "key objects deleted"

    def test_a_creation_that_loses_to_a_destruction_refuses_and_leaves_no_key(self, tmp_path):
        """The race the subject object settles: a destroy lands between a creation's key put and
        its conditional update of the subject object."""
        ks, other = self.make(tmp_path), self.make(tmp_path)
        real_create = ks.files.create

        def create_then_destroy(key, data):
            real_create(key, data)
            other.destroy("s-race", erasure_id="e-2")

        ks.files = type("Files", (), {"__getattr__": lambda _, name: getattr(other.files, name),
                                      "create": staticmethod(create_then_destroy)})()
        with pytest.raises(ErasedSubjectError):
            ks.get_or_create("s-race")
        assert not any(k.startswith("store/keys/ids/") for k in self.bucket.keys())
