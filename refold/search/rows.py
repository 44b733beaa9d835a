"""The search index's fact rows, from the state tables: a basis per tag and an overlay's delta.

    basis (one per tag)   every stored row at the tag, the current compose roll-ups of those
                          rows, the entities' names: what a search keeps in memory while the
                          tag stays (reads the whole facts table once)
    delta (each read)     the subjects the read overlay touches (the events after the tag):
                          their rows as the overlay has them, and the compose roll-ups with an
                          input among those rows, derived again; the basis rows they replace
                          (every row of those subjects at the tag, every roll-up with an input
                          among them) are dropped

A fact's index row depends on its own row, its names, and the rows that close it; a subject's
rows change together (facts merge per (tenant, subject, relation)), a compose roll-up is a
function of its two inputs, and an append never renames a known node. So the basis with the
delta applied is the whole state's rows as the overlay has them, and a search that keeps the
basis (and its items) re-derives only what the new events touch: an agent's search right after
an append no longer reads and derives the whole state (docs/search.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import polars as pl

from refold.fold.partition import derive_frame, one_of
from refold.reads.rollups import rollups_of, rules_of
from refold.storage.state import StateStore, StateTag

if TYPE_CHECKING:
    from refold.reads.overlay import StateOverlay

__all__ = ["IndexBasis", "IndexDelta", "index_basis", "index_delta", "index_facts"]


@dataclass(frozen=True)
class IndexBasis:
    """The state tables' share of the index at one tag (no overlay): ``rows`` every stored row
    (both layers, history included), ``rollups`` the current compose roll-ups of those rows (a
    compose roll-up's closed copies are not indexed: :func:`refold.fold.embed.fact_items_of_rows`),
    ``names`` node id → display name of every entity."""

    rows: pl.DataFrame
    rollups: pl.DataFrame
    names: dict[str, str]

    def frame(self) -> pl.DataFrame:
        """Every fact row of the basis: stored rows and roll-ups."""
        return pl.concat([self.rows, self.rollups]) if self.rollups.height else self.rows


@dataclass(frozen=True)
class IndexDelta:
    """What an overlay changes in a basis: ``rows`` (the touched subjects' rows and the roll-ups
    with an input among them, as the overlay has them) replace the basis rows of ``dropped``
    (fact ids); ``context`` holds the rows a closed derived row's inputs are (who may see its
    closing follows them: :func:`refold.fold.scoping.closer_frame`), not indexed themselves;
    ``names`` the basis names and those of the nodes only the overlay names."""

    rows: pl.DataFrame
    dropped: frozenset[str]
    context: pl.DataFrame
    names: dict[str, str]


def index_basis(store: StateStore, tag: StateTag) -> IndexBasis:
    """The :class:`IndexBasis` of ``store`` at ``tag``: reads the whole ``facts`` table and the
    entities' names, never a graph."""
    rows = pl.from_arrow(store.read("facts", version=tag.facts_version))
    rollups = rollups_of(store, tag, rows.filter(pl.col("valid_to").is_null()), subjects=None, remember=False)
    names: dict[str, str] = {}
    if rows.height:
        found = pl.from_arrow(store.read("entities", version=tag.entities_version, columns=["node", "name"]))
        names = dict(zip(found["node"].to_list(), found["name"].to_list()))
    return IndexBasis(rows=rows, rollups=rollups, names=names)


