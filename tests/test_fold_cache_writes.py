"""A fold uses the extractions it just cached as it made them, without reading them back, and
uses the cache's row wherever another writer cached a key first (real Delta tables in
tmp_path; the "other writer" is a second store handle committing from inside the extractor)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from deltalake import DeltaTable

import refold
from refold.extractors import get_extractor
from refold.fold.extract import ExtractedFact, Extraction
from refold.storage.cache.table import ExtractionCache
from tests.test_state_scoping import UNREADABLE

NAMES = [f"{first} {last}" for last in ("Smith", "Jones", "Brown", "Lopez", "Khan", "Novak", "Ito", "Berg")
         for first in ("Alice", "Bruno", "Chen", "Dara", "Emil")]


def _says(n: int, start: int = 0) -> list[dict]:
    return [{"kind": "observation", "source": "agent", "content": f"{NAMES[i]} works at Acme Corp."}
            for i in range(start, start + n)]


class RacedRules:
    """The rules extractor, but before its first answer another writer caches its own extraction
    of the first event it is asked about: ``<its person> works_at Rival``."""

    name = "rules"

    def __init__(self, root):
        self.root = root
        self.inner = get_extractor("rules")
        self.raced: str | None = None

    def extract(self, events, spec):
        if self.raced is None:
            first = events[0]
            self.raced = first.event_id
            who = first.content.split(" works at ")[0]
            other = refold.open(self.root).cache  # another writer's handle on the same table
            other.put([Extraction(event_id=first.event_id, spec_hash=spec.hash, engine="rules",
                                  facts=(ExtractedFact(who, "works_at", "Rival"),))], seqs={first.event_id: first.seq})
        return self.inner.extract(events, spec)


def test_a_key_another_writer_cached_first_is_folded_as_cached(mem):
    mem.append(_says(20))
    mem.fold(full=True)
    mem.append(_says(5, start=20))
    racing = RacedRules(mem.root)
    report = mem.fold(extractor=racing)
    assert racing.raced is not None and report.extraction_calls == 5
    works = mem.facts(relation="works_at", current_only=True)
    assert works.filter(pl.col("object") == "Rival")["subject"].to_list() == [NAMES[20]]
    assert works.height == 25  # the other 24 as the rules read them
    # the state is what a refold from the cache gives: the fold used the cached row, not its own
    again = refold.open(mem.root)
    again.fold(full=True)
    columns = ["subject", "relation", "object", "current"]
    assert again.facts().select(columns).sort(columns).equals(mem.facts().select(columns).sort(columns))


def test_a_fold_does_not_read_back_what_it_just_cached(mem, monkeypatch):
    """An incremental partitioned fold folds the extractions it made as it made them, not as
    read back from the cache: each file its cache write adds is garbled the moment the write
    returns (so a read of those rows fails, as the refold at the end shows), and the fold still
    holds every new event's facts."""
    mem.append(_says(30))
    mem.fold(full=True)
    mem.append(_says(10, start=30))
    cache = mem.layout.extractions.removeprefix("file://")
    garbled = []
    real_insert = ExtractionCache.insert

    def insert_then_garble(self, extractions, **kw):
        before = set(DeltaTable(cache).file_uris())
        landed = real_insert(self, extractions, **kw)
        for uri in sorted(set(DeltaTable(cache).file_uris()) - before):
            Path(uri.removeprefix("file://")).write_bytes(b"not parquet: the fold read back its own rows")
            garbled.append(uri)
        return landed

    monkeypatch.setattr(ExtractionCache, "insert", insert_then_garble)
    report = mem.fold(extractor=get_extractor("rules"))
    monkeypatch.undo()
    assert garbled and report.extraction_calls == 10
    assert sorted(mem.facts(relation="works_at", current_only=True)["subject"].to_list()) == sorted(NAMES)
    with pytest.raises(UNREADABLE):
        refold.open(mem.root).fold(full=True)  # (a refold reads the cache: the garbled rows fail it)
