"""The auditor's verifier (refold.proofs, issue #36): RFC 9162 inclusion and consistency proofs.

Checked against an independent source: transparency-dev/merkle's published test vectors
(tests/data/merkle_vectors.json: every inclusion and consistency probe of its testdata/, with the
tree of testonly/constants.go), each accepted or rejected exactly as the vectors say; the proofs
refold generates for that tree equal the vectors' happy paths byte for byte. Then, on trees of
every size up to 64 against a reference MTH written here from the RFC's recursive definition:
every valid proof is accepted, and every malformed one (a flipped bit in any hash, a hash
dropped, added or duplicated, wrong sizes or index, swapped or wrong roots) is rejected. And the
JSON a `refold proof` command prints is read strictly: garbage before or after, duplicate or
unknown fields, non-canonical base64, booleans for numbers.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest

from refold import proofs
from refold.fold.errors import IntegrityError, RefoldError
from refold.proofs import (EMPTY_ROOT, ConsistencyProof, InclusionProof, ProofError, consistency_proof,
                           inclusion_proof, leaf_hash, list_subtree, node_hash, parse_proof, root,
                           verify_consistency, verify_inclusion)

VECTORS = json.loads((Path(__file__).parent / "data" / "merkle_vectors.json").read_text())


def _b(text: str | None) -> bytes:
    return base64.b64decode(text or "")


def _accepts(check, *args) -> bool:
    try:
        return check(*args) is True
    except ProofError:
        return False


# -- the published vectors (transparency-dev/merkle testdata) ------------------------------------


@pytest.mark.parametrize("probe", VECTORS["inclusion"], ids=lambda p: p["name"])
def test_inclusion_vectors(probe):
    accepted = _accepts(verify_inclusion, _b(probe["leafHash"]), probe["leafIdx"], probe["treeSize"],
                        [_b(p) for p in probe["proof"] or []], _b(probe["root"]))
    assert accepted is not probe["wantErr"]


@pytest.mark.parametrize("probe", VECTORS["consistency"], ids=lambda p: p["name"])
def test_consistency_vectors(probe):
    accepted = _accepts(verify_consistency, probe["size1"], probe["size2"], [_b(p) for p in probe["proof"] or []],
                        _b(probe["root1"]), _b(probe["root2"]))
    assert accepted is not probe["wantErr"]


def test_the_vectors_cover_both_outcomes():
    for kind in ("inclusion", "consistency"):
        wanted = [p["wantErr"] for p in VECTORS[kind]]
        assert len(wanted) == 98 and wanted.count(False) >= 6 and wanted.count(True) >= 90


LEAVES = [leaf_hash(bytes.fromhex(x)) for x in VECTORS["leaf_inputs_hex"]]


def test_roots_of_the_reference_tree():
    assert root([]) == EMPTY_ROOT == hashlib.sha256(b"").digest()
    for size, expected in enumerate(VECTORS["root_hashes_hex"]):
        assert root(LEAVES[:size]).hex() == expected
        assert proofs.mth([bytes.fromhex(x) for x in VECTORS["leaf_inputs_hex"][:size]]).hex() == expected


def test_generated_proofs_equal_the_vectors_happy_paths():
    subtree = list_subtree(LEAVES)
    inclusion = [p for p in VECTORS["inclusion"] if not p["wantErr"] and p["treeSize"] <= len(LEAVES)
                 and _b(p["leafHash"]) == LEAVES[p["leafIdx"]]]
    consistency = [p for p in VECTORS["consistency"] if not p["wantErr"] and p["size1"] > 0]
    assert len(inclusion) >= 5 and len(consistency) >= 5
    for p in inclusion:
        assert inclusion_proof(p["leafIdx"], p["treeSize"], subtree) == [_b(x) for x in p["proof"] or []]
        assert root(LEAVES[:p["treeSize"]]) == _b(p["root"])
    for p in consistency:
        assert consistency_proof(p["size1"], p["size2"], subtree) == [_b(x) for x in p["proof"] or []]


# -- every proof of small trees, against a reference written from the RFC ---------------------------


def _mth(leaves: list[bytes]) -> bytes:
    """RFC 9162 §2.1.1, recursively: MTH(D[n]) = HASH(0x01 ‖ MTH(D[0:k]) ‖ MTH(D[k:n]))."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return leaves[0]
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    return hashlib.sha256(b"\x01" + _mth(leaves[:k]) + _mth(leaves[k:])).digest()


