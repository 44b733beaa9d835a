"""The erasure record: the content of an ``erasure`` event, naming every event it tombstones (pure).

A tombstone cannot prove itself: its content and salt are gone, so its commitment cannot be
recomputed, and its ``kind`` and ``erasure_id`` columns are not covered by the chain (the link
keeps the *original* commitment). What makes a tombstone legitimate is an erasure recorded in the
chain: the ``erasure`` event's content is this record, covered by that event's own commitment,
and it lists each tombstoned event's kept fields as they stood before the erasure. ``verify``
accepts a tombstone only when such a record names it with the same fields, and reports any
other row of kind ``tombstone`` (a forged deletion) as tampering at its seq.

The record is compact JSON (no personal data: positions, ids and hashes only)::

    {"format": "refold-erasure/v1", "erasure_id": "…",
     "erased": [[seq, event_id, commitment, recorded_at, table_version], …]}

in seq order, ``recorded_at`` as the chain's canonical time (UTC, microseconds). A shred-mode
erasure tombstones nothing: its events keep their rows (their keys are destroyed), and the record
names them in ``"shredded": [[seq, commitment], …]`` instead (absent when empty, so a record
without shredded events keeps the bytes it always had): the leaves of the log's Merkle tree that
the erasure made unreadable (:mod:`refold.proofs`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from refold.fold.chain import canonical_time
from refold.fold.events import Event

FORMAT = "refold-erasure/v1"

#: the columns a tombstone keeps besides the chain fields; every other one must be null or empty
_EMPTIED = ("tenant", "source", "content", "trace_id", "justification", "valid_from", "valid_to",
            "ingestion_run", "fact", "salt", "cipher")
_EMPTIED_LISTS = ("subjects", "principals", "key_ids")


@dataclass(frozen=True)
class Erased:
    """One tombstoned event's kept fields, as the erasure recorded them."""

    seq: int
    event_id: str
    commitment: str
    recorded_at: str | None
    table_version: int

    @classmethod
    def of(cls, seq: int, event_id: str, commitment: str, recorded_at: datetime | None,
           table_version: int) -> "Erased":
        return cls(int(seq), str(event_id), str(commitment), canonical_time(recorded_at), int(table_version))


@dataclass(frozen=True)
class ErasureRecord:
    """What one erasure tombstones (see the module docstring)."""

    erasure_id: str
    erased: tuple[Erased, ...] = ()
    #: (seq, commitment) of each event the erasure made unreadable without a tombstone (shred mode)
    shredded: tuple[tuple[int, str], ...] = ()

    @classmethod
    def build(cls, erasure_id: str, erased: Iterable[Erased],
              shredded: Iterable[tuple[int, str]] = ()) -> "ErasureRecord":
        return cls(erasure_id, tuple(sorted(erased, key=lambda e: e.seq)),
                   tuple(sorted((int(s), str(c)) for s, c in shredded)))

    def content(self) -> str:
        """The ``erasure`` event's content: deterministic, so a rerun after a crash appends the
        same event (found again by its id) instead of a conflicting one."""
        rows = [[e.seq, e.event_id, e.commitment, e.recorded_at, e.table_version] for e in self.erased]
        value: dict[str, Any] = {"format": FORMAT, "erasure_id": self.erasure_id, "erased": rows}
        if self.shredded:
            value["shredded"] = [[s, c] for s, c in self.shredded]
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def parse(cls, content: str | None) -> "ErasureRecord":
        """The record in an erasure event's content; ValueError when it is not one (an erasure
        made before records listed their events, or a malformed content)."""
        try:
            value: Any = json.loads(content or "")
            if not isinstance(value, dict) or value.get("format") != FORMAT:
                raise ValueError(f"not a {FORMAT} record")
            erased = []
            for row in value["erased"]:
                seq, event_id, commitment, recorded_at, table_version = row
                if not (isinstance(seq, int) and isinstance(event_id, str) and isinstance(commitment, str)
                        and isinstance(table_version, int) and (recorded_at is None or isinstance(recorded_at, str))):
                    raise ValueError(f"malformed entry {row!r}")
                erased.append(Erased(seq, event_id, commitment, recorded_at, table_version))
            erasure_id = value["erasure_id"]
            if not isinstance(erasure_id, str):
                raise ValueError("erasure_id is not a string")
            shredded = []
            for row in value.get("shredded", []):
                seq, commitment = row
                if not (isinstance(seq, int) and isinstance(commitment, str)):
                    raise ValueError(f"malformed shredded entry {row!r}")
                shredded.append((seq, commitment))
        except (TypeError, KeyError, ValueError) as exc:
            raise ValueError(f"not an erasure record ({exc})") from None
        return cls(erasure_id, tuple(erased), tuple(shredded))


def tombstone_problem(tombstone: Event, entry: Erased | None, erasure_seq: int | None) -> str | None:
    """Why ``tombstone`` is not what the recorded erasure ``entry`` (at ``erasure_seq``) names,
    or None when it is."""
    where = f"seq {tombstone.seq}"
    if entry is None:
        return (f"{where}: tombstone names erasure {tombstone.erasure_id!r}, whose record in the log does "
                "not list this event (a forged deletion)")
    if erasure_seq is not None and erasure_seq <= tombstone.seq:
        return f"{where}: tombstone is named by an erasure recorded before it, at seq {erasure_seq}"
    kept = Erased.of(tombstone.seq, tombstone.event_id, tombstone.commitment, tombstone.recorded_at,
                     tombstone.table_version) if tombstone.table_version is not None else None
    if kept != entry:
        changed = [name for name in ("event_id", "commitment", "recorded_at", "table_version")
                   if kept is None or getattr(kept, name) != getattr(entry, name)]
        return f"{where}: tombstone's {', '.join(changed)} differ from what erasure {tombstone.erasure_id!r} recorded"
    left = [name for name in _EMPTIED if getattr(tombstone, name) is not None]
    left += [name for name in _EMPTIED_LISTS if getattr(tombstone, name)]
    if left:
        return f"{where}: tombstone still holds {', '.join(left)} (a tombstone keeps only ids and chain fields)"
    return None
