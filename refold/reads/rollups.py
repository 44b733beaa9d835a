"""Compose roll-ups of the state tables, derived when read (the tables do not store them).

A compose rule (a, r1, b) ∘ (b, r2, c) ⇒ (a, out, c) kept a closed copy of every derived row each
time an input changed, so an organisation that moved re-derived a row per member of its staff:
the stored rows grew with (moves × staff). The state tables keep the merged rows (and the inverse
roll-ups, one row per input row); a read derives the compose rows of exactly what it reads, with
:func:`refold.fold.partition.derive_for_subjects` (the join the full fold ran, on the restricted
inputs: the same fact ids, validity, lineage):

* subjects' rows (their buckets, already read) ⇒ the objects b of their r1 rows ⇒ one pruned read
  of b's buckets for their r2 rows ⇒ the subjects' derived rows (:func:`with_rollups`);
* a whole-state read joins the whole merged layer in polars (:func:`with_rollups`, no subjects);
* ``why`` of a derived id: a fact id names neither its bucket nor its inputs, so the r1 and r2
  rows' ids and intervals are joined bucket group by bucket group until a pair's id is the one
  asked for (:func:`find_derived`).

The tag names the rules a read derives (:attr:`refold.storage.state.StateTag.rollups`), so a
read needs no spec. A derived row cannot outlive an erased input: it is computed from the rows
the tables hold now.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timezone
from typing import TYPE_CHECKING

import polars as pl

from refold.fold.merge import fact_id_of
from refold.fold.partition import bucket_of, derive_for_subjects, derive_frame
from refold.fold.spec import RollupRule
from refold.storage.state import StateStore, StateTag, among
from refold.store import on_erasure

if TYPE_CHECKING:
    from refold.reads.overlay import StateOverlay

__all__ = ["find_derived", "input_relations", "pairs_deriving", "rollups_of", "rules_of", "with_rollups"]

#: buckets a derived-id search reads at a time (memory follows a group's r1 rows and their pairs)
SEARCH_GROUP = 8


def rules_of(tag: StateTag) -> tuple[RollupRule, ...]:
    """The roll-up rules a read of ``tag``'s state derives."""
    return tuple(RollupRule(name, kind, tuple(inputs), output) for name, kind, inputs, output in tag.rollups)


def input_relations(tag: StateTag, relation: str | None) -> set[str] | None:
    """The relations a read of ``relation`` must read (None: all): the relation itself plus the
    inputs of the rules that derive it (filter the answer on ``relation`` afterwards)."""
    if relation is None:
        return None
    return {relation} | {i for r in rules_of(tag) if r.output == relation for i in r.inputs}


def with_rollups(store: StateStore, tag: StateTag, rows: pl.DataFrame, *,
                 subjects: Iterable[str] | None, overlay: "StateOverlay | None" = None) -> pl.DataFrame:
    """``rows`` (facts rows as read from the tables) plus :func:`rollups_of` them."""
    derived = rollups_of(store, tag, rows, subjects=subjects, overlay=overlay)
    return pl.concat([rows, derived]) if derived.height else rows