def _tree(n: int) -> list[bytes]:
    return [leaf_hash(i.to_bytes(4, "big")) for i in range(n)]


def _mutations(proof: list[bytes]) -> list[list[bytes]]:
    """Every proof one edit away from ``proof``: a flipped bit in each hash, each hash dropped or
    duplicated, a hash added at either end, two hashes swapped."""
    out = []
    for i in range(len(proof)):
        for bit in (0, 255):
            changed = bytearray(proof[i])
            changed[bit // 8] ^= 1 << (bit % 8)
            out.append(proof[:i] + [bytes(changed)] + proof[i + 1:])
        out.append(proof[:i] + proof[i + 1:])
        out.append(proof[:i + 1] + proof[i:])
    out += [[hashlib.sha256(b"x").digest(), *proof], [*proof, hashlib.sha256(b"x").digest()], [*proof, EMPTY_ROOT]]
    out += [proof[:i] + [proof[i + 1], proof[i]] + proof[i + 2:] for i in range(len(proof) - 1)
            if proof[i] != proof[i + 1]]
    return out


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 17, 31, 33, 64])
def test_every_inclusion_proof_verifies_and_every_edit_of_it_does_not(n):
    leaves = _tree(n)
    top = _mth(leaves)
    assert root(leaves) == top
    for i in range(n):
        proof = inclusion_proof(i, n, list_subtree(leaves))
        assert verify_inclusion(leaves[i], i, n, proof, top) is True
        for bad in _mutations(proof):
            assert not _accepts(verify_inclusion, leaves[i], i, n, bad, top), (i, bad)
        for index in (i + 1, i - 1, i ^ 1, n, n + 5):
            if index not in (i, -1):
                assert not _accepts(verify_inclusion, leaves[i], index, n, proof, top), index
        for size in (n - 1, n + 1, n * 2, 0):
            # a size whose audit path has another shape is refused; one of the same shape (leaf 0
            # of a tree of 3 or of 4: two hashes, both on the right) passes, as RFC 9162's algorithm
            # lets it: the checkpoint's signature binds the root to its size
            if size <= i or len(inclusion_proof(i, size, list_subtree(_tree(size)))) != len(proof):
                assert not _accepts(verify_inclusion, leaves[i], i, size, proof, top), size
        assert not _accepts(verify_inclusion, leaves[(i + 1) % n], i, n, proof, top) or n == 1
        assert not _accepts(verify_inclusion, leaves[i], i, n, proof, hashlib.sha256(top).digest())
        assert not _accepts(verify_inclusion, top, i, n, proof, leaves[i]) or n == 1  # swapped leaf and root


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 17, 33, 64])
def test_every_consistency_proof_verifies_and_every_edit_of_it_does_not(n):
    leaves = _tree(n)
    top = _mth(leaves)
    for m in range(1, n + 1):
        old = _mth(leaves[:m])
        proof = consistency_proof(m, n, list_subtree(leaves))
        assert verify_consistency(m, n, proof, old, top) is True
        for bad in _mutations(proof) if m < n else [[old]]:
            assert not _accepts(verify_consistency, m, n, bad, old, top), (m, bad)
        if m < n:
            assert not _accepts(verify_consistency, n, m, proof, top, old)  # swapped sizes and roots
            assert not _accepts(verify_consistency, m, n, proof, top, old)  # swapped roots
            assert not _accepts(verify_consistency, m, n, proof, old, _mth(leaves[:n - 1]))
            assert not _accepts(verify_consistency, m, n, proof, _mth(_tree(m + 1)[1:]) if m > 0 else old, top)
            for s1, s2 in ((m + 1, n), (m - 1, n), (m, n + 1), (m, n - 1), (0, n), (n, m)):
                if (s1, s2) == (m, n):
                    continue
                same_shape = 0 < s1 < s2 and len(consistency_proof(s1, s2, list_subtree(_tree(s2)))) == len(proof)
                if not same_shape:
                    assert not _accepts(verify_consistency, s1, s2, proof, old, top), (s1, s2)


