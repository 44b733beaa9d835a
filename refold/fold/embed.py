"""The embedder port, and the items of folded state that get embedded (pure, no IO).

The vector index is derived state like the graph: what gets embedded is a function of the folded
graph (one sentence per fact, derived facts included) and of the log (one text per event), and the
index is keyed by the spec hash and the embedder's ``model_id``. This module says *what* is
embedded and with which metadata; :mod:`refold.storage.index` stores it in faiss and
:mod:`refold.search.retriever` keeps it in step with the log.

Each item has a stable 63-bit ``id`` (a hash of its key: the fact id, or the event id), so an
index can be updated by difference: items whose key and text are unchanged keep their vector and
only get fresh metadata (a superseded fact's ``valid_to``, a new corroborating source); new or
re-worded items are embedded; items that left the state are removed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import polars as pl

from refold.fold.errors import ValidationError
from refold.fold.events import Event
from refold.fold.scoping import CLOSER_COLUMNS

__all__ = [
    "EMBEDDED_KINDS", "EVENT_SCHEMA", "Embedder", "FACT_SCHEMA", "ITEM_FACT_COLUMNS", "MAX_TEXT_CHARS",
    "check_vectors", "event_items", "event_text", "fact_item_frame", "fact_items_of_rows",
    "fact_sentence", "readers_of", "relation_phrase", "stable_id", "text_hash",
]

#: Event kinds whose text is embedded (what an agent or a person said or wrote).
EMBEDDED_KINDS = frozenset({"observation", "document", "chat_turn", "memory_written", "tool_call"})
#: Event texts are cut here before embedding (MiniLM reads ~256 tokens anyway).
MAX_TEXT_CHARS = 2000


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors. Must be deterministic for a given ``model_id``.

    ``embed(texts)`` returns a float32 array of shape ``(len(texts), dim)`` whose rows have unit
    L2 norm (so inner product is cosine similarity). ``model_id`` names the model *and* its
    version: it keys the index, so two embedders with one ``model_id`` must give the same vectors.
    Implementations should be picklable (they run inside Ray workers) and load models lazily.
    """

    model_id: str
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


def check_vectors(vectors: np.ndarray, *, count: int, dim: int, model_id: str) -> np.ndarray:
    """Validate an embedder's output (shape, dtype, unit norm); return it as contiguous float32."""
    arr = np.ascontiguousarray(vectors, dtype=np.float32)
    if arr.shape != (count, dim):
        raise ValidationError(
            f"embedder {model_id!r} returned shape {arr.shape} for {count} texts; expected ({count}, {dim})"
        )
    if count:
        norms = np.linalg.norm(arr, axis=1)
        if not np.all(np.abs(norms - 1.0) < 1e-3):
            raise ValidationError(
                f"embedder {model_id!r} returned vectors that are not L2-normalised "
                f"(norms {norms.min():.3f}..{norms.max():.3f}); normalise them in embed()"
            )
    return arr


def stable_id(key: str) -> int:
    """A non-negative int64 id for ``key`` (faiss ids are int64): 63 bits of BLAKE2b."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big") >> 1


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def fact_sentence(subject: str, relation: str, obj: str) -> str:
    """A fact as the sentence that gets embedded: ``"Alice lives in Berlin"``."""
    return f"{subject} {relation_phrase(relation)} {obj}"


def relation_phrase(relation: str) -> str:
    """A relation as the words between a fact's subject and object (``lives_in`` → ``lives in``)."""
    return relation.replace("_", " ").strip()


def event_text(event: Event) -> str:
    """The text of an event that gets embedded (its content, cut to :data:`MAX_TEXT_CHARS`)."""
    return (event.content or "")[:MAX_TEXT_CHARS]


def readers_of(principal_lists: Iterable[Sequence[str]]) -> tuple[bool, list[str]]:
    """``(restricted, readers)`` for an item built from events with these principals lists.

    An event whose list is empty may be read by everyone in its tenant. An item is visible to a
    principal only if the principal may read *every* source event, so the readers of a
    restricted item are the intersection of the non-empty lists (possibly nobody).
    """
    readers: set[str] | None = None
    for plist in principal_lists:
        if plist:
            readers = set(plist) if readers is None else readers & set(plist)
    return (readers is not None), sorted(readers or ())


