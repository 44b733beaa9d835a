"""Reads of a shred-mode store answer from the partitioned engine's state tables, and honour every
destroyed key at once (docs/erasure.md, "Keys destroyed outside an erasure"), on real stores with
real key files.

The state tables hold plaintext derived from decrypted events, so a read may answer from them
only while no owner was erased since their fold: each read lists the key store's erased markers
(written before any key is destroyed) and compares them with the markers the tables' tag records.
Otherwise it answers from the graph engine, which decrypts the log, and the next fold erases the
marked owners' events from the tables as an erasure does.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import refold
from refold import erasing
from refold.memory import Memory
from refold.search import open_index
from refold.storage.keys import FileKeyStore, KeyOwner, marks_fingerprint
from refold.storage.scan import scan
from tests.fold_helpers import canonical_graph, fact_event

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
    mem.fold(engine="partitioned")
    return mem


def _no_graph_engine(monkeypatch):
    def refuse(*_a, **_k):
        raise AssertionError("the read folded the log with the graph engine")

    monkeypatch.setattr(Memory, "_fold_state", refuse)


def _graph_engine(root: Path):
    """The graph engine's fold of the store (it decrypts the log), in a fresh Memory."""
    ref = refold.open(root)
    ref.fold(engine="graph", full=True, snapshot_every=0)
    return canonical_graph(ref.state().graph)


def _objects(mem: Memory, subject: str) -> set[str]:
    return set(mem.facts(subject=subject, current_only=True)["object"].to_list())


def _state_hits(mem: Memory) -> list:
    return [h for h in scan(mem.root, [CANARY]) if h.file.startswith("state/")]


def test_reads_answer_from_the_state_tables_and_equal_the_graph_engine(mem, monkeypatch):
    mem.append(fact_event("Ben", "visited", "Oslo", day=60, subjects=["s-ben"]))  # after the tag: the overlay
    with monkeypatch.context() as patch:
        _no_graph_engine(patch)
        assert mem._readable_tables(None) is not None
        assert {f"{CANARY}0", "Acme"} <= _objects(mem, "Ann")
        assert "Oslo" in _objects(mem, "Ben")  # the overlay decrypted the newer event
        why = mem.why(mem.facts(subject="Ben", relation="visited")["fact_id"][0])
        mem.fold(engine="partitioned")  # (an overlay leaves summaries to the fold: docs/fold.md)
        graph = canonical_graph(mem.graph())
    assert graph == _graph_engine(Path(mem.root))
    assert "Oslo" in str(why["events"])


def test_a_key_destroyed_outside_an_erasure_is_honoured_at_once_and_erased_by_the_next_fold(mem, monkeypatch):
    tag = mem.state_store(mem.current_spec()).tag()
    assert tag.erased == "" and _state_hits(mem)
    FileKeyStore(mem.layout.keys).destroy("s-ann")  # not refold's erasure: no receipt, no refold
    # the next read, in this process and with nothing else changed, no longer shows Ann's facts
    assert mem._readable_tables(None) is None
    assert _objects(mem, "Ann") == set()
    assert "tea" not in _objects(mem, "Ben")  # (an event shared with Ann needs her key too)
    assert "Acme" in _objects(mem, "Ben")
    mem.fold(engine="partitioned")  # no new event: the fold erases Ann's events from the tables
    marks = mem.erased_marks()
    assert mem.state_store(mem.current_spec()).tag().erased == marks_fingerprint(marks) != ""
    assert _state_hits(mem) == []  # the old versions that held them are vacuumed
    with monkeypatch.context() as patch:
        _no_graph_engine(patch)
        assert _objects(mem, "Ann") == set() and _objects(mem, "Ben") == {"Acme"}
        graph = canonical_graph(mem.graph())
    assert graph == _graph_engine(Path(mem.root))


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
    mem.fold(engine="partitioned")
    assert mem._readable_tables(None) is not None and _objects(mem, "Ann") == set()
    assert _state_hits(mem) == []


def test_a_shred_erasure_leaves_reads_on_the_state_tables(mem, monkeypatch):
    receipt = erasing.erase(mem, "s-ann")
    assert receipt.mode == "shred"
    with monkeypatch.context() as patch:
        _no_graph_engine(patch)
        assert mem._readable_tables(None) is not None  # the erasure's refold recorded the marker
        assert _objects(mem, "Ann") == set() and "tea" not in _objects(mem, "Ben")
        graph = canonical_graph(mem.graph())
    assert graph == _graph_engine(Path(mem.root))
    assert _state_hits(mem) == []


def test_search_drops_the_events_and_facts_of_a_key_destroyed_outside_an_erasure(mem):
    def hits(m: Memory) -> set[str]:
        facts = m.search(f"Ann likes {CANARY}0", k=50, embedder="hashing")
        events = m.search(f"Ann likes {CANARY}0", k=50, kind="events", embedder="hashing")
        return {t for t in [*facts["text"].to_list(), *events["text"].to_list()] if CANARY in t}

    open_index(mem, embedder="hashing")  # a stored index and a kept view, both holding Ann's text
    assert hits(mem)
    FileKeyStore(mem.layout.keys).destroy(KeyOwner.subject("s-ann"))
    assert hits(mem) == set()  # the kept view (same log, same erasure epoch) is not served
    mem.fold(engine="partitioned")
    assert hits(mem) == set()
    # a fresh process starts from the stored index, built before the destruction
    assert hits(refold.open(mem.root)) == set()


def test_the_graph_engines_kept_state_honours_a_key_destroyed_outside_an_erasure(tmp_path):
    """A store never folded into state tables reads through the graph engine, which keeps its
    state per log position: a destruction moves no position and bumps no erasure epoch."""
    mem = refold.init(tmp_path / "store", mode="shred")
    mem.append(_events())
    mem.fold(engine="graph", snapshot_every=0)
    assert mem._readable_tables(None) is None and f"{CANARY}0" in _objects(mem, "Ann")
    FileKeyStore(mem.layout.keys).destroy("s-ann")
    assert _objects(mem, "Ann") == set() and "tea" not in _objects(mem, "Ben")
