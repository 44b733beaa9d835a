"""The residue of keys destroyed outside an erasure: what derived stores keep of their owners' events.

``refold erase`` destroys its subject's keys and purges every derived store of the subject's
events. A key can also go another way: ``KeyStore.destroy`` called directly, a tenant's key (the
key of its subject-less events), an erasure stopped after its marker. The log is unreadable for
that owner at once and the state tables honour its marker at the next fold; but the extraction
cache and a stored search index still hold plaintext derived from the owner's events (extracted
facts, event text). :func:`sweep` purges them:

    ROOT/erasure.swept     the owners (KeyOwner.digest) whose events' residue was purged, one per line

It purges the events of every owner with an erased marker that file does not list yet (the
store's ``purge(event_ids)``, as an erasure's purge step calls it), vacuums the extraction cache
so no older version keeps the rows, then adds the owners to the file. Idempotent: a crash before
the file is written redoes the purges next time (a purge of ids already gone is a no-op). Two
sweeps at once may each rewrite the file; an owner one of them drops from it is swept again by a
later sweep: work, never residue.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from refold.storage.derived import PurgeResult
from refold.storage.keys.crypto import marked_in_log
from refold.storage.layout import Layout
from refold.erasure.scrub import scrub_table

__all__ = ["STORE", "SWEPT_FILE", "swept_owners", "sweep"]

SWEPT_FILE = "erasure.swept"
#: the name a sweep's :class:`PurgeResult` carries (in an erasure receipt's purged stores)
STORE = "keys destroyed outside an erasure"


def swept_owners(layout: Layout) -> frozenset[str]:
    """The owner digests whose events' residue a sweep purged (empty before the first)."""
    text = layout.files().get_text(SWEPT_FILE) or ""
    return frozenset(line for line in text.split() if line)


def sweep(layout: Layout, log, marks: Iterable[str], stores: Sequence[Any], *, skip: Iterable[str] = (),
          covered: Iterable[str] = (), storage_options: dict[str, str] | None = None) -> PurgeResult:
    """Purge from ``stores`` (each with ``purge(event_ids)``) the events of the owners among
    ``marks`` (:meth:`KeyStore.erased_owners`) not swept yet, leaving out ``skip`` (an erasure's
    own events, which its purge step just removed), and record those owners as swept.
    ``covered``: owners every event of which is in ``skip`` (an erasure's subjects: its plan
    holds every event their keys encrypt), not looked for again. Reads the log's four clear key
    columns, never a key, and only when an owner is left to look for; does nothing when every
    owner was swept."""
    swept = swept_owners(layout)
    new = frozenset(marks) - swept
    if not new:
        return PurgeResult(STORE, 0)
    wanted = new - frozenset(covered)
    ids = sorted(marked_in_log(log, wanted) - set(skip)) if wanted else []
    results = [store.purge(ids) for store in stores] if ids else []
    if any(r.store == "extractions" and r.rows for r in results):
        # the deleted rows live on in the cache's older files until a vacuum removes them
        scrub_table(layout.extractions, erased_ids=ids, storage_options=storage_options)
    layout.files().put(SWEPT_FILE, "\n".join(sorted(swept_owners(layout) | new)).encode("ascii") + b"\n")
    rows = sum(r.rows for r in results)
    detail = (f"owners with an erased marker not swept before: {len(new)}; their events purged here: {len(ids)}",
              *(f"{r.store}: {r.rows}" for r in results))
    return PurgeResult(STORE, rows, detail)
