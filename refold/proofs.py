"""Merkle tree proofs over the log, as RFC 9162 §2.1 defines them: what an auditor runs, alone.

refold keeps a Merkle tree over its log (:mod:`refold.storage.log.merkle`). Leaf *i* is the leaf
hash of event seq *i*'s commitment (its 32 bytes: the ``commitment`` column, hex-decoded), which
erasure keeps, so an erasure never changes a leaf and old proofs stay valid::

    leaf_hash(entry)   = SHA-256(0x00 ‖ entry)
    node_hash(l, r)    = SHA-256(0x01 ‖ l ‖ r)
    MTH({})            = SHA-256()
    MTH(D[n])          = node_hash(MTH(D[0:k]), MTH(D[k:n]))   k: the largest power of 2 below n

This module is the auditor's side and needs no store: it imports nothing of refold but its error
root. :func:`verify_inclusion` and :func:`verify_consistency` take bytes and return ``True`` or
raise :class:`ProofError` (following RFC 9162 §2.1.3.2 and §2.1.4.2, and transparency-dev's
verifier where the RFC leaves a case open: sizes of 0, equal sizes, hash lengths).
:func:`parse_proof` reads the JSON a ``refold proof`` command prints, strictly: one JSON object,
known fields only, canonical base64 hashes of 32 bytes. Proof *generation*
(:func:`inclusion_proof`, :func:`consistency_proof`) follows RFC 9162 §2.1.3.1 and §2.1.4.1 over
any source of subtree hashes, so the store answers without rehashing the log.

What a proof shows, and what it does not: docs/verify.md.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from refold.fold.errors import IntegrityError

__all__ = [
    "EMPTY_ROOT", "HASH_SIZE", "ConsistencyProof", "InclusionProof", "ProofError", "TreeSource",
    "consistency_proof", "inclusion_proof", "leaf_hash", "list_subtree", "mth", "node_hash",
    "parse_proof", "root", "verify_consistency", "verify_inclusion",
]

HASH_SIZE = 32
#: MTH of the empty list
EMPTY_ROOT = hashlib.sha256(b"").digest()
#: the largest tree size a proof may name (RFC 9162 sizes are uint64; JSON readers stop at 2**53)
MAX_SIZE = 2 ** 53


class ProofError(IntegrityError):
    """A proof that does not verify, or input that is not a proof; the message says which part
    and what to do."""


# -- the tree ---------------------------------------------------------------------------------------


def leaf_hash(entry: bytes) -> bytes:
    """SHA-256(0x00 ‖ entry): the hash of one leaf."""
    return hashlib.sha256(b"\x00" + bytes(entry)).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """SHA-256(0x01 ‖ left ‖ right): the hash of an interior node."""
    return hashlib.sha256(b"\x01" + bytes(left) + bytes(right)).digest()


def root(leaves: Sequence[bytes]) -> bytes:
    """MTH over ``leaves`` (leaf hashes, in order): the root of the tree that holds them.

    Computed bottom-up, an odd last node carried to the next level unchanged, which gives RFC
    9162's MTH (a split at the largest power of two) for every size."""
    level = list(leaves)
    if not level:
        return EMPTY_ROOT
    while len(level) > 1:
        paired = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            paired.append(level[-1])
        level = paired
    return level[0]


def mth(entries: Sequence[bytes]) -> bytes:
    """MTH over ``entries`` (the leaves' inputs, not yet hashed)."""
    return root([leaf_hash(e) for e in entries])


#: the hash of leaves [lo, hi) of a tree: MTH(D[lo:hi]) (asked only for ranges the RFC's recursion
#: visits: lo is a multiple of the smallest power of two >= hi - lo)
Subtree = Callable[[int, int], bytes]


