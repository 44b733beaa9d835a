"""The vector index of a store in a bucket (the local S3 API, moto, in its own process) is kept
there as objects: a search saves it, a later process loads it instead of re-embedding, and an
erasure purges X's vectors from the objects (no index object holds X's canaries afterwards)."""

from __future__ import annotations

import pytest

import refold
from refold.erasure.scan import scan_report
from tests.moto_process import moto_process, new_bucket  # noqa: F401

EMB = "hashing"
CANARIES = ["Quuxville", "Zorblatt"]


@pytest.mark.search
def test_the_index_lives_in_the_bucket_and_erasure_purges_it(moto_process):
    bucket = new_bucket(moto_process)
    root, opts = f"{bucket.uri}/idx", bucket.storage_options
    mem = refold.init(root, storage_options=opts)
    mem.append([
        {"kind": "chat_turn", "content": "Xena: I live in Quuxville.", "source": "chat#1", "subjects": ["s-x"]},
        {"kind": "chat_turn", "content": "Xena: I work at Zorblatt.", "source": "chat#2", "subjects": ["s-x"]},
        {"kind": "chat_turn", "content": "Bob: I live in Rome.", "source": "chat#4"},
    ])
    mem.fold()
    built = mem.index(embedder=EMB)  # builds and saves the index
    assert built.report.embedded > 0
    assert "Quuxville" in mem.search("Xena lives in Quuxville", k=10, embedder=EMB)["object"].to_list()
    index_keys = [k for k in bucket.keys() if k.startswith("idx/index/")]
    assert any(k.endswith("manifest.json") for k in index_keys) and any(k.endswith(".faiss") for k in index_keys)

    again = refold.open(root, storage_options=opts).index(embedder=EMB)
    assert again.report.embedded == 0 and again.report.path.startswith(f"{root}/index/")  # loaded, not rebuilt

    receipt = mem.erase("s-x", canaries=CANARIES)
    assert any(p["store"] == "index" and p["rows"] > 0 for p in receipt.purged)
    assert receipt.scan["hits"] == []
    hits = scan_report(root, canaries=CANARIES, storage_options=opts).hits
    assert not [h for h in hits if h.file.startswith("index/")]
    frame = mem.search("Quuxville", k=10, embedder=EMB)
    assert "Quuxville" not in " ".join(frame["text"].to_list())