FACT_SCHEMA = {
    "id": pl.Int64, "key": pl.Utf8, "tenant": pl.Utf8, "subject": pl.Utf8, "relation": pl.Utf8,
    "object": pl.Utf8, "text": pl.Utf8, "text_hash": pl.Utf8,
    "valid_from": pl.Datetime("us", "UTC"), "valid_to": pl.Datetime("us", "UTC"),
    "recorded_seq": pl.Int64, "derivation": pl.Utf8, "sources": pl.List(pl.Utf8),
    "restricted": pl.Boolean, "readers": pl.List(pl.Utf8),
    # who may see what closed the fact (refold.fold.scoping): to a principal who may not, the fact
    # is open (an index written before these columns existed lacks them until its next sync)
    "closer_restricted": pl.Boolean, "closer_readers": pl.List(pl.Utf8),
}
EVENT_SCHEMA = {
    "id": pl.Int64, "key": pl.Utf8, "tenant": pl.Utf8, "kind": pl.Utf8, "source": pl.Utf8,
    "seq": pl.Int64, "recorded_at": pl.Datetime("us", "UTC"),
    "valid_from": pl.Datetime("us", "UTC"), "valid_to": pl.Datetime("us", "UTC"),
    "text": pl.Utf8, "text_hash": pl.Utf8, "sources": pl.List(pl.Utf8),
    "restricted": pl.Boolean, "readers": pl.List(pl.Utf8),
}


#: the fact columns :func:`fact_item_frame` reads (``subject`` and ``object`` as node ids)
ITEM_FACT_COLUMNS = {
    "fact_id": pl.Utf8, "tenant": pl.Utf8, "subject": pl.Utf8, "relation": pl.Utf8, "object": pl.Utf8,
    "valid_from": pl.Datetime("us", "UTC"), "valid_to": pl.Datetime("us", "UTC"), "recorded_seq": pl.Int64,
    "derivation": pl.Utf8, "sources": pl.List(pl.Utf8), "source_principals": pl.List(pl.List(pl.Utf8)),
}


def fact_items_of_rows(rows: pl.DataFrame, names: Mapping[str, str],
                       retraction_principals: Mapping[str, Sequence[str]], *,
                       known: pl.DataFrame | None = None) -> pl.DataFrame:
    """One row per fact of a whole state that the index embeds, from fact rows (the state
    tables' columns, node ids for subjects and objects: :func:`refold.search.rows.index_facts`;
    history and derived facts included, a compose roll-up's closed copies not: each change of
    either input closes a copy, so they grow with an organisation's moves × its staff, and the
    index holds the current one, which is what a search without ``history`` or ``valid_at``
    finds). Filtering (current only, valid time, tenant, principal) happens at search time on
    these columns, so a fact whose ``valid_to`` changes needs new metadata, not a new vector
    (``known``: see :func:`fact_item_frame`)."""
    from refold.fold.scoping import closer_frame

    return fact_item_frame(rows.select(list(ITEM_FACT_COLUMNS)).cast(ITEM_FACT_COLUMNS), names,
                           closer_frame(rows, retraction_principals), known=known)


