"""The vector index: faiss vectors plus one metadata row per vector, filtered BEFORE ranking.

    ROOT/index/<spec_hash>/<model slug>/
        manifest.json                 spec hash, model id, dim, backend, log position it reflects
        facts.faiss   facts.parquet   one vector per fact (derived facts included)
        events.faiss  events.parquet  one vector per readable event text

A :class:`VectorIndex` is an ``IndexIDMap2`` over ``IndexFlatIP`` (exact, the default) or over
``IndexHNSWFlat`` (approximate, for large sets), with int64 ids from
:func:`refold.fold.embed.stable_id`, and a polars frame of metadata sorted by id.

Search takes the *candidate* ids (those the filters allow) and ranks only among them:

* no filter, or every id allowed → a plain faiss search;
* few candidates (at most ``exact_max`` ids, or under ``exact_share`` of the index) → exact inner
  products over just those vectors (numpy). HNSW under a restrictive filter loses recall and
  returns empty slots, so this switch is automatic for both backends;
* otherwise faiss searches with an ``IDSelectorBatch`` in its ``SearchParameters`` (exact for flat;
  for HNSW any query that comes back with empty slots is redone exactly).

Files are replaced atomically (temp file + rename), so a purge leaves no old copy behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import polars as pl

from refold.fold.errors import StoreError
from refold.storage.derived import PurgeResult
from refold.storage.files.modes import apply_tree, make_dirs
from refold.storage.layout import Layout, atomic_write_json

Backend = Literal["flat", "hnsw"]
BACKENDS: tuple[str, ...] = ("flat", "hnsw")
KINDS: tuple[str, ...] = ("facts", "events")
FORMAT = 1
#: purges per store root in this process: cached views built before a purge are stale
_GENERATION: dict[str, int] = {}

_INSTALL_HINT = ("install faiss with the search extra: first `pip install torch==2.13.0 --index-url "
                 "https://download.pytorch.org/whl/cpu`, then `pip install 'refold[search]'`")


def _faiss():
    try:
        import faiss
    except ImportError as exc:
        raise StoreError(f"the vector index needs faiss ({exc}); {_INSTALL_HINT}") from exc
    return faiss


@dataclass(frozen=True)
class Tuning:
    """When to switch strategies, and the HNSW parameters."""

    exact_max: int = 4096
    exact_share: float = 0.05
    hnsw_m: int = 32
    hnsw_ef_construction: int = 80
    hnsw_ef_search: int = 64


@dataclass(frozen=True)
class SyncStats:
    """What :meth:`VectorIndex.sync` did: vectors added (of which freshly embedded), removed, kept."""

    added: int = 0
    embedded: int = 0
    removed: int = 0
    kept: int = 0


@dataclass(frozen=True)
class Hits:
    """Search results for one query: ids and scores, best first, and the strategy used."""

    ids: np.ndarray
    scores: np.ndarray
    strategy: str


class Candidates:
    """The ids a filter allows (sorted), with the faiss selector or the exact-search matrix built once."""

    def __init__(self, ids: np.ndarray):
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        if ids.size > 1 and not np.all(ids[1:] > ids[:-1]):  # metadata rows come sorted by id already
            ids = np.unique(ids)
        self.ids = ids
        self._selector = None
        self._matrix: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.ids.size)

    def selector(self):
        if self._selector is None:
            self._selector = _faiss().IDSelectorBatch(self.ids)
        return self._selector

    def matrix(self, index: "VectorIndex") -> np.ndarray:
        if self._matrix is None:
            self._matrix = index.vectors(self.ids)
        return self._matrix


def _new_faiss(dim: int, backend: str, tuning: Tuning):
    faiss = _faiss()
    if backend == "flat":
        inner = faiss.IndexFlatIP(dim)
    elif backend == "hnsw":
        inner = faiss.IndexHNSWFlat(dim, tuning.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        inner.hnsw.efConstruction = tuning.hnsw_ef_construction
        inner.hnsw.efSearch = tuning.hnsw_ef_search
    else:
        raise StoreError(f"unknown index backend {backend!r}; use one of {', '.join(BACKENDS)}")
    return faiss.IndexIDMap2(inner)


def _top_k(scores: np.ndarray, ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Best ``k`` of one query's scores, ties broken by id (deterministic)."""
    if scores.size > k:
        part = np.argpartition(-scores, k - 1)[:k]
        cut = scores[part].min()
        part = np.flatnonzero(scores >= cut)  # keep every tie at the boundary, then order
    else:
        part = np.arange(scores.size)
    order = np.lexsort((ids[part], -scores[part]))[:k]
    return ids[part][order], scores[part][order]


