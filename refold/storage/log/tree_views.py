"""Views of the Merkle tree at a size: the nodes a proof needs (:func:`tree_view`), and the check
``verify`` runs of the stored tree against the log (:func:`check_tree`). The tree itself, its tiles
and edge, live in :mod:`refold.storage.log.merkle`.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from refold.fold.errors import IntegrityError, ValidationError
from refold.storage.log import merkle  # (its tile constants read at call time: tests shrink them)
from refold.storage.log.merkle import (
    Edge, MerkleTree, leaf_hashes, levels, log_size, node_hash, rows_of, tile_key,
)


class TreeView:
    """The tree of the log's first ``size`` leaves, answering subtree hashes and leaf entries
    (a :class:`refold.proofs.TreeSource`). ``edge`` is an edge of at least ``size`` leaves."""

    def __init__(self, tree: MerkleTree, edge: Edge, size: int, log):
        self.tree, self.edge, self.size, self.log = tree, edge, size, log
        self._bottom: dict[int, tuple[list[bytes], pa.Table]] = {}

    def _row_levels(self, level: int, index: int) -> list[list[bytes]]:
        """The node levels of tile ``index`` at ``level`` as far as it is complete at the edge's size."""
        tree, edge = self.tree, self.edge
        complete = (index + 1) << (merkle.TILE_HEIGHT * (level + 1)) <= edge.size
        if not complete:  # the edge's own row at that level
            return tree.edge_levels(edge, level)
        if level == 0:
            return tree.cached_levels(("leaves", index), lambda: levels(self._bottom_tile(index)[0]))
        return tree.cached_levels((level, index), lambda: levels(tree.stored_tile(level, index, self.log)))

    def _bottom_tile(self, index: int) -> tuple[list[bytes], pa.Table]:
        if index not in self._bottom:
            self._bottom[index] = self.tree.bottom_tile(index, self.log)
        return self._bottom[index]

    def node(self, height: int, index: int) -> bytes:
        """The complete node at ``height`` over leaves [index·2^height, (index+1)·2^height)."""
        if (index + 1) << height > self.size:
            raise ValueError(f"node {height}/{index} is not complete in a tree of {self.size} leaves")
        level, within = divmod(height, merkle.TILE_HEIGHT)
        first = index << within  # its first descendant in row ``level``
        levels = self._row_levels(level, first >> merkle.TILE_HEIGHT)
        return levels[within][(first & merkle.MASK) >> within]

    def subtree(self, lo: int, hi: int) -> bytes:
        """MTH of leaves [lo, hi) (a range the RFC's recursion visits)."""
        n = hi - lo
        if n <= 0:
            return merkle.EMPTY_ROOT
        if n & (n - 1) == 0:
            height = n.bit_length() - 1
            return self.node(height, lo >> height)
        k = 1 << ((n - 1).bit_length() - 1)
        return node_hash(self.subtree(lo, lo + k), self.subtree(lo + k, hi))

    def root(self) -> bytes:
        return self.subtree(0, self.size)

    def entry(self, index: int) -> tuple[bytes, dict[str, Any]]:
        """Leaf ``index``'s entry (the event's commitment, 32 bytes) and whether it was erased."""
        tile = index >> merkle.TILE_HEIGHT
        if (tile + 1) << merkle.TILE_HEIGHT <= self.edge.size:  # its bottom tile is read for the proof anyway
            row = self._bottom_tile(tile)[1].slice(index & merkle.MASK, 1).to_pylist()[0]
            commitment = bytes.fromhex(row["commitment"])
        else:  # one of the newest leaves, whose hashes the edge holds: check the edge against the log
            row = rows_of(self.log, index, index + 1, ["commitment", "kind", "erasure_id"]).to_pylist()[0]
            commitment = bytes.fromhex(row["commitment"])
            if hashlib.sha256(b"\x00" + commitment).digest() != self.edge.rows[0][index & merkle.MASK]:
                raise IntegrityError(f"the saved Merkle tree ({merkle.EDGES}/) differs from the log at seq {index}; "
                                     "run "
                                     f"`refold verify {self.log.layout.root}`", first_bad_seq=index)
        erased = row["kind"] == "tombstone"
        return commitment, {"erased": erased, "erasure_id": row["erasure_id"] if erased else None}


