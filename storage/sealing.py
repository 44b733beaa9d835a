"""Rows for new events, numbered after the head and sealed into the hash chain (see fold/chain.py).

Appends of 10k events spend most of their Python time here, so plain events are sealed column by
column (:func:`~refold.fold.chain.seal_new`, no :class:`Event` per row). A protector that changes
stored fields (shred mode encrypts content) takes the general path: one ``Event`` per row, sealed
with :func:`~refold.fold.chain.seal`. Both give the same bytes for the same input.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import pyarrow as pa

from refold.fold.chain import seal, seal_new
from refold.fold.events import Event, NewEvent
from .schema import EVENTS_SCHEMA, events_to_table

#: columns stored exactly as the NewEvent holds them
_COPIED = ("event_id", "kind", "tenant", "source", "content", "subjects", "principals", "trace_id",
           "justification", "valid_from", "valid_to", "ingestion_run")


def seal_rows(fresh: Sequence[NewEvent], *, first_seq: int, prev_link: str, recorded_at: datetime,
              table_version: int, protector: Callable[[NewEvent], dict[str, Any]] | None = None,
              ) -> tuple[pa.Table, str]:
    """The rows of ``fresh`` as seqs ``first_seq…``, chained after ``prev_link``; and the last link.

    Each event gets 16 fresh random bytes of salt. ``protector`` (when given) returns stored
    column overrides per event.
    """
    n = len(fresh)
    salts = os.urandom(16 * n)
    if protector is not None:
        rows, prev = [], prev_link
        for i, e in enumerate(fresh):
            event = Event(
                seq=first_seq + i, event_id=e.event_id, recorded_at=recorded_at,
                table_version=table_version, kind=e.kind, tenant=e.tenant, source=e.source,
                content=e.content, subjects=e.subjects, principals=e.principals,
                trace_id=e.trace_id, justification=e.justification, valid_from=e.valid_from,
                valid_to=e.valid_to, ingestion_run=e.ingestion_run, fact=e.fact,
                salt=salts[16 * i: 16 * i + 16].hex(),
            )
            overrides = protector(e)
            event = seal(event.with_(**overrides) if overrides else event, prev)
            prev = event.link
            rows.append(event)
        return events_to_table(rows), prev
    commitments, prev_links, links = seal_new(
        fresh, first_seq=first_seq, recorded_at=recorded_at, table_version=table_version,
        prev_link=prev_link, salts=salts,
    )
    hex_salts = salts.hex()
    data: dict[str, Any] = {
        "seq": range(first_seq, first_seq + n),
        "recorded_at": [recorded_at] * n,
        "table_version": [table_version] * n,
        "salt": [hex_salts[32 * i: 32 * i + 32] for i in range(n)],
        "cipher": [None] * n,
        "key_ids": [[]] * n,
        "erasure_id": [None] * n,
        "commitment": commitments,
        "prev_link": prev_links,
        "link": links,
        "fact": [None if e.fact is None else json.dumps(e.fact.as_dict(), sort_keys=True) for e in fresh],
    }
    for name in _COPIED:
        data[name] = [getattr(e, name) for e in fresh]
    table = pa.table([pa.array(data[f.name], f.type) for f in EVENTS_SCHEMA], schema=EVENTS_SCHEMA)
    return table, links[-1]
