"""Derived state as Delta tables: ``state/<spec-hash>/{items,facts,entities}``.

    items     one row per extracted fact (or retraction) of a surviving event, with its bucket:
              what a partition's merge reads (:data:`refold.fold.partition.ITEM_SCHEMA`)
    facts     merged facts and the stored roll-ups (``layer`` "merged"/"derived": inverse rules
              only; compose roll-ups are derived when read, see refold.reads.rollups),
              partitioned by (layer, bucket) (:data:`refold.fold.partition.FACT_SCHEMA`)
    entities  names, aliases, summaries, partitioned by bucket (:data:`~refold.fold.partition.ENTITY_SCHEMA`)

``bucket`` is the hash bucket of the subject's node id (tenant + entity key), so a partition
folds alone and a read of one subject opens one bucket's files. Every write goes through
delta-rs (``write_deltalake``, an overwrite with a ``bucket IN (...)`` predicate for a partial
rewrite). Delta statistics are kept to the numeric and partition columns only, so no name or
other content lands in ``_delta_log``.

A fold's last commit, to ``facts``, is its tag (:class:`StateTag`: the log position it reflects
and the ``entities`` version that goes with it), set as table properties by a commit that also
carries it as custom metadata: that ``facts`` version is the snapshot, and "state as of log seq S"
is time travel to the newest tagged version at or before S. An incremental fold appends new
versions of the rows it changed (``seen_at``, ``deleted``; a read keeps the newest). Erasure
rewrites the partitions that held the erased events and vacuums, after which older versions can
no longer be read.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.exceptions import TableNotFoundError

from refold.fold.errors import StoreError
from refold.fold.partition import ENTITY_SCHEMA, FACT_SCHEMA, ITEM_SCHEMA

from refold.storage.delta.io import parquet_dataset, scan, sql_in
from refold.storage.files.modes import apply_commit, make_dirs
from refold.storage.layout import Layout

__all__ = ["KEYS", "StateStore", "StateTag", "TABLES", "among", "state_specs"]

#: table name → (schema of its rows, partition columns)
TABLES = {
    "items": (ITEM_SCHEMA, ["bucket"]),
    "facts": (FACT_SCHEMA, ["layer", "bucket"]),
    "entities": (ENTITY_SCHEMA, ["bucket"]),
}
#: versioned tables → their key: an incremental fold appends new versions of the rows it changed
#: (``seen_at``: the log seq of that fold; ``deleted``: the row is gone) instead of rewriting
#: whole partitions, and a read keeps the newest version of each key (:meth:`StateStore.read`)
KEYS = {"facts": "fact_id", "entities": "node"}
_VERSION_FIELDS = [pa.field("seen_at", pa.int64()), pa.field("deleted", pa.bool_())]
#: the only columns with Delta statistics: numbers and partitions, never a name (see module doc)
_STATS = {"items": "bucket,seq", "facts": "layer,bucket,recorded_seq,seen_at", "entities": "bucket,seen_at"}


def _stored(name: str) -> pa.Schema:
    schema = TABLES[name][0]
    return pa.schema(list(schema) + _VERSION_FIELDS) if name in KEYS else schema


#: the column whose values a commit's predicate may name (:meth:`StateStore.write` ``ids``):
#: delta-rs keeps the predicate in the commit log until the erasure's scrub removes the old
#: commit files, so only hashes (fact ids), never a name
_ID_COLUMNS = {"facts": "fact_id"}
_PREFIX = "refold."
#: the state tables' format: a tag of another format is not a state this code can read (reads
#: answer the graph engine's way, and the next partitioned fold refolds in full, replacing the
#: tables). "2": compose roll-ups are no longer stored (derived when read, named by the tag).
#: "3": entities carry ``name_seqs`` (see :data:`refold.fold.partition.ENTITY_SCHEMA`).
FORMAT = "3"


@dataclass(frozen=True)
class StateTag:
    """What a tagged ``facts`` version reflects."""

    log_seq: int
    log_link: str
    buckets: int
    tenants: tuple[str, ...]
    entities_version: int
    #: merged and derived rows (their newest versions) in that state
    facts: int = 0
    derived: int = 0
    facts_version: int = -1
    #: the roll-up rules a read derives (compose rules: their rows are not stored), as
    #: (name, kind, inputs, output)
    rollups: tuple[tuple[str, str, tuple[str, ...], str], ...] = ()
    #: shred mode: the erased markers this state honours (:func:`refold.storage.keys.port.marks_fingerprint`;
    #: "" none). A read answers from the tables only while the key store lists the same markers
    erased: str = ""

    def metadata(self) -> dict[str, str]:
        return {_PREFIX + "read_rollups": json.dumps([list(r) for r in self.rollups]),
                _PREFIX + "erased_owners": self.erased,_PREFIX + "log_seq": str(self.log_seq), _PREFIX + "log_link": self.log_link,
                _PREFIX + "buckets": str(self.buckets), _PREFIX + "tenants": json.dumps(list(self.tenants)),
                _PREFIX + "entities_version": str(self.entities_version),
                _PREFIX + "counts": f"{self.facts},{self.derived}", _PREFIX + "state_format": FORMAT}

    @classmethod
    def from_commit(cls, info: dict, version: int) -> "StateTag | None":
        if not info.get(_PREFIX + "log_seq"):  # absent, or cleared by a full fold under way
            return None
        if info.get(_PREFIX + "state_format") != FORMAT:
            return None
        facts, derived = (int(n) for n in info.get(_PREFIX + "counts", "0,0").split(","))
        return cls(log_seq=int(info[_PREFIX + "log_seq"]), log_link=info[_PREFIX + "log_link"],
                   buckets=int(info[_PREFIX + "buckets"]), tenants=tuple(json.loads(info[_PREFIX + "tenants"])),
                   entities_version=int(info[_PREFIX + "entities_version"]), facts=facts, derived=derived,
                   facts_version=version, erased=info.get(_PREFIX + "erased_owners") or "",
                   rollups=tuple((n, k, tuple(i), o) for n, k, i, o in json.loads(info.get(_PREFIX + "read_rollups",
                                                                                          "[]"))))


def among(column: str, values: Iterable[str]) -> pc.Expression:
    """A read filter: string ``column`` is one of ``values`` (for :meth:`StateStore.read`)."""
    return pc.field(column).isin(pa.array(sorted(set(values)), pa.string()))


#: the tables a state digest covers, in its order, each with the key order of its rows
_DIGESTED = {"facts": ["layer", "fact_id"], "entities": ["node"]}


class StateStore:
    """The state tables of one spec under one store (see the module docstring)."""

    def __init__(self, layout: Layout, spec_hash: str, *, storage_options: dict[str, str] | None = None):
        self.layout = layout
        self.spec_hash = spec_hash
        self.storage_options = storage_options
        self.root = layout.state(spec_hash)
        self._tables: dict[str, DeltaTable] = {}
        self._versions: dict[tuple[str, int], DeltaTable] = {}
        self._tags: tuple[int, list[StateTag]] | None = None  # (facts version, its tags)

    def path(self, name: str) -> str:
        return f"{self.root}/{name}"

    # -- reading ---------------------------------------------------------------------------------

    def table(self, name: str, *, version: int | None = None) -> DeltaTable | None:
        """The Delta table ``name`` (at ``version``), or None when it was never written. The
        newest handle is kept and brought up to date incrementally (no commit-log replay). A
        negative ``version`` is the empty state before any fold (:func:`refold.reads.overlay.empty_tag`)."""
        if version is not None and version < 0:
            return None
        if version is not None:
            kept = self._tables.get(name)
            if kept is not None and kept.version() == version:
                return kept  # (the newest version, already open: no commit-log replay)
            kept = self._versions.get((name, version))
            if kept is None:
                try:
                    kept = DeltaTable(self.path(name), version=version, storage_options=self.storage_options)
                except TableNotFoundError:
                    return None
                if len(self._versions) >= 8:  # a few tagged versions stay open (a tag's entities)
                    self._versions.pop(next(iter(self._versions)))
                self._versions[(name, version)] = kept
            return kept
        dt = self._tables.get(name)
        try:
            if dt is None:
                dt = self._tables[name] = DeltaTable(self.path(name), storage_options=self.storage_options)
            else:
                dt.update_incremental()
        except TableNotFoundError:
            return None
        return dt

    def tag(self) -> StateTag | None:
        """The tag of the newest ``facts`` version (None: no fold finished). Read from the
        table's properties, which outlive the commit log's clean-up after an erasure."""
        dt = self.table("facts")
        if dt is None:
            return None
        return StateTag.from_commit(dt.metadata().configuration, dt.version())

    def tags(self) -> list[StateTag]:
        """Every tagged ``facts`` version still in the commit log, oldest first."""
        dt = self.table("facts")
        if dt is None:
            return []
        if self._tags is not None and self._tags[0] == dt.version():
            return self._tags[1]  # (the history is one read of every commit file: kept per version)
        history = dt.history()
        out = [StateTag.from_commit(info, info["version"]) for info in history
               if info.get("operation") == "SET TBLPROPERTIES"]
        entities = self.table("entities")
        facts_from = _readable_from(history)
        entities_from = 0 if entities is None else _readable_from(entities.history())
        tags = sorted((t for t in out if t is not None and t.facts_version >= facts_from
                       and t.entities_version >= entities_from), key=lambda t: t.facts_version)
        self._tags = (dt.version(), tags)
        return tags

    def tag_at(self, log_seq: int) -> StateTag | None:
        """The newest tagged version reflecting the log at or before ``log_seq``."""
        found = [t for t in self.tags() if t.log_seq <= log_seq]
        return found[-1] if found else None

    def read(self, name: str, *, buckets: Iterable[int] | None = None, filter: pc.Expression | None = None,
             columns: list[str] | None = None, version: int | None = None, layer: str | None = None) -> pa.Table:
        """Rows of ``name`` (of a versioned table: the newest version of each key, deleted ones
        left out); ``buckets`` and ``layer`` (of ``facts``) prune partitions (only their files
        are opened: a filter on ``layer`` alone still opened both layers' files).

        ``filter`` is applied before the versions are resolved, so on a versioned table it may
        test only columns a row's versions share (its key, subject, relation, object, tenant,
        layer, bucket), never ``valid_to`` or ``sources``: filter those afterwards.

        The files are those delta-rs lists for that version, read with pyarrow's own Parquet
        reader (through the filesystem the table's storage options describe), never through
        ``DeltaTable.to_pyarrow_dataset``: a process whose table handles made such a dataset can
        abort at interpreter shutdown after its output was complete ("terminate called without an
        active exception"; see :mod:`refold.storage.delta.io`), which no process — a CLI read, an
        agent's tool call, a fold — may do. ``filter`` tests columns stored in the files; the
        partition columns are selected by ``buckets`` and ``layer``."""
        schema, partitions = TABLES[name]
        wanted_schema = schema if columns is None else pa.schema([schema.field(c) for c in columns])
        names = list(wanted_schema.names)
        key = KEYS.get(name)
        if key is not None:
            names += [c for c in (key, "seen_at", "deleted") if c not in names]
        dt = self.table(name, version=version)
        if dt is None:
            return wanted_schema.empty_table()
        stored = _stored(name)
        # only the wanted partitions' files are opened (pruned on delta-rs's file list)
        actions = pa.table(dt.get_add_actions(flatten=True))
        wanted = None if buckets is None else set(buckets)
        root = dt.table_uri.rstrip("/")
        paths = []
        values = zip(actions["path"].to_pylist(), *(actions[f"partition.{c}"].to_pylist() for c in partitions))
        for path, *parts in values:
            at = dict(zip(partitions, parts))
            if (wanted is None or int(at["bucket"]) in wanted) and (layer is None or at.get("layer") == layer):
                paths.append(f"{root}/{path}")
        if not paths:
            return wanted_schema.empty_table()
        table = scan(parquet_dataset(dt, paths, stored, partitions=partitions), columns=names, filter=filter)
        if key is not None and table.num_rows:
            table = _newest(table, key)
        return table.select(wanted_schema.names).cast(wanted_schema)

    def files(self, name: str) -> int:
        """The number of data files of ``name`` now."""
        dt = self.table(name)
        return 0 if dt is None else len(dt.file_uris())

    def compact(self, name: str, *, buckets: int, group: int = 4) -> int:
        """Rewrite ``name`` with only the newest version of each row (reads stay fast after
        many incremental folds), ``group`` buckets at a time (memory follows a group); return
        the new version."""
        version = -1
        for start in range(0, buckets, group):
            part = list(range(start, min(start + group, buckets)))
            version = self.write(name, self.read(name, buckets=part), buckets=part, note={"compacted": "1"})
        return version

    def digest(self, *, buckets: int, group: int) -> str:
        """SHA-256 (hex) of the state as a read sees it: the newest version of every ``facts``
        and ``entities`` row, bucket by bucket, each bucket's rows in key order (entity
        summaries as JSON with sorted keys), read ``group`` buckets at a time (memory follows a
        group). Equal states digest equal whatever their file layout, row versions or grouping.
        Receipts of refold 0.2 keep it (``state1:`` + this); ``receipt verify`` still recomputes it,
        so its value is part of the receipt format. Erasures now write :meth:`bucket_digest`."""
        import hashlib

        digest = hashlib.sha256(f"state{FORMAT}".encode())
        for name in _DIGESTED:
            for start in range(0, buckets, group):
                empty = None
                for bucket, rows in self._digest_slices(name, list(range(start, min(start + group, buckets)))):
                    if rows.num_rows:
                        _feed_rows(digest, f"{name}:{bucket}", rows)
                        continue
                    # an empty bucket feeds its label and the same bytes for every column (most
                    # buckets of a small store): computed once per table, fed as they are
                    if empty is None:
                        empty = _Recorded()
                        _feed_rows(empty, None, rows)
                    digest.update(f"{name}:{bucket}\0".encode())
                    digest.update(empty.data)
        return digest.hexdigest()

    def bucket_digest(self, *, buckets: int, group: int, kept: bool = True) -> str:
        """SHA-256 (hex) of the state as a read sees it, as a hash of per-bucket hashes: for
        ``facts`` then ``entities``, each bucket's label and the SHA-256 of its newest rows in key
        order (fed as :meth:`digest` feeds them). Equal states digest equal whatever their file
        layout. An erasure receipt keeps it (``state2:`` + this), so change it only with a new
        scheme prefix.

        ``kept``: reuse the per-bucket hashes stored beside the tables (``bucket_digests.json``)
        for every bucket whose data files are the ones they were computed from (Delta data files
        never change, so the same files hold the same rows), and store the new ones: the cost
        follows the buckets changed since the last digest, not the store. ``kept=False``
        recomputes every bucket (what ``receipt verify`` does) and stores nothing."""
        import hashlib

        key = f"state/{self.spec_hash}/bucket_digests.json"
        files = self.layout.files()
        try:
            stored = (files.get_json(key) or {}) if kept else {}
        except (ValueError, StoreError):  # (a garbled file is recomputed, never trusted)
            stored = {}
        fresh: dict[str, list[str]] = {}
        total = hashlib.sha256(f"state{FORMAT}/buckets".encode())
        for name in _DIGESTED:
            sets = self._bucket_files(name, buckets)
            digests: dict[int, str] = {}
            for bucket in range(buckets):
                known = stored.get(f"{name}:{bucket}")
                if known is not None and known[0] == sets[bucket]:
                    digests[bucket] = known[1]
            todo = [b for b in range(buckets) if b not in digests]
            for start in range(0, len(todo), group):
                for bucket, rows in self._digest_slices(name, todo[start:start + group]):
                    one = hashlib.sha256()
                    _feed_rows(one, None, rows)
                    digests[bucket] = one.hexdigest()
            for bucket in range(buckets):
                total.update(f"{name}:{bucket}\0{digests[bucket]}".encode())
                fresh[f"{name}:{bucket}"] = [sets[bucket], digests[bucket]]
        if kept and fresh != stored:
            files.put_json(key, fresh)  # (hashes of rows only: no personal data, no residue)
        return total.hexdigest()

    def _digest_slices(self, name: str, part: list[int]) -> Iterator[tuple[int, pa.Table]]:
        """Each bucket of ``part`` with its rows of ``name`` as a digest feeds them: in key order,
        entity summaries as JSON with sorted keys (one read of the group; each bucket's rows a
        slice of the sorted rows, no filter pass per bucket; an empty bucket, an empty slice)."""
        rows = self.read(name, buckets=part)
        if name == "entities" and rows.num_rows:
            summaries = [None if s is None else json.dumps(json.loads(s), sort_keys=True, ensure_ascii=False)
                         for s in rows["summary"].to_pylist()]
            rows = rows.set_column(rows.schema.get_field_index("summary"), "summary", pa.array(summaries, pa.string()))
        rows = rows.sort_by([("bucket", "ascending")] + [(c, "ascending") for c in _DIGESTED[name]])
        ends = np.searchsorted(rows["bucket"].to_numpy(), np.array(part), side="right")
        for bucket, end, begin in zip(part, ends, [0, *ends[:-1]]):
            yield bucket, rows.slice(int(begin), int(end - begin))

    def _bucket_files(self, name: str, buckets: int) -> dict[int, str]:
        """Per bucket of ``name`` now, a hash of its data files' paths (one of each bucket's
        states: Delta never rewrites a data file in place)."""
        import hashlib

        paths: dict[int, list[str]] = {b: [] for b in range(buckets)}
        dt = self.table(name)
        if dt is not None:
            actions = pa.table(dt.get_add_actions(flatten=True))
            for path, bucket in zip(actions["path"].to_pylist(), actions["partition.bucket"].to_pylist()):
                paths.setdefault(int(bucket), []).append(path)
        return {b: hashlib.sha256("\0".join(sorted(paths.get(b, []))).encode()).hexdigest() for b in range(buckets)}

    # -- writing ---------------------------------------------------------------------------------

    def write(self, name: str, rows: pa.Table, *, buckets: Iterable[int] | None = None,
              layer: str | None = None, tag: StateTag | None = None, mode: str = "overwrite",
              note: dict[str, str] | None = None, seen_at: int = -1, deleted: pa.Array | None = None,
              ids: Iterable[str] | None = None) -> int:
        """Replace the partitions ``buckets`` (all: None) of ``name`` (of ``layer`` in ``facts``)
        with ``rows``, or append them (``mode="append"``: on a versioned table, new versions of
        those rows stamped ``seen_at``, ``deleted`` marking the ones gone); return the new
        table version.

        ``ids`` (fact ids): replace only the rows of those partitions with one of
        these ids, every version of them; delta-rs rewrites just the files holding such rows, in
        the same commit. Every row must lie in those partitions (and carry one of ``ids``):
        delta-rs checks the predicate. ``note``: custom metadata of the commit (a full fold's
        progress, see :meth:`notes`)."""
        partitions = TABLES[name][1]
        schema = _stored(name)
        if name in KEYS:
            rows = rows.select(TABLES[name][0].names)
            rows = rows.append_column("seen_at", pa.array([seen_at] * rows.num_rows, pa.int64()))
            rows = rows.append_column("deleted", deleted if deleted is not None
                                      else pa.array([False] * rows.num_rows, pa.bool_()))
        rows = rows.select(schema.names).cast(schema)
        terms = []
        if layer is not None:
            terms.append(f"layer = '{layer}'")
        if buckets is not None:
            wanted = sorted(set(buckets))
            if not wanted:
                dt = self.table(name)
                return -1 if dt is None else dt.version()
            terms.append(f"bucket IN ({', '.join(str(b) for b in wanted)})")
        if ids is not None:
            terms.append(sql_in(_ID_COLUMNS[name], ids))
        predicate = " AND ".join(terms) if terms and mode == "overwrite" else None
        # the kept handle, brought up to date, is what delta-rs writes through: given the path
        # instead, it loaded the table afresh for every write (the commit log since the last
        # checkpoint, and the checkpoint's file list)
        target = self.table(name)
        if target is None:
            predicate = None  # a new table: nothing to replace
            if self.layout.is_local:
                make_dirs(self.path(name))  # (state/ and its spec's folder get the store's modes)
        config = {"delta.dataSkippingStatsColumns": _STATS[name], "delta.enableDeletionVectors": "false",
                  "delta.enableChangeDataFeed": "false"}
        since = -1 if target is None else target.version()
        try:
            whole = mode == "overwrite" and predicate is None  # (may replace an older format's schema)
            write_deltalake(self.path(name) if target is None else target, rows, mode=mode, predicate=predicate,
                            partition_by=partitions,
                            configuration=config, storage_options=self.storage_options,
                            schema_mode="overwrite" if whole else None,
                            commit_properties=CommitProperties(
                                custom_metadata={_PREFIX + k: v for k, v in note.items()}) if note else None)
            if tag is not None:
                # the tag: table properties (kept through checkpoints and log clean-up) set by a
                # commit that also carries it as custom metadata (listed by :meth:`tags`)
                self.table(name).alter.set_table_properties(
                    tag.metadata(), raise_if_not_exists=False,
                    commit_properties=CommitProperties(custom_metadata=tag.metadata()))
        except Exception as exc:  # noqa: BLE001 - delta-rs raises several types; all mean the same here
            raise StoreError(f"cannot write state table {self.path(name)}: {exc}; "
                             "rerun the fold (a partial write is replaced by the next one)") from exc
        dt = self.table(name)
        assert dt is not None
        self._private(name, dt, since)
        return dt.version()

    def _private(self, name: str, dt: DeltaTable, since: int) -> None:
        """Give what the commits after version ``since`` of ``name`` wrote the modes the store
        calls for (private, or group-shared): delta-rs creates files with the process umask."""
        if self.layout.is_local:
            for version in range(since + 1, dt.version() + 1):
                apply_commit(self.path(name), version)

    def clear_tag(self) -> None:
        """Mark the state as being rewritten (a full fold starts): no tag until it finishes, so
        a fold killed half-way is never taken for a complete state."""
        dt = self.table("facts")
        if dt is not None and self.tag() is not None:
            since = dt.version()
            dt.alter.set_table_properties({_PREFIX + "log_seq": ""}, raise_if_not_exists=False)
            self._private("facts", dt, since)

    def notes(self, name: str) -> list[dict[str, str]]:
        """The ``note`` of each commit to ``name`` since its last tag (newest first)."""
        dt = self.table(name)
        out = []
        for info in [] if dt is None else dt.history():
            if info.get("operation") == "SET TBLPROPERTIES" and info.get(_PREFIX + "log_seq"):
                break
            note = {k[len(_PREFIX):]: v for k, v in info.items() if k.startswith(_PREFIX) and isinstance(v, str)}
            if note:
                out.append(note)
        return out

    def set_tag(self, tag: StateTag) -> None:
        """Tag the newest ``facts`` version (a fold that changed no row of it)."""
        dt = self.table("facts")
        since = dt.version()
        dt.alter.set_table_properties(tag.metadata(), raise_if_not_exists=False,
                                      commit_properties=CommitProperties(custom_metadata=tag.metadata()))
        self._private("facts", dt, since)

    def vacuum(self, retain_hours: int | None = None) -> list[str]:
        """Delete the files old versions of the state tables held; return their paths.

        ``retain_hours`` None (the erasure: after it rewrote partitions, those files held erased
        data): every file the newest version does not hold, untracked ones included; no older
        version can be read after it. A number: the files the tables stopped using more than
        that many hours ago (Delta's own vacuum, which records its retention in the commit log;
        files a running fold is writing are not touched). The tagged versions whose files may be
        gone are no longer listed by :meth:`tags`, so a read as of a position that old folds the
        log instead (docs/fold.md)."""
        removed = []
        for name in TABLES:
            dt = self.table(name)
            if dt is not None:
                removed += dt.vacuum(retention_hours=retain_hours or 0, enforce_retention_duration=False,
                                     dry_run=False, full=retain_hours is None)
        return removed

    def exists(self) -> bool:
        return self.tag() is not None

    def drop(self) -> None:
        """Remove every state table of this spec (a folder, or every object under it)."""
        import shutil

        if not self.layout.is_local:
            files = self.layout.files()
            for key in files.list(f"state/{self.spec_hash}"):
                files.delete(key)
        elif os.path.isdir(self.root):
            shutil.rmtree(self.root)
        self._tables, self._versions, self._tags = {}, {}, None


class _Recorded:
    """What :func:`_feed_rows` feeds, kept as bytes instead of hashed (see :meth:`StateStore.digest`)."""

    def __init__(self) -> None:
        self.data = b""

    def update(self, data) -> None:
        self.data += bytes(data)


def _feed_rows(digest, label: str | None, table: pa.Table) -> None:
    """Hash ``table`` as it stands (row order included) into ``digest`` for
    :meth:`StateStore.digest`: its label and row count, then every column with its name and type,
    value by value (:func:`_feed_column`). ``label`` None: the label's part is left to the caller."""
    digest.update((f"{table.num_rows}\0" if label is None else f"{label}\0{table.num_rows}\0").encode())
    for field in table.schema:
        digest.update(f"{field.name}\0{field.type}\0".encode())
        column = table[field.name].combine_chunks()
        _feed_column(digest, column.dictionary_decode() if pa.types.is_dictionary(column.type) else column)