def index_delta(basis: IndexBasis, tag: StateTag, overlay: "StateOverlay") -> IndexDelta:
    """The :class:`IndexDelta` of ``overlay`` (the read overlay of the events after ``tag``) on
    ``basis`` (``tag``'s). Works in memory: reads nothing."""
    names = dict(basis.names)
    names.update({n: name for n, (_, name) in overlay.names.items() if n not in names})
    names.update({n: e["name"] for n, e in overlay.entities.items()})
    # (shred mode: owners erased since the fold; no row with one of their events is shown)
    erased = frozenset(basis.rows.filter(pl.col("sources").list.eval(pl.element().is_in(
        pl.Series(sorted(overlay.erased), dtype=pl.Utf8).implode())).list.any())["fact_id"].to_list()) \
        if overlay.erased else frozenset()
    gone = basis.rows.filter(one_of("fact_id", overlay.gone))
    subjects = set(overlay.rows["subject"].to_list()) | set(gone["subject"].to_list())
    if not subjects:
        empty = basis.rows.head(0)
        return IndexDelta(rows=empty, dropped=erased, context=empty, names=names)
    mine = basis.rows.filter(one_of("subject", subjects))
    touched = overlay.apply(mine, nodes=subjects)
    # the roll-ups with an input among the touched subjects' rows, over every current row as the
    # overlay has them (the pairs with a touched input only: see derive_frame's ``touching``)
    stale = set(mine["fact_id"].to_list())
    frames = [touched]
    rules = rules_of(tag)
    if rules and basis.rollups.height:
        hit = basis.rollups.select("fact_id", "inputs").explode("inputs").filter(one_of("inputs", stale))
        stale |= set(hit["fact_id"].to_list())
    if rules:
        live = touched.filter(pl.col("valid_to").is_null() & (pl.col("layer") == "merged"))
        if live.height:
            current = overlay.apply(basis.rows.filter(pl.col("valid_to").is_null()))
            current = current.filter(pl.col("valid_to").is_null() & (pl.col("layer") == "merged"))
            derived = derive_frame(rules, current, buckets=tag.buckets, touching=live["fact_id"].to_list())
            frames.append(derived.select(touched.columns).cast(touched.schema))
    # a closed derived row elsewhere with an input among them: who may see its closing follows
    # its inputs' closings (refold.fold.scoping.closer_frame), which may have changed
    ids = pl.Series(sorted(set(touched["fact_id"].to_list())), dtype=pl.Utf8).implode()
    dependents = basis.rows.filter((pl.col("derivation") != "extracted") & pl.col("valid_to").is_not_null())
    dependents = dependents.filter(pl.col("inputs").list.eval(pl.element().is_in(ids)).list.any())
    if dependents.height:
        found = dependents["fact_id"].to_list()
        stale |= set(found)
        frames.append(overlay.apply(dependents, fact_ids=found))
    rows = pl.concat(frames).unique("fact_id", keep="first", maintain_order=True)
    # the rows a closed derived row's inputs are, with their subjects' other rows (an input's own
    # closing is read from its subject's rows)
    inputs = set(rows.filter(pl.col("valid_to").is_not_null() & (pl.col("derivation") != "extracted"))
                 ["inputs"].explode().drop_nulls().to_list()) - set(rows["fact_id"].to_list())
    context = rows.head(0)
    if inputs:
        owners = set(basis.rows.filter(one_of("fact_id", inputs))["subject"].to_list()) - subjects
        if owners:
            context = overlay.apply(basis.rows.filter(one_of("subject", owners)), nodes=owners)
    return IndexDelta(rows=rows, dropped=frozenset(stale) | erased, context=context, names=names)


def index_facts(store: StateStore, tag: StateTag, overlay: "StateOverlay | None" = None
                ) -> tuple[pl.DataFrame, dict[str, str]]:
    """What the search index embeds of the state (:func:`refold.fold.embed.fact_items_of_rows`):
    every stored fact with its history, and the compose roll-ups that are current (derived from
    the current rows: a derived row is open exactly when both its inputs are), subjects and
    objects as node ids; and the names of those nodes. A compose roll-up's closed copies (one per
    change of either input, so an organisation's moves times its staff) are not derived: the
    index leaves them out on either engine (:func:`refold.fold.embed.fact_items_of_rows`). The basis of
    ``tag`` with ``overlay``'s delta applied (the same path a search's kept basis takes)."""
    basis = index_basis(store, tag)
    if overlay is None:
        return basis.frame(), basis.names
    delta = index_delta(basis, tag, overlay)
    df = basis.frame()
    if delta.dropped:
        df = df.filter(~one_of("fact_id", delta.dropped))
    if delta.rows.height:
        df = pl.concat([df, delta.rows.select(df.columns).cast(df.schema)])
    return df, delta.names