class VectorIndex:
    """One faiss index and its metadata rows (``meta`` has ``id``, ``text``, ``text_hash``, ...)."""

    def __init__(self, index, meta: pl.DataFrame, *, backend: str, tuning: Tuning | None = None):
        self.index = index
        self.meta = meta.sort("id")
        self.backend = backend
        self.tuning = tuning or Tuning()
        self._ids = self.meta["id"].to_numpy()
        if index.ntotal != self.meta.height:
            raise StoreError(f"index holds {index.ntotal} vectors but {self.meta.height} metadata rows")

    @classmethod
    def empty(cls, dim: int, schema: dict, *, backend: str = "flat", tuning: Tuning | None = None) -> "VectorIndex":
        tuning = tuning or Tuning()
        return cls(_new_faiss(dim, backend, tuning), pl.DataFrame(schema=schema), backend=backend, tuning=tuning)

    @property
    def dim(self) -> int:
        return int(self.index.d)

    def __len__(self) -> int:
        return int(self.index.ntotal)

    def vectors(self, ids: np.ndarray) -> np.ndarray:
        """The stored vectors of ``ids`` (each must be present)."""
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        if ids.size == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self.index.reconstruct_batch(ids)

    def rows(self, ids: np.ndarray) -> pl.DataFrame:
        """Metadata rows of ``ids`` in the given order."""
        pos = np.searchsorted(self._ids, ids)
        return self.meta[pos.tolist()] if len(pos) else self.meta.clear()

    # -- updating -------------------------------------------------------------------------------

    def sync(self, items: pl.DataFrame, embed: Callable[[list[str]], np.ndarray], *,
             donor: "VectorIndex | None" = None) -> SyncStats:
        """Make this index hold exactly ``items`` (same columns as ``meta``), in place.

        Vectors whose id and text are unchanged stay; new or re-worded items take their vector
        from ``donor`` when it holds the same text, else from ``embed``; the rest are removed.
        Metadata is replaced wholesale (validity and provenance live there, not in the vectors).
        """
        items = items.sort("id")
        old = self.meta.select("id", "text_hash")
        kept = old.join(items.select("id", "text_hash"), on=["id", "text_hash"], how="semi")["id"].to_numpy()
        gone = np.setdiff1d(self._ids, kept, assume_unique=True)
        new = items.join(old, on=["id", "text_hash"], how="anti")
        vectors = np.zeros((new.height, self.dim), dtype=np.float32)
        todo = np.ones(new.height, dtype=bool)
        if donor is not None and new.height:
            have = new.select("id", "text_hash").with_row_index("pos").join(
                donor.meta.select("id", "text_hash"), on=["id", "text_hash"], how="semi")
            if have.height:
                pos = have["pos"].to_numpy()
                vectors[pos] = donor.vectors(have["id"].to_numpy())
                todo[pos] = False
        if todo.any():
            texts = new.filter(pl.Series(todo))["text"].to_list()
            vectors[todo] = embed(texts)
        new_ids = new["id"].to_numpy()
        if gone.size and self.backend == "hnsw":
            # HNSW graphs cannot drop nodes: rebuild from the vectors that stay
            keep_vecs = self.vectors(kept)
            self.index = _new_faiss(self.dim, self.backend, self.tuning)
            if kept.size:
                self.index.add_with_ids(keep_vecs, kept)
        elif gone.size:
            self.index.remove_ids(_faiss().IDSelectorBatch(np.ascontiguousarray(gone)))
        if new.height:
            self.index.add_with_ids(vectors, np.ascontiguousarray(new_ids, dtype=np.int64))
        self.meta = items
        self._ids = items["id"].to_numpy()
        return SyncStats(added=new.height, embedded=int(todo.sum()), removed=int(gone.size), kept=int(kept.size))

    def drop_sources(self, event_ids: Iterable[str]) -> int:
        """Remove every vector built from any of ``event_ids``; return how many went."""
        wanted = sorted(set(event_ids))
        if not wanted or not len(self):
            return 0
        hit = self.meta.filter(pl.col("sources").list.eval(pl.element().is_in(wanted)).list.any())
        if hit.height:
            self.sync(self.meta.join(hit.select("id"), on="id", how="anti"),
                      lambda texts: np.zeros((len(texts), self.dim), np.float32))
        return hit.height

    def rebuilt(self, backend: str) -> "VectorIndex":
        """A copy with another backend (same vectors and metadata)."""
        out = VectorIndex.empty(self.dim, dict(self.meta.schema), backend=backend, tuning=self.tuning)
        out.sync(self.meta, lambda texts: np.zeros((len(texts), self.dim), np.float32), donor=self)
        return out

    # -- searching ------------------------------------------------------------------------------

    def search(self, queries: np.ndarray, k: int, *, candidates: Candidates | None = None) -> list[Hits]:
        """Top ``k`` per query among ``candidates`` (all ids when None)."""
        queries = np.ascontiguousarray(np.atleast_2d(queries), dtype=np.float32)
        n = len(self)
        none = [Hits(np.zeros(0, np.int64), np.zeros(0, np.float32), "empty") for _ in queries]
        if n == 0 or k <= 0 or (candidates is not None and len(candidates) == 0):
            return none
        if candidates is None or len(candidates) == n:
            return self._faiss_search(queries, min(k, n), params=None, strategy=self.backend)
        c = len(candidates)
        if c <= self.tuning.exact_max or c < self.tuning.exact_share * n:
            return self._exact(queries, k, candidates)
        faiss = _faiss()
        if self.backend == "hnsw":
            params = faiss.SearchParametersHNSW(sel=candidates.selector(),
                                                efSearch=max(self.tuning.hnsw_ef_search, 2 * k))
        else:
            params = faiss.SearchParameters(sel=candidates.selector())
        hits = self._faiss_search(queries, min(k, c), params=params, strategy=f"{self.backend}+selector")
        if self.backend == "hnsw":
            short = [i for i, h in enumerate(hits) if h.ids.size < min(k, c)]
            if short:  # HNSW ran out of reachable candidates: redo those queries exactly
                redo = self._exact(queries[short], k, candidates)
                for i, h in zip(short, redo):
                    hits[i] = h
        return hits

    def _faiss_search(self, queries: np.ndarray, k: int, *, params, strategy: str) -> list[Hits]:
        scores, ids = self.index.search(queries, k, params=params) if params is not None else self.index.search(queries, k)
        out = []
        for s, i in zip(scores, ids):
            ok = i >= 0
            i, s = _top_k(s[ok], i[ok], k)  # stable order among ties
            out.append(Hits(i, s, strategy))
        return out

    def _exact(self, queries: np.ndarray, k: int, candidates: Candidates) -> list[Hits]:
        matrix = candidates.matrix(self)
        all_scores = matrix @ queries.T  # (candidates, queries)
        return [Hits(*_top_k(all_scores[:, j], candidates.ids, k), "exact-subset") for j in range(queries.shape[0])]

    # -- files ----------------------------------------------------------------------------------

    def save(self, folder: Path, kind: str) -> None:
        make_dirs(folder)
        _atomic(folder / f"{kind}.faiss", lambda tmp: _faiss().write_index(self.index, tmp))
        _atomic(folder / f"{kind}.parquet", lambda tmp: self.meta.write_parquet(tmp))
        apply_tree(folder)  # faiss and polars create files with the process umask

    @classmethod
    def load(cls, folder: Path, kind: str, *, backend: str, tuning: Tuning | None = None) -> "VectorIndex":
        try:
            faiss = _faiss()
            index = faiss.read_index(str(folder / f"{kind}.faiss"))
            meta = pl.read_parquet(folder / f"{kind}.parquet")
            stored = np.sort(faiss.vector_to_array(index.id_map))
            if not np.array_equal(stored, np.sort(meta["id"].to_numpy())):
                # e.g. two writers interleaved their files: never pair vectors with the wrong rows
                raise StoreError("the vector ids and the metadata ids differ")
            return cls(index, meta, backend=backend, tuning=tuning)
        except (OSError, RuntimeError, AttributeError, StoreError, pl.exceptions.PolarsError) as exc:
            raise StoreError(f"cannot read the {kind} index under {folder}: {exc}; it is derived, "
                             "delete the folder and search again to rebuild it") from exc