def _feed_column(digest, array: pa.Array) -> None:
    """Hash one column value by value: a validity byte per row, then per type the int64 byte
    lengths and the concatenated UTF-8 of strings, the int64 (timestamps: microseconds) or
    float64 values (little-endian, 0 for a null), or the int64 lengths of lists followed by their
    flattened values; every part preceded by its byte length. (Booleans as int64 0/1.)"""
    def put(data) -> None:
        data = memoryview(data).cast("B")
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)

    kind = array.type
    put(np.asarray(pc.is_valid(array), dtype=np.uint8) if array.null_count else np.ones(len(array), np.uint8))
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        filled = pc.fill_null(array, "").cast(pa.large_string())
        put(pc.binary_length(filled).to_numpy().astype("<i8"))
        offsets = np.frombuffer(filled.buffers()[1], dtype="<i8")[filled.offset:filled.offset + len(filled) + 1]
        put(filled.buffers()[2][int(offsets[0]):int(offsets[-1])] if len(filled) else b"")
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
        put(pc.fill_null(pc.list_value_length(array), 0).to_numpy().astype("<i8"))
        _feed_column(digest, pc.list_flatten(array))
    elif pa.types.is_timestamp(kind) or pa.types.is_integer(kind) or pa.types.is_boolean(kind):
        put(pc.fill_null(array.cast(pa.int64()), 0).to_numpy().astype("<i8"))
    elif pa.types.is_floating(kind):
        put(pc.fill_null(array.cast(pa.float64()), 0.0).to_numpy().astype("<f8"))
    else:
        raise StoreError(f"no digest for a {kind} column of the state tables")


