"""Filtered vs unfiltered search latency on the refold vector index (exact and HNSW).

Synthetic unit vectors with refold's real metadata frame: ``clustered`` (default: 1,000 topic
centres plus noise, shaped like sentence embeddings, which HNSW handles well) or ``random``
(uniform on the sphere: no structure at all, HNSW's worst case); every filtered search ranks only the ids its filter allows (pre-filtering). For each
backend it prints the per-query latency of:

* ``unfiltered``      a plain faiss search;
* ``keep 50%``        faiss with an IDSelectorBatch in its SearchParameters;
* ``keep 1%``         the automatic switch: exact inner products over just the allowed vectors;
* ``keep 1% forced``  (HNSW only) HNSW with the selector and no switch, to show why the switch exists;

as a ratio to the unfiltered search of the same backend (measured in the same run), with recall@k
against brute force over the allowed ids. It also times building a candidate set from the
metadata (a polars filter; cached per filter by a Retriever).

    python benchmarks/search.py [--n 100000] [--dim 384] [--queries 200] [--k 10] [--threads 1]
                                [--data clustered|random] [--quick] [--json]

``--threads`` sets faiss's OpenMP threads for the searches (default 1: one query at a time is
latency-bound, and on a busy 2-core machine OpenMP threads spinning for a core made a flat search
~40x slower); index builds use faiss's default.

``--quick``: 10,000 vectors and 30 queries (what tests/test_benchmarks_search.py runs).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import polars as pl

from refold.fold.embed import FACT_SCHEMA
from refold.search.retriever import filter_expr
from refold.storage.index import Candidates, Tuning, VectorIndex


def build(n: int, dim: int, backend: str, vectors: np.ndarray, tuning: Tuning,
          search_threads: int) -> tuple[VectorIndex, float]:
    ids = np.arange(1, n + 1, dtype=np.int64)
    rng = np.random.default_rng(5)
    meta = pl.DataFrame({
        "id": ids, "key": [f"f{i}" for i in ids], "tenant": rng.choice(["a", "b"], size=n),
        "subject": "s", "relation": "r", "object": "o", "text": [f"t{i}" for i in ids],
        "text_hash": [f"h{i}" for i in ids], "valid_from": None,
        "valid_to": None, "recorded_seq": ids, "derivation": "extracted",
        "sources": [[f"e{i}"] for i in ids], "restricted": False, "readers": [[] for _ in ids],
        "closer_restricted": False, "closer_readers": [[] for _ in ids],
    }, schema_overrides=FACT_SCHEMA).select(list(FACT_SCHEMA)).cast(FACT_SCHEMA)
    ix = VectorIndex.empty(dim, FACT_SCHEMA, backend=backend, tuning=tuning)
    lookup = {f"t{i}": row for i, row in zip(ids, vectors)}
    start = time.perf_counter()
    ix.sync(meta, lambda texts: np.stack([lookup[t] for t in texts]))
    took = time.perf_counter() - start
    if search_threads:
        import faiss

        faiss.omp_set_num_threads(search_threads)
    return ix, took


def timed(ix: VectorIndex, queries: np.ndarray, k: int, cands: Candidates | None) -> tuple[float, list]:
    ix.search(queries[:1], k, candidates=cands)  # warm: selector / subset matrix built once
    start = time.perf_counter()
    hits = [ix.search(q, k, candidates=cands)[0] for q in queries]
    return (time.perf_counter() - start) / len(queries) * 1e3, hits


def recall(hits: list, vectors: np.ndarray, queries: np.ndarray, allowed: np.ndarray, k: int) -> float:
    sub = vectors[allowed - 1]
    got = 0
    for h, q in zip(hits, queries):
        truth = allowed[np.argsort(-(sub @ q))[:k]]
        got += len(set(h.ids.tolist()) & set(truth.tolist()))
    return got / (k * len(queries))


def _vectors(n: int, dim: int, data: str, rng: np.random.Generator) -> np.ndarray:
    if data == "random":
        return rng.standard_normal((n, dim)).astype(np.float32)
    centres = rng.standard_normal((1000, dim)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    noise = rng.standard_normal((n, dim)).astype(np.float32) * (0.6 / np.sqrt(dim))
    return centres[rng.integers(len(centres), size=n)] + noise


def _strategies(hits: list) -> str:
    """The strategy used, with a count when queries differed (HNSW redoes short answers exactly)."""
    counts: dict[str, int] = {}
    for h in hits:
        counts[h.strategy] = counts.get(h.strategy, 0) + 1
    if len(counts) == 1:
        return next(iter(counts))
    return "+".join(f"{name}:{n}" for name, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def run(n: int, dim: int, nq: int, k: int, *, data: str = "clustered", threads: int = 1,
        backends: tuple[str, ...] = ("flat", "hnsw")) -> dict:
    import faiss

    default_threads = faiss.omp_get_max_threads()
    rng = np.random.default_rng(0)
    vectors = _vectors(n, dim, data, rng)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries = vectors[rng.integers(n, size=nq)] + 0.05 * rng.standard_normal((nq, dim)).astype(np.float32)
    queries = (queries / np.linalg.norm(queries, axis=1, keepdims=True)).astype(np.float32)
    half = np.sort(rng.choice(np.arange(1, n + 1), size=n // 2, replace=False))
    one = np.sort(rng.choice(np.arange(1, n + 1), size=max(k, n // 100), replace=False))
    out: dict = {"n": n, "dim": dim, "queries": nq, "k": k, "data": data, "threads": threads, "rows": []}
    for backend in backends:
        faiss.omp_set_num_threads(default_threads)
        ix, build_s = build(n, dim, backend, vectors, Tuning(), threads)
        out[f"build_{backend}_s"] = round(build_s, 2)
        base_ms, base_hits = timed(ix, queries, k, None)
        cases = [("unfiltered", None, base_ms, base_hits, np.arange(1, n + 1))]
        for label, allowed in (("keep 50%", half), ("keep 1%", one)):
            ms, hits = timed(ix, queries, k, Candidates(allowed))
            cases.append((label, allowed, ms, hits, allowed))
        if backend == "hnsw":
            forced = VectorIndex(ix.index, ix.meta, backend="hnsw", tuning=Tuning(exact_max=0, exact_share=0.0))
            ms, hits = timed(forced, queries, k, Candidates(one))
            cases.append(("keep 1% forced", one, ms, hits, one))
        for label, _, ms, hits, allowed in cases:
            out["rows"].append({
                "backend": backend, "filter": label, "strategy": _strategies(hits), "kept": int(len(allowed)),
                "ms_per_query": round(ms, 3), "ratio_vs_unfiltered": round(ms / base_ms, 2),
                "recall_at_k": round(recall(hits, vectors, queries, allowed, k), 3),
                "empty_slots": int(sum(k - len(h.ids) for h in hits)),
            })
    # the metadata side: building one candidate set with the same predicate a Retriever uses
    meta = ix.meta
    expr = filter_expr("facts", tenant="a", principal="bob", valid_at=None, history=False)
    start = time.perf_counter()
    for _ in range(5):
        Candidates(meta.filter(expr)["id"].to_numpy())
    out["candidate_set_ms"] = round((time.perf_counter() - start) / 5 * 1e3, 2)
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1, help="faiss OpenMP threads (0: faiss's default)")
    parser.add_argument("--data", choices=["clustered", "random"], default="clustered")
    parser.add_argument("--backends", default="flat,hnsw", help="comma-separated: flat, hnsw")
    parser.add_argument("--quick", action="store_true", help="10,000 vectors, 30 queries")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    n, nq = (10_000, 30) if args.quick else (args.n, args.queries)
    result = run(n, args.dim, nq, args.k, data=args.data, threads=args.threads,
                 backends=tuple(b.strip() for b in args.backends.split(",") if b.strip()))
    if args.json:
        print(json.dumps(result))
        return result
    builds = ", ".join(f"{b} {result[f'build_{b}_s']} s" for b in ("flat", "hnsw") if f"build_{b}_s" in result)
    print(f"{n} {args.data} vectors x {args.dim} dims, {nq} queries, k={args.k}, "
          f"faiss search threads {args.threads or 'default'}; build {builds}")
    print(f"{'backend':8} {'filter':16} {'strategy':32} {'kept':>7} {'ms/query':>9} {'ratio':>6} {'recall':>7} {'empty':>6}")
    for r in result["rows"]:
        print(f"{r['backend']:8} {r['filter']:16} {r['strategy']:32} {r['kept']:>7} {r['ms_per_query']:>9.3f} "
              f"{r['ratio_vs_unfiltered']:>6.2f} {r['recall_at_k']:>7.3f} {r['empty_slots']:>6}")
    print(f"candidate set from metadata (tenant + principal + current), uncached: {result['candidate_set_ms']} ms")
    return result


if __name__ == "__main__":
    main()
