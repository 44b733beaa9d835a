"""A fold uses the extractions it just cached as it made them, without reading them back, and
uses the cache's row wherever another writer cached a key first (real Delta tables in
tmp_path; the "other writer" is a second store handle committing from inside the extractor)."""

from __future__ import annotations

import polars as pl
import pytest

import refold
from refold.extractors import get_extractor
from refold.fold.extract import ExtractedFact, Extraction
from refold.storage.cache import ExtractionCache


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
    """An incremental partitioned fold looks its new events up in the cache once (finding none)
    and folds the extractions it made: no second read of the rows it has just written."""
    mem.append(_says(30))
    mem.fold(full=True)
    mem.append(_says(10, start=30))
    looked = []
    original = ExtractionCache.facts

    def counted(self, spec_hash, event_ids, **kw):
        ids = list(event_ids)
        looked.append(len(ids))
        return original(self, spec_hash, ids, **kw)

    monkeypatch.setattr(ExtractionCache, "facts", counted)
    report = mem.fold(extractor=get_extractor("rules"))
    monkeypatch.undo()
    assert report.extraction_calls == 10 and looked == [10]
    assert sorted(mem.facts(relation="works_at", current_only=True)["subject"].to_list()) == sorted(NAMES)