def tree_view(log, size: int | None = None, *, leaf: int | None = None, since: int | None = None) -> TreeView:
    """The tree of ``log``'s first ``size`` leaves (default: all of them), caught up from the log
    if the saved tree is behind. ``leaf`` / ``since``: the leaf index or the older size a proof
    is asked for, checked here so a bad request fails with what to ask instead."""
    events = log_size(log)
    if size is None:
        size = events
    for name, value in (("size", size), ("seq", leaf), ("size1", since)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise ValidationError(f"{name} must be a whole number >= 0, not {value!r}")
    if size > events:
        raise ValidationError(f"the log holds {events} event(s), so there is no tree of size {size}; "
                              f"ask for a size from 1 to {events}")
    if leaf is not None and leaf >= size:
        raise ValidationError(f"seq {leaf} is not in the tree of size {size}"
                              + (f" (the log holds {events} event(s)); pass a --size above {leaf}"
                                 if leaf < events else f"; the log holds {events} event(s) (seqs 0..{events - 1})"))
    if since is not None and not 0 < since <= size:
        raise ValidationError(f"no consistency proof from size {since} to {size}: the older size must be from 1 "
                              f"to {size}")
    if size == 0 and leaf is None and since is None:
        return TreeView(_tree_of(log), Edge(), 0, log)
    tree = _tree_of(log)
    return TreeView(tree, tree.current(log, size, events), size, log)


def _tree_of(log) -> MerkleTree:
    tree = getattr(log, "merkle", None)
    return tree if isinstance(tree, MerkleTree) else MerkleTree(log.layout)


@dataclass(frozen=True)
class TreeCheck:
    """What :func:`check_tree` found: the root at each size asked for (within the log), problems,
    notes, and the first seq a saved edge holds beyond the log's end (a truncated tail)."""

    roots: dict[int, bytes]
    problems: list[str]
    notes: list[str]
    truncated_at: int | None = None


def check_tree(layout, commitments: Sequence[str], sizes: Iterable[int]) -> TreeCheck:
    """Recompute the tree from ``commitments`` (every event's, in seq order; the chain already
    checked) and compare the stored tiles and edges with it. A missing tile is a note: it is
    rebuilt from the log on demand; one that differs from the log is a problem, and so is an
    edge of more leaves than the log holds (like a published head past the log's end)."""
    tree = MerkleTree(layout)
    problems: list[str] = []
    notes: list[str] = []
    n = len(commitments)
    edges: dict[int, tuple[str, Edge]] = {}  # size → (key, edge) of every saved edge
    truncated: int | None = None  # the first seq a saved edge holds that the log does not
    for key in tree.edge_keys():
        try:
            edge = Edge.decode(tree.read(key) or b"")
            if edge.size != int(key.rsplit("/", 1)[-1]):
                raise ValueError(f"it holds a tree of {edge.size} leaves")
        except (ValueError, struct.error) as exc:
            problems.append(f"{key}: not a valid tree edge ({exc}); remove it, and the next append or proof "
                            "rebuilds the tree from the log")
            continue
        if edge.size > n:
            problems.append(f"{key}: the Merkle tree holds {edge.size} leaves but the log ends at seq {n - 1}: the "
                            "tail was truncated (or the tree is another log's)")
            truncated = n if truncated is None else truncated
            continue
        edges[edge.size] = (key, edge)
    saved = max(edges, default=0)  # tiles complete at this size must be there
    stops = sorted({s for s in sizes if 0 <= s <= n} | set(edges))
    roots: dict[int, bytes] = {}
    edge = Edge()
    bad_tiles: list[str] = []
    missing = 0
    at = 0
    for stop in [*stops, n]:
        for lo in range(at, stop, merkle.CATCH_UP_CHUNK):
            hi = min(stop, lo + merkle.CATCH_UP_CHUNK)
            for level, index, data in edge.extend(leaf_hashes(commitments[lo:hi])):
                found = tree.read(tile_key(level, index))
                if found is None:
                    missing += (index + 1) << (merkle.TILE_HEIGHT * (level + 1)) <= saved
                elif found != data:
                    bad_tiles.append(tile_key(level, index))
        at = max(at, stop)
        roots[stop] = edge.root()
        if stop in edges and edges[stop][1].rows != edge.rows:
            problems.append(f"{edges[stop][0]}: its hashes differ from the tree of the log's first {stop} events "
                            "(an edit, or a bug); remove it, and the next append or proof rebuilds the tree")
    if bad_tiles:
        problems.append(f"{len(bad_tiles)} Merkle tile(s) differ from the tree of the log's commitments, first "
                        f"{bad_tiles[0]} (edited or damaged): proofs from them would not verify; remove them, and "
                        "the next proof rebuilds them from the log")
    if missing:
        notes.append(f"{missing} Merkle tile(s) under {merkle.FOLDER}/ are missing; the next proof rebuilds them "
                     "from the log")
    return TreeCheck(roots, problems, notes, truncated)
