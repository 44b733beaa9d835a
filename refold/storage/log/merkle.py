"""The Merkle tree over the log (RFC 9162 §2.1), kept beside it so a proof never rehashes the log.

Leaf *i* is SHA-256(0x00 ‖ c) where c is the 32 bytes of event seq *i*'s ``commitment``, which an
erasure keeps (a tombstone keeps its commitment; a shredded event keeps its row): the tree only
ever grows, and no erasure changes a node of it. What is kept, under ``ROOT/merkle/``:

- **tiles** (``merkle/tile/<L>/<N>``, named as C2SP tlog-tiles names them, and byte for byte a
  tlog-tiles tile): the 256 hashes of the nodes at height 8·L under tile N, written once when
  they are complete and never changed. Level 0 (the leaf hashes themselves) is not stored: a
  proof reads the 256 commitments of its bottom tile from the log, which it reads anyway for
  the leaf's entry, and one read of one row group costs about what reading a stored tile would.
- **the edge** (``merkle/edge/<size>``): the tree's size and, per level, the hashes of the tile not
  complete yet (fewer than 256 per level, so a few KiB), with a SHA-256 of the rest at its end.
  A writer keeps it in memory and saves it (one atomic put) on its first append, with every
  completed tile and every :data:`SAVE_EVERY` leaves; a reader catches the saved one up from the
  log's newest commitments.

A node of height h is then one stored or edge row plus at most 255 hashes within its tile; a
proof at 1M events reads one bottom tile from the log, at most one stored tile per level above
and the edge, and hashes about a thousand times.

The appender extends the tree right after its commit lands (:meth:`MerkleTree.appended`, from
:class:`~refold.storage.log.eventlog.EventLog`), from the edge it kept in memory, so an append pays its
leaves' hashes and ~255 node hashes per 256 leaves (~1.5 µs per event), and now and then a small
write; nothing is read back.
Everything here is derived from the log and rebuilt from it when missing, short or inconsistent
(a crash between a commit and its tree write, a store made before the tree existed): a reader
or a writer that finds the edge behind the log catches it up from the log's commitments and
saves it, best effort. Tile contents are fixed by the log, so writers racing to save the same
tile write the same bytes; an edge saved late by a slower writer only moves the saved size back,
which the next reader catches up again. ``verify`` recomputes the tree from the log and compares
every stored tile and the edge (:func:`check_tree`); proofs generated from a damaged tree do not
verify against checkpoints signed before the damage.
"""

from __future__ import annotations

import binascii
import hashlib
import os
import struct
import threading
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refold.fold.errors import IntegrityError, StoreError
from refold.storage.files.modes import file_mode, make_dirs

__all__ = ["EMPTY_ROOT", "TILE_HEIGHT", "Edge", "MerkleTree", "leaf_hashes",
           "tile_key"]

TILE_HEIGHT = 8
TILE = 1 << TILE_HEIGHT
MASK = TILE - 1
FOLDER = "merkle"
EDGES = f"{FOLDER}/edge"  # the edge of size S is saved as merkle/edge/<S, 20 digits>
EMPTY_ROOT = hashlib.sha256(b"").digest()
_MAGIC = b"refold-merkle-edge/v1\n"
#: a writer saves its edge on its first append, when a tile completes, and then once at least this
#: many leaves were added since it last saved (a 0.3 ms write on a ~20 ms 1k-event append);
#: whoever opens the tree next catches the saved edge up from the log's last few commitments
SAVE_EVERY = 4096
#: commitments read from the log per step of a catch-up (bounds its memory)
CATCH_UP_CHUNK = 1 << 18
_NODE = b"\x01"


