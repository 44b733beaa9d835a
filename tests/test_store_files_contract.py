"""The side-file port (refold.storage.files.objects): one contract, run against each adapter.

Every adapter — a local folder (LocalFiles) and a bucket on the local S3 API (ObjectFiles over
obstore, talking to moto) — passes the same tests, so the side files behave alike wherever a
store lives.
"""

from __future__ import annotations

import json
import stat
from concurrent.futures import ThreadPoolExecutor

import pytest

from refold import StoreError
from refold.storage.files.objects import LocalFiles, ObjectExistsError, ObjectFiles, StoreFiles, store_files


class StoreFilesContract:
    """Subclassed once per adapter; ``files`` is a fresh, empty store root."""

    @pytest.fixture
    def files(self) -> StoreFiles:  # pragma: no cover - overridden
        raise NotImplementedError

    def test_a_missing_key_reads_as_none_and_does_not_exist(self, files):
        assert files.get("store.json") is None
        assert files.get_json("receipts/heads/x.json") is None
        assert not files.exists("store.json")

    def test_put_replaces_and_reads_back(self, files):
        assert isinstance(files, StoreFiles)
        files.put("store.json", b"one")
        files.put("store.json", b"two")
        assert files.get("store.json") == b"two" and files.exists("store.json")
        files.put_json("a/b/c.json", {"x": [1, 2]})
        assert files.get_json("a/b/c.json") == {"x": [1, 2]}
        assert files.get_text("a/b/c.json").startswith("{")

    def test_create_refuses_an_existing_key_and_keeps_the_first(self, files):
        files.create("receipts/heads/1.json", b"first")
        with pytest.raises(ObjectExistsError, match="already exists"):
            files.create("receipts/heads/1.json", b"second")
        assert files.get("receipts/heads/1.json") == b"first"

    def test_only_one_of_many_concurrent_creates_wins(self, files):
        def attempt(i):
            try:
                files.create("heads/race.json", str(i).encode())
                return i
            except ObjectExistsError:
                return None

        with ThreadPoolExecutor(6) as pool:
            winners = [w for w in pool.map(attempt, range(6)) if w is not None]
        assert len(winners) == 1
        assert files.get("heads/race.json") == str(winners[0]).encode()

    def test_concurrent_updates_lose_nothing(self, files):
        def add(i):
            files.update("subjects.json", lambda old: json.dumps([*json.loads(old or b"[]"), i]).encode())

        with ThreadPoolExecutor(4) as pool:
            list(pool.map(add, range(8)))
        assert sorted(files.get_json("subjects.json")) == list(range(8))
        files.update("subjects.json", lambda old: None)  # None: leave it
        assert len(files.get_json("subjects.json")) == 8

    def test_list_is_recursive_sorted_and_limited_to_the_prefix(self, files):
        for key in ("receipts/b.json", "receipts/heads/2.json", "receipts/a.json", "receiptsX/z", "keys/k"):
            files.put(key, b"x")
        assert files.list("receipts") == ["receipts/a.json", "receipts/b.json", "receipts/heads/2.json"]
        assert files.list("nothing") == []
        assert "keys/k" in files.list()

    def test_delete_removes_and_tolerates_a_missing_key(self, files):
        files.put("keys/subject", b"secret")
        files.delete("keys/subject")
        files.delete("keys/subject")
        assert files.get("keys/subject") is None and files.list("keys") == []


class TestLocalFiles(StoreFilesContract):
    @pytest.fixture
    def files(self, tmp_path):
        root = tmp_path / "store"
        root.mkdir(mode=0o700)
        return store_files(str(root))

    def test_files_and_folders_get_the_store_private_modes(self, files):
        assert isinstance(files, LocalFiles)
        files.put("receipts/heads/a.json", b"x")
        files.create("receipts/heads/b.json", b"y")
        for key in ("receipts/heads/a.json", "receipts/heads/b.json"):
            assert stat.S_IMODE(files.path(key).stat().st_mode) == 0o600
        assert stat.S_IMODE(files.path("receipts/heads").stat().st_mode) == 0o700
        assert [p.name for p in files.path("receipts/heads").iterdir()] != [] and not any(
            p.name.startswith(".tmp-") for p in files.path("receipts/heads").iterdir())

    def test_file_uri_is_the_same_folder(self, tmp_path):
        store_files(f"file://{tmp_path}").put("x.json", b"1")
        assert (tmp_path / "x.json").read_bytes() == b"1"


class TestObjectFiles(StoreFilesContract):
    @pytest.fixture
    def files(self, s3_bucket):
        return store_files(f"{s3_bucket.uri}/prefix", s3_bucket.storage_options)

    def test_objects_land_under_the_prefix_in_the_bucket(self, files, s3_bucket):
        assert isinstance(files, ObjectFiles)
        files.put("store.json", b"{}")
        assert s3_bucket.keys() == ["prefix/store.json"]

    def test_a_missing_bucket_is_named_in_the_error(self, s3_bucket):
        files = ObjectFiles(f"{s3_bucket.uri}-missing/p", s3_bucket.storage_options)
        with pytest.raises(StoreError, match=r"s3://refold-test-\w+-missing/p/store.json.*bucket does not exist"):
            files.put("store.json", b"{}")

    def test_an_unknown_setting_is_named_when_the_store_opens(self, s3_bucket):
        opts = {**s3_bucket.storage_options, "AWS_NO_SUCH_SETTING": "1"}
        with pytest.raises(StoreError, match=r"cannot open s3://.*aws_no_such_setting.*storage_options"):
            ObjectFiles(f"{s3_bucket.uri}/p", opts)

    def test_delta_only_and_client_settings_are_accepted(self, s3_bucket):
        """deltalake's storage_options mix store, HTTP-client and commit-locking keys: the same
        dict must configure the side files (the client keys go to obstore's client options)."""
        opts = {**s3_bucket.storage_options, "AWS_S3_LOCKING_PROVIDER": "dynamodb", "timeout": "30s",
                "max_retries": "4", "retry_timeout": "60s", "backoff_config.init_backoff": "200ms",
                "connect_timeout": "10s"}
        files = ObjectFiles(f"{s3_bucket.uri}/p", opts)
        files.put("x", b"1")
        assert files.get("x") == b"1"
