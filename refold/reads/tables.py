"""Which state a read answers from: the state tables at a tag and the read overlay past it.

Every read of the facade goes through :func:`read_tables`, which returns ``(tables, tag,
overlay)``: the :class:`~refold.storage.state.StateStore` of a spec, the tag its answer starts
from, and the :class:`~refold.reads.overlay.StateOverlay` of the events after that tag
(docs/state.md, "Reads"). It writes nothing and calls no model. What it builds is kept in the
Store (:meth:`~refold.store.Store.kept`), so nothing survives an erasure.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from refold.fold.errors import StoreError, ValidationError
from refold.fold.spec import FoldSpec
from refold.reads.overlay import empty_tag, log_after, state_overlay, tail_after, without_events
from refold.storage.keys.crypto import marked_in_log
from refold.storage.state import StateStore, StateTag
from refold.store import Store, honours

#: :meth:`Store.kept` names: the head's read per spec, and reads as of a past seq
HEAD, PAST = "reads.head", "reads.past"


def read_tables(store: Store, as_of: int | str | datetime | None = None,
                spec: FoldSpec | None = None) -> tuple[StateStore, StateTag, Any]:
    """``(tables, tag, overlay)`` a read of ``spec`` (default: the current spec) answers from,
    at the head or as the log stood at ``as_of`` (record time). Never None: every read has this
    path. Raises :class:`ValidationError` when the overlay would pass
    :attr:`Store.read_overlay_limit` events (the message says what to do)."""
    spec = spec or store.current_spec()
    return _at_head(store, spec) if as_of is None else _at(store, spec, as_of)


def _at_head(store: Store, spec: FoldSpec):
    """The head's read: the tables at their tag and the overlay of the events after it. No tag
    (never folded, or a full fold under way) or a tag whose position the log no longer holds:
    the overlay of the whole log on an empty state. A log version seen before, with no event
    pending, is answered from the kept read; a later one over the same tables advances that
    overlay by the events after it (an agent's read after its append merges only those).

    Shred mode: erased markers the tag does not honour (keys destroyed outside an erasure since
    the fold) have the overlay take those owners' events out itself; the tail is decrypted."""
    tables = store.state_store(spec)
    version = store.log_store.version()
    marks = store.erased_marks()  # before the tables: a marker listed after is the next read's
    kept = store.kept(HEAD)
    seen = kept.get(spec.hash)
    if seen is not None and seen[0] == version:  # (a new marker changed the epoch: dropped)
        return seen[1]
    tag = tables.tag()
    tail = base = None
    if tag is not None and seen is not None and seen[3] == tag:
        # the same tables, the log moved (an append): the kept overlay is advanced by the
        # events after the position it reached, when the log still holds that position
        _check_overlay(store, store.head().seq - tag.log_seq, tag, tables, as_of=None)
        tail, base = log_after(store, *seen[2]), seen[1][2]
    if tail is None:
        if tag is not None:
            _check_overlay(store, store.head().seq - tag.log_seq, tag, tables, as_of=None)
            tail = tail_after(store, tag)
        if tail is None:  # never folded, or the log no longer holds the tag's position
            tag = empty_tag(spec)
            _check_overlay(store, store.head().seq + 1, None, tables, as_of=None)
            tail = tail_after(store, tag)
        base = _unhonoured(store, spec, tables, tag, marks)
    if tail:
        end = (tail[-1].seq, tail[-1].link)  # the position the overlay reaches
    else:
        end = seen[2] if seen is not None and base is seen[1][2] else (tag.log_seq, tag.log_link)
    overlay = state_overlay(store, spec, tables, tag, store.readable(tail, marks), base=base)
    found = (tables, overlay.of_tag(tag), overlay)
    if not overlay.pending:  # else not kept: a fold (here or elsewhere) may cache their extractions
        kept.clear()
        kept[spec.hash] = (version, found, end, tag)
    return found


def _at(store: Store, spec: FoldSpec, as_of: int | str | datetime):
    """The read as of ``as_of``: time travel to the newest tagged state version at or before that
    position and the overlay of the events between the two (docs/state.md, "Reads as of a past
    position"); with no such version (none that old, or vacuumed), the overlay of the log's
    prefix on an empty state."""
    end = store.log_store.prefix_end(as_of)  # (what seqs a version holds outlives an erasure)
    if end is None or end < 0:
        end = -1
    marks = store.erased_marks()
    kept = store.kept(PAST)
    seen = kept.get((spec.hash, end))
    tables = store.state_store(spec)
    if seen is not None and (seen[1].log_seq < 0 or seen[1] in tables.tags()):  # (a vacuum may have cut it)
        return seen[0]
    tag = tables.tag_at(end)
    tail = None
    if tag is not None:
        _check_overlay(store, end - tag.log_seq, tag, tables, as_of=as_of)
        tail = tail_after(store, tag, until=end)
    if tail is None:  # no state version that old, or the log no longer holds its position
        tag = empty_tag(spec)
        _check_overlay(store, end + 1, tag, tables, as_of=as_of)
        tail = tail_after(store, tag, until=end) if end >= 0 else []
        if tail is None:
            raise StoreError(f"the log's data file statistics hide events up to seq {end}; run "
                             f"`refold verify {store.root}`")
    overlay = state_overlay(store, spec, tables, tag, store.readable(tail, marks),
                            base=_unhonoured(store, spec, tables, tag, marks))
    found = (tables, overlay.of_tag(tag), overlay)
    if not overlay.pending:  # else not kept, as for the head
        kept.clear()
        kept[(spec.hash, end)] = (found, tag)
    return found


def _unhonoured(store: Store, spec: FoldSpec, tables: StateStore, tag: StateTag, marks: frozenset[str]):
    """The overlay that takes out of the state at ``tag`` the events of owners among ``marks``
    that its fold did not honour (None: it honours them all)."""
    if tag.log_seq < 0 or honours(tag, marks):
        return None
    return without_events(spec, tables, tag, marked_in_log(store.log_store, marks, until=tag.log_seq))


def _check_overlay(store: Store, events: int, tag: StateTag | None, tables: StateStore, *, as_of) -> None:
    """Refuse a read whose overlay would hold more than :attr:`Store.read_overlay_limit` events."""
    if events <= store.read_overlay_limit:
        return
    limit = f"{store.read_overlay_limit:,}"
    if as_of is None:
        where = "no fold yet" if tag is None else f"the state tables reflect log seq {tag.log_seq}"
        raise ValidationError(
            f"{events:,} events await a fold ({where}); reads overlay at most {limit} events in memory: run "
            "mem.fold() first (or raise Memory.read_overlay_limit)",
            cli=f"{events:,} events await a fold ({where}); run `refold fold {store.root}` first")
    oldest = oldest_readable(store, tables)
    raise ValidationError(
        f"as_of={as_of!r} lies {events:,} events past the newest state version at or before it "
        f"(a read overlays at most {limit}); the oldest readable position is {oldest}: state versions are "
        "kept by mem.vacuum_state(retain_hours=...) and made by each fold, so read as_of a position a fold "
        "reached (or raise Memory.read_overlay_limit)",
        cli=f"as_of {as_of} lies {events:,} events past the newest state version at or before it; the oldest "
            f"readable position is {oldest} (state versions are kept by `refold vacuum-state --retain-hours`)")


def oldest_readable(store: Store, tables: StateStore) -> str:
    """Which ``as_of`` positions a read answers: those within the overlay limit of the start of
    the log, and those from the oldest state version still whole on (if a fold is older)."""
    first = min((t.log_seq for t in tables.tags()), default=None)
    reach = store.read_overlay_limit - 1
    if first is None or first <= reach:
        if first is None:
            return f"seq 0 (no state version is kept: as_of reads reach seq {reach}, overlaid from the start)"
        return f"seq 0 (every seq from {first} on has a state version)"
    return f"seq {first} (and seqs 0-{reach}, overlaid from the start of the log)"


def forget_reads(store: Store, spec_hash: str | None = None) -> None:
    """Drop the head reads ``store`` keeps (of ``spec_hash`` only, when given): their tables
    changed under them (a fold, a purge)."""
    kept = store.kept(HEAD)
    if spec_hash is None:
        kept.clear()
    else:
        kept.pop(spec_hash, None)