def rollups_of(store: StateStore, tag: StateTag, rows: pl.DataFrame, *, subjects: Iterable[str] | None,
               overlay: "StateOverlay | None" = None, remember: bool = True) -> pl.DataFrame:
    """The compose-derived rows (``rows``' columns) of ``subjects`` (None: of every subject;
    ``rows`` then holds the whole merged layer, or a tenant's). ``rows`` must hold every
    first-input row of ``subjects``; their partners are read from their own buckets (one pruned
    read), as ``overlay`` (the read's overlay of newer events, :mod:`refold.reads.overlay`) has
    them. ``remember``: keep the derived ids' inputs for a ``why`` of one of them
    (:data:`_HINTS`; not for a whole-state scan that answers no fact-by-fact read)."""
    rules = rules_of(tag)
    none = rows.head(0)
    if not rules or rows.height == 0:
        return none
    merged = rows.filter(pl.col("layer") == "merged")
    if subjects is None:
        derived = derive_frame(rules, merged, buckets=tag.buckets)
    else:
        subjects = sorted(set(subjects))
        firsts = sorted({r.inputs[0] for r in rules})
        seconds = sorted({r.inputs[1] for r in rules})
        heads = merged.filter(pl.col("subject").is_in(pl.Series(subjects, dtype=pl.Utf8).implode())
                              & pl.col("relation").is_in(firsts))
        objects = sorted(set(heads["object"].to_list()))
        if not objects:
            return none
        partners = pl.from_arrow(store.read(
            "facts", version=tag.facts_version, layer="merged", buckets={bucket_of(o, tag.buckets) for o in objects},
            filter=among("subject", objects) & among("relation", seconds)))
        if overlay is not None:
            partners = overlay.apply(partners, nodes=objects, relation=set(seconds))
            partners = partners.filter(pl.col("layer") == "merged")
        derived = derive_for_subjects(rules, heads, partners, subjects, buckets=tag.buckets)
    if derived.height == 0:
        return none
    if remember:
        _remember(derived)
    return derived.select(rows.columns).cast(rows.schema)


#: compose-derived ids this process's reads made → (rule name, first input id, second input id),
#: the newest :data:`HINTS` of them: ``why`` of an id a read just returned finds its inputs here
#: instead of searching the inputs' join. An id is the hash of its rule and inputs, so a hint
#: cannot be wrong, and the inputs are still read from the state (an erased input derives nothing).
_HINTS: dict[str, tuple[str, str, str, tuple[str, ...]]] = {}
HINTS = 100_000


def _remember(derived: pl.DataFrame) -> None:
    for fact_id, rule, inputs, subjects in zip(derived["fact_id"].to_list(), derived["derivation"].to_list(),
                                               derived["inputs"].to_list(), derived["input_subjects"].to_list()):
        if len(inputs) == 2:
            _HINTS.pop(fact_id, None)
            _HINTS[fact_id] = (rule, inputs[0], inputs[1], tuple(subjects or ()))
    while len(_HINTS) > HINTS:
        del _HINTS[next(iter(_HINTS))]


#: compose-derived ids a search returned → the node of their subject (a roll-up's subject is its
#: first input's), the newest :data:`HINTS` of them: a ``why`` of one derives that subject's
#: roll-ups (a read of its buckets) and so finds the id among the :data:`_HINTS` instead of
#: searching the inputs' join of the whole state. A wrong note only costs that read.
_SUBJECTS: dict[str, str] = {}


def note_subjects(subjects: dict[str, str]) -> None:
    """Note (fact id → subject node) of compose-derived ids a read returned without deriving
    them (a search: the index holds no roll-up's inputs)."""
    for fact_id, node in subjects.items():
        if fact_id not in _HINTS:
            _SUBJECTS.pop(fact_id, None)
            _SUBJECTS[fact_id] = node
    while len(_SUBJECTS) > HINTS:
        del _SUBJECTS[next(iter(_SUBJECTS))]


@on_erasure
def forget_hints(_: object = None) -> None:
    """Drop every hint (an erasure happened: they may name an erased subject's node)."""
    _HINTS.clear()
    _SUBJECTS.clear()


def derived_here(fact_ids: Iterable[str]) -> set[str]:
    """Those of ``fact_ids`` that a read of this process derived (compose roll-ups: never stored,
    so a reader need not look for them in the tables)."""
    return {i for i in fact_ids if i in _HINTS}


#: an open valid time's end, for interval tests (later than any stated time)
_OPEN = datetime(9999, 12, 31, tzinfo=timezone.utc)


def _intervals(rows: pl.DataFrame) -> pl.DataFrame:
    """``rows`` with ``_end`` (``valid_to``, open as :data:`_OPEN`), without empty intervals
    (they overlap nothing)."""
    rows = rows.with_columns(pl.col("valid_to").fill_null(_OPEN).alias("_end"))
    return rows.filter(pl.col("valid_from") < pl.col("_end"))