def test_a_consistency_proof_cannot_hide_a_changed_leaf():
    leaves = _tree(20)
    forked = list(leaves)
    forked[3] = leaf_hash(b"rewritten")
    for m in range(4, 20):  # the old tree held leaf 3; the new one holds another leaf there
        proof = consistency_proof(m, 20, list_subtree(forked))
        assert not _accepts(verify_consistency, m, 20, proof, root(leaves[:m]), root(forked))


def test_bad_arguments_are_proof_errors_saying_what():
    leaf, top = _tree(1)[0], _tree(1)[0]
    cases = [
        ((leaf, 0, 1, [], top[:31]), "root is 31 bytes"),
        ((leaf[:5], 0, 1, [], top), "leaf_hash is 5 bytes"),
        (("ab" * 16, 0, 1, [], top), "not bytes"),
        ((leaf, -1, 1, [], top), "out of range"),
        ((leaf, True, 1, [], top), "not an integer"),
        ((leaf, 0, 2 ** 60, [], top), "out of range"),
        ((leaf, 0, 1, b"x" * 32, top), "not a list"),
        ((leaf, 1, 1, [], top), "not below tree_size"),
    ]
    for args, words in cases:
        with pytest.raises(ProofError, match=words):
            verify_inclusion(*args)
    assert issubclass(ProofError, IntegrityError) and issubclass(ProofError, RefoldError)
    with pytest.raises(ProofError, match="size1 4 is greater than size2 3"):
        verify_consistency(4, 3, [top], top, top)
    with pytest.raises(ProofError, match="size1 is 0"):
        verify_consistency(0, 3, [], EMPTY_ROOT, top)
    with pytest.raises(ProofError, match="empty"):
        verify_consistency(2, 3, [], top, top)
    with pytest.raises(ProofError):
        inclusion_proof(3, 3, list_subtree(_tree(3)))
    with pytest.raises(ProofError):
        consistency_proof(0, 3, list_subtree(_tree(3)))


def test_node_and_leaf_hashes_are_domain_separated():
    a, b = b"a" * 32, b"b" * 32
    assert node_hash(a, b) == hashlib.sha256(b"\x01" + a + b).digest()
    assert leaf_hash(a + b) == hashlib.sha256(b"\x00" + a + b).digest() != node_hash(a, b)


# -- the JSON of a proof ----------------------------------------------------------------------------


def _inclusion_json(n: int = 11, i: int = 6) -> dict:
    entries = [hashlib.sha256(str(k).encode()).digest() for k in range(n)]
    leaves = [leaf_hash(e) for e in entries]
    p = InclusionProof(i, n, leaves[i], tuple(inclusion_proof(i, n, list_subtree(leaves))), root(leaves), entries[i])
    return p.as_json()


def _consistency_json() -> dict:
    leaves = _tree(11)
    p = ConsistencyProof(5, 11, tuple(consistency_proof(5, 11, list_subtree(leaves))), root(leaves[:5]), root(leaves))
    return p.as_json()


def test_proof_json_round_trips_and_verifies():
    value = _inclusion_json()
    assert set(value) == {"leaf_index", "tree_size", "leaf_hash", "entry", "commitment", "proof", "root"}
    p = parse_proof(json.dumps(value, indent=2))
    assert isinstance(p, InclusionProof) and p.verify() and p.as_json() == value
    assert p.commitment == base64.b64decode(value["entry"]).hex() == value["commitment"]
    c = parse_proof(json.dumps(_consistency_json()).encode())
    assert isinstance(c, ConsistencyProof) and c.verify() and c.as_json() == _consistency_json()
    assert parse_proof("\n  " + json.dumps(value) + "\n\n").verify()  # whitespace around is fine


