"""The record an erasure appends before it tombstones anything (see :mod:`refold.fold.erasure_record`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import pyarrow.compute as pc

from refold.fold.erasure_record import Erased, ErasureRecord
from refold.fold.errors import ErasureError

_KEPT = ["seq", "event_id", "commitment", "recorded_at", "table_version"]


def record_for(log, erasure_id: str, seqs: Iterable[int],
               planned: Mapping[int, str] | None = None, *,
               pseudonym: Callable[[str], str] | None = None) -> ErasureRecord:
    """The record naming the events at ``seqs`` as they stand now (before their tombstones).

    ``planned``: seq → commitment the erasure was planned with; a row that differs (or is gone)
    stops the erasure, as the tombstone commit would. ``pseudonym`` maps an event id to what its
    tombstone will hold (:mod:`refold.storage.erased_ids`); the record then never holds the id.
    """
    wanted = sorted(set(seqs))
    if not wanted:
        return ErasureRecord(erasure_id)
    rows = log.arrow(columns=_KEPT, filter=pc.field("seq").isin(wanted)).to_pylist()
    found = {r["seq"]: r for r in rows}
    erased = []
    for seq in wanted:
        row = found.get(seq)
        if row is None or (planned is not None and planned.get(seq) not in (None, row["commitment"])):
            raise ErasureError(f"seq {seq} changed since the erasure was planned; run `refold verify`")
        event_id = row["event_id"] if pseudonym is None else pseudonym(row["event_id"])
        erased.append(Erased.of(seq, event_id, row["commitment"], row["recorded_at"], row["table_version"]))
    return ErasureRecord.build(erasure_id, erased)