def pairs_deriving(rule: RollupRule, firsts: pl.DataFrame, seconds: pl.DataFrame,
                   fact_ids: set[str]) -> list[tuple[str, str]]:
    """The (first input, second input) fact ids of the compose ``rule``'s rows among
    ``fact_ids``, from merged rows of its first (``firsts``) and second (``seconds``) input
    relation (``fact_id``, ``subject``, ``object``, ``valid_from``, ``valid_to``).

    Only pairs that overlap in valid time derive a row (:func:`refold.fold.rollups.derive`).
    Where a key's second rows are disjoint intervals (a single-valued relation's history: an
    organisation's locations), the ones a first row overlaps are a run of them, found by two
    as-of joins; other keys are joined on the key and filtered. Joining an organisation's whole
    staff history with its whole location history first took gigabytes at 1M events."""
    a = _intervals(firsts).with_row_index("_a")
    b = _intervals(seconds).select(pl.col("fact_id").alias("fact_id_b"), pl.col("subject").alias("object"),
                               pl.col("valid_from").alias("from_b"), pl.col("_end").alias("end_b"))
    if a.height == 0 or b.height == 0:
        return []
    b = b.sort(["object", "from_b", "end_b"])
    before = pl.col("end_b").shift(1).over("object")
    b = b.with_columns((before.is_null() | (before <= pl.col("from_b"))).all().over("object").alias("_disjoint"),
                       pl.int_range(pl.len()).over("object").alias("_rank"))
    runs, rest = b.filter(pl.col("_disjoint")), b.filter(~pl.col("_disjoint"))
    found = []
    if rest.height:
        j = a.join(rest, on="object").filter((pl.col("valid_from") < pl.col("end_b")) & (pl.col("from_b") < pl.col("_end")))
        found.append(j.select("fact_id", "fact_id_b"))
    if runs.height:
        # the run of seconds a row [from, end) overlaps: from the first whose end is after
        # ``from`` to the last whose start is before ``end`` (both sorted: the intervals are disjoint)
        first = a.sort("valid_from").join_asof(runs.select("object", "end_b", pl.col("_rank").alias("_lo")).sort("end_b"),
                                               left_on="valid_from", right_on="end_b", by="object",
                                               strategy="forward", allow_exact_matches=False, check_sortedness=False)
        last = a.sort("_end").join_asof(runs.select("object", "from_b", pl.col("_rank").alias("_hi")).sort("from_b"),
                                        left_on="_end", right_on="from_b", by="object",
                                        strategy="backward", allow_exact_matches=False, check_sortedness=False)
        span = (first.select("_a", "fact_id", "object", "_lo").join(last.select("_a", "_hi"), on="_a")
                .filter(pl.col("_lo").is_not_null() & pl.col("_hi").is_not_null() & (pl.col("_lo") <= pl.col("_hi"))))
        pairs = (span.with_columns(pl.int_ranges("_lo", pl.col("_hi") + 1).alias("_rank")).explode("_rank")
                 .join(runs.select("object", "_rank", "fact_id_b"), on=["object", "_rank"]))
        found.append(pairs.select("fact_id", "fact_id_b"))
    j = pl.concat(found)
    return [(x, y) for x, y in zip(j["fact_id"].to_list(), j["fact_id_b"].to_list())
            if fact_id_of("rollup", rule.name, x, y) in fact_ids]