@pytest.mark.parametrize("text, words", [
    ("garbage" + json.dumps(_inclusion_json()), "not one JSON object"),
    (json.dumps(_inclusion_json()) + "garbage", "not one JSON object"),
    (json.dumps(_inclusion_json()) + json.dumps(_inclusion_json()), "not one JSON object"),
    (json.dumps(_inclusion_json())[:-5], "not one JSON object"),
    ("\ufeff" + json.dumps(_inclusion_json()), "byte-order mark"),
    (json.dumps([_inclusion_json()]), "not an object"),
    ("{}", "neither an inclusion proof"),
    (json.dumps(_inclusion_json())[:-1] + ', "leaf_index": 1}', "appears twice"),
    (json.dumps(_inclusion_json() | {"note": "hi"}), "unknown field"),
    (json.dumps(_inclusion_json() | {"leaf_index": True}), "whole number"),
    (json.dumps(_inclusion_json() | {"tree_size": 11.0}), "whole number"),
    (json.dumps(_inclusion_json() | {"tree_size": "11"}), "whole number"),
    (json.dumps(_inclusion_json() | {"leaf_index": -1}), "whole number"),
    (json.dumps(_inclusion_json()).replace('"tree_size": 11', '"tree_size": NaN'), "not a JSON number"),
    (json.dumps({k: v for k, v in _inclusion_json().items() if k != "root"}), "needs field"),
    (json.dumps(_inclusion_json() | {"root": _inclusion_json()["root"].rstrip("=")}), "not base64"),
    (json.dumps(_inclusion_json() | {"root": " " + _inclusion_json()["root"]}), "not base64"),
    (json.dumps(_inclusion_json() | {"root": base64.b64encode(b"x" * 31).decode()}), "31 bytes"),
    (json.dumps(_inclusion_json() | {"proof": "abc"}), "list of base64"),
    (json.dumps(_inclusion_json() | {"proof": [None]}), "not base64 text"),
    (json.dumps(_inclusion_json() | {"entry": base64.b64encode(b"y" * 32).decode(), "commitment": "79" * 32}),
     "does not hash"),
    (json.dumps(_inclusion_json() | {"commitment": "00" * 32}), "not the hex"),
    (json.dumps(_consistency_json() | {"extra": 1}), "unknown field"),
    ("[" * 100_000, "not one JSON object|nests too deeply"),
    (b"\xff\xfe{}", "not UTF-8"),
])
def test_malformed_proof_files_are_refused_saying_what(text, words):
    with pytest.raises(ProofError, match=words):
        parse_proof(text)


def test_non_canonical_base64_is_refused():
    value = _inclusion_json()
    raw = base64.b64decode(value["proof"][0])
    # the same bytes with the unused low bits of the last character set: decodes, but is not canonical
    text = value["proof"][0]
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    last = alphabet[alphabet.index(text[-2]) | 1]
    other = text[:-2] + last + "="
    if other != text:
        assert base64.b64decode(other) == raw
        with pytest.raises(ProofError, match="canonical"):
            parse_proof(json.dumps(value | {"proof": [other, *value["proof"][1:]]}))


def test_a_parsed_proof_that_was_altered_does_not_verify():
    value = _inclusion_json()
    for field in ("leaf_hash", "root"):
        altered = dict(value)
        raw = bytearray(base64.b64decode(altered[field]))
        raw[0] ^= 1
        altered[field] = base64.b64encode(bytes(raw)).decode()
        altered.pop("entry") if field == "leaf_hash" else None
        altered.pop("commitment") if field == "leaf_hash" else None
        with pytest.raises(ProofError):
            parse_proof(json.dumps(altered)).verify()
    for index, size in ((5, 11), (7, 11), (6, 6), (6, 1)):
        with pytest.raises(ProofError):
            parse_proof(json.dumps(value | {"leaf_index": index, "tree_size": size})).verify()
    c = _consistency_json()
    with pytest.raises(ProofError):
        parse_proof(json.dumps(c | {"root1": c["root2"], "root2": c["root1"]})).verify()
