"""Erasure and the index: after erasing X, no search (today, as_of, events, history) returns anything
of X, cached views built before the erasure are not served, and no index file holds X's canaries."""

from __future__ import annotations

from pathlib import Path

import pytest

import refold
from refold.search.retriever import purge_index

EMB = "hashing"
CANARIES = ["Quuxville", "Zorblatt"]


def _store(root: Path):
    mem = refold.init(root)
    mem.append([
        {"kind": "chat_turn", "content": "Xena: I live in Quuxville.", "source": "chat#1", "subjects": ["s-x"]},
        {"kind": "chat_turn", "content": "Xena: I work at Zorblatt.", "source": "chat#2", "subjects": ["s-x"]},
        {"kind": "chat_turn", "content": "Bob: I live in Rome.", "source": "chat#3", "subjects": ["s-x"]},
        {"kind": "chat_turn", "content": "Bob: I live in Rome.", "source": "chat#4"},
        {"kind": "chat_turn", "content": "Cy: I live in Oslo.", "source": "chat#5"},
    ])
    mem.fold()
    return mem


def _x_ids(mem) -> set[str]:
    return {e.event_id for e in mem.events() if "s-x" in e.subjects}


def _nothing_of_x(frame, x_ids: set[str]) -> bool:
    texts = " ".join(frame["text"].to_list())
    if any(c in texts for c in CANARIES):
        return False
    if "sources" in frame.columns:
        return not any(set(s) & x_ids for s in frame["sources"].to_list())
    return not set(frame["event_id"].to_list()) & x_ids


@pytest.mark.search
@pytest.mark.slow
def test_after_erasure_searching_for_the_canaries_returns_nothing_of_x(tmp_path):
    mem = _store(tmp_path / "s")
    x_ids = _x_ids(mem)
    version_before = mem.head().table_version
    before = mem.search("Xena lives in Quuxville", k=10, history=True, embedder=EMB)
    assert "Quuxville" in before["object"].to_list()
    past_view = mem.index(embedder=EMB, as_of=version_before)  # cached before the erasure
    assert "Quuxville" in past_view.search("Quuxville", k=10, history=True)["object"].to_list()

    receipt = mem.erase("s-x", canaries=CANARIES)
    assert any(p["store"] == "index" and p["rows"] > 0 for p in receipt.purged)

    for query in ["Xena lives in Quuxville", "Zorblatt", "Quuxville", "Xena"]:
        for kwargs in ({}, {"history": True}, {"kind": "events"}, {"as_of": version_before, "history": True},
                       {"as_of": version_before, "kind": "events"}):
            frame = mem.search(query, k=10, embedder=EMB, **kwargs)
            assert _nothing_of_x(frame, x_ids), (query, kwargs, frame)
    # a fact other events still support comes back, without X's event among its sources
    rome = mem.search("Bob lives in Rome", k=1, embedder=EMB)
    assert rome["object"].to_list() == ["Rome"] and not set(rome["sources"][0]) & x_ids
    # the residue scan reads every file under the store, the index folder included
    assert mem.scan(CANARIES).hits == ()
    index_bytes = b"".join(p.read_bytes() for p in (tmp_path / "s" / "index").rglob("*") if p.is_file())
    assert not any(c.encode() in index_bytes for c in CANARIES)


@pytest.mark.search
def test_purge_index_removes_vectors_and_drops_cached_views(tmp_path):
    mem = _store(tmp_path / "p")
    view = mem.index(embedder=EMB)
    x_ids = _x_ids(mem)
    result = purge_index(mem.store, sorted(x_ids))
    # fact vectors: Xena lives_in, works_at, the derived "Zorblatt employs Xena", and Bob's Rome
    # fact (X's event is one of its sources); event vectors: X's three texts
    assert result.store == "index" and result.rows == 4 + 3
    assert mem.index(embedder=EMB) is not view  # the cached view is gone
    on_disk = refold.open(tmp_path / "p")
    from refold.storage.index import IndexStore

    spec = on_disk.current_spec().hash
    loaded = IndexStore(on_disk.layout).load(spec, view.report.model_id)
    # the next search re-synced from the (unchanged) log: purge alone does not erase the log
    assert loaded is not None and loaded[0]["link"] == on_disk.head().link


@pytest.mark.search
def test_erasure_preview_counts_index_vectors_and_writes_nothing(tmp_path):
    mem = _store(tmp_path / "v")
    mem.index(embedder=EMB)
    files = {p: p.read_bytes() for p in (tmp_path / "v" / "index").rglob("*") if p.is_file()}
    plan = mem.erase("s-x", dry_run=True)
    [index] = [d for d in plan.derived if d["store"] == "index"]
    assert index["rows"] == 4 + 3 and "4 fact vector(s), 3 event vector(s) to remove" in index["detail"][0]
    assert {p: p.read_bytes() for p in (tmp_path / "v" / "index").rglob("*") if p.is_file()} == files