def find_derived(store: StateStore, tag: StateTag, fact_ids: Iterable[str],
                 overlay: "StateOverlay | None" = None) -> pl.DataFrame:
    """The compose-derived rows among ``fact_ids`` (ids no stored row has), found by joining the
    rules' inputs' ids and intervals a bucket group at a time; the rows are then derived from
    their two inputs exactly as a read derives them. The inputs are read as ``overlay`` (the
    read's overlay of newer events) has them: a roll-up only they derive is found too."""
    wanted = set(fact_ids)
    found: list[pl.DataFrame] = []
    narrow = ["fact_id", "subject", "relation", "object", "valid_from", "valid_to"]
    noted = {_SUBJECTS[i] for i in wanted if i not in _HINTS and i in _SUBJECTS}
    rules = rules_of(tag)
    if noted and rules:  # a search returned them: derive their subjects' roll-ups (hints), as a read does
        firsts = {r.inputs[0] for r in rules}
        heads = pl.from_arrow(store.read("facts", version=tag.facts_version, layer="merged",
                                         buckets={bucket_of(n, tag.buckets) for n in noted},
                                         filter=among("subject", noted) & among("relation", firsts)))
        if overlay is not None:
            heads = overlay.apply(heads, nodes=noted, relation=firsts).filter(pl.col("layer") == "merged")
        rollups_of(store, tag, heads, subjects=noted, overlay=overlay)
    for rule in rules_of(tag):  # first the ids a read of this process derived (no search)
        hints = [h for i in wanted if (h := _HINTS.get(i)) is not None and h[0] == rule.name]
        if hints:
            buckets = ({bucket_of(n, tag.buckets) for h in hints for n in h[3]} if all(h[3] for h in hints)
                       else None)  # (the inputs' subjects' buckets: a read of those only)
            rows = _derive_pairs(store, tag, rule, [(h[1], h[2]) for h in hints], wanted, overlay, buckets)
            found.append(rows)
            wanted -= set(rows["fact_id"].to_list())
    for rule in rules_of(tag):
        if not wanted:
            break
        first, second = rule.inputs
        seconds = pl.from_arrow(store.read("facts", version=tag.facts_version, layer="merged", columns=narrow,
                                           filter=among("relation", [second])))
        if overlay is not None:
            seconds = overlay.apply(seconds, relation=second)
        if seconds.height == 0:
            continue
        for start in range(0, tag.buckets, SEARCH_GROUP):
            group = range(start, min(start + SEARCH_GROUP, tag.buckets))
            firsts = pl.from_arrow(store.read("facts", version=tag.facts_version, layer="merged", columns=narrow,
                                              buckets=group, filter=among("relation", [first])))
            if overlay is not None:  # (the overlay's new rows, of every bucket, join in with the first group)
                firsts = (overlay.apply(firsts, relation=first) if start == 0 else
                          firsts.filter(~pl.col("fact_id").is_in(pl.Series(sorted(overlay.replaced), dtype=pl.Utf8)
                                                                 .implode())))
            pairs = pairs_deriving(rule, firsts, seconds, wanted)
            if not pairs:
                continue
            # the pairs' inputs are read from their subjects' buckets only (a roll-up's first
            # input lives in its subject's bucket, the second in the first's object's)
            homes = dict(zip(firsts["fact_id"].to_list(), firsts["subject"].to_list()))
            homes.update(zip(seconds["fact_id"].to_list(), seconds["subject"].to_list()))
            where = {bucket_of(homes[i], tag.buckets) for p in pairs for i in p}
            rows = _derive_pairs(store, tag, rule, pairs, wanted, overlay, where)
            found.append(rows)
            wanted -= set(rows["fact_id"].to_list())
            if not wanted:
                break
    return pl.concat(found) if found else pl.DataFrame()


def _derive_pairs(store: StateStore, tag: StateTag, rule: RollupRule, pairs: list[tuple[str, str]],
                  wanted: set[str], overlay: "StateOverlay | None" = None,
                  buckets: set[int] | None = None) -> pl.DataFrame:
    """The rows among ``wanted`` that ``rule`` derives from the input ``pairs`` (read by id from
    ``buckets``, None: every bucket; as ``overlay`` has them)."""
    ids = sorted({i for p in pairs for i in p})
    inputs = pl.from_arrow(store.read("facts", version=tag.facts_version, layer="merged", buckets=buckets,
                                      filter=among("fact_id", ids)))
    if overlay is not None:
        inputs = overlay.apply(inputs, fact_ids=ids).filter(pl.col("layer") == "merged")
    rows = derive_frame((rule,), inputs, buckets=tag.buckets)
    return rows.filter(pl.col("fact_id").is_in(pl.Series(sorted(wanted), dtype=pl.Utf8).implode()))
