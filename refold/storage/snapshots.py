"""Snapshots: the merged graph of a fold at a log position, per spec, stored columnar.

    snapshots/<spec_hash>/<last_seq, 12 digits>/
        nodes.parquet       entity nodes (id, tenant, name, key, aliases, roll-up summary)
        edges-NNN.parquet   merged and derived edges, every attribute (see refold.fold.snapshot_codec),
                            in buckets by subject (CRC-32 mod the bucket count) of ~8k rows each
        contained.parquet   event ids whose data the snapshot holds (erasure purges by these)
        manifest.json       written last: position (last_seq + its link), merge stats, counts,
                            a digest of the contained ids, a SHA-256 per file

A snapshot is written into a temporary folder that is renamed into place only when complete
(manifest last), so a reader never sees half of one; a folder without a readable manifest, or
whose files do not match their digests, is ignored. Roll-ups are stored with the merged graph
(recomputing them on load cost more than decoding them).

Validity (checked by the fold, :mod:`refold.folding`): the log must still hold, at ``last_seq``,
the event with the recorded ``link`` (the link commits to the whole chain up to there, and
tombstones keep links), and no event in the snapshot's contained set may have been erased.
:meth:`SnapshotStore.purge` removes every snapshot containing an erased event, plus any temporary
folder (whose contents are unknown); the erasure procedure calls it.

On object storage (``s3://`` …) the same files are objects under the same keys, through the
store-files port (:mod:`refold.storage.objects`): a snapshot is built in a private local temporary
folder exactly as above, each file is uploaded, and the manifest is created LAST (create-if-absent)
as the commit marker; readers list only positions whose manifest exists, so a half-uploaded
snapshot is never read (purge, and prune for positions older than those it keeps, delete such
leftovers). Reading downloads the files one at a time into a private temporary folder that is
removed afterwards. An erasure's in-place patch needs the local folder; on object storage the
erasure purges the snapshots holding erased events instead (:mod:`refold.erasing.snapshot_patch`).
The manifest as a value is :class:`~refold.storage.snapshot_info.SnapshotInfo`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from refold.fold.errors import StoreError
from refold.fold.graph_objects import paused_gc
from refold.fold.incremental import LiveFold
from refold.fold.snapshot_codec import (FORMAT, FORMATS, decode_graph, encode_graph,
                                        stats_from_json, stats_to_json)
from refold.fold.spec import FoldSpec
from .cache import PurgeResult
from .snapshot_buckets import BUCKET_LIST, bucket_keys, edge_buckets, event_buckets, node_index
from .snapshot_files import (Prepared, TableRead, _dictionary_columns, _edge_files, _encode,  # noqa: F401
                             _ids_digest, _on_worker, _sha256, _sorted_ids, _sorted_table, io_worker,
                             prepare_contained, read_file)
from .filemodes import apply_tree, make_dirs, modes_in
from .layout import Layout
from .objects import ObjectExistsError, StoreFiles
from .snapshot_info import SnapshotInfo

__all__ = ["Prepared", "SnapshotInfo", "SnapshotStore", "TableRead", "io_worker", "prepare_contained"]

MANIFEST = "manifest.json"
_CONTAINED_SCHEMA = pa.schema([("event_id", pa.string())])
#: format 3: each contained id with the buckets of the merged edges it is a source of or ended
_CONTAINED_INDEXED = pa.schema([("event_id", pa.string()), ("buckets", BUCKET_LIST)])
#: Edges are stored in files of about this many rows, bucketed by subject, so that a patch (an
#: erasure's) reads (through the bucket index) and rewrites only the buckets it changed and links
#: the others into the new folder. Every file costs a load ~1 ms of fixed Parquet overhead and a
#: write ~1.3 ms; a patch's rewritten bucket ~1 ms of encoding per 1k rows. At 20k events 2k-row
#: buckets (13 files) took a load's file reads from ~12-19 to ~21-29 ms; 4k (6 files) ~15-18.
BUCKET_ROWS = 4096
MAX_BUCKETS = 256


def bucket_count(edges: int) -> int:
    return max(1, min(MAX_BUCKETS, edges // BUCKET_ROWS))


def edge_bucket_count(info: "SnapshotInfo") -> int:
    """How many edge buckets ``info`` has (1 for an older single-file snapshot)."""
    return len(_edge_files(info))


class SnapshotStore:
    """The snapshots of one store (a folder per spec hash and position)."""

    def __init__(self, layout: Layout, *, storage_options: dict[str, str] | None = None):
        self.layout = layout
        self.root = Path(layout.snapshots) if layout.is_local else None
        self.storage_options = storage_options
        #: the bucket's side files (object storage only; None on a local root)
        self.objects: StoreFiles | None = None if layout.is_local else layout.files()

    @property
    def enabled(self) -> bool:
        return self.root is not None or self.objects is not None

    # -- reading --------------------------------------------------------------------------------

    def list(self, spec_hash: str | None = None) -> list[SnapshotInfo]:
        """Complete snapshots (of ``spec_hash``, or all), oldest first per spec."""
        if self.objects is not None:
            return [info for _, info in self._object_snapshots(spec_hash) if info is not None]
        if self.root is None or not self.root.exists():
            return []
        specs = [self.root / spec_hash] if spec_hash else sorted(p for p in self.root.iterdir() if p.is_dir())
        out = []
        for folder in specs:
            if not folder.is_dir():
                continue
            for snap in sorted(folder.iterdir()):
                if snap.name.startswith(".") or not snap.is_dir():
                    continue
                info = self._read_manifest(snap)
                if info is not None:
                    out.append(info)
        return out

    def _read_manifest(self, folder: Path) -> SnapshotInfo | None:
        try:
            return SnapshotInfo.from_json(json.loads((folder / MANIFEST).read_text()), str(folder))
        except (OSError, ValueError, KeyError, StoreError):
            return None  # incomplete, foreign or damaged: never used

    def spec_hashes(self) -> list[str]:
        """The spec hashes with a snapshot folder (sorted; a folder may hold no complete snapshot)."""
        if self.objects is not None:
            return sorted({key.split("/")[1] for key in self._object_keys(None)})
        if self.root is None or not self.root.exists():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith("."))

    def newest(self, spec_hash: str, *, at_most: int) -> list[SnapshotInfo]:
        """Snapshots of ``spec_hash`` with ``last_seq <= at_most``, newest first."""
        return sorted((s for s in self.list(spec_hash) if s.last_seq <= at_most),
                      key=lambda s: s.last_seq, reverse=True)

    def contained_ids(self, info: SnapshotInfo) -> set[str]:
        return set(self.contained_array(info).to_pylist())

    def contained_array(self, info: SnapshotInfo) -> pa.Array:
        """The contained event ids as an Arrow string array (sorted, as written)."""
        with self._local(info, ["contained"]) as here, pq.ParquetFile(Path(here.path) / "contained.parquet") as fh:
            return fh.read(columns=["event_id"])["event_id"].combine_chunks()

    def contained_table(self, info: SnapshotInfo) -> pa.Table:
        """The contained ids (``event_id``) and, in an indexed snapshot, each one's edge buckets
        (``buckets``), checked against the manifest digest."""
        with self._local(info, ["contained"]) as here:
            table = read_file(here, "contained", "contained", columns=list(
                (_CONTAINED_INDEXED if info.indexed else _CONTAINED_SCHEMA).names))
        assert table is not None
        return table.combine_chunks()

    def read_tables(self, info: SnapshotInfo, *, for_decode: bool = False, contained: bool = True,
                    use_threads: bool = True) -> dict[str, pa.Table]:
        """The snapshot's tables by name (nodes, edges, contained), checked against its manifest.

        The edge buckets come back as one table, bucket after bucket, and ``edge_rows`` as a
        one-column table of each bucket file's row count (so a row's bucket is known without
        hashing its key again). ``for_decode``: repetitive string columns come as Arrow
        dictionaries (faster to decode; :data:`~refold.fold.snapshot_codec.DICTIONARY_COLUMNS`).
        ``contained=False``: the contained ids are checked but not read (the caller has them).
        ``use_threads=False``: each file is decoded on the calling thread (less CPU in all; for a
        caller whose other threads keep the cores busy).
        """
        with self._local(info) as here:
            return TableRead(here, for_decode=for_decode, contained=contained, use_threads=use_threads).result()

    def load(self, info: SnapshotInfo, spec: FoldSpec) -> LiveFold:
        """A :class:`LiveFold` resumed from ``info`` (files checked against the manifest)."""
        if info.spec_hash != spec.hash:
            raise StoreError(f"snapshot {info.path} is for spec {info.spec_hash}, not {spec.hash}")
        tables = self.read_tables(info, for_decode=True)
        contained = set(tables["contained"]["event_id"].to_pylist())
        with paused_gc():  # a few hundred thousand new objects: no collector passes over them meanwhile
            graph = decode_graph(tables["nodes"], tables["edges"])
            return LiveFold.resume(spec, graph, stats_from_json(info.stats), contained=contained,
                                   link=info.link, started_from=info.last_seq)

    # -- writing --------------------------------------------------------------------------------

    def write(self, live: LiveFold) -> SnapshotInfo | None:
        """Snapshot ``live`` at its position; None when snapshots are off or it already exists."""
        if not self.enabled or live.last_seq < 0:
            return None
        if self.objects is not None:
            if self.objects.exists(f"{_key(live.spec.hash, live.last_seq)}/{MANIFEST}"):
                return None
        elif (self.root / live.spec.hash / f"{live.last_seq:012d}" / MANIFEST).exists():
            return None
        live.refresh()  # roll-ups are stored too: bring them up to date with the merged edges
        with paused_gc():  # a tuple per edge: collector passes would walk the whole folded graph
            nodes, edges = encode_graph(live.graph)
        count = bucket_count(edges.num_rows)
        which = edge_buckets(bucket_keys(edges), count)
        buckets = {b: edges.filter(pc.equal(which, b)) for b in range(count)}
        ids = _sorted_ids(live.contained)
        contained = pa.table([ids, event_buckets(edges, which, ids)], schema=_CONTAINED_INDEXED)
        args = (live.spec.hash, live.last_seq, live.link, live.builder.stats, nodes, buckets, edges.num_rows,
                contained)
        if self.objects is None:
            return self._write(*args, index=node_index(edges, which))
        with tempfile.TemporaryDirectory(prefix="refold-snapshot-") as staging:
            built = self._write(*args, index=node_index(edges, which), root=Path(staging))
            assert built is not None
            return self._upload(built)

    def replace(self, info: SnapshotInfo, *, nodes: pa.Table, contained: "list[str] | pa.Array | pa.Table | Prepared",
                stats,
                edges: pa.Table | None = None, rewrite: set[int] | None = None, bucket_of: pa.Array | None = None,
                buckets: dict[int, pa.Table] | None = None, edge_count: int | None = None,
                index: pa.Table | None = None) -> SnapshotInfo:
        """Write a new state for ``info``'s position over it (an erasure's patched snapshot).

        Either ``edges``, the whole edge table: ``rewrite`` names the edge buckets (of ``info``'s
        :func:`edge_bucket_count`) whose rows may differ, the others are linked from the old folder
        instead of written again (the same bytes); ``bucket_of``: each row's bucket when the
        caller knows it (it must equal ``edge_buckets(bucket_keys(edges), buckets)``; computed
        when None). Or, for a bucketed ``info``, ``buckets``: the new rows of just the buckets
        that changed, by number, with ``edge_count`` the rows of all of them. The new folder is
        complete before the old one is moved aside; a crash in between leaves a dot-folder that
        the next purge deletes, and no snapshot at that position.

        ``index`` (with ``contained`` a table of ids and their buckets, sorted by id): the new
        snapshot's bucket index, which makes it format 3; without, it is written as format 2.
        ``contained`` may also come encoded ahead (:func:`prepare_contained`).
        """
        if self.root is None:
            raise StoreError("snapshots are patched in place only on a local store; on object storage "
                             "the erasure purges them")
        reuse: dict[int, tuple[Path, str]] = {}
        old_files = _edge_files(info)
        bucketed = bool(old_files) and old_files[0] != "edges"
        if buckets is not None:
            if not bucketed or edge_count is None:
                raise StoreError(f"snapshot {info.path}: changed buckets need a bucketed snapshot and an edge count")
            rewrite = set(buckets)
        else:
            assert edges is not None
            edge_count = edges.num_rows
        count = len(old_files) if bucketed else bucket_count(edge_count)
        if rewrite is not None and bucketed:
            reuse = {b: (Path(info.path) / f"{old_files[b]}.parquet", info.files[old_files[b]])
                     for b in range(count) if b not in rewrite}
        if buckets is None:
            assert edges is not None
            which = bucket_of if bucketed and bucket_of is not None else edge_buckets(bucket_keys(edges), count)
            buckets = {b: edges.filter(pc.equal(which, b)) for b in range(count) if b not in reuse}
        if isinstance(contained, Prepared):
            if (index is not None) != ("buckets" in contained.table.column_names):
                raise StoreError("an indexed snapshot needs its contained ids with their buckets, an older one "
                                 "the ids alone")
        elif index is None:
            ids = contained["event_id"] if isinstance(contained, pa.Table) else contained
            contained = pa.table([_sorted_ids(ids)], schema=_CONTAINED_SCHEMA)
        elif not isinstance(contained, pa.Table):
            raise StoreError("an indexed snapshot needs its contained ids with their buckets")
        written = self._write(info.spec_hash, info.last_seq, info.link, stats, nodes, buckets, edge_count,
                              contained, replace=True, reuse=reuse, index=index)
        assert written is not None
        return written

    def _write(self, spec_hash: str, last_seq: int, link: str, stats, nodes: pa.Table,
               buckets: dict[int, pa.Table], edge_count: int, contained: "pa.Table | Prepared", *, replace: bool = False,
               reuse: dict[int, tuple[Path, str]] | None = None, index: pa.Table | None = None,
               root: Path | None = None) -> SnapshotInfo | None:
        """Write a snapshot folder: ``buckets`` (bucket number -> rows) and the ``reuse``d
        buckets' files (linked) make up its edges; ``contained``: the ids (sorted), with their
        buckets when ``index`` is given (format 3). ``root``: instead of the store's folder (a
        staging folder for an upload)."""
        root = root or self.root
        assert root is not None
        spec_dir = root / spec_hash
        final = spec_dir / f"{last_seq:012d}"
        make_dirs(spec_dir)
        tmp = spec_dir / f".tmp-{uuid.uuid4().hex}"
        tmp.mkdir(mode=0o700)
        try:
            reuse = reuse or {}
            ready = contained if isinstance(contained, Prepared) else prepare_contained(contained, encode=False)
            tables = {"nodes": nodes}
            if ready.file is None:
                tables["contained"] = ready.table
            if index is not None:
                tables["index"] = index
            tables.update((f"edges-{b:03d}", table) for b, table in sorted(buckets.items()))

            def put(name: str) -> tuple[str, str]:
                data, digest = _encode(name, tables[name])
                with open(tmp / f"{name}.parquet", "wb") as fh:
                    fh.write(data)
                return name, digest

            # the files are shared out between the worker thread and this one, largest first to
            # whichever has less so far (encoding and compressing release the GIL): a patch's
            # bucket on one side, nodes and index on the other. Size = cells (nbytes walks every
            # buffer of a sliced or concatenated table: ~0.3 ms a table)
            there: list[str] = []
            here: list[str] = []
            load = [0, 0]
            size = {name: table.num_rows * table.num_columns for name, table in tables.items()}
            for name in sorted(tables, key=lambda n: -size[n]):
                side = 0 if load[0] <= load[1] else 1
                (there if side == 0 else here).append(name)
                load[side] += size[name]
            if _on_worker():
                here, there = here + there, []
            elsewhere = io_worker().submit(lambda: [put(name) for name in there]) if there else None
            files = dict(put(name) for name in here)
            if elsewhere is not None:
                files.update(elsewhere.result())
            if ready.file is not None:  # (encoded ahead, see prepare_contained)
                with open(tmp / "contained.parquet", "wb") as fh:
                    fh.write(ready.file[0])
                files["contained"] = ready.file[1]
            for b, (source, digest) in reuse.items():
                os.link(source, tmp / f"edges-{b:03d}.parquet")  # same bytes: no copy, no rehash
                files[f"edges-{b:03d}"] = digest
            info = SnapshotInfo(
                spec_hash=spec_hash, last_seq=last_seq, link=link, path=str(final),
                stats=stats_to_json(stats), nodes=nodes.num_rows, edges=edge_count,
                contained=ready.count, contained_sha256=ready.ids_sha256,
                created_at=datetime.now(timezone.utc).isoformat(), files=files,
                format=FORMAT if index is not None else FORMATS[0],
            )
            with open(tmp / MANIFEST, "w", encoding="utf-8") as fh:  # last, and fsynced
                json.dump(info.as_json(), fh, indent=2, sort_keys=True)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, modes_in(spec_dir)[1])
            apply_tree(tmp)  # private (or the store's group modes) before it appears
            if replace and final.exists():
                aside = spec_dir / f".old-{uuid.uuid4().hex}"
                os.rename(final, aside)
                os.rename(tmp, final)
                shutil.rmtree(aside, ignore_errors=True)
                return info
            try:
                os.rename(tmp, final)  # atomic: the snapshot appears complete or not at all
            except OSError:
                if (final / MANIFEST).exists():  # another writer put the same snapshot in place
                    return None
                shutil.rmtree(final, ignore_errors=True)  # a damaged leftover: replace it
                os.rename(tmp, final)
            return info
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)

    # -- object storage -------------------------------------------------------------------------

    def _upload(self, built: SnapshotInfo) -> SnapshotInfo | None:
        """Upload the staged snapshot folder ``built``: its files, then its manifest LAST and only
        if absent (the commit marker). None when another writer committed that position first."""
        assert self.objects is not None
        folder, key = Path(built.path), _key(built.spec_hash, built.last_seq)
        for name in sorted(built.files):  # one file in memory at a time
            self.objects.put(f"{key}/{name}.parquet", (folder / f"{name}.parquet").read_bytes())
        try:
            self.objects.create(f"{key}/{MANIFEST}", (folder / MANIFEST).read_bytes())
        except ObjectExistsError:
            return None
        return dataclasses.replace(built, path=self.objects.url(key))

    @contextlib.contextmanager
    def _local(self, info: SnapshotInfo, names: list[str] | None = None) -> Iterator[SnapshotInfo]:
        """``info`` with its files on the local disk: itself on a local store; on object storage a
        copy whose path is a private temporary folder holding the files ``names`` (default all of
        the manifest's), downloaded one at a time, removed when the block ends."""
        if self.objects is None:
            yield info
            return
        key = _key(info.spec_hash, info.last_seq)
        with tempfile.TemporaryDirectory(prefix="refold-snapshot-") as staging:
            for name in (info.files if names is None else names):
                data = self.objects.get(f"{key}/{name}.parquet")
                if data is None:
                    raise StoreError(f"snapshot {info.path} has no {name}.parquet; delete it (refold rebuilds it)")
                (Path(staging) / f"{name}.parquet").write_bytes(data)
                del data
            yield dataclasses.replace(info, path=staging)

    def _object_keys(self, spec_hash: str | None) -> list[str]:
        """Every key under ``snapshots/`` (of ``spec_hash``) shaped ``snapshots/SPEC/POSITION/FILE``."""
        assert self.objects is not None
        prefix = f"snapshots/{spec_hash}" if spec_hash else "snapshots"
        return [k for k in self.objects.list(prefix) if k.count("/") == 3]

    def _object_snapshots(self, spec_hash: str | None) -> list[tuple[str, SnapshotInfo | None]]:
        """(position prefix, its snapshot or None when it has no readable manifest) for every
        position prefix in the bucket, sorted (oldest first per spec)."""
        assert self.objects is not None
        keys = self._object_keys(spec_hash)
        prefixes = sorted({k.rsplit("/", 1)[0] for k in keys})
        marked = {k.rsplit("/", 1)[0] for k in keys if k.endswith(f"/{MANIFEST}")}
        out: list[tuple[str, SnapshotInfo | None]] = []
        for prefix in prefixes:
            info = None
            if prefix in marked:
                try:
                    info = SnapshotInfo.from_json(self.objects.get_json(f"{prefix}/{MANIFEST}"),  # type: ignore[attr-defined]
                                                  self.objects.url(prefix))  # type: ignore[attr-defined]
                except (ValueError, KeyError, TypeError, StoreError):
                    info = None  # foreign or damaged: never used
            out.append((prefix, info))
        return out

    def _delete_prefix(self, prefix: str) -> None:
        """Delete a position's objects, the manifest first (readers stop seeing it at once)."""
        assert self.objects is not None
        self.objects.delete(f"{prefix}/{MANIFEST}")
        for key in self.objects.list(prefix):
            self.objects.delete(key)

    # -- removing -------------------------------------------------------------------------------

    def remove(self, info: SnapshotInfo) -> None:
        if self.objects is not None:
            self._delete_prefix(_key(info.spec_hash, info.last_seq))
            return
        _remove_dir(Path(info.path))

    def prune(self, spec_hash: str, *, keep: int) -> list[SnapshotInfo]:
        """Keep the ``keep`` newest snapshots of ``spec_hash``; return the removed ones. On object
        storage it also deletes uncommitted uploads (no manifest) at positions older than the
        oldest snapshot kept (a newer one may still be uploading)."""
        snaps = self.list(spec_hash)
        old = snaps[:-keep] if keep > 0 else snaps
        for info in old:
            self.remove(info)
        if self.objects is not None and snaps[len(old):]:
            oldest_kept = snaps[len(old)].last_seq
            for prefix, info in self._object_snapshots(spec_hash):
                position = prefix.rsplit("/", 1)[1]
                if info is None and position.isdigit() and int(position) < oldest_kept:
                    self._delete_prefix(prefix)
        return old

    def _hits(self, event_ids: Iterable[str]) -> tuple[list[SnapshotInfo], list[Path]]:
        wanted = set(event_ids)
        hits: list[SnapshotInfo] = []
        partial: list[Path] = []
        if self.objects is not None:
            for prefix, info in self._object_snapshots(None):
                if info is None:
                    partial.append(Path(prefix))  # an unfinished upload or a damaged one: contents unknown
                    continue
                try:
                    if wanted & self.contained_ids(info):
                        hits.append(info)
                except (OSError, pa.ArrowException, StoreError):
                    hits.append(info)  # unreadable list: cannot prove it is clean
            return hits, partial
        if self.root is None or not self.root.exists():
            return hits, partial
        for folder in (p for p in self.root.iterdir() if p.is_dir()):
            for snap in folder.iterdir():
                info = self._read_manifest(snap) if snap.is_dir() and not snap.name.startswith(".") else None
                if info is None:
                    partial.append(snap)  # a temporary or damaged folder: its contents are unknown
                    continue
                try:
                    if wanted & self.contained_ids(info):
                        hits.append(info)
                except (OSError, pa.ArrowException):
                    hits.append(info)  # unreadable list: cannot prove it is clean
        return hits, partial

    def preview(self, event_ids: Iterable[str], *, seqs: Iterable[int] | None = None) -> PurgeResult:
        """What :meth:`purge` would remove (nothing is removed; ``seqs``, the ids' log positions
        that the erasure plan passes every derived store, are not needed here)."""
        hits, partial = self._hits(event_ids)
        return PurgeResult("snapshots", len(hits) + len(partial), self._detail(hits, partial))

    def purge(self, event_ids: Iterable[str]) -> PurgeResult:
        """Remove every snapshot that contains any of ``event_ids`` (and every temporary folder)."""
        hits, partial = self._hits(event_ids)
        for info in hits:
            self.remove(info)
        for path in partial:
            if self.objects is not None:
                self._delete_prefix(path.as_posix())
            else:
                _remove_dir(path)
        return PurgeResult("snapshots", len(hits) + len(partial), self._detail(hits, partial))

    def _detail(self, hits: list[SnapshotInfo], partial: list[Path]) -> tuple[str, ...]:
        if self.objects is not None:  # keys relative to the store root
            return tuple(sorted([*(_key(h.spec_hash, h.last_seq) for h in hits), *(p.as_posix() for p in partial)]))
        root = Path(self.layout.root)
        return tuple(sorted(os.path.relpath(p, root) for p in [*(Path(h.path) for h in hits), *partial]))


def _key(spec_hash: str, last_seq: int) -> str:
    """The key prefix of a snapshot's objects on object storage (relative to the store root)."""
    return f"snapshots/{spec_hash}/{last_seq:012d}"


def _remove_dir(path: Path) -> None:
    """Rename first (readers stop seeing it at once), then delete."""
    if not path.exists():
        return
    trash = path.with_name(f".trash-{uuid.uuid4().hex}")
    try:
        os.rename(path, trash)
    except OSError:
        trash = path
    if trash.is_dir():
        shutil.rmtree(trash, ignore_errors=True)
    else:
        trash.unlink(missing_ok=True)