def _split(n: int) -> int:
    """The largest power of two below ``n`` (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


def list_subtree(leaves: Sequence[bytes]) -> Subtree:
    """A :data:`Subtree` over leaf hashes held in memory (small trees, tests)."""
    return lambda lo, hi: root(leaves[lo:hi])


def inclusion_proof(index: int, size: int, subtree: Subtree) -> list[bytes]:
    """PATH(index, D[size]) of RFC 9162 §2.1.3.1: the audit path of leaf ``index`` in the tree of
    the first ``size`` leaves, lowest level first."""
    if not 0 <= index < size:
        raise ProofError(f"leaf {index} is not in a tree of size {size}")
    path: list[bytes] = []
    lo, hi = 0, size
    while hi - lo > 1:  # walk down from the root, collecting the other side of each split
        k = _split(hi - lo)
        if index < lo + k:
            path.append(subtree(lo + k, hi))
            hi = lo + k
        else:
            path.append(subtree(lo, lo + k))
            lo += k
    path.reverse()
    return path


def consistency_proof(size1: int, size2: int, subtree: Subtree) -> list[bytes]:
    """PROOF(size1, D[size2]) of RFC 9162 §2.1.4.1 (empty when the sizes are equal)."""
    if not 0 < size1 <= size2:
        raise ProofError(f"no consistency proof from tree size {size1} to {size2}: it needs 0 < size1 <= size2")
    proof: list[bytes] = []
    lo, hi, complete = 0, size2, True
    while size1 - lo != hi - lo:  # SUBPROOF(size1 - lo, D[lo:hi], complete), unrolled
        k = _split(hi - lo)
        if size1 - lo <= k:
            proof.append(subtree(lo + k, hi))
            hi = lo + k
        else:
            proof.append(subtree(lo, lo + k))
            lo += k
            complete = False
    if not complete:  # the old tree's last node, which the verifier cannot know
        proof.append(subtree(lo, hi))
    proof.reverse()
    return proof


# -- verification -------------------------------------------------------------------------------------


def _hash(value: Any, what: str) -> bytes:
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise ProofError(f"{what} is a {type(value).__name__}, not bytes")
    value = bytes(value)
    if len(value) != HASH_SIZE:
        raise ProofError(f"{what} is {len(value)} bytes long; a SHA-256 hash has {HASH_SIZE}")
    return value


def _size(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ProofError(f"{what} is a {type(value).__name__}, not an integer")
    if not 0 <= value <= MAX_SIZE:
        raise ProofError(f"{what} {value} is out of range (0..2**53)")
    return value


def _path(proof: Any, what: str = "proof") -> list[bytes]:
    if proof is None:
        return []
    if isinstance(proof, (bytes, bytearray, str)) or not isinstance(proof, Sequence):
        raise ProofError(f"the {what} is a {type(proof).__name__}, not a list of hashes")
    return [_hash(p, f"{what}[{i}]") for i, p in enumerate(proof)]


def verify_inclusion(leaf_hash: bytes, leaf_index: int, tree_size: int, proof: Sequence[bytes],
                     root: bytes) -> bool:
    """True when ``proof`` shows the leaf ``leaf_hash`` at ``leaf_index`` in the tree of size
    ``tree_size`` whose root is ``root`` (RFC 9162 §2.1.3.2); else :class:`ProofError`."""
    index, size = _size(leaf_index, "leaf_index"), _size(tree_size, "tree_size")
    leaf, expected, path = _hash(leaf_hash, "leaf_hash"), _hash(root, "root"), _path(proof)
    if index >= size:
        raise ProofError(f"leaf_index {index} is not below tree_size {size}")
    fn, sn, r = index, size - 1, leaf
    for p in path:
        if sn == 0:
            raise ProofError(f"the proof has {len(path)} hashes, more than leaf {index} of a tree of size "
                             f"{size} needs")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError(f"the proof has {len(path)} hashes, fewer than leaf {index} of a tree of size "
                         f"{size} needs")
    if r != expected:
        raise ProofError(f"the proof does not lead from leaf {index} to the root of the tree of size {size}: "
                         "the leaf, a proof hash or the root differs from what the log holds")
    return True


def verify_consistency(size1: int, size2: int, proof: Sequence[bytes], root1: bytes, root2: bytes) -> bool:
    """True when ``proof`` shows that the tree of size ``size2`` and root ``root2`` extends the
    tree of size ``size1`` and root ``root1`` (RFC 9162 §2.1.4.2); else :class:`ProofError`.

    A proof from the empty tree is refused (every tree extends it, so it proves nothing), as
    transparency-dev's verifier does; equal sizes need an empty proof and equal roots."""
    m, n = _size(size1, "size1"), _size(size2, "size2")
    path = _path(proof)
    if m == n and m > 0:  # a tree extends itself: only equality counts (transparency-dev's vectors
        # accept equal roots of any length here, and reject nothing else)
        for value, what in ((root1, "root1"), (root2, "root2")):
            if not isinstance(value, (bytes, bytearray, memoryview)):
                raise ProofError(f"{what} is a {type(value).__name__}, not bytes")
        if path:
            raise ProofError(f"size1 and size2 are both {m}, so the proof must be empty; it has {len(path)} hashes")
        if bytes(root1) != bytes(root2):
            raise ProofError(f"size1 and size2 are both {m} but the roots differ: two different logs")
        return True
    first, second = _hash(root1, "root1"), _hash(root2, "root2")
    if m > n:
        raise ProofError(f"size1 {m} is greater than size2 {n}: a log never shrinks; swap them if they were "
                         "given the wrong way round")
    if m == 0:
        raise ProofError("size1 is 0: every tree extends the empty one, so there is nothing to prove; "
                         "ask for a proof from a checkpoint you hold")
    if not path:
        raise ProofError(f"the proof from size {m} to {n} is empty")
    if m & (m - 1) == 0:  # an exact power of 2: the old tree is a node of the new one
        path = [first, *path]
    fn, sn = m - 1, n - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofError(f"the proof from size {m} to {n} has more hashes than it needs")
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError(f"the proof from size {m} to {n} has fewer hashes than it needs")
    if fr != first:
        raise ProofError(f"the proof does not lead to root1 (size {m}): the old tree is not a prefix of the new "
                         "one, or a proof hash or root1 was changed")
    if sr != second:
        raise ProofError(f"the proof does not lead to root2 (size {n}): the new tree does not extend the old "
                         "one, or a proof hash or root2 was changed")
    return True


