"""The local S3 API fixture (tests/object_store.py) carries a Delta table through delta-rs."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError


def test_a_delta_table_round_trips_through_the_local_s3_api(s3_bucket):
    uri = f"{s3_bucket.uri}/events"
    opts = s3_bucket.storage_options
    write_deltalake(uri, pa.table({"seq": [0, 1], "content": ["a", "b"]}), storage_options=opts)
    write_deltalake(uri, pa.table({"seq": [2], "content": ["c"]}), mode="append", storage_options=opts)

    table = DeltaTable(uri, storage_options=opts)
    assert table.version() == 1
    assert sorted(table.to_pyarrow_table().column("seq").to_pylist()) == [0, 1, 2]
    # the objects really are in the bucket, not on a local disk
    assert "events/_delta_log/00000000000000000000.json" in s3_bucket.keys()
    # conditional put works: a writer opened at an old version is refused, not rebased
    stale = DeltaTable(uri, version=0, storage_options=opts)
    with pytest.raises(CommitFailedError):
        write_deltalake(stale, pa.table({"seq": [9], "content": ["x"]}), mode="append",
                        storage_options=opts, commit_properties=CommitProperties(max_commit_retries=0))


def test_each_test_gets_its_own_empty_bucket(s3_bucket, moto_server):
    assert s3_bucket.keys() == []
    names = [b["Name"] for b in moto_server.client("s3").list_buckets()["Buckets"]]
    assert s3_bucket.name in names and len(s3_bucket.name) >= 3