def state_specs(layout: Layout) -> list[str]:
    """The spec hashes with state tables under the store (listed through its files: a folder, or
    a bucket's objects)."""
    return sorted({key.split("/")[1] for key in layout.files().list("state") if key.count("/") >= 2})


def _readable_from(history: list[dict]) -> int:
    """The oldest version of a table whose files every vacuum in ``history`` left whole (0:
    never vacuumed).

    Delta's vacuum deletes a file the table stopped using when the commit that removed it is
    older than the vacuum's start minus its retention (its ``VACUUM START`` commit records
    both). So the versions from the newest commit older than that horizon on are whole: every
    later commit, which is what removed their files, is younger. A vacuum with no retention
    deletes every file the version it ran on did not hold."""
    out = 0
    for start in (info for info in history if info.get("operation") == "VACUUM START"):
        retain = int((start.get("operationParameters") or {}).get("specifiedRetentionMillis") or 0)
        if retain == 0:
            out = max(out, start["version"] - 1)
            continue
        horizon = start["timestamp"] - retain
        older = [info["version"] for info in history if info["timestamp"] <= horizon]  # (a tie counts as older)
        out = max(out, max(older, default=0))
    return out


def _newest(table: pa.Table, key: str) -> pa.Table:
    """The newest version (largest ``seen_at``; the later row of equals) of each ``key``,
    without the deleted ones."""
    import polars as pl

    frame = pl.from_arrow(table).with_row_index("_row")
    frame = frame.sort(["seen_at", "_row"]).unique(subset=[key], keep="last", maintain_order=True)
    return frame.filter(~pl.col("deleted")).sort("_row").drop("_row").to_arrow()