def leaf_hashes(commitments: Sequence[str | None]) -> list[bytes]:
    """The leaf hash of each hex ``commitment``: SHA-256(0x00 ‖ commitment bytes)."""
    try:
        raw = binascii.unhexlify("".join(commitments))  # type: ignore[arg-type]
        if commitments and set(map(len, commitments)) != {64}:  # type: ignore[arg-type]
            raise ValueError("not 32 bytes each")
    except (TypeError, ValueError):  # (binascii.Error is a ValueError) find the one to name
        bad = next((c for c in commitments if not _is_hash_hex(c)), None)
        raise IntegrityError(f"a stored commitment is not a SHA-256 hash in hex ({bad!r:.80}); run "
                             "`refold verify`") from None
    # each 0x00 ‖ commitment laid out in one buffer by numpy, so the loop below only hashes
    # (half the time of concatenating each input in Python: this is an append's tree work)
    n = len(commitments)
    rows = np.empty((n, 33), np.uint8)
    rows[:, 0] = 0
    rows[:, 1:] = np.frombuffer(raw, np.uint8).reshape(n, 32)
    data = rows.tobytes()
    sha = hashlib.sha256
    return [sha(data[i:i + 33]).digest() for i in range(0, 33 * n, 33)]


def _is_hash_hex(value: Any) -> bool:
    try:
        return isinstance(value, str) and len(bytes.fromhex(value)) == 32
    except ValueError:
        return False


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(_NODE + left + right).digest()


def _perfect(hashes: Sequence[bytes]) -> bytes:
    """The root of a perfect subtree over ``hashes`` (a power of two of them)."""
    sha = hashlib.sha256
    level = hashes
    while len(level) > 1:  # (node_hash inlined: this is most of an append's tree work)
        level = [sha(_NODE + level[i] + level[i + 1]).digest() for i in range(0, len(level), 2)]
    return level[0]


def levels(row: Sequence[bytes]) -> list[list[bytes]]:
    """Every complete node above ``row`` (a tile's row, maybe partial): levels[k][i] is the node of
    height k (within the tile) over row[i·2^k : (i+1)·2^k]."""
    levels = [list(row)]
    while len(levels[-1]) > 1:
        below = levels[-1]
        levels.append([node_hash(below[i], below[i + 1]) for i in range(0, len(below) - 1, 2)])
    return levels


def tile_key(level: int, index: int) -> str:
    """``merkle/tile/<level>/<index>``, the index written as tlog-tiles writes it (groups of three
    digits, all but the last prefixed by ``x``: 1234067 → ``x001/x234/067``)."""
    groups = []
    while True:
        groups.append(index % 1000)
        index //= 1000
        if not index:
            break
    parts = [f"x{g:03d}" for g in reversed(groups[1:])] + [f"{groups[0]:03d}"]
    return f"{FOLDER}/tile/{level}/{'/'.join(parts)}"


