"""The derived-store port (:class:`refold.storage.derived.DerivedStore`): one contract, subclassed
once per adapter, so every store an erasure purges behaves the same way.

The contract: an adapter is a ``DerivedStore``; ``purge(ids)`` of events it derived data from
removes all of it and says how many rows went (under a store name, with no event id in its
detail lines); the data of other events stays; a second purge of the same ids (a rerun of a
killed erasure) succeeds and removes nothing more.
"""

from __future__ import annotations

import pytest

import refold
from refold.reads.queries import facts_sourced_from
from refold.reads.tables import read_tables
from refold.engine.purge import StatePurger
from refold.storage.derived import DerivedStore, PurgeResult
from refold.storage.index import index_store
from refold.storage.legacy import LegacySnapshots, has_legacy_snapshots
from tests.fold_helpers import fact_event

GONE = ["ev-gone-1", "ev-gone-2"]
KEPT = ["ev-kept-1"]


def _store(tmp_path):
    mem = refold.init(tmp_path / "store")
    mem.append([fact_event("Quillon Varga", "lives_in", "Tromso", day=1, event_id=GONE[0], subjects=["s-x"]),
                fact_event("Quillon Varga", "works_at", "Acme", day=2, event_id=GONE[1], subjects=["s-x"]),
                fact_event("Ada Byron", "lives_in", "Oslo", day=3, event_id=KEPT[0], subjects=["s-y"])])
    mem.fold()
    return mem


class DerivedStoreContract:
    """Subclass once per adapter: ``make`` returns the adapter over a store holding data derived
    from :data:`GONE` and :data:`KEPT`; ``remaining(ids)`` counts what it still holds of ``ids``."""

    def make(self, mem):
        raise NotImplementedError

    def remaining(self, mem, ids) -> int:
        raise NotImplementedError

    @pytest.fixture
    def setup(self, tmp_path):
        mem = _store(tmp_path)
        return mem, self.make(mem)

    def test_it_is_a_derived_store(self, setup):
        _, adapter = setup
        assert isinstance(adapter, DerivedStore)

    def test_a_purge_removes_everything_derived_from_the_ids_and_keeps_the_rest(self, setup):
        mem, adapter = setup
        assert self.remaining(mem, GONE) > 0 and self.remaining(mem, KEPT) > 0
        result = adapter.purge(GONE)
        assert isinstance(result, PurgeResult) and result.store and result.rows > 0
        assert not any(i in line for line in result.detail for i in GONE)  # no event id in a receipt line
        assert self.remaining(mem, GONE) == 0
        assert self.remaining(mem, KEPT) > 0

    def test_a_second_purge_of_the_same_ids_removes_nothing_more(self, setup):
        mem, adapter = setup
        adapter.purge(GONE)
        again = adapter.purge(GONE)
        assert again.rows == 0
        assert self.remaining(mem, GONE) == 0 and self.remaining(mem, KEPT) > 0


class TestExtractionCache(DerivedStoreContract):
    def make(self, mem):
        return mem.cache

    def remaining(self, mem, ids):
        return len(mem.cache.get(mem.current_spec().hash, ids))


class TestStateTables(DerivedStoreContract):
    def make(self, mem):
        return StatePurger(mem.store)

    def remaining(self, mem, ids):
        return facts_sourced_from(*read_tables(mem.store), set(ids)).height


@pytest.mark.search
class TestVectorIndex(DerivedStoreContract):
    def make(self, mem):
        mem.index(embedder="hashing")  # a stored index of the facts and the events
        return index_store(mem.layout)

    def remaining(self, mem, ids):
        return index_store(mem.layout).preview(ids).rows


class TestLegacySnapshots(DerivedStoreContract):
    """refold 0.1's snapshot files hold every event's data in one file set: a purge of any ids
    removes them all, so the "kept" data is the store's own (the log still holds it)."""

    def make(self, mem):
        files = mem.layout.files()
        files.put("snapshots/abc/0/graph.json", b'{"events": ["ev-gone-1", "ev-gone-2", "ev-kept-1"]}')
        return LegacySnapshots(mem.layout)

    def remaining(self, mem, ids):
        if set(ids) <= set(KEPT):
            return len(mem.events())  # (what stays is the log's, not the snapshot's)
        return int(has_legacy_snapshots(mem.layout))
