"""A store made by refold 0.1 may still hold the graph engine's ``snapshots/`` folder: whole
folded graphs with names in them. 0.2 never reads it, and neither a fold nor an erasure may leave
it behind (real stores in tmp_path; the old files are written as 0.1 laid them out: JSON and
Parquet files under snapshots/<spec-hash>/)."""

from __future__ import annotations

import refold


def _old_store(tmp_path) -> refold.Memory:
    mem = refold.init(tmp_path / "store")
    mem.register_subject("s-ada", "Ada Quellbrook")
    mem.append([{"kind": "memory_written", "content": "Ada Quellbrook lives in Oslo", "source": "chat#1",
                 "subjects": ["s-ada"], "justification": "she said so",
                 "fact": {"subject": "Ada Quellbrook", "relation": "lives_in", "object": "Oslo"}}])
    old = tmp_path / "store" / "snapshots" / "abc123"
    old.mkdir(parents=True)
    (old / "000000000000.json").write_text('{"nodes": [["default/ada quellbrook", {"name": "Ada Quellbrook"}]]}')
    (old / "manifest.json").write_text("{}")
    return mem


def test_an_erasure_removes_the_old_snapshot_files_and_says_so(tmp_path):
    mem = _old_store(tmp_path)
    receipt = mem.erase("s-ada")
    assert not (tmp_path / "store" / "snapshots").exists()
    assert "legacy snapshots" in [p["store"] for p in receipt.purged]
    assert not mem.scan(["Ada Quellbrook"]).hits
    assert mem.verify_receipt(receipt, needles=["Ada Quellbrook"]).ok


def test_the_first_fold_removes_them_and_later_erasures_do_not_list_them(tmp_path):
    mem = _old_store(tmp_path)
    mem.fold()
    assert not (tmp_path / "store" / "snapshots").exists()
    assert mem.facts(subject="Ada Quellbrook")["object"].to_list() == ["Oslo"]
    receipt = refold.open(tmp_path / "store").erase("s-ada")
    assert "legacy snapshots" not in [p["store"] for p in receipt.purged]