@dataclass
class Edge:
    """The tree of ``size`` leaves as far as it is not in stored tiles: ``rows[L]`` holds the
    hashes at height 8·L of the tile not complete yet at level L (``(size >> 8L) % 256`` of them)."""

    size: int = 0
    rows: list[list[bytes]] = field(default_factory=list)
    #: the node levels of each row, computed when a proof first needs them (see TreeView)
    levels: dict[int, list[list[bytes]]] = field(default_factory=dict, compare=False, repr=False)

    def copy(self) -> "Edge":
        return Edge(self.size, [list(r) for r in self.rows])

    def extend(self, leaves: Sequence[bytes]) -> list[tuple[int, int, bytes]]:
        """Add ``leaves`` (leaf hashes); return the tiles they completed at level 1 and above,
        as (level, index, 256 hashes joined). Level 0 tiles complete too, but are not stored."""
        completed: list[tuple[int, int, bytes]] = []
        self.levels.clear()
        old = self.size
        self.size += len(leaves)
        incoming: Sequence[bytes] = leaves
        level = 0
        while incoming:
            if level == len(self.rows):
                self.rows.append([])
            row = self.rows[level]
            first_tile = (old >> (TILE_HEIGHT * level)) >> TILE_HEIGHT
            row.extend(incoming)
            full = len(row) >> TILE_HEIGHT
            promoted = []
            for t in range(full):
                chunk = row[t * TILE:(t + 1) * TILE]
                if level:
                    completed.append((level, first_tile + t, b"".join(chunk)))
                promoted.append(_perfect(chunk))
            if full:
                del row[:full * TILE]
            incoming = promoted
            level += 1
        return completed

    def root(self) -> bytes:
        """MTH of the tree of ``size`` leaves."""
        if self.size == 0:
            return EMPTY_ROOT
        parts: list[bytes] = []  # the perfect subtrees that make up the tree, left to right
        for row in reversed(self.rows):
            start = 0
            for k in range(TILE_HEIGHT - 1, -1, -1):
                if len(row) >> k & 1:
                    parts.append(_perfect(row[start:start + (1 << k)]))
                    start += 1 << k
        acc = parts[-1]
        for part in reversed(parts[:-1]):
            acc = node_hash(part, acc)
        return acc

    def encode(self) -> bytes:
        body = bytearray(_MAGIC)
        body += struct.pack(">QB", self.size, len(self.rows))
        for row in self.rows:
            body += struct.pack(">H", len(row))
            body += b"".join(row)
        return bytes(body) + hashlib.sha256(body).digest()

    @classmethod
    def decode(cls, data: bytes) -> "Edge":
        """The edge in ``data``; ValueError when it is not one (cut short, garbled, inconsistent)."""
        if len(data) < len(_MAGIC) + 9 + 32 or not data.startswith(_MAGIC):
            raise ValueError("not a refold tree edge")
        body, digest = data[:-32], data[-32:]
        if hashlib.sha256(body).digest() != digest:
            raise ValueError("its checksum does not match (a write cut short, or an edit)")
        size, count = struct.unpack_from(">QB", body, len(_MAGIC))
        at = len(_MAGIC) + 9
        rows = []
        for level in range(count):
            (n,) = struct.unpack_from(">H", body, at)
            at += 2
            if n != (size >> (TILE_HEIGHT * level)) & MASK:
                raise ValueError(f"level {level} holds {n} hashes, a tree of {size} leaves has "
                                 f"{(size >> (TILE_HEIGHT * level)) & MASK}")
            rows.append([body[at + 32 * i:at + 32 * (i + 1)] for i in range(n)])
            at += 32 * n
        if at != len(body) or (size >> (TILE_HEIGHT * count)) != 0:
            raise ValueError("its levels do not add up to its size")
        return cls(size, rows)


