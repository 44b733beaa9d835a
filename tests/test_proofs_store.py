"""The Merkle tree a store keeps, its proofs and checkpoints (issue #36; refold.storage.log.merkle,
refold.storage.log.checkpoints, Memory.inclusion_proof / consistency_proof / checkpoint).

Real stores; the tree's tiles are made 4 leaves high (``small_tiles``) so that a log of a few
hundred events has stored tiles at several levels, edges that lag, and tiles complete at one size
and not at another. Every proof a store makes is compared with the pure reference
(refold.proofs over the log's commitments read back) and verified; the tree is rebuilt from the log
when it is missing, behind, ahead of the log or garbled, and ``verify`` names a damaged tile or
edge and every published checkpoint that is not the log's.
"""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path

import pytest

import refold
from refold import proofs
from refold.fold.errors import IntegrityError, NotFoundError, ValidationError
from refold.fold.erasure_record import ErasureRecord
from refold.storage.log import merkle
from refold.storage.log.checkpoints import open_checkpoint, published_checkpoints
from refold.storage.log.signing import KEY_ENV, recorded_public_key, set_up_signing
from refold.storage.log.verify import sign_current_head
from tests.log_helpers import _event
from tests.moto_process import moto_process, new_bucket  # noqa: F401


@pytest.fixture
def small_tiles(monkeypatch):
    """Tiles of 4 hashes (height 2), and an edge saved every 8 leaves."""
    monkeypatch.setattr(merkle, "TILE_HEIGHT", 2)
    monkeypatch.setattr(merkle, "TILE", 4)
    monkeypatch.setattr(merkle, "MASK", 3)
    monkeypatch.setattr(merkle, "SAVE_EVERY", 8)


def _append(mem, count: int, first: int, **extra) -> None:
    mem.append([_event(first + i, event_id=f"e-{first + i}", subjects=[f"subj-{(first + i) % 3}"], **extra)
                for i in range(count)])


def _leaves(mem) -> list[bytes]:
    return merkle.leaf_hashes(mem.log_store.arrow(columns=["commitment"])["commitment"].to_pylist())


def _grown(tmp_path, sizes) -> refold.Memory:
    mem = refold.init(tmp_path / "store")
    n = 0
    for size in sizes:
        _append(mem, size, n)
        n += size
    return mem


