"""A key destroyed outside an erasure leaves no plaintext in the derived stores after the next fold
or erasure (docs/erasure.md, "Keys destroyed outside an erasure"), on real shred-mode stores with
real key files, a real extraction cache (Delta), a stored faiss index and the state tables (with
their older tagged versions).

The residue scanner (``erasing.scan``, the one erasures use) reads every file under the store:
before the sweep it finds the owner's text in the cache, the index and the state tables; after
it, nowhere. The log stays encrypted (it is not residue: its keys are gone)."""

from __future__ import annotations

from pathlib import Path

import pytest

import refold
from refold.erasure import verbs as erasing
from refold.memory import Memory
from refold.search.retriever import open_index
from refold.storage.keys import crypto
from refold.erasure import sweep as sweep_module
from refold.erasure.sweep import STORE, SWEPT_FILE, swept_owners
from refold.storage.keys.port import FileKeyStore, KeyOwner
from tests.fold_helpers import fact_event
from tests.test_shred_state_reads import CANARY, _events

OTHER = "quetzalbrioche"  # Ben's own canary (a second, later erasure)
TENANT = "marzipanfjord"  # in a subject-less event of tenant globex (under the tenant's key)


@pytest.fixture
def mem(tmp_path) -> Memory:
    mem = refold.init(tmp_path / "store", mode="shred")
    mem.append([*_events(), fact_event("Ben", "likes", OTHER, day=70, subjects=["s-ben"]),
                fact_event("Globex", "located_in", TENANT, day=71, tenant="globex")])
    mem.fold()
    mem.append(fact_event("Ann", "likes", "pears", day=80, subjects=["s-ann"]))
    mem.fold()  # a second tagged state version: the first one too holds both subjects' facts
    open_index(mem.store, embedder="hashing")  # a stored index with their facts and event text
    return mem


def _where(mem: Memory, canary: str) -> set[str]:
    """The top folders of the files under the store that hold ``canary`` in plaintext."""
    return {h.file.split("/")[0] for h in mem.scan(canaries=[canary]).hits}


@pytest.mark.search
@pytest.mark.slow
def test_the_next_fold_purges_a_destroyed_owners_residue_and_only_once(mem):
    assert {"extractions", "index", "state"} <= _where(mem, CANARY)
    FileKeyStore(mem.layout.keys).destroy("s-ann")  # not refold's erasure: no receipt, no purge
    assert "extractions" in _where(mem, CANARY)
    mem.fold()
    assert _where(mem, CANARY) == set()
    assert swept_owners(mem.layout) == {KeyOwner.subject("s-ann").digest()}
    assert "s-ann" not in (Path(mem.root) / SWEPT_FILE).read_text()  # (digests only: no id, no name)
    assert OTHER in str(mem.facts(subject="Ben")["object"].to_list())  # Ben's are untouched
    assert _where(mem, OTHER)
    # swept once: the next sweep finds nothing new and purges nothing
    assert erasing.sweep_destroyed(mem.store).rows == 0
    hits = mem.search(f"Ann likes {CANARY}0", k=50, embedder="hashing")
    assert not any(CANARY in t for t in hits["text"].to_list())


@pytest.mark.search
def test_a_tenants_destroyed_key_is_swept_by_the_next_fold(mem):
    """A tenant's key encrypts its subject-less events (offboarding a tenant): reads leave them
    out at once, and the next fold sweeps the cache and the index and erases them from the
    state tables (vacuuming the versions that held them)."""
    assert {"extractions", "index", "state"} <= _where(mem, TENANT)
    FileKeyStore(mem.layout.keys).destroy(KeyOwner.tenant("globex"))
    assert mem.facts(tenant="globex").height == 0
    mem.fold()
    assert _where(mem, TENANT) == set()
    assert CANARY in str(mem.facts(subject="Ann")["object"].to_list())  # the other keys' events stay


@pytest.mark.search
@pytest.mark.slow
def test_an_erasure_after_a_destruction_sweeps_both_and_says_so_in_its_receipt(mem, monkeypatch):
    FileKeyStore(mem.layout.keys).destroy("s-ann")  # no fold between this and the erasure
    receipt = mem.erase("s-ben", canaries=[OTHER])
    assert _where(mem, CANARY) == set() and _where(mem, OTHER) == set()
    swept = [p for p in receipt.purged if p["store"] == STORE]
    # Ann's and Ben's markers are new to the sweep; only Ann's events were left to purge (the
    # erasure's stores before it purged Ben's)
    assert swept and swept[0]["rows"] > 0 and "not swept before: 2;" in swept[0]["detail"][0]
    assert swept_owners(mem.layout) == {KeyOwner.subject(s).digest() for s in ("s-ann", "s-ben")}
    # a later erasure finds nothing left to sweep, and neither the sweep nor the state tables'
    # purge reads the log for marked events to know it: the tables honour every other marker,
    # and the erasure's own subject's events are all in its plan
    def refuse(*_a, **_k):
        raise AssertionError("the erasure read the log for the marked owners' events")

    monkeypatch.setattr(sweep_module, "marked_in_log", refuse)
    monkeypatch.setattr(crypto, "marked_in_log", refuse)
    person3 = set(mem.facts(subject="Person3")["fact_id"].to_list())
    later = mem.erase("s-person3")
    assert [p["rows"] for p in later.purged if p["store"] == STORE] == [0]
    assert later.scan["hits"] == [] and mem.facts(subject="Person3").height == 0 and person3