class MerkleTree:
    """The stored tree of one store (see the module docstring). Thread-safe; one per
    :class:`~refold.storage.log.eventlog.EventLog`, which keeps the edge of its own last append."""

    def __init__(self, layout):
        self.layout = layout
        self._local = Path(layout.root.removeprefix("file://")) if layout.is_local else None
        self._lock = threading.RLock()
        self._edge: Edge | None = None  # the edge this object saved or loaded last
        self._tiles: OrderedDict[tuple[Any, ...], list[list[bytes]]] = OrderedDict()  # node levels per tile
        self._made: set[Path] = set()  # folders known to exist
        self._saved = -SAVE_EVERY  # the size of the edge this object saved last

    # -- storage ------------------------------------------------------------------------------------

    def read(self, key: str) -> bytes | None:
        """The stored bytes of ``key`` (a tile or an edge), None when there is none."""
        if self._local is not None:
            try:
                return (self._local / key).read_bytes()
            except (FileNotFoundError, NotADirectoryError):
                return None
            except OSError as exc:
                raise StoreError(f"cannot read {self._local / key}: {exc.strerror or exc}") from None
        return self.layout.files().get(key)

    def _put(self, key: str, data: bytes) -> None:
        """Write ``key`` so that a reader sees all of it or nothing (a temporary file renamed).
        Keys are new names (a tile is written once, an edge under its size), so the rename
        replaces nothing: ext4 flushes a file renamed over another one before the rename
        returns, which cost ~13 ms here right after a Delta commit. No fsync either: all of it
        is derived from the log, and what a crash could leave (a missing or short file) is
        caught by its length or checksum and rebuilt."""
        if self._local is None:
            self.layout.files().put(key, data)
            return
        path = self._local / key
        folder = path.parent
        if folder not in self._made:
            make_dirs(folder)
            self._made.add(folder)
        tmp = folder / f".tmp-{os.getpid()}-{threading.get_ident()}-{path.name}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, file_mode(folder))
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        os.replace(tmp, path)

    def edge_keys(self) -> list[str]:
        """The saved edges' keys, newest (largest size) first."""
        if self._local is not None:
            try:
                names = os.listdir(self._local / EDGES)
            except (FileNotFoundError, NotADirectoryError):
                return []
            keys = [f"{EDGES}/{name}" for name in names]
        else:
            keys = self.layout.files().list(EDGES)
        return sorted((k for k in keys if k.rsplit("/", 1)[-1].isdigit()), reverse=True)

    def load_edge(self) -> Edge | None:
        """The newest valid saved edge (None: none, or none valid: the tree is then rebuilt)."""
        for key in self.edge_keys():
            data = self.read(key)
            try:
                edge = Edge.decode(data or b"")
            except (ValueError, struct.error):
                continue  # cut short by a crash, or being written right now: the one before
            if edge.size == int(key.rsplit("/", 1)[-1]):
                return edge
        return None

    def _save_edge(self, edge: Edge) -> None:
        """Save ``edge`` under its size, then remove the older edges."""
        key = f"{EDGES}/{edge.size:020d}"
        self._put(key, edge.encode())
        for old in self.edge_keys():
            if old < key:
                self._delete(old)

    def _delete(self, key: str) -> None:
        if self._local is not None:
            try:
                os.unlink(self._local / key)
            except FileNotFoundError:
                pass
        else:
            self.layout.files().delete(key)

    def _save(self, edge: Edge, tiles: list[tuple[int, int, bytes]]) -> None:
        for level, index, data in tiles:  # tiles first: a saved edge never names a missing tile
            self._put(tile_key(level, index), data)
        self._save_edge(edge)

    def _save_quietly(self, edge: Edge, tiles: list[tuple[int, int, bytes]]) -> None:
        try:
            self._save(edge, tiles)
        except (OSError, StoreError) as exc:
            warnings.warn(f"refold: could not save the Merkle tree under {self.layout.root}/{FOLDER} ({exc}); "
                          "proofs rebuild it from the log", RuntimeWarning, stacklevel=3)

    # -- growing ------------------------------------------------------------------------------------

    def appended(self, first: int, commitments: Sequence[str], log) -> Edge:
        """Extend the tree by the leaves of seqs ``first…`` (their hex ``commitments``), which the
        caller's commit just added to ``log``; save the tiles they complete, and the edge (see
        :data:`SAVE_EVERY`). Returns the new edge."""
        with self._lock:
            edge = self._edge if self._edge is not None and self._edge.size == first else None
            if edge is None:
                edge = self._caught_up(log, first)
                self._saved = -SAVE_EVERY  # loaded, not ours: save the next edge, for the next process
            grown = edge.copy()
            tiles = grown.extend(leaf_hashes(commitments))
            for level, index, data in tiles:  # (before the edge: a saved edge never names a missing tile)
                self._put(tile_key(level, index), data)
            if tiles or grown.size - self._saved >= SAVE_EVERY:
                self._save_edge(grown)
                self._saved = grown.size
            self._edge = grown
            return grown

    def _caught_up(self, log, size: int) -> Edge:
        """The edge at exactly ``size`` leaves: the saved one, extended from the log's
        commitments when it is behind; rebuilt from the log when it is ahead (the log was cut
        back, or the edge is not this log's) or missing."""
        edge = self.load_edge()
        if edge is None or edge.size > size:
            edge = Edge()
        if edge.size == size:
            return edge
        tiles: list[tuple[int, int, bytes]] = []
        for lo in range(edge.size, size, CATCH_UP_CHUNK):
            hi = min(size, lo + CATCH_UP_CHUNK)
            tiles += edge.extend(leaf_hashes(commitments_of(log, lo, hi)))
        self._save_quietly(edge, tiles)
        self._saved = edge.size
        return edge

    def current(self, log, size: int, events: int) -> Edge:
        """An edge of at least ``size`` leaves for a log of ``events`` events, caught up from the
        log and saved when the saved one is behind, rebuilt when it claims more than the log."""
        with self._lock:
            edge = self.load_edge()
            if edge is not None and self._edge is not None and events >= self._edge.size > edge.size:
                edge = self._edge  # (a slower writer saved an older edge: ours is newer)
            if edge is not None and edge.size > events:
                events = log_size(log)  # the log may have grown since the caller looked
                if edge.size > events:
                    edge = None  # not this log's tree (the log was cut back): rebuild it
            if edge is None or edge.size < size:
                edge = self._caught_up(log, events)
            self._edge = edge
            return edge

    # -- reading ------------------------------------------------------------------------------------

    def cached_levels(self, key: tuple[Any, ...], make) -> list[list[bytes]]:
        """The node levels of a complete tile (its hashes never change): ``make()``'s the first
        time ``key`` is asked for, kept for the next proofs."""
        with self._lock:
            levels = self._tiles.get(key)
            if levels is None:
                levels = make()
                self._tiles[key] = levels
                if len(self._tiles) > 64:
                    self._tiles.popitem(last=False)
            else:
                self._tiles.move_to_end(key)
            return levels

    def edge_levels(self, edge: Edge, level: int) -> list[list[bytes]]:
        """The node levels of ``edge``'s own (incomplete) row at ``level``, computed once per edge."""
        with self._lock:
            if level not in edge.levels:
                edge.levels[level] = levels(edge.rows[level])
            return edge.levels[level]

    def stored_tile(self, level: int, index: int, log) -> list[bytes]:
        """The 256 hashes of the complete tile ``index`` at ``level`` (>= 1), from its file, or
        rebuilt from the level below (and saved) when the file is missing or not 8 KiB."""
        data = self.read(tile_key(level, index))
        if data is not None and len(data) == TILE * 32:
            return [data[i:i + 32] for i in range(0, len(data), 32)]
        if level == 1:  # one read of the 65,536 commitments below
            lo = index << (2 * TILE_HEIGHT)
            leaves = leaf_hashes(commitments_of(log, lo, lo + (1 << (2 * TILE_HEIGHT))))
            below = [_perfect(leaves[i:i + TILE]) for i in range(0, len(leaves), TILE)]
        else:
            below = [_perfect(self.stored_tile(level - 1, t, log)) for t in range(index * TILE, (index + 1) * TILE)]
        try:
            self._put(tile_key(level, index), b"".join(below))
        except (OSError, StoreError):
            pass
        return below

    def bottom_tile(self, index: int, log, size: int | None = None) -> tuple[list[bytes], pa.Table]:
        """The leaf hashes of bottom tile ``index`` (seqs 256·index …, up to ``size``) and the log
        rows they come from (seq, commitment, kind, erasure_id)."""
        lo = index * TILE
        hi = lo + TILE if size is None else min(lo + TILE, size)
        rows = rows_of(log, lo, hi, ["commitment", "kind", "erasure_id"])
        return leaf_hashes(rows["commitment"].to_pylist()), rows


# -- verify's side --------------------------------------------------------------------------------------


def rows_of(log, lo: int, hi: int, columns: list[str]) -> pa.Table:
    """The log's rows of seqs [lo, hi), in seq order, checked to be exactly those seqs."""
    table = log.arrow(columns=["seq", *columns], filter=(pc.field("seq") >= lo) & (pc.field("seq") < hi),
                      prune=[{"seq": (lo, hi - 1)}])
    seqs = table["seq"]
    if len(seqs) != hi - lo or (hi > lo and (seqs[0].as_py() != lo or seqs[-1].as_py() != hi - 1)):
        raise IntegrityError(f"the log does not hold seqs {lo}..{hi - 1} exactly once each (found {len(seqs)} rows); "
                             f"run `refold verify {log.layout.root}`", first_bad_seq=lo)
    return table


def commitments_of(log, lo: int, hi: int) -> list[str]:
    return rows_of(log, lo, hi, ["commitment"])["commitment"].to_pylist()


def log_size(log) -> int:
    """How many events the log holds (its head's seq + 1)."""
    return log.head().seq + 1
