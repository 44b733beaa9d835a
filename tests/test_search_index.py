"""The faiss index on its own: incremental sync, strategies (full, selector, exact subset, HNSW
switch), files, purge. Real faiss; random unit vectors or the hashing embedder (index logic only)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from refold.search.embedders import HashingEmbedder, get_embedder
from refold.fold.embed import FACT_SCHEMA, check_vectors, fact_sentence, readers_of, stable_id, text_hash
from refold.fold.errors import StoreError, ValidationError
from refold.storage.index import Candidates, Tuning, VectorIndex
from refold.storage.layout import Layout
from refold.storage.index import IndexStore

DIM = 32


def _items(n: int, *, start: int = 0, texts: dict[int, str] | None = None, valid_to=None) -> pl.DataFrame:
    rows = []
    for i in range(start, start + n):
        text = (texts or {}).get(i, f"item {i}")
        rows.append({"id": stable_id(f"f{i}"), "key": f"f{i}", "tenant": "t", "subject": f"s{i}",
                     "relation": "r", "object": f"o{i}", "text": text, "text_hash": text_hash(text),
                     "valid_from": None, "valid_to": valid_to, "recorded_seq": i, "derivation": "extracted",
                     "sources": [f"e{i}"], "restricted": False, "readers": []})
    return pl.DataFrame(rows, schema=FACT_SCHEMA)


class Counting:
    """Random-but-fixed unit vector per text; counts how many texts it was asked to embed."""

    model_id, dim = "counting", DIM

    def __init__(self):
        self.calls = 0

    def embed(self, texts):
        self.calls += len(texts)
        out = np.stack([np.random.default_rng(abs(hash(t)) % 2**32).standard_normal(DIM) for t in texts]) \
            if texts else np.zeros((0, DIM))
        out = out.astype(np.float32)
        return out / np.linalg.norm(out, axis=1, keepdims=True) if len(texts) else out


@pytest.mark.parametrize("backend", ["flat", "hnsw"])
@pytest.mark.search
def test_sync_embeds_only_new_or_reworded_items(backend):
    emb = Counting()
    ix = VectorIndex.empty(DIM, FACT_SCHEMA, backend=backend)
    s = ix.sync(_items(50), emb.embed)
    assert (s.added, s.embedded, s.removed, s.kept) == (50, 50, 0, 0) and len(ix) == 50
    # 10 new items, 5 gone, 1 re-worded, every other one only gets a valid_to
    from datetime import datetime, timezone

    now = datetime(2024, 1, 1, tzinfo=timezone.utc)
    nxt = _items(55, start=5, texts={7: "item 7 reworded"}, valid_to=now)
    emb.calls = 0
    s = ix.sync(nxt, emb.embed)
    assert (s.added, s.embedded, s.removed, s.kept) == (11, 11, 6, 44)
    assert emb.calls == 11 and len(ix) == 55
    assert ix.meta["valid_to"].null_count() == 0  # metadata replaced wholesale
    got = ix.vectors(np.array([stable_id("f7")]))[0]
    assert np.allclose(got, emb.embed(["item 7 reworded"])[0], atol=1e-6)


@pytest.mark.search
def test_donor_vectors_are_reused():
    emb = Counting()
    head = VectorIndex.empty(DIM, FACT_SCHEMA)
    head.sync(_items(20), emb.embed)
    past = VectorIndex.empty(DIM, FACT_SCHEMA)
    emb.calls = 0
    s = past.sync(_items(25), emb.embed, donor=head)
    assert (s.added, s.embedded) == (25, 5) and emb.calls == 5
    assert np.allclose(past.vectors(head.meta["id"].to_numpy()), head.vectors(head.meta["id"].to_numpy()))


def _random_index(n: int, backend: str, seed: int = 0, tuning: Tuning | None = None):
    rng = np.random.default_rng(seed)
    vecs = rng.standard_normal((n, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    lookup = {f"item {i}": vecs[i] for i in range(n)}
    ix = VectorIndex.empty(DIM, FACT_SCHEMA, backend=backend, tuning=tuning)
    ix.sync(_items(n), lambda texts: np.stack([lookup[t] for t in texts]))
    return ix, vecs


def _brute(vecs, q, allowed_rows, k):
    scores = vecs[allowed_rows] @ q
    order = np.argsort(-scores)[:k]
    return [stable_id(f"f{allowed_rows[i]}") for i in order]


@pytest.mark.parametrize("backend", ["flat", "hnsw"])
@pytest.mark.search
def test_strategies_rank_only_allowed_ids_and_match_brute_force(backend):
    n, k = 3000, 10
    ix, vecs = _random_index(n, backend, tuning=Tuning(exact_max=100, exact_share=0.05))
    rng = np.random.default_rng(1)
    q = vecs[rng.integers(n, size=5)] + 0.01
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    few = np.sort(rng.choice(n, size=60, replace=False))       # under exact_max → exact subset
    many = np.sort(rng.choice(n, size=1500, replace=False))    # half the index → faiss selector
    for rows, strategy in ((few, "exact-subset"), (many, f"{backend}+selector")):
        cands = Candidates(np.array([stable_id(f"f{r}") for r in rows]))
        hits = ix.search(q, k, candidates=cands)
        allowed = set(cands.ids.tolist())
        for j, h in enumerate(hits):
            assert h.strategy == strategy
            assert set(h.ids.tolist()) <= allowed and len(h.ids) == k
            if backend == "flat" or strategy == "exact-subset":
                assert h.ids.tolist() == _brute(vecs, q[j], rows, k)
    full = ix.search(q, k)
    assert all(h.strategy == backend and len(h.ids) == k for h in full)


@pytest.mark.search
def test_hnsw_switches_to_exact_under_a_restrictive_filter():
    """1% of 5,000 ids allowed: HNSW with a selector would lose recall; the switch gives exact answers."""
    n, k = 5000, 10
    ix, vecs = _random_index(n, "hnsw", tuning=Tuning(exact_max=0, exact_share=0.05))
    rows = np.arange(0, n, 100)
    cands = Candidates(np.array([stable_id(f"f{r}") for r in rows]))
    q = vecs[[3, 700, 4100]]
    for j, h in enumerate(ix.search(q, k, candidates=cands)):
        assert h.strategy == "exact-subset"
        assert h.ids.tolist() == _brute(vecs, q[j], rows, k)


@pytest.mark.search
def test_empty_candidates_and_empty_index():
    ix = VectorIndex.empty(DIM, FACT_SCHEMA)
    assert ix.search(np.ones((1, DIM), np.float32) / np.sqrt(DIM), 5)[0].ids.size == 0
    ix, _ = _random_index(50, "flat")
    assert ix.search(np.ones(DIM, np.float32) / np.sqrt(DIM), 5, candidates=Candidates(np.array([], np.int64)))[0].ids.size == 0


@pytest.mark.parametrize("backend", ["flat", "hnsw"])
@pytest.mark.search
def test_save_load_and_purge_by_source(tmp_path, backend):
    ix, vecs = _random_index(200, backend)
    ix.save(tmp_path, "facts")
    again = VectorIndex.load(tmp_path, "facts", backend=backend)
    assert len(again) == 200 and again.meta.equals(ix.meta)
    removed = again.drop_sources(["e3", "e150", "nope"])
    assert removed == 2 and len(again) == 198
    assert stable_id("f3") not in set(again.meta["id"].to_list())
    hits = again.search(vecs[3], 5)[0]
    assert stable_id("f3") not in hits.ids.tolist()


@pytest.mark.search
def test_corrupt_files_give_a_clear_error(tmp_path):
    (tmp_path / "facts.faiss").write_bytes(b"junk")
    pl.DataFrame(schema=FACT_SCHEMA).write_parquet(tmp_path / "facts.parquet")
    with pytest.raises(StoreError, match="delete the folder"):
        VectorIndex.load(tmp_path, "facts", backend="flat")


@pytest.mark.search
def test_store_purge_marks_stale_and_deletes_unreadable_folders(tmp_path):
    store = IndexStore(Layout(str(tmp_path)))
    ix, _ = _random_index(30, "flat")
    events = VectorIndex.empty(DIM, dict(ix.meta.schema))
    store.save("spec1", "m/1", {"facts": ix, "events": events}, last_seq=29, link="abc")
    bad = store.folder("spec2", "m/1")
    bad.mkdir(parents=True)
    (bad / "manifest.json").write_text("{not json")
    before = store.epoch("spec1", "m/1")
    result = store.purge(["e1", "e2"])
    assert result.store == "index" and result.rows == 2
    assert any("unreadable" in d for d in result.detail)
    assert not any("e1" in d for d in result.detail)  # detail carries counts, never ids or text
    manifest = store.manifest("spec1", "m/1")
    assert manifest["link"] == "" and manifest["counts"]["facts"] == 28
    assert store.epoch("spec1", "m/1") != before
    assert store.load("spec2", "m/1") is None


@pytest.mark.search
def test_store_purge_rewrites_only_the_kinds_that_lost_vectors(tmp_path):
    """A purge loads one kind at a time and writes a kind's files again only when it lost a
    vector: each file holds every vector of its kind (a gigabyte at 1M events)."""
    store = IndexStore(Layout(str(tmp_path)))
    facts, _ = _random_index(30, "flat")
    events, _ = _random_index(10, "flat")
    events.meta = events.meta.with_columns(pl.col("sources").list.eval(pl.lit("ev-") + pl.element()))
    store.save("spec1", "m/1", {"facts": facts, "events": events}, last_seq=29, link="abc")
    folder = store.folder("spec1", "m/1")

    def stamps():
        return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in folder.glob("*.*") if p.suffix != ".json"}

    before = stamps()
    assert store.purge(["e4"]).rows == 1  # a fact's source only
    after = stamps()
    assert after["events.faiss"] == before["events.faiss"] and after["events.parquet"] == before["events.parquet"]
    assert after["facts.faiss"] != before["facts.faiss"]
    assert store.manifest("spec1", "m/1")["counts"] == {"facts": 29, "events": 10}
    assert store.purge(["ev-e2"]).rows == 1  # an event's own text only
    assert stamps()["facts.faiss"] == after["facts.faiss"] and stamps()["events.faiss"] != after["events.faiss"]
    assert store.manifest("spec1", "m/1")["counts"] == {"facts": 29, "events": 9}


def test_readers_and_sentences():
    assert readers_of([[], []]) == (False, [])
    assert readers_of([["bob", "carol"], [], ["bob"]]) == (True, ["bob"])
    assert readers_of([["bob"], ["carol"]]) == (True, [])
    assert fact_sentence("Alice", "lives_in", "Berlin") == "Alice lives in Berlin"
    assert stable_id("x") == stable_id("x") and 0 <= stable_id("x") < 2**63


def test_hashing_embedder_contract_and_bad_embedders():
    emb = HashingEmbedder(dim=64)
    a = emb.embed(["Alice lives in Berlin", "Alice lives in Berlin", "", "zebra"])
    assert a.dtype == np.float32 and a.shape == (4, 64)
    assert np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5) and np.array_equal(a[0], a[1])
    assert float(a[0] @ emb.embed(["where does Alice live"])[0]) > float(a[0] @ a[3])
    with pytest.raises(ValidationError, match="not L2-normalised"):
        check_vectors(np.ones((2, 4)), count=2, dim=4, model_id="m")
    with pytest.raises(ValidationError, match="shape"):
        check_vectors(np.ones((2, 4)), count=3, dim=4, model_id="m")
    with pytest.raises(ValidationError, match="unknown embedder"):
        get_embedder("bert-huge")
    with pytest.raises(ValidationError, match="not an embedder"):
        get_embedder(object())


@pytest.mark.search
def test_files_from_two_different_indexes_are_refused(tmp_path):
    a, _ = _random_index(20, "flat")
    b = VectorIndex.empty(DIM, FACT_SCHEMA)
    b.sync(_items(20, start=100), Counting().embed)
    a.save(tmp_path, "facts")
    b.meta.write_parquet(tmp_path / "facts.parquet")  # same count, other ids
    with pytest.raises(StoreError, match="ids differ"):
        VectorIndex.load(tmp_path, "facts", backend="flat")
