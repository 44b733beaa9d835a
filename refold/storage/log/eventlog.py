"""The event log: an append-only Delta table with a total order and a hash chain.

Concurrency design (compare-and-append). delta-rs rebases blind appends from racing writers
silently, which would fork ``seq`` and the chain. So every append:

1. brings its view to the newest table version ``v`` and reads the head (last seq, link, record
   time) from the rows, checked against the head recorded in commit ``v``'s metadata
   (:meth:`~refold.storage.log.reader.LogReader.head`: a mismatch raises ``IntegrityError``);
2. assigns ``seq = head.seq + 1 …``, ``table_version = v + 1`` and seals each event into the chain;
3. commits version ``v + 1`` through delta-rs with ``max_commit_retries=0``
   (:mod:`refold.storage.log.datafiles`): a commit that landed after ``v`` makes it fail with
   ``CommitFailedError`` instead of being rebased, and we go back to 1.

So a commit lands only on top of the head it was computed from: no fork, no gap, for threads and
processes alike. A lost race costs a sealed batch and a written data file, so writers on one host
take turns first (a thread lock per ``EventLog``, :mod:`refold.storage.log.hostlock` between
processes); that lock only saves work, the compare-and-append alone keeps the order (writers on
other hosts, object stores). Each ``EventLog`` keeps the head of the newest version it knows,
the event_id index of the data files it has read, and a ``DeltaTable`` it refreshes only when
something reads it: while nothing else lands, an append on a local table costs two ``stat`` calls
of bookkeeping besides its own commit, and no Delta state replay.

Idempotency: an ``event_id`` already in the log returns its original seq and writes nothing (the
same id with different content raises :class:`ConflictError`); an id repeated inside one batch is
written once. So does the id of an erased event: its tombstone holds the id's pseudonym
(:mod:`refold.storage.erased_ids`), which the check computes once the log holds one. An error raised after the commit may have landed (an *ambiguous* commit) is resolved
by re-reading the table: if the batch's ids are there, the append succeeded; a caller that retries
anyway gets the same seqs.

After each commit the new head is published under ``receipts/heads/`` so ``verify`` can detect a
truncated tail (a removed newest commit). Every :data:`COMPACT_EVERY` data files the appending
writer compacts them (Delta OPTIMIZE, rows unchanged), because delta-rs's commit cost grows with
the number of files in the table; checkpoints are delta-rs's own post-commit hook. Reading (heads,
rows by seq, time or id) lives in :mod:`refold.storage.log.reader`, which :class:`EventLog` extends.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError

from refold.fold.chain import GENESIS
from refold.fold.errors import ConflictError, IntegrityError, StoreError
from refold.fold.events import ERASED_ID_PREFIX, Event, NewEvent, check_times
from refold.storage.delta.io import parquet_dataset
from refold.storage.erased_ids import pseudonyms
from refold.storage.layout import Layout
from refold.storage.log.reader import HEAD_KEY, LogReader
from refold.storage.log.heads import Head, publish_store_head
from refold.storage.files.modes import apply_commit, apply_tree
from refold.storage.log.hostlock import host_turn
from refold.storage.log.datafiles import FILE_TARGET_BYTES, WRITER_PROPERTIES, write_rows
from refold.storage.delta.handles import commit_file
from refold.storage.log.schema import EVENTS_SCHEMA, TABLE_CONFIGURATION
from refold.storage.log.sealing import Sealed, seal_rows
from refold.storage.log.signing import signer_from_env
from refold.storage.log.checkpoints import checkpoint_fields  # (Merkle tree: refold/storage/log/merkle.py, issue 36)
from refold.storage.log.merkle import MerkleTree

#: Once this many data files have been added since the last compaction, the append that added the
#: last one merges them (0: never). delta-rs's commit cost grows with the number of files: a
#: single-event append took ~4 ms at 10 files, ~20 ms at 100 and ~180 ms at 800 (2 busy cores);
#: merging 25 small files costs ~30 ms, less than the growth it saves over the next 25 appends.
COMPACT_EVERY = 25


def _dedupe(batch: Sequence[NewEvent], ids: list[str]) -> list[NewEvent]:
    """``batch`` (whose event ids are ``ids``) with repeated ids kept once; the same id with
    different content is a conflict."""
    if len(set(ids)) == len(ids):  # the usual case, checked in one pass
        return list(batch)
    seen: dict[str, NewEvent] = {}
    for e in batch:
        first = seen.setdefault(e.event_id, e)
        if first is not e and not e.same_input(first):
            raise ConflictError(
                f"event_id {e.event_id} occurs twice in the batch with different content; "
                "use a new event_id for a new event"
            )
    return list(seen.values()) if len(seen) < len(batch) else list(batch)


#: Turns a batch of validated events into stored columns that replace theirs, one value per
#: event (``{"content": [...], ...}``; see :func:`~refold.storage.log.sealing.seal_rows`), called
#: once per append attempt: shred mode encrypts the batch here with its keys fetched in one go.
Protector = Callable[[Sequence[NewEvent]], Mapping[str, Sequence[Any]]]


def plain_protector(_: Sequence[NewEvent]) -> Mapping[str, Sequence[Any]]:
    """The protector that stores events as they are."""
    return {}


#: the head of a log without events, at the table's first version (what its rows would give)
_EMPTY_HEAD = Head(-1, GENESIS, datetime(1970, 1, 1, tzinfo=timezone.utc), 0)


class _Again(Exception):
    """An append attempt to run again at once (after an ambiguous error, on the reloaded table)."""


def _conflict_wait(state) -> float:
    """The tenacity wait before the next append attempt: none after :class:`_Again`; after a lost
    race a random one of up to 10 ms per attempt so far (200 ms at most), so racing writers spread out."""
    if isinstance(state.outcome.exception(), _Again):
        return 0.0
    return random.uniform(0, min(0.01 * state.attempt_number, 0.2))


class EventLog(LogReader):
    """One store's log. Cheap to construct; safe to use from several threads and processes."""

    def __init__(self, layout: Layout, *, storage_options: dict[str, str] | None = None,
                 protector: Protector = plain_protector):
        if storage_options is not None and layout.storage_options is None:  # the side files need them too
            layout = dataclasses.replace(layout, storage_options=storage_options)
        self.layout = layout
        self.storage_options = storage_options
        self.protector = protector
        self._init_caches()
        try:
            self._dt = self.table()
        except TableNotFoundError:
            raise StoreError(
                f"no event log at {layout.events}; create the store with `refold init {layout.root}`"
            ) from None
        except DeltaError as exc:  # a commit file or checkpoint that does not parse
            raise IntegrityError(
                f"the event log at {layout.events} cannot be loaded: its Delta log (_delta_log) was changed or "
                f"damaged ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
            ) from None

    def _init_caches(self) -> None:
        self._lock = threading.RLock()  # appends of one EventLog take turns (see module doc)
        self._dt: DeltaTable | None = None  # brought up to date only when something reads it
        self._ids: set[str] = set()  # the event_id of every row in the files below
        self._erased_seen = False  # whether _ids holds a pseudonym (an erased id: erased_ids.py)
        self._pseudonyms = None  # the store's erased-id key, read once it is needed
        self._indexed: set[str] = set()  # data file URIs already in _ids
        self._ids_version = -1  # table version _ids is complete for
        self._last: Head | None = None  # the head at some version (of our last commit, or read)
        self._compacted_files = 0  # live data files right after this object's last compaction
        self._prefix_ends: dict[int, int] = {}  # log version → its last seq (fixed once written: prefix_end)
        events = self.layout.events
        self._folder = Path(os.path.abspath(events.removeprefix("file://"))) if self.layout.is_local else None
        self._signer = signer_from_env(self.layout)  # signs published heads (REFOLD_SIGNING_KEY)
        self.merkle = MerkleTree(self.layout)  # the Merkle tree over the log, grown by each append

    def __getstate__(self) -> dict[str, Any]:  # picklable (Ray): caches are rebuilt on arrival
        return {k: self.__dict__[k] for k in ("layout", "storage_options", "protector")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_caches()

    # -- creation -------------------------------------------------------------------------------

    @staticmethod
    def create(layout: Layout, *, storage_options: dict[str, str] | None = None) -> None:
        """Create an empty log table (version 0). Fails if one exists."""
        try:
            DeltaTable(layout.events, storage_options=storage_options)
        except TableNotFoundError:
            DeltaTable.create(
                layout.events, EVENTS_SCHEMA, configuration=TABLE_CONFIGURATION,
                storage_options=storage_options, name="refold_events",
                description="refold event log: the only source of truth; append through refold only",
                # the empty log's head, as every append's commit carries its own: the first
                # append finds it in the history instead of scanning the (empty) table
                commit_properties=CommitProperties(custom_metadata={HEAD_KEY: json.dumps(_EMPTY_HEAD.as_json())}),
            )
            # the heads folder and journal exist from the start: the first append only opens them
            # (~1.3 ms less); on object storage the empty log's head is its first head object
            publish_store_head(dataclasses.replace(layout, storage_options=storage_options), _EMPTY_HEAD)
            if layout.is_local:
                apply_tree(layout.events)  # delta-rs wrote it with the umask: the store's modes
            return
        raise StoreError(f"{layout.events} already holds an event log")

    def _known_ids(self, dt: DeltaTable) -> set[str]:
        """Every row's event_id, refreshed by reading only data files not read before.

        When a file read before is gone (a DELETE or an erasure rewrote it), the index is rebuilt.
        Only ids: the seq of an id found here is read from its row (ids are rarely found again,
        and a set takes a 10k-event batch in a third of the time a dict of seqs does).
        """
        if dt.version() == self._ids_version:
            return self._ids
        uris = dt.file_uris()
        if not self._indexed.issubset(uris):
            self._ids, self._indexed, self._erased_seen = set(), set(), False
        new = [u for u in uris if u not in self._indexed]
        if new:
            rows = parquet_dataset(dt, new, EVENTS_SCHEMA).to_table(columns=["event_id"])
            self._ids.update(rows["event_id"].to_pylist())
            self._indexed.update(new)
            if not self._erased_seen:
                self._erased_seen = bool(pc.any(pc.starts_with(rows["event_id"], ERASED_ID_PREFIX)).as_py())
        self._ids_version = dt.version()
        return self._ids

    # -- appending ------------------------------------------------------------------------------

    def append(self, batch: Sequence[NewEvent], *, max_attempts: int = 200, protect: bool = True) -> list[int]:
        """Append ``batch`` atomically in order; return each event's seq.

        Events whose id is already in the log keep their original seq and are not written again;
        an id that occurs twice in ``batch`` is written once (both get its seq), and the same id
        with different content raises :class:`ConflictError`. ``protect=False`` stores the batch
        in clear even in shred mode (refold's own system events, which carry no personal data).
        """
        if not batch:
            return []
        check_times(batch)  # a time the chain or Arrow cannot hold fails here, before any sealing
        ids = [e.event_id for e in batch]  # once: the checks below are C-level passes over it
        unique = _dedupe(batch, ids)
        if len(unique) < len(batch):
            ids = [e.event_id for e in unique]
        from tenacity import Retrying, retry_if_exception_type, stop_after_attempt

        reloaded = False
        # another writer landed first (CommitFailedError): re-read the head and try again
        retrying = Retrying(retry=retry_if_exception_type((CommitFailedError, _Again)),
                            stop=stop_after_attempt(max_attempts), wait=_conflict_wait, reraise=True)
        with self._lock, self._writer_turn() as exclusive:
            try:
                for attempt in retrying:
                    with attempt:
                        version = self._sync()
                        existing = self._check_existing(unique, ids)
                        fresh = [e for e in unique if e.event_id not in existing] if existing else unique
                        if not fresh:
                            return [existing[e.event_id] for e in batch]
                        rows, new_head = self._seal_table(fresh, self._last, version + 1, protect=protect)
                        try:
                            self._write(version, rows, {HEAD_KEY: json.dumps(new_head.as_json())})
                        except CommitFailedError:
                            raise  # lost the race: the next attempt reads the new head
                        except Exception as exc:  # ambiguous: the commit may have landed before the error
                            self._dt, self._last = None, None  # state unknown now: load the table afresh
                            self._sync()
                            landed = self._check_existing(unique, ids)
                            if all(e.event_id in landed for e in unique):
                                self._publish_head(new_head)
                                return [landed[e.event_id] for e in batch]
                            if not reloaded:  # the cached table may have been the problem: once more
                                reloaded = True
                                raise _Again from exc
                            raise StoreError(
                                f"append failed and the batch did not land ({exc}); it is safe to retry"
                            ) from exc
                        self._remember(ids if fresh is unique else [e.event_id for e in fresh], new_head)
                        tree = self._grow_tree(new_head, rows)
                        self._publish_head(new_head, tree=tree)
                        if (exclusive and COMPACT_EVERY
                                and len(self._indexed) - self._compacted_files >= COMPACT_EVERY):
                            self._compact_quietly(self._fresh_table())
                        first = new_head.seq - len(fresh) + 1
                        if fresh is unique and len(unique) == len(batch):  # all new, no repeats: in order
                            return list(range(first, first + len(batch)))
                        by_id = dict(zip((e.event_id for e in fresh), range(first, first + len(fresh))))
                        by_id.update(existing)
                        return [by_id[e.event_id] for e in batch]
            except (CommitFailedError, _Again):
                pass
        raise StoreError(f"append gave up after {max_attempts} commit conflicts; retry later")

    def version(self) -> int:
        """The newest table version (two ``stat`` calls when this object made the last commit;
        otherwise the table handle catches up, without reading any data file)."""
        with self._lock:
            if self._up_to_date():
                return self._ids_version
            return self._fresh_table().version()

    def _up_to_date(self) -> bool:
        """Whether the head and id index this object keeps are those of the newest version, and
        its table handle is at that version (a local table with no newer commit file)."""
        version = self._ids_version
        return (self._last is not None and self._last.table_version == version and self._dt is not None
                and self._dt.version() == version and self._is_current_version(version))

    def _sync(self) -> int:
        """Bring what appends compute from (head, id index) to the newest table version; return it.

        On a local table that this object committed last, one ``stat`` of the commit after the
        known version (and one of that version's own, gone once erasure cleaned up the log) tells
        that nothing landed since: no DeltaTable work at all. Otherwise the table is refreshed,
        the new files' ids are read and the head is read from the rows and checked against the
        newest commit's (:meth:`head`, which raises ``IntegrityError`` when they disagree).
        """
        if self._up_to_date():
            return self._ids_version
        dt = self._fresh_table()
        self._known_ids(dt)
        if not (self._last and self._last.table_version == dt.version()):
            self._last = self.head(dt)
        return dt.version()

    def _remember(self, fresh_ids: list[str], head: Head) -> None:
        """Index our own commit without reading it back (its rows are ``fresh_ids``)."""
        self._last = head
        if self._dt is None or self._dt.version() != head.table_version:
            return  # the handle moved on: the next sync reads what it needs
        self._indexed.update(u for u in self._dt.file_uris() if u not in self._indexed)
        self._ids.update(fresh_ids)
        self._ids_version = head.table_version

    # -- compaction -----------------------------------------------------------------------------

    def compact(self) -> dict[str, Any]:
        """Merge small data files into larger ones (Delta OPTIMIZE); return delta-rs's metrics.

        Rows, seqs and the chain are unchanged (verify reads rows, not files). The replaced files
        stay on disk until a VACUUM (erasure runs one). Appends do this every
        :data:`COMPACT_EVERY` files by themselves, on local stores.

        Only with every other writer excluded: delta-rs 1.6.6 lets two concurrent OPTIMIZEs (or an
        OPTIMIZE and a DELETE) both commit, which stores the compacted rows twice. So compaction
        runs only while holding the host lock; on an object store it is refused.
        """
        with self._lock, self._writer_turn() as exclusive:
            if not exclusive:
                raise StoreError(
                    f"cannot compact {self.layout.events}: no exclusive host lock (object store, or "
                    "another writer held it too long); compact when nothing else writes"
                )
            return self._compact(self._fresh_table())

    def _compact(self, dt: DeltaTable) -> dict[str, Any]:
        self._known_ids(dt)  # index every file first: the compacted files hold the same ids
        head = self._last if self._last and self._last.table_version == dt.version() else self.head(dt)
        after = Head(head.seq, head.link, head.recorded_at, dt.version() + 1)
        # (files of about FILE_TARGET_BYTES are left alone: it merges the files appended since, a run
        # of seqs, so every file keeps its own seq range; delta-rs's 100 MiB default re-merged
        # the whole log of a smaller store each time, in no order)
        metrics = dt.optimize.compact(target_size=FILE_TARGET_BYTES, writer_properties=WRITER_PROPERTIES,
                                      commit_properties=CommitProperties(
            max_commit_retries=0, custom_metadata={HEAD_KEY: json.dumps(after.as_json())}))
        if not metrics.get("numFilesRemoved"):  # nothing to merge, nothing committed
            pass
        elif dt.version() == after.table_version:  # nothing else landed: same rows, new files
            self._indexed = set(dt.file_uris())
            self._ids_version = dt.version()
            self._last = after
        else:  # rebased over a writer that went ahead without the lock: re-read everything
            self._ids, self._indexed, self._ids_version, self._last = set(), set(), -1, None
        self._compacted_files = len(self._indexed)
        if self._folder is not None and metrics.get("numFilesAdded"):  # the files delta-rs wrote
            if dt.version() == after.table_version:
                apply_commit(self._folder, after.table_version)
            else:  # rebased: which version is ours is not known here (rare)
                apply_tree(self._folder)
        return metrics

    def _compact_quietly(self, dt: DeltaTable) -> None:
        """Compaction after an append that landed: a failure here must not fail the append."""
        try:
            self._compact(dt)
        except CommitFailedError:
            self._dt = None  # another writer landed first; compact another time
        except Exception as exc:  # noqa: BLE001
            self._dt = None
            warnings.warn(f"refold: compacting {self.layout.events} failed ({exc}); appends go on, "
                          "but each costs more as files accumulate", RuntimeWarning, stacklevel=3)

    def _writer_turn(self):
        """Writers on this host take turns (see :mod:`refold.storage.log.hostlock`)."""
        return host_turn(self.layout.root)

    def _fresh_table(self) -> DeltaTable:
        """This object's table, brought up to the newest version.

        On a local store, our version's commit file still there and the next one absent means
        nothing landed since (two ``stat`` calls instead of listing ``_delta_log``). Were a commit
        to land right after, the compare-and-append would fail and the retry would refresh, so a
        stale view never commits. When the log was checkpointed and cleaned up past our version
        (erasure does that), the incremental update cannot work and the table is loaded afresh.
        """
        with self._lock:
            if self._dt is not None:
                try:
                    if not self._is_current_version(self._dt.version()):
                        self._dt.update_incremental()
                    return self._dt
                except Exception:  # noqa: BLE001 - commits we never saw were cleaned up: reload
                    self._dt = None
            self._dt = self.table()
            return self._dt

    def _is_current_version(self, version: int) -> bool:
        if self._folder is None:
            return False
        return os.path.exists(commit_file(self._folder, version)) and not os.path.exists(
            commit_file(self._folder, version + 1))

    # a seam for fault-injection tests (an error after the commit landed)
    def _write(self, version: int, rows: Sealed, metadata: dict[str, str]) -> None:
        """Commit ``rows`` as table version ``version + 1`` with ``metadata`` in its commitInfo.

        Raises ``CommitFailedError`` when another commit took that version.
        """
        dt = self._dt
        if dt is None or dt.version() != version:  # moved since _sync: compute again
            raise CommitFailedError(f"the table is no longer at version {version}")
        write_rows(dt, rows.table, metadata, storage_options=self.storage_options)
        if self._folder is not None:  # a local table delta-rs commits: its files get the store's modes
            apply_commit(self._folder, version + 1)

    def _check_existing(self, batch: Sequence[NewEvent], ids: list[str]) -> dict[str, int]:
        """event_id → seq of the ids in ``batch`` (``ids``, in order) the log holds (a conflicting
        one raises). Uses the id index as :meth:`_sync` left it.
        """
        known = self._ids
        erased = self._erased_among(ids)
        if known.isdisjoint(ids) and not erased:  # the usual case, in one C-level pass
            return {}
        # the index only preselects: what counts (and gives the seq) is the row itself
        stored = {ev.event_id: ev for ev in self.events_by_id(self._fresh_table(),
                                                               [i for i in ids if i in known] + list(erased))}
        for e in batch:
            old = stored.get(e.event_id)
            if old is not None and not old.is_tombstone and not self._same(e, old):
                raise ConflictError(
                    f"event_id {e.event_id} is already in the log (seq {old.seq}) with different "
                    "content; use a new event_id for a new event"
                )
        # an id erased since: its tombstone (under the id's pseudonym) answers the retry
        return {erased.get(i, i): ev.seq for i, ev in stored.items()}

    def _erased_among(self, ids: list[str]) -> dict[str, str]:
        """``{pseudonym: id}`` of the ``ids`` whose events were erased (nothing to hash while the
        log holds no tombstone with a pseudonym)."""
        if not self._erased_seen:
            return {}
        if self._pseudonyms is None:
            self._pseudonyms = pseudonyms(self.layout.root, files=self.layout.files())
            if self._pseudonyms is None:
                return {}
        return {p: i for p, i in self._pseudonyms.of(ids).items() if p in self._ids}

    def _same(self, new: NewEvent, old: Event) -> bool:
        if old.cipher:  # shred mode: compare what we can without decrypting
            return (new.kind, new.source, new.tenant) == (old.kind, old.source, old.tenant)
        return new.same_input(old)

    def _seal_table(self, fresh: Sequence[NewEvent], head: Head, version: int, *,
                    protect: bool = True) -> tuple[Sealed, Head]:
        """Rows for ``fresh`` placed after ``head`` and sealed into the chain, and the new head."""
        # record time never runs backwards along seq, even if clocks differ between writers
        recorded_at = max(datetime.now(timezone.utc), head.recorded_at)
        rows = seal_rows(
            fresh, first_seq=head.seq + 1, prev_link=head.link, recorded_at=recorded_at,
            table_version=version, overrides=self.protector(fresh) if protect else None,
        )
        return rows, Head(head.seq + len(fresh), rows.link, recorded_at, version)

    # -- published heads ------------------------------------------------------------------------

    def publish_head(self, head: Head) -> None:
        """Publish ``head`` as the store's head (``receipts/heads/``), signed when this log signs:
        for events that landed by another commit than :meth:`append` (an erasure's record)."""
        self._publish_head(head)

    def _publish_head(self, head: Head, keep: int = 16, tree=None) -> None:
        extra = None
        if self._signer is not None and tree is not None and tree.size == head.seq + 1:
            extra = checkpoint_fields(self._signer, tree.size, tree.root())  # signed with the head
        publish_store_head(self.layout, head, keep=keep, signer=self._signer, extra=extra)

    # -- the Merkle tree (refold/storage/log/merkle.py) -----------------------------------------------

    def _grow_tree(self, head: Head, rows: Sealed):
        """Add the leaves of the rows that just landed to the Merkle tree; return its new edge.
        Best effort, like the head: the commit landed, and a tree left behind is caught up from
        the log by the next append or proof. The chain's bytes are untouched (leaves hash the
        commitments sealing computed)."""
        try:
            return self.merkle.appended(head.seq - rows.table.num_rows + 1,
                                        rows.table["commitment"].to_pylist(), self)
        except Exception as exc:  # noqa: BLE001
            warnings.warn(f"refold: could not extend the Merkle tree of {self.layout.root} ({exc}); the next "
                          "append or proof catches it up from the log", RuntimeWarning, stacklevel=3)
            return None