def _check_proofs(mem, leaves: list[bytes], sizes, rng) -> None:
    subtree = proofs.list_subtree(leaves)
    for size in sizes:
        top = proofs.root(leaves[:size])
        for seq in {0, size - 1, size // 2, rng.randrange(size)}:
            p = mem.inclusion_proof(seq, size)
            assert p.root == top and p.leaf_hash == leaves[seq] and p.verify(top)
            assert list(p.proof) == proofs.inclusion_proof(seq, size, subtree)
            assert proofs.leaf_hash(p.entry) == leaves[seq]
        for size1 in {1, size, max(1, size // 3), rng.randrange(1, size + 1)}:
            c = mem.consistency_proof(size1, size)
            assert c.root1 == proofs.root(leaves[:size1]) and c.root2 == top and c.verify()
            assert list(c.proof) == proofs.consistency_proof(size1, size, subtree)


def test_the_tree_grows_with_appends_and_answers_every_size(tmp_path, small_tiles):
    rng = random.Random(36)
    mem = _grown(tmp_path, [rng.choice([1, 2, 3, 5, 16, 17, 31]) for _ in range(18)])
    leaves = _leaves(mem)
    n = len(leaves)
    tiles = sorted(p.relative_to(tmp_path / "store").as_posix() for p in (tmp_path / "store" / "merkle").rglob("*")
                   if p.is_file() and "tile" in p.parts)
    assert "merkle/tile/1/000" in tiles and any(t.startswith("merkle/tile/2/") for t in tiles)
    assert len((tmp_path / "store" / "merkle" / "edge").iterdir().__next__().read_bytes()) > 0
    _check_proofs(mem, leaves, sorted({1, 2, 3, 4, 5, 15, 16, 17, 63, 64, 65, n // 2, n - 1, n}), rng)
    fresh = refold.open(tmp_path / "store")  # another process: loads the saved edge, catches it up
    _check_proofs(fresh, leaves, [n, n - 3], rng)
    assert mem.verify().ok


def test_the_tree_is_rebuilt_from_the_log_when_missing_behind_ahead_or_garbled(tmp_path, small_tiles):
    import shutil

    mem = _grown(tmp_path, [40, 3, 21])
    leaves = _leaves(mem)
    store = tmp_path / "store"
    shutil.rmtree(store / "merkle")  # a store from before the tree existed
    assert refold.open(store).inclusion_proof(5).verify(proofs.root(leaves))
    edge_files = list((store / "merkle" / "edge").iterdir())
    assert [p.name for p in edge_files] == [f"{len(leaves):020d}"]
    # garbled edge: the one before it is gone, so the tree is rebuilt from the log
    edge_files[0].write_bytes(edge_files[0].read_bytes()[:-1])
    report = mem.verify()
    assert not report.ok and "not a valid tree edge" in report.problems[0] and report.first_bad_seq is None
    assert refold.open(store).consistency_proof(7).verify(proofs.root(leaves[:7]), proofs.root(leaves))
    assert mem.verify().ok
    # an edge that claims more leaves than the log holds (a log cut back, another log's tree)
    other = merkle.Edge()
    other.extend(merkle.leaf_hashes([f"{i:064x}" for i in range(len(leaves) + 9)]))
    (store / "merkle" / "edge" / f"{other.size:020d}").write_bytes(other.encode())
    report = mem.verify()
    assert "the tail was truncated" in " ".join(report.problems) and report.first_bad_seq == len(leaves)
    assert refold.open(store).inclusion_proof(2).verify(proofs.root(leaves))
    # behind: a writer that appends after another caught the edge up
    _append(mem, 9, len(leaves))
    _append(refold.open(store), 6, len(leaves) + 9)
    _append(mem, 2, len(leaves) + 15)
    leaves = _leaves(mem)
    _check_proofs(refold.open(store), leaves, [len(leaves), 40], random.Random(1))
    assert mem.verify().ok


def test_verify_names_a_damaged_tile_and_notes_a_missing_one(tmp_path, small_tiles):
    mem = _grown(tmp_path, [70])
    tile = tmp_path / "store" / merkle.tile_key(1, 2)  # the nodes of height 2 over leaves 32..47
    original = tile.read_bytes()
    tile.write_bytes(bytes([original[0] ^ 1]) + original[1:])  # the node over leaves 32..35
    report = mem.verify()
    assert not report.ok and "merkle/tile/1/002" in report.problems[0] and "differ" in report.problems[0]
    leaves = _leaves(mem)
    p = refold.open(tmp_path / "store").inclusion_proof(37)  # its path holds that node: does not verify
    with pytest.raises(proofs.ProofError):
        p.verify(proofs.root(leaves))
    tile.unlink()
    report = mem.verify()
    assert report.ok and "missing" in report.notes[0]
    assert refold.open(tmp_path / "store").inclusion_proof(37).verify(proofs.root(leaves))  # rebuilt from the log
    assert tile.read_bytes() == original and mem.verify().notes == ()


def test_proof_requests_that_cannot_be_answered_say_what_to_ask(tmp_path):
    mem = _grown(tmp_path, [10])
    for call, words in (
        (lambda: mem.inclusion_proof(10), "seq 10 is not in the tree of size 10; the log holds 10"),
        (lambda: mem.inclusion_proof(7, 5), "pass a --size above 7"),
        (lambda: mem.inclusion_proof(-1), "whole number"),
        (lambda: mem.inclusion_proof(3, 11), "ask for a size from 1 to 10"),
        (lambda: mem.consistency_proof(0), "from 1 to 10"),
        (lambda: mem.consistency_proof(6, 5), "from 1 to 5"),
        (lambda: mem.consistency_proof(3, 12), "no tree of size 12"),
    ):
        with pytest.raises(ValidationError, match=words):
            call()
    assert mem.consistency_proof(10).proof == ()
    empty = refold.init(tmp_path / "empty")
    with pytest.raises(ValidationError):
        empty.inclusion_proof(0)
    assert empty.checkpoint(signed=False).size == 0
    assert empty.checkpoint(signed=False).root == proofs.EMPTY_ROOT
    with pytest.raises(NotFoundError, match="records no signing key"):
        empty.checkpoint()


@pytest.fixture
def signed(tmp_path, monkeypatch):
    """A store of 12 events with signing set up (its head and checkpoint signed), then 8 more
    appended by a writer holding the key: (memory, key path)."""
    mem = _grown(tmp_path, [12])
    key = tmp_path / "operator" / "key.pem"
    set_up_signing(mem.layout, key)
    sign_current_head(mem.log_store, key)
    monkeypatch.setenv(KEY_ENV, str(key))
    writer = refold.open(tmp_path / "store")
    _append(writer, 5, 12)
    _append(writer, 3, 17)
    return writer, key


def test_signed_appends_and_sign_head_publish_checkpoints_that_verify_holds_to_the_log(signed):
    mem, key = signed
    public = recorded_public_key(mem.layout)
    found = [(head.seq, open_checkpoint(note, public)) for _, head, note in published_checkpoints(mem.layout)]
    assert [(seq, cp.size) for seq, cp in found] == [(11, 12), (16, 17), (19, 20)]
    leaves = _leaves(mem)
    assert all(cp.root == proofs.root(leaves[:cp.size]) for _, cp in found)
    newest = mem.checkpoint()
    assert newest.size == 20 and open_checkpoint(newest.note, public) == newest
    assert mem.checkpoint(12).size == 12
    with pytest.raises(NotFoundError, match="no signed checkpoint of size 13"):
        mem.checkpoint(13)
    unsigned = mem.checkpoint(15, signed=False)
    assert unsigned.note is None and unsigned.root == proofs.root(leaves[:15]) and unsigned.origin == newest.origin
    report = mem.verify(signed_heads=True)
    assert report.ok, report.problems


@pytest.mark.parametrize("edit, words", [
    (lambda cp: cp.replace("\n17\n", "\n18\n"), "published with ends at seq 16"),
    (lambda cp: cp.split("\n")[0] + "\n17\n" + base64.b64encode(b"r" * 32).decode() + "\n\n" + cp.split("\n\n")[1],
     "names another root"),
    (lambda cp: cp[:-8] + "AAAAAAA=\n" if cp[-9] != "A" else cp[:-8] + "BBBBBBB=\n", "does not verify"),
    (lambda cp: "garbage", "not a signed checkpoint"),
])
def test_verify_reports_a_published_checkpoint_that_is_not_the_logs(signed, edit, words):
    mem, _ = signed
    journal = Path(mem.layout.heads) / "heads.jsonl"
    lines = journal.read_text().split("\n")
    at = next(i for i, line in enumerate(lines) if line and json.loads(line)["seq"] == 16)
    value = json.loads(lines[at])
    value["checkpoint"] = edit(value["checkpoint"])
    lines[at] = json.dumps(value)
    journal.write_text("\n".join(lines))
    report = mem.verify(signed_heads=True)
    assert not report.ok and any(words in p for p in report.problems), report.problems
    if "does not verify" not in words:
        assert any(words in p for p in mem.verify().problems)  # the keyless check sees it too


def test_erasure_keeps_every_leaf_so_old_proofs_and_checkpoints_stay_valid(tmp_path, monkeypatch):
    mem = _grown(tmp_path, [9, 12])
    key = tmp_path / "operator" / "key.pem"
    set_up_signing(mem.layout, key)
    sign_current_head(mem.log_store, key)
    before = mem.checkpoint()
    public = recorded_public_key(mem.layout)
    old_proofs = [mem.inclusion_proof(seq) for seq in range(before.size)]
    monkeypatch.setenv(KEY_ENV, str(key))
    mem = refold.open(tmp_path / "store")
    mem.erase("subj-1")
    after = mem.checkpoint()
    assert after.size == before.size + 1  # the erasure event
    assert open_checkpoint(after.note, public).root == after.root
    # from the checkpoint before the erasure to the one after it: the log only grew
    assert mem.consistency_proof(before.size, after.size).verify(before.root, after.root)
    record = ErasureRecord.parse(mem.log(since=before.size)["content"][0])
    erased = {e.seq: e.commitment for e in record.erased}
    assert sorted(erased) == [s for s in range(before.size) if s % 3 == 1]
    for seq in range(before.size):
        old = old_proofs[seq]
        assert old.verify(before.root)  # proofs made before the erasure still hold
        now = mem.inclusion_proof(seq, before.size)
        assert now.proof == old.proof and now.leaf_hash == old.leaf_hash and now.verify(before.root)
        assert mem.inclusion_proof(seq).verify(after.root)
        if seq in erased:  # only the commitment is left: the erasure record names exactly that leaf
            assert now.erased and now.erasure_id == record.erasure_id and now.commitment == erased[seq]
            assert set(now.as_json()) == {"leaf_index", "tree_size", "leaf_hash", "entry", "commitment", "proof",
                                          "root", "erased", "erasure_id"}
        else:
            assert not now.erased and "erased" not in now.as_json()
    assert mem.verify(signed_heads=True).ok


@pytest.mark.parametrize("batch", [False, True])
def test_shredded_events_keep_their_leaves_and_the_record_names_them(tmp_path, batch):
    mem = refold.init(tmp_path / "store", mode="shred")
    _append(mem, 12, 0)
    top = mem.checkpoint(signed=False)
    leaves = _leaves(mem)
    mem.erase(["subj-2"]) if batch else mem.erase("subj-2")
    assert mem.consistency_proof(12).verify(top.root, mem.checkpoint(signed=False).root)
    assert all(mem.inclusion_proof(seq, 12).verify(top.root) for seq in range(12))
    # a shred erasure tombstones nothing: its record names the leaves it made unreadable
    [event] = [e for e in mem.log_store.events() if e.kind == "erasure"]
    record = ErasureRecord.parse(event.content)
    assert record.erased == () and record.shredded
    for seq, commitment in record.shredded:
        assert "subj-2" in mem.log_store.events(since=seq, until=seq + 1)[0].subjects
        assert proofs.leaf_hash(bytes.fromhex(commitment)) == leaves[seq]
    assert mem.verify().ok


def test_the_tree_on_object_storage(moto_process, small_tiles):  # noqa: F811
    s3_bucket = new_bucket(moto_process)
    root = f"{s3_bucket.uri}/store"
    mem = refold.init(root, storage_options=s3_bucket.storage_options)
    for first in range(0, 30, 10):
        _append(mem, 10, first)
    keys = s3_bucket.keys()
    assert "store/merkle/tile/1/000" in keys and any(k.startswith("store/merkle/edge/") for k in keys)
    leaves = _leaves(mem)
    reader = refold.open(root, storage_options=s3_bucket.storage_options)
    _check_proofs(reader, leaves, [30, 17], random.Random(3))
    assert reader.verify().ok


def test_a_tree_that_disagrees_with_the_log_is_refused_when_a_proof_reads_it(tmp_path, small_tiles):
    mem = _grown(tmp_path, [6])  # seqs 4 and 5 are in the edge's bottom row
    assert mem.verify().ok
    edge_file = next((tmp_path / "store" / "merkle" / "edge").iterdir())
    edge = merkle.Edge.decode(edge_file.read_bytes())
    edge.rows[0][1] = b"\x00" * 32
    edge_file.write_bytes(edge.encode())
    with pytest.raises(IntegrityError, match="differs from the log at seq 5"):
        refold.open(tmp_path / "store").inclusion_proof(5)
    assert "its hashes differ" in mem.verify().problems[0]
