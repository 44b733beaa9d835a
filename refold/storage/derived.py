"""The port every derived store implements for erasure: ``purge(event_ids)``.

A derived store holds data computed from log events (the extraction cache, the state tables, the
vector index, refold 0.1's snapshot files, and in shred mode the sweep of destroyed keys'
residue). An erasure hands each one the erased events' ids, in order, through this one protocol;
tests/test_derived_store_contract.py runs the same contract against every adapter.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["DerivedStore", "PurgeResult"]


@dataclass(frozen=True)
class PurgeResult:
    """What a purge removed from one derived store: its name, the rows removed, and detail lines
    for the receipt (never an event's content, a name or a subject id)."""

    store: str
    rows: int
    detail: tuple[str, ...] = ()


@runtime_checkable
class DerivedStore(Protocol):
    """Data derived from log events, erasable by event id.

    ``purge(event_ids)`` removes everything the store derived from those events (rows, vectors,
    files: whatever a read could still return of them) and returns a :class:`PurgeResult`. It is
    idempotent — a rerun of a killed erasure calls it again with the same ids and must succeed,
    removing what the killed run left — and leaves old versions to the erasure's scrub step."""

    def purge(self, event_ids: Iterable[str]) -> PurgeResult: ...