# -- proofs as values and as JSON ------------------------------------------------------------------------


def b64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def _unb64(value: Any, what: str, *, size: int | None = HASH_SIZE) -> bytes:
    if not isinstance(value, str):
        raise ProofError(f"field {what!r} is a {type(value).__name__}, not base64 text")
    try:
        raw = base64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise ProofError(f"field {what!r} is not base64 (RFC 4648, standard alphabet, padded)") from None
    if b64(raw) != value:
        raise ProofError(f"field {what!r} is not canonical base64 (stray padding or bits)")
    if size is not None and len(raw) != size:
        raise ProofError(f"field {what!r} holds {len(raw)} bytes; a SHA-256 hash has {size}")
    return raw


class TreeSource(Protocol):
    """What proofs are generated from: a tree of ``size`` leaves that answers subtree hashes and
    the leaf entries (:class:`refold.storage.log.tree_views.TreeView` is one)."""

    size: int

    def subtree(self, lo: int, hi: int) -> bytes: ...

    def entry(self, index: int) -> tuple[bytes, Mapping[str, Any]]: ...


_INCLUSION = ("leaf_index", "tree_size", "leaf_hash", "proof", "root")
_INCLUSION_OPTIONAL = ("entry", "commitment", "erased", "erasure_id")
_CONSISTENCY = ("size1", "size2", "proof", "root1", "root2")


@dataclass(frozen=True)
class InclusionProof:
    """Leaf ``leaf_index`` (event seq ``leaf_index``) is in the tree of size ``tree_size`` whose
    root is ``root``. ``entry``: the leaf's input (the event's 32-byte commitment); ``erased`` and
    ``erasure_id`` say that the event was erased (its commitment is all that is left: the proof
    carries no content either way). Those two are the store's word, not covered by the proof."""

    leaf_index: int
    tree_size: int
    leaf_hash: bytes
    proof: tuple[bytes, ...]
    root: bytes
    entry: bytes | None = None
    erased: bool = False
    erasure_id: str | None = None

    @classmethod
    def of(cls, tree: TreeSource, index: int) -> "InclusionProof":
        """The proof of leaf ``index`` in ``tree``."""
        entry, info = tree.entry(index)
        return cls(index, tree.size, leaf_hash(entry), tuple(inclusion_proof(index, tree.size, tree.subtree)),
                   tree.subtree(0, tree.size), entry, bool(info.get("erased")), info.get("erasure_id"))

    def verify(self, root: bytes | None = None) -> bool:
        """True when the proof verifies against ``root`` (default: its own); the entry, when
        given, must hash to the leaf."""
        if self.entry is not None and leaf_hash(self.entry) != self.leaf_hash:
            raise ProofError("field 'entry' does not hash to 'leaf_hash': SHA-256(0x00 ‖ entry) differs")
        return verify_inclusion(self.leaf_hash, self.leaf_index, self.tree_size, self.proof,
                                self.root if root is None else root)

    @property
    def commitment(self) -> str | None:
        """The entry as the log's ``commitment`` column shows it (hex)."""
        return None if self.entry is None else self.entry.hex()

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"leaf_index": self.leaf_index, "tree_size": self.tree_size,
                               "leaf_hash": b64(self.leaf_hash), "proof": [b64(p) for p in self.proof],
                               "root": b64(self.root)}
        if self.entry is not None:
            out["entry"] = b64(self.entry)
            out["commitment"] = self.entry.hex()
        if self.erased:
            out["erased"] = True
            out["erasure_id"] = self.erasure_id
        return out

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> "InclusionProof":
        _fields(value, _INCLUSION, _INCLUSION_OPTIONAL, "an inclusion proof")
        entry = _unb64(value["entry"], "entry", size=None) if "entry" in value else None
        if "commitment" in value:
            commitment = value["commitment"]
            if entry is None or not isinstance(commitment, str) or commitment != entry.hex():
                raise ProofError("field 'commitment' is not the hex of field 'entry'")
        erased = value.get("erased", False)
        erasure_id = value.get("erasure_id")
        if not isinstance(erased, bool) or not (erasure_id is None or isinstance(erasure_id, str)):
            raise ProofError("field 'erased' must be true or false and 'erasure_id' a string")
        proof = cls(_json_size(value, "leaf_index"), _json_size(value, "tree_size"),
                    _unb64(value["leaf_hash"], "leaf_hash"), _json_path(value), _unb64(value["root"], "root"),
                    entry, erased, erasure_id)
        if entry is not None and leaf_hash(entry) != proof.leaf_hash:
            raise ProofError("field 'entry' does not hash to 'leaf_hash': SHA-256(0x00 ‖ entry) differs")
        return proof


