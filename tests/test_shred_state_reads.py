"""Reads of a shred-mode store answer from the state tables, and honour every destroyed key at
once (docs/erasure.md, "Keys destroyed outside an erasure"), on real stores with real key files.

The state tables hold plaintext derived from decrypted events: each read lists the key store's
erased markers (written before any key is destroyed) and compares them with the markers the
tables' tag records. When the tag does not honour a marker, the read itself leaves out every
fact with a source event of a marked owner (in this process and any other, before any fold),
and the next fold erases the marked owners' events from the tables as an erasure does. Every
answer is held to the reference fold of the events the key store still opens.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import refold
from refold.memory import Memory
from refold.search.retriever import open_index
from refold.storage.keys.port import FileKeyStore, KeyOwner, marks_fingerprint
from refold.erasure.scan import scan
from tests.fold_helpers import canonical_edges, canonical_graph, fact_event, reference_of

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from snapshot_workload import events as workload  # noqa: E402

CANARY = "zanzibarquokka"


def _events() -> list[dict]:
    """The workload (subject-less: under the tenant key), plus facts about two data subjects."""
    out = list(workload(200, seed=5, people=12))
    out += [fact_event("Ann", "likes", f"{CANARY}{i}", day=40 + i, subjects=["s-ann"]) for i in range(3)]
    out += [fact_event("Ann", "works_at", "Acme", day=50, subjects=["s-ann"]),
            fact_event("Ben", "works_at", "Acme", day=51, subjects=["s-ben"]),
            fact_event("Ben", "likes", "tea", day=52, subjects=["s-ann", "s-ben"])]
    return out


@pytest.fixture
def mem(tmp_path) -> Memory:
    mem = refold.init(tmp_path / "store", mode="shred")
    mem.append(_events())
    mem.fold()
    return mem


def _reference(root: Path):
    """The reference fold of the store's events as a fresh Memory reads them (decrypted; those
    of owners whose keys are destroyed or marked have no content)."""
    return reference_of(refold.open(root)).graph


def _objects(mem: Memory, subject: str) -> set[str]:
    return set(mem.facts(subject=subject, current_only=True)["object"].to_list())


def _state_hits(mem: Memory) -> list:
    return [h for h in scan(mem.root, [CANARY]) if h.file.startswith("state/")]


def test_reads_answer_from_the_state_tables_and_equal_the_reference_fold(mem):
    tag = mem.state_store(mem.current_spec()).tag()
    mem.append(fact_event("Ben", "visited", "Oslo", day=60, subjects=["s-ben"]))  # after the tag: the overlay
    assert {f"{CANARY}0", "Acme"} <= _objects(mem, "Ann")
    assert "Oslo" in _objects(mem, "Ben")  # the overlay decrypted the newer event
    why = mem.why(mem.facts(subject="Ben", relation="visited")["fact_id"][0])
    assert "Oslo" in str(why["events"])
    assert canonical_edges(mem.graph()) == canonical_edges(_reference(Path(mem.root)))
    assert mem.state_store(mem.current_spec()).tag() == tag  # (no fold answered the reads)
    mem.fold()  # (an overlay leaves summaries to the fold: docs/state.md)
    assert canonical_graph(mem.graph()) == canonical_graph(_reference(Path(mem.root)))


def test_a_key_destroyed_outside_an_erasure_is_honoured_at_once_and_erased_by_the_next_fold(mem):
    tag = mem.state_store(mem.current_spec()).tag()
    assert tag.erased == "" and _state_hits(mem)
    assert "Ann" in mem.facts(subject="Acme", relation="employs")["object"].to_list()
    FileKeyStore(mem.layout.keys).destroy("s-ann")  # not refold's erasure: no receipt, no refold
    # the next read, in this process and with nothing else changed, no longer shows Ann's facts
    assert _objects(mem, "Ann") == set()
    assert "tea" not in _objects(mem, "Ben")  # (an event shared with Ann needs her key too)
    assert "Acme" in _objects(mem, "Ben")
    employs = mem.facts(subject="Acme", relation="employs")["object"].to_list()  # (roll-ups of hers too)
    assert "Ben" in employs and "Ann" not in employs
    assert mem.state_store(mem.current_spec()).tag() == tag  # the read answered without a fold
    assert canonical_edges(mem.graph()) == canonical_edges(_reference(Path(mem.root)))
    assert _objects(refold.open(mem.root), "Ann") == set()  # and so does another process
    mem.fold()  # no new event: the fold erases Ann's events from the tables
    marks = mem.erased_marks()
    assert mem.state_store(mem.current_spec()).tag().erased == marks_fingerprint(marks) != ""
    assert _state_hits(mem) == []  # the old versions that held them are vacuumed
    assert _objects(mem, "Ann") == set() and _objects(mem, "Ben") == {"Acme"}
    assert canonical_graph(mem.graph()) == canonical_graph(_reference(Path(mem.root)))


def test_a_destruction_stopped_after_its_marker_already_makes_the_owners_events_unreadable(mem, monkeypatch):
    """The marker is written before the keys go: a read or fold between the two (or after a crash
    there) must not show what the destruction is about to shred, though the keys still exist."""
    keys = FileKeyStore(mem.layout.keys)
    ann_keys = keys.key_ids("s-ann")

    def crash(*_a, **_k):
        raise RuntimeError("killed between the marker and the key files")

    monkeypatch.setattr(FileKeyStore, "_before_destroy", crash)
    with pytest.raises(RuntimeError):
        keys.destroy("s-ann", erasure_id="er-1")
    monkeypatch.undo()
    assert all(keys.exists(k) for k in ann_keys) and KeyOwner.subject("s-ann").digest() in mem.erased_marks()
    assert [e for e in mem.events() if "s-ann" in e.subjects and e.content is not None] == []
    assert _objects(mem, "Ann") == set()
    mem.fold()
    assert mem.state_store(mem.current_spec()).tag().erased == marks_fingerprint(mem.erased_marks())
    assert _objects(mem, "Ann") == set()
    assert _state_hits(mem) == []


def test_a_shred_erasure_leaves_a_state_that_honours_its_marker(mem):
    receipt = mem.erase("s-ann")
    assert receipt.mode == "shred"
    # the erasure's refold recorded the marker: the tag honours every marker listed
    assert mem.state_store(mem.current_spec()).tag().erased == marks_fingerprint(mem.erased_marks()) != ""
    assert _objects(mem, "Ann") == set() and "tea" not in _objects(mem, "Ben")
    assert canonical_graph(mem.graph()) == canonical_graph(_reference(Path(mem.root)))
    assert _state_hits(mem) == []


@pytest.mark.search
def test_search_drops_the_events_and_facts_of_a_key_destroyed_outside_an_erasure(mem):
    def hits(m: Memory) -> set[str]:
        facts = m.search(f"Ann likes {CANARY}0", k=50, embedder="hashing")
        events = m.search(f"Ann likes {CANARY}0", k=50, kind="events", embedder="hashing")
        return {t for t in [*facts["text"].to_list(), *events["text"].to_list()] if CANARY in t}

    open_index(mem.store, embedder="hashing")  # a stored index and a kept view, both holding Ann's text
    assert hits(mem)
    FileKeyStore(mem.layout.keys).destroy(KeyOwner.subject("s-ann"))
    assert hits(mem) == set()  # the kept view (same log, same erasure epoch) is not served
    mem.fold()
    assert hits(mem) == set()
    # a fresh process starts from the stored index, built before the destruction
    assert hits(refold.open(mem.root)) == set()


def test_a_store_never_folded_honours_a_key_destroyed_outside_an_erasure(tmp_path):
    """With no tag yet, a read overlays the whole log on an empty state (decrypting it); a
    destruction moves no log position and bumps no erasure epoch, yet the next read leaves the
    owner's events out."""
    mem = refold.init(tmp_path / "store", mode="shred")
    mem.append(_events())
    assert f"{CANARY}0" in _objects(mem, "Ann")
    FileKeyStore(mem.layout.keys).destroy("s-ann")
    assert _objects(mem, "Ann") == set() and "tea" not in _objects(mem, "Ben")
    assert mem.state_store(mem.current_spec()).tag() is None
    assert canonical_edges(mem.graph()) == canonical_edges(_reference(Path(mem.root)))