def fact_item_frame(facts: pl.DataFrame, names: Mapping[str, str], closers: pl.DataFrame, *,
                    known: pl.DataFrame | None = None) -> pl.DataFrame:
    """The index rows (:data:`FACT_SCHEMA`) of ``facts`` (the columns of
    :data:`ITEM_FACT_COLUMNS`, one row per fact of a whole state), with ``names`` (node id →
    entity name) and ``closers`` (:data:`CLOSER_COLUMNS`: the facts of that state whose closer
    is restricted, :func:`refold.fold.scoping.closer_frame`).
    Whichever engine folded the state, the same facts give the same frame. ``known``: rows an
    index holds (``key``, ``text``, ``id``, ``text_hash``): a fact with the same key and text
    takes its id and text hash from there instead of hashing again (both are functions of them)."""
    if facts.height == 0:
        return _frame([], FACT_SCHEMA)
    phrases = {r: relation_phrase(r) for r in facts["relation"].unique().to_list()}
    facts = facts.with_columns(
        pl.col("subject").replace_strict(names, return_dtype=pl.Utf8),
        pl.col("object").replace_strict(names, return_dtype=pl.Utf8),
        pl.col("relation").replace_strict(phrases, return_dtype=pl.Utf8).alias("_phrase"),
    )
    # fact_sentence, built column-wise (one string per fact)
    facts = facts.with_columns(pl.concat_str([pl.col("subject"), pl.col("_phrase"), pl.col("object")],
                                             separator=" ").alias("text"))
    # who may read each fact and see its closing: most facts are open to all and closed (if at
    # all) by what all may see, so only the others' rows are built in Python, then joined
    sparse = facts.filter(pl.col("source_principals").list.eval(pl.element().list.len() > 0).list.any())
    access = [(fid, *readers_of(lists)) for fid, lists in zip(sparse["fact_id"].to_list(),
                                                             sparse["source_principals"].to_list())]
    none: pl.Expr = pl.lit([], dtype=pl.List(pl.Utf8))
    facts = facts.join(pl.DataFrame(access, schema={"fact_id": pl.Utf8, "restricted": pl.Boolean,
                                                    "readers": pl.List(pl.Utf8)}, orient="row"),
                       on="fact_id", how="left", maintain_order="left")
    facts = facts.join(closers.select(list(CLOSER_COLUMNS)).cast(CLOSER_COLUMNS), on="fact_id", how="left",
                       maintain_order="left")
    facts = _hashed(facts, known)
    out = facts.select(
        "id", pl.col("fact_id").alias("key"), "tenant", "subject", "relation", "object", "text", "text_hash",
        "valid_from", "valid_to", "recorded_seq", "derivation", "sources",
        pl.col("restricted").fill_null(False), pl.col("readers").fill_null(none),
        pl.col("closer_restricted").fill_null(False), pl.col("closer_readers").fill_null(none),
    )
    return _checked(out.cast(FACT_SCHEMA))


def _hashed(facts: pl.DataFrame, known: pl.DataFrame | None) -> pl.DataFrame:
    """``facts`` with ``id`` (of ``fact_id``) and ``text_hash`` (of ``text``): looked up in
    ``known`` where it has the same key and text, hashed for the rest."""
    if known is not None and known.height:
        facts = facts.join(known.select(pl.col("key").alias("fact_id"), "text", "id", "text_hash"),
                           on=["fact_id", "text"], how="left", maintain_order="left")
    else:
        facts = facts.with_columns(pl.lit(None, pl.Int64).alias("id"), pl.lit(None, pl.Utf8).alias("text_hash"))
    todo = facts.filter(pl.col("id").is_null()).select("fact_id", "text")
    if todo.height == 0:
        return facts
    fresh = todo.select(
        "fact_id",
        pl.Series("_id", [stable_id(i) for i in todo["fact_id"].to_list()], dtype=pl.Int64),
        pl.Series("_hash", [text_hash(t) for t in todo["text"].to_list()], dtype=pl.Utf8))
    return facts.join(fresh, on="fact_id", how="left", maintain_order="left").with_columns(
        pl.coalesce("id", "_id").alias("id"), pl.coalesce("text_hash", "_hash").alias("text_hash"))


def event_items(events: Iterable[Event]) -> pl.DataFrame:
    """One row per readable event of an embedded kind (erased events and tombstones have none)."""
    rows = []
    for e in events:
        if e.kind not in EMBEDDED_KINDS or e.content is None or not e.content.strip():
            continue
        text = event_text(e)
        restricted, readers = readers_of([e.principals])
        rows.append({
            "id": stable_id(e.event_id), "key": e.event_id, "tenant": e.tenant, "kind": e.kind,
            "source": e.source, "seq": e.seq, "recorded_at": e.recorded_at,
            "valid_from": e.valid_from, "valid_to": e.valid_to,
            "text": text, "text_hash": text_hash(text), "sources": [e.event_id],
            "restricted": restricted, "readers": readers,
        })
    return _frame(rows, EVENT_SCHEMA)


def _frame(rows: list[dict], schema: dict) -> pl.DataFrame:
    return _checked(pl.DataFrame(rows, schema=schema))


def _checked(frame: pl.DataFrame) -> pl.DataFrame:
    frame = frame.sort("id")
    if frame.height != frame["id"].n_unique():
        # 63-bit hash collision between two distinct keys: astronomically unlikely, never silent
        dup = frame.filter(pl.col("id").is_duplicated())["key"].to_list()
        raise ValidationError(f"index id collision between keys {dup[:4]}; report this as a bug")
    return frame