@dataclass(frozen=True)
class ConsistencyProof:
    """The tree of size ``size2`` (root ``root2``) extends the tree of size ``size1`` (root
    ``root1``): its first ``size1`` leaves are those of the older tree, unchanged."""

    size1: int
    size2: int
    proof: tuple[bytes, ...]
    root1: bytes
    root2: bytes

    @classmethod
    def of(cls, tree: TreeSource, size1: int) -> "ConsistencyProof":
        """The proof from ``size1`` to ``tree``'s size."""
        return cls(size1, tree.size, tuple(consistency_proof(size1, tree.size, tree.subtree)),
                   tree.subtree(0, size1), tree.subtree(0, tree.size))

    def verify(self, root1: bytes | None = None, root2: bytes | None = None) -> bool:
        return verify_consistency(self.size1, self.size2, self.proof, self.root1 if root1 is None else root1,
                                  self.root2 if root2 is None else root2)

    def as_json(self) -> dict[str, Any]:
        return {"size1": self.size1, "size2": self.size2, "proof": [b64(p) for p in self.proof],
                "root1": b64(self.root1), "root2": b64(self.root2)}

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> "ConsistencyProof":
        _fields(value, _CONSISTENCY, (), "a consistency proof")
        return cls(_json_size(value, "size1"), _json_size(value, "size2"), _json_path(value),
                   _unb64(value["root1"], "root1"), _unb64(value["root2"], "root2"))


def _fields(value: Mapping[str, Any], required: tuple[str, ...], optional: tuple[str, ...], what: str) -> None:
    missing = [k for k in required if k not in value]
    if missing:
        raise ProofError(f"{what} needs field(s) {', '.join(missing)}")
    unknown = sorted(set(value) - set(required) - set(optional))
    if unknown:
        raise ProofError(f"unknown field(s) {', '.join(map(repr, unknown))} in {what}; a proof holds only "
                         f"{', '.join(required + optional)}")


def _json_size(value: Mapping[str, Any], name: str) -> int:
    number = value[name]
    if not isinstance(number, int) or isinstance(number, bool) or not 0 <= number <= MAX_SIZE:
        raise ProofError(f"field {name!r} must be a whole number from 0 to 2**53, not {number!r}")
    return number


def _json_path(value: Mapping[str, Any]) -> tuple[bytes, ...]:
    proof = value["proof"]
    if not isinstance(proof, list):
        raise ProofError(f"field 'proof' must be a list of base64 hashes, not {type(proof).__name__}")
    return tuple(_unb64(p, f"proof[{i}]") for i, p in enumerate(proof))


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, val in pairs:
        if key in out:
            raise ProofError(f"field {key!r} appears twice")
        out[key] = val
    return out


def _no_constant(name: str) -> Any:
    raise ProofError(f"{name} is not a JSON number")


#: the largest proof file read (a proof of a 2**53-leaf tree is ~4 KiB)
MAX_PROOF_BYTES = 1 << 20


def parse_proof(data: bytes | str) -> InclusionProof | ConsistencyProof:
    """The proof in ``data``: exactly one JSON object (whitespace around it allowed, nothing
    else), with the fields of an inclusion proof (``leaf_index`` …) or of a consistency proof
    (``size1`` …). Raises :class:`ProofError` saying what is wrong."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    if len(data) > MAX_PROOF_BYTES:
        raise ProofError(f"the proof is {len(data)} bytes; a proof is a few KiB at most")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProofError(f"the proof is not UTF-8 text (byte {exc.start})") from None
    if text.startswith("\ufeff"):
        raise ProofError("the proof starts with a byte-order mark; save it as plain UTF-8")
    try:
        value = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise ProofError(f"the proof is not one JSON object ({exc.msg} at line {exc.lineno} column {exc.colno}); "
                         "remove anything before or after it") from None
    except RecursionError:
        raise ProofError("the proof nests too deeply to be a proof") from None
    if not isinstance(value, dict):
        raise ProofError(f"the proof is a JSON {type(value).__name__}, not an object")
    if "leaf_index" in value or "tree_size" in value:
        return InclusionProof.from_json(value)
    if "size1" in value or "size2" in value:
        return ConsistencyProof.from_json(value)
    raise ProofError("the JSON object is neither an inclusion proof (leaf_index, tree_size, …) nor a "
                     "consistency proof (size1, size2, …); make one with `refold proof`")