def _atomic(path: Path, write: Callable[[str], Any]) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def generation(index_root: str | Path) -> int:
    """How many purges this process ran on the index folder ``index_root``."""
    return _GENERATION.get(str(Path(str(index_root).removeprefix("file://")).resolve()), 0)


def _bump(index_root: Path) -> None:
    key = str(index_root.resolve())
    _GENERATION[key] = _GENERATION.get(key, 0) + 1


def events_through(manifest: dict[str, Any]) -> tuple[int, str]:
    """(seq, link) of the log position whose events the stored events index holds (less those
    purged since): the saved position, kept across purges (which mark ``last_seq`` stale);
    (-1, "") when unknown (an index saved before this was recorded)."""
    seq, link = manifest.get("events_through") or (manifest.get("last_seq", -1), manifest.get("link", ""))
    return int(seq), str(link)


def model_slug(model_id: str) -> str:
    """A folder name for a model id: readable part plus a short hash (ids may contain '/')."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "-", model_id).strip("-")[:60]
    return f"{readable}-{hashlib.sha256(model_id.encode()).hexdigest()[:8]}"


class IndexStore:
    """The ``index/`` folder of a store: one sub-folder per (spec hash, embedder model id)."""

    def __init__(self, layout: Layout):
        if not layout.is_local:
            raise StoreError(f"{layout.root} is on object storage: use index_store(layout) (its index/ is objects)")
        self.root = Path(layout.index.removeprefix("file://"))

    def epoch(self, spec_hash: str, model_id: str) -> tuple[int, int | None]:
        """Changes whenever a purge touched this index (in this process or, via the manifest, in
        another one); in-memory views built under another epoch must not be used."""
        manifest = self.manifest(spec_hash, model_id)
        return generation(self.root), (manifest or {}).get("epoch")

    def folder(self, spec_hash: str, model_id: str) -> Path:
        return self.root / spec_hash / model_slug(model_id)

    def location(self, spec_hash: str, model_id: str) -> str:
        """Where the index of (spec, model) is kept, for a report."""
        return str(self.folder(spec_hash, model_id))

    def manifest(self, spec_hash: str, model_id: str) -> dict[str, Any] | None:
        try:
            return json.loads((self.folder(spec_hash, model_id) / "manifest.json").read_text())
        except (OSError, ValueError):
            return None

    def load(self, spec_hash: str, model_id: str, *, tuning: Tuning | None = None) -> tuple[dict, dict[str, VectorIndex]] | None:
        """The manifest and both indexes, or None when absent or unreadable (it is rebuilt)."""
        manifest = self.manifest(spec_hash, model_id)
        if manifest is None or manifest.get("format") != FORMAT:
            return None
        folder = self.folder(spec_hash, model_id)
        try:
            return manifest, {k: VectorIndex.load(folder, k, backend=manifest["backend"], tuning=tuning) for k in KINDS}
        except (StoreError, KeyError):
            return None

    def save(self, spec_hash: str, model_id: str, indexes: dict[str, VectorIndex], *,
             last_seq: int, link: str, erasure: str = "") -> dict[str, Any]:
        """Write both indexes and then the manifest: the log position they reflect and the
        erasure epoch their items were read under (``erasure``, ``Memory.erasure_epoch``: in
        shred mode it names the erased markers, so an index saved before a key was destroyed is
        brought up to date before it serves)."""
        folder = self.folder(spec_hash, model_id)
        epoch = int((self.manifest(spec_hash, model_id) or {}).get("epoch", 0))
        # a crash between files leaves the manifest's position stale, so the next search resyncs
        (folder / "manifest.json").unlink(missing_ok=True)
        for kind, index in indexes.items():
            index.save(folder, kind)
        manifest = {
            "format": FORMAT, "spec_hash": spec_hash, "model_id": model_id,
            "dim": indexes["facts"].dim, "backend": indexes["facts"].backend,
            "last_seq": last_seq, "link": link, "counts": {k: len(v) for k, v in indexes.items()},
            "epoch": epoch, "events_through": [last_seq, link], "erasure_epoch": erasure,
        }
        atomic_write_json(folder / "manifest.json", manifest)
        return manifest

    def folders(self) -> list[Path]:
        """Every index folder under ``index/`` (with or without a readable manifest)."""
        if not self.root.exists():
            return []
        return sorted(p for spec in self.root.iterdir() if spec.is_dir() for p in spec.iterdir() if p.is_dir())

    def preview(self, event_ids: Sequence[str] | Iterable[str], *, seqs: Iterable[int] | None = None
                ) -> PurgeResult:
        """What :meth:`purge` would remove (reads metadata only, writes nothing; ``seqs``, the
        ids' log positions that the erasure plan passes every derived store, are not needed here)."""
        ids = sorted(set(event_ids))
        removed, detail = 0, []
        for folder in self.folders() if ids else []:
            rel = folder.relative_to(self.root.parent).as_posix()
            counts = {}
            for kind in KINDS:
                try:
                    meta = pl.read_parquet(folder / f"{kind}.parquet", columns=["sources"])
                except (OSError, pl.exceptions.PolarsError):
                    counts[kind] = "?"
                    continue
                counts[kind] = meta.filter(pl.col("sources").list.eval(pl.element().is_in(ids)).list.any()).height
            removed += sum(c for c in counts.values() if isinstance(c, int))
            detail.append(f"{rel}: {counts['facts']} fact vector(s), {counts['events']} event vector(s) to remove")
        return PurgeResult("index", removed, tuple(detail))

    def purge(self, event_ids: Sequence[str] | Iterable[str]) -> PurgeResult:
        """Remove every vector derived from ``event_ids`` in every index folder.

        Fact vectors whose sources include any of them and the events' own text vectors go; the
        files are rewritten (HNSW graphs rebuilt) and the manifest marked stale, so the next
        search re-syncs with the refolded state (re-adding, e.g., a fact that other events still
        support). A folder that cannot be read is deleted whole: it is derived data.
        """
        ids = sorted(set(event_ids))
        removed, detail = 0, []
        if not ids:
            return PurgeResult("index", 0)
        _bump(self.root)
        for folder in self.folders():
            rel = folder.relative_to(self.root.parent).as_posix()
            for tmp in folder.glob(".tmp-*"):
                tmp.unlink(missing_ok=True)
            counts, sizes = {}, {}
            try:
                manifest = json.loads((folder / "manifest.json").read_text())
                # one kind in memory at a time, and only a kind that lost vectors is written again
                # (each file holds every vector of its kind: ~1 GB each at 1M events)
                for kind in KINDS:
                    index = VectorIndex.load(folder, kind, backend=manifest["backend"])
                    counts[kind] = index.drop_sources(ids)
                    if counts[kind]:
                        index.save(folder, kind)
                    sizes[kind] = len(index)
                    del index
            except (OSError, ValueError, KeyError, StoreError):
                shutil.rmtree(folder)
                make_dirs(folder)  # keep a fresh epoch so other processes drop their cached views
                atomic_write_json(folder / "manifest.json", {"format": FORMAT, "epoch": time.time_ns()})
                detail.append(f"{rel}: unreadable, deleted (rebuilt on the next search)")
                continue
            # stale: the next search re-syncs the facts; the events index still holds every event
            # up to the position it was saved at, less the purged ones (events_through)
            manifest.update(events_through=events_through(manifest), last_seq=-1, link="", epoch=time.time_ns(),
                            counts=sizes)
            atomic_write_json(folder / "manifest.json", manifest)
            removed += sum(counts.values())
            detail.append(f"{rel}: {counts['facts']} fact vector(s), {counts['events']} event vector(s) removed")
        return PurgeResult("index", removed, tuple(detail))


class ObjectIndexStore(IndexStore):
    """``index/`` of a store on object storage: the same files as locally, kept as objects.

    Each operation downloads what it reads into a private temporary folder (0700), works there
    with the local code above, uploads what it wrote, and removes the folder: no copy of the
    index (derived from personal data) outlives the call outside the store. The manifest goes
    last on a save and first on a purge, so a reader never pairs a new manifest with old files.
    """

    def __init__(self, layout: Layout):
        self.files = layout.files()
        self.key = "index"
        self.uri = layout.index
        self.root = Path(tempfile.mkdtemp(prefix="refold-index-")) / "index"  # mkdtemp: 0700
        self.root.mkdir()

    def close(self) -> None:
        shutil.rmtree(self.root.parent, ignore_errors=True)

    def __del__(self) -> None:  # the working folder never outlives the object
        self.close()

    def epoch(self, spec_hash: str, model_id: str) -> tuple[int, int | None]:
        return generation(self.uri), (self.manifest(spec_hash, model_id) or {}).get("epoch")

    def location(self, spec_hash: str, model_id: str) -> str:
        return f"{self.uri}/{self.folder(spec_hash, model_id).relative_to(self.root).as_posix()}"

    def _prefix(self, folder: Path) -> str:
        return f"{self.key}/{folder.relative_to(self.root).as_posix()}"

    def _download(self, folder: Path) -> None:
        shutil.rmtree(folder, ignore_errors=True)
        make_dirs(folder)
        prefix = self._prefix(folder)
        for key in self.files.list(prefix):
            data = self.files.get(key)
            if data is not None:
                target = folder / key[len(prefix) + 1:]
                make_dirs(target.parent)
                target.write_bytes(data)

    def _upload(self, folder: Path, *, manifest_last: bool = True) -> None:
        prefix = self._prefix(folder)
        here = {p.relative_to(folder).as_posix() for p in folder.rglob("*")
                if p.is_file() and not p.name.startswith(".tmp-")}
        for name in sorted(here - {"manifest.json"}):
            self.files.put(f"{prefix}/{name}", (folder / name).read_bytes())
        for key in self.files.list(prefix):  # files the local code removed
            if key[len(prefix) + 1:] not in here:
                self.files.delete(key)
        if manifest_last and "manifest.json" in here:
            self.files.put(f"{prefix}/manifest.json", (folder / "manifest.json").read_bytes())

    def manifest(self, spec_hash: str, model_id: str) -> dict[str, Any] | None:
        try:
            return self.files.get_json(f"{self._prefix(self.folder(spec_hash, model_id))}/manifest.json")
        except ValueError:
            return None

    def load(self, spec_hash: str, model_id: str, *, tuning: Tuning | None = None):
        self._download(self.folder(spec_hash, model_id))
        try:
            return super().load(spec_hash, model_id, tuning=tuning)
        finally:
            shutil.rmtree(self.folder(spec_hash, model_id), ignore_errors=True)

    def save(self, spec_hash: str, model_id: str, indexes: dict[str, VectorIndex], *,
             last_seq: int, link: str, erasure: str = "") -> dict[str, Any]:
        folder = self.folder(spec_hash, model_id)
        make_dirs(folder)
        self.files.delete(f"{self._prefix(folder)}/manifest.json")  # stale until the new one lands
        try:
            manifest = super().save(spec_hash, model_id, indexes, last_seq=last_seq, link=link, erasure=erasure)
            self._upload(folder)
            return manifest
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def folders(self) -> list[Path]:
        names = {tuple(key.split("/")[1:3]) for key in self.files.list(self.key) if key.count("/") >= 3}
        out = []
        for spec, slug in sorted(names):
            folder = self.root / spec / slug
            self._download(folder)
            out.append(folder)
        return out

    def purge(self, event_ids: Sequence[str] | Iterable[str]) -> PurgeResult:
        ids = sorted(set(event_ids))
        if not ids:
            return PurgeResult("index", 0)
        _bump(Path(self.uri))
        try:
            result = super().purge(ids)
            for folder in self.folders_here():
                self._upload(folder)
            return result
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root.mkdir()

    def folders_here(self) -> list[Path]:
        """The folders this object downloaded (and changed) in its working folder."""
        return sorted(p for spec in self.root.iterdir() if spec.is_dir() for p in spec.iterdir() if p.is_dir())


def index_store(layout: Layout) -> IndexStore:
    """The ``index/`` of the store ``layout`` names: local files, or objects (:class:`ObjectIndexStore`)."""
    return IndexStore(layout) if layout.is_local else ObjectIndexStore(layout)
