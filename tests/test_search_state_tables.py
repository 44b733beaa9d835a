"""The search index kept in step from the state tables (issue #17: a read must not fold the whole
state as one graph). Where reads answer from the state tables, the index's fact items are built
from their rows in polars (:func:`refold.search.rows.index_facts`,
:func:`refold.fold.embed.fact_items_of_rows`) and its event items from the events after the
position the index reflects; the items of the reference fold of the same log
(:mod:`refold.fold.reference`, every event extracted by the rules extractor) are the oracle.

Each seeded log (the one of tests/test_state_scoping.py) mixes principals over supersession,
facts about the past, retractions by restricted events, inverse and compose roll-ups, and events
after the last fold (the read overlay): every column of the index's metadata is compared,
``closer_restricted``/``closer_readers`` included.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

import refold
from refold.search import retriever as search_mod
from refold.extractors import get_extractor
from refold.fold.embed import event_items, fact_items_of_rows
from refold.fold.reference import reference_fold, reference_index_items
from refold.fold.extract import needs_extraction
from refold.reads.queries import graph_view
from refold.search.rows import index_facts
from refold.reads.tables import read_tables
from tests.fold_helpers import fact_event
from tests.test_state_scoping import UNREADABLE, _events, restore_files


def _oracle(mem, as_of=None) -> dict[str, pl.DataFrame]:
    """The items of the reference fold of the log (at ``as_of``): a fold of it as one graph."""
    events = mem.events(as_of=as_of)
    spec = mem.current_spec()
    extractions = {x.event_id: x for x in get_extractor("rules").extract([e for e in events if needs_extraction(e)], spec)}
    retractions = {e.event_id: e.principals for e in events if e.kind == "retraction"}
    graph = reference_fold(spec, events, extractions).graph
    return {"facts": reference_index_items(graph, retractions), "events": event_items(events)}


def _store(tmp_path, seed: int):
    rng = random.Random(seed)
    mem = refold.init(tmp_path / "store")
    mem.append(_events(rng, 40, 0))
    mem.fold()
    mem.append(_events(rng, 12, 40))  # read through the overlay
    return mem, rng


def _no_graph_fold(monkeypatch, mem):
    """Refuse, until ``monkeypatch.undo()``, every fold of the state as one graph: the state
    tables' graph view (behind ``Memory.state`` and ``Memory.graph``) and the reference fold of the
    log, wherever a refold module imported them. The index reads every fact row either way, so no
    data tells the two apart: the cost is guarded by refusing the calls, and ``mem.state()`` is
    asked under the refusal to show that it intercepts the whole-state fold."""
    def refuse(*args, **kw):
        raise AssertionError("the index folded the whole state as a graph")
    for name, module in list(sys.modules.items()):
        if name == "refold" or name.startswith("refold."):
            for attr, real in (("graph_view", graph_view), ("reference_fold", reference_fold)):
                if getattr(module, attr, None) is real:
                    monkeypatch.setattr(module, attr, refuse)
    with pytest.raises(AssertionError, match="whole state as a graph"):
        mem.state()


def _garble_texts(mem, before: int) -> dict[Path, bytes]:
    """Garble the ``content`` column of every log data file whose events all lie before seq
    ``before`` (except a file a spec is read from): a read of those events' texts fails (the
    test checks that ``mem.events()`` does), while reads of their other columns (ids, kinds,
    principals: what the index's closing rule reads) still work. Returns the files' original
    bytes, for :func:`tests.test_state_scoping.restore_files`."""
    root = Path(mem.layout.events.removeprefix("file://"))
    saved = {}
    for action in pa.table(DeltaTable(str(root)).get_add_actions(flatten=True)).to_pylist():
        if action["max.seq"] >= before or action["min.kind"] <= "spec_changed" <= action["max.kind"]:
            continue
        file = root / action["path"]
        data = bytearray(file.read_bytes())
        saved[file] = bytes(data)
        meta = pq.ParquetFile(file).metadata
        for group in range(meta.num_row_groups):
            for i in range(meta.num_columns):
                chunk = meta.row_group(group).column(i)
                if chunk.path_in_schema == "content":
                    start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
                    data[start:start + chunk.total_compressed_size] = b"\xff" * chunk.total_compressed_size
        file.write_bytes(bytes(data))
    assert saved  # (there were old events to garble)
    return saved


@pytest.mark.parametrize("seed", range(5))
def test_fact_items_of_the_state_tables_equal_the_reference_folds(tmp_path, seed):
    mem, _ = _store(tmp_path, seed)
    tables = read_tables(mem.store)
    assert tables is not None and tables[2].rows is not None  # the tables answer, with an overlay
    rows, names = index_facts(*tables)
    got = fact_items_of_rows(rows, names, mem.store.retraction_principals())
    want = _oracle(mem)["facts"]
    assert got.equals(want)
    assert want["closer_restricted"].any() and want["restricted"].any()  # (the scoping columns are compared)
    assert (want["derivation"] == "works_in").any() or (want["derivation"] != "extracted").any()
    # as of every past log version the tables can answer (time travel on them and an overlay)
    versions = mem.log_store.arrow(columns=["table_version"])["table_version"].to_pylist()
    for version in sorted(set(versions))[1::3]:
        past = read_tables(mem.store, version)
        if past is None:
            continue
        rows, names = index_facts(*past)
        got = fact_items_of_rows(rows, names, mem.store.retraction_principals()) if rows.height else None
        want = _oracle(mem, as_of=version)["facts"]
        assert (got is None and want.height == 0) or got.equals(want), version


@pytest.mark.parametrize("persist", [True, False])
@pytest.mark.search
def test_the_head_index_follows_the_log_without_a_graph_fold(tmp_path, monkeypatch, persist):
    mem, rng = _store(tmp_path, 7)
    oracle = _oracle(mem)
    _no_graph_fold(monkeypatch, mem)
    first = search_mod.open_index(mem.store, embedder="hashing", persist=persist)
    for kind in ("facts", "events"):
        assert first.indexes[kind].meta.equals(oracle[kind]), kind
    # the log moves: the events index takes the new events' texts only (read from their files),
    # the facts index the new state's rows; only new texts are embedded
    monkeypatch.undo()
    mem.append(_events(rng, 9, 52))
    oracle = _oracle(mem)
    _no_graph_fold(monkeypatch, mem)
    # no read of the whole log: the texts of the events before the state's tag (which the index
    # holds already, and the read overlay does not need) are garbled, and the sync still answers
    tag = mem.state_store(mem.current_spec()).tag()
    garbled = _garble_texts(mem, before=min(tag.log_seq, first.last_seq))
    with pytest.raises(UNREADABLE):
        mem.events()  # (a read of the whole log fails on them)
    moved = search_mod.open_index(mem.store, embedder="hashing", persist=persist)
    restore_files(garbled)
    for kind in ("facts", "events"):
        assert moved.indexes[kind].meta.equals(oracle[kind]), kind
    new = sum(oracle[kind].join(first.indexes[kind].meta, on=["id", "text_hash"], how="anti").height
              for kind in ("facts", "events"))
    assert moved.report.embedded == new > 0  # only what the last index lacked
    assert new < len(moved.indexes["facts"]) + len(moved.indexes["events"])
    assert first.indexes["events"].meta.height < moved.indexes["events"].meta.height  # the one held is unchanged
    hits = mem.search("Zoe lives in Oslo", k=3, embedder="hashing", principal="hr")
    assert hits.height and hits["fact_id"].is_in(oracle["facts"]["key"].implode()).all()


@pytest.mark.search
def test_a_stored_index_whose_position_the_log_no_longer_holds_reads_every_event(tmp_path):
    """A stored index whose position names another log (as after a rewrite) is not advanced by a
    tail after that position: the next sync reads every event, so the index equals the oracle's."""
    mem, rng = _store(tmp_path, 3)
    ix = mem.index(embedder="hashing")
    manifest = tmp_path / "store" / ix.report.path.split("/store/", 1)[1] / "manifest.json"
    data = json.loads(manifest.read_text())
    seq, link = data["events_through"]
    data["events_through"] = [seq, "0" * len(link)]  # another log's position (as after a rewrite)
    data["link"] = data["events_through"][1]
    manifest.write_text(json.dumps(data))
    mem.append(_events(rng, 5, 52))
    search_mod.forget_views(mem.store)
    moved = mem.index(embedder="hashing")
    assert moved.indexes["events"].meta.equals(_oracle(mem)["events"])


@pytest.mark.search
def test_a_search_after_an_erasure_holds_nothing_of_the_erased_events(tmp_path):
    mem, _ = _store(tmp_path, 1)
    mine = [fact_event("Zoe", "lives_in", "Tromso", day=40, event_id="ev-x1", subjects=["s-x"]),
            fact_event("Tromso", "located_in", "Norway", day=41, event_id="ev-x2", subjects=["s-x"])]
    mem.append(mine)
    mem.fold()
    before = mem.index(embedder="hashing")
    assert before.indexes["events"].meta["key"].is_in(["ev-x1", "ev-x2"]).sum() == 2
    position = (before.last_seq, before.link)
    mem.erase("s-x")
    from refold.storage.index import events_through, index_store

    manifest = index_store(mem.layout).manifest(mem.current_spec().hash, before.report.model_id)
    assert manifest["last_seq"] == -1 and events_through(manifest) == position  # stale facts, events kept
    # the purged index still holds the events up to its position: only the tail is read (the
    # texts of every event before that position are garbled, and a read of the whole log fails)
    garbled = _garble_texts(mem, before=position[0])
    with pytest.raises(UNREADABLE):
        mem.events()
    after = mem.index(embedder="hashing")
    restore_files(garbled)
    for kind in ("facts", "events"):
        meta = after.indexes[kind].meta
        assert not meta["sources"].list.eval(pl.element().is_in(["ev-x1", "ev-x2"])).list.any().any(), kind
        assert not meta["text"].str.contains("Tromso").any(), kind
        assert meta.equals(_oracle(mem)[kind]), kind


@pytest.mark.search
def test_the_index_holds_a_compose_roll_ups_current_copy_not_its_closed_ones(tmp_path):
    mem = refold.init(tmp_path / "store")
    mem.append([fact_event("Zoe", "works_at", "Acme", day=0), fact_event("Acme", "located_in", "Oslo", day=1),
                fact_event("Acme", "located_in", "Rome", day=5)])
    mem.fold()
    rolled = mem.facts(subject="Zoe", relation="works_in")
    assert sorted(zip(rolled["object"].to_list(), rolled["current"].to_list())) == [("Oslo", False), ("Rome", True)]
    meta = mem.index(embedder="hashing").indexes["facts"].meta
    texts = set(meta["text"].to_list())
    assert "Zoe works in Rome" in texts and "Zoe works in Oslo" not in texts
    assert "Acme located in Oslo" in texts  # a stored fact keeps its history
    hits = mem.search("Zoe works in Oslo", k=5, embedder="hashing", history=True)
    assert "Zoe works in Oslo" not in hits["text"].to_list() and hits.height


def test_known_ids_and_hashes_serve_only_for_the_same_key_and_text(tmp_path):
    mem, _ = _store(tmp_path, 2)
    rows, names = index_facts(*read_tables(mem.store))
    fresh = fact_items_of_rows(rows, names, mem.store.retraction_principals())
    # an index whose texts differ (an entity renamed, e.g. after an erasure of its first mention)
    # and whose hashes are wrong: none of them may be taken
    stale = fresh.with_columns(pl.col("text") + " (old)", pl.lit("bogus").alias("text_hash"), pl.lit(7).alias("id"))
    assert fact_items_of_rows(rows, names, mem.store.retraction_principals(), known=stale).equals(fresh)
    # the same texts: taken (a wrong hash put there shows it was read, not recomputed)
    marked = fresh.with_columns(pl.lit("from-index").alias("text_hash"))
    reused = fact_items_of_rows(rows, names, mem.store.retraction_principals(), known=marked)
    assert (reused["text_hash"] == "from-index").all() and reused.drop("text_hash").equals(fresh.drop("text_hash"))


@pytest.mark.search
def test_searches_after_appends_advance_their_own_view_and_leave_a_returned_one_alone(tmp_path, monkeypatch):
    from refold.storage.index import IndexStore

    mem, rng = _store(tmp_path, 4)
    held = mem.index(embedder="hashing")  # stored, and returned to this caller
    held_meta = {kind: held.indexes[kind].meta.clone() for kind in ("facts", "events")}
    loads = []
    real_load = IndexStore.load
    monkeypatch.setattr(IndexStore, "load", lambda self, *a, **kw: loads.append(a) or real_load(self, *a, **kw))
    for round_ in range(3):
        mem.append(_events(rng, 4, 60 + 4 * round_))
        hits = mem.search("Zoe lives in Oslo", k=3, embedder="hashing")
        assert hits.height
        _, view = search_mod._service(mem.store).head[(mem.current_spec().hash, "refold-hashing-v1-d256")]
        oracle = _oracle(mem)
        for kind in ("facts", "events"):
            assert view.indexes[kind].meta.equals(oracle[kind]), (round_, kind)
            assert len(view.indexes[kind]) == oracle[kind].height
    assert loads == []  # never reloaded from disk: the view kept here was as new as the stored one
    for kind in ("facts", "events"):  # the view this caller holds did not change under it
        assert held.indexes[kind].meta.equals(held_meta[kind]) and len(held.indexes[kind]) == held_meta[kind].height
    # a view handed to a caller (mem.index() after the searches) is not changed by later searches
    given = mem.index(embedder="hashing")
    size = len(given.indexes["events"])
    mem.append(_events(rng, 2, 80))
    mem.search("Zoe", k=1, embedder="hashing")
    assert len(given.indexes["events"]) == size


@pytest.mark.slow
def test_closer_frame_equals_closer_readers(tmp_path):
    """The polars form of the closing rule (the state tables' index) against the dict form
    (the reference fold's), over the same rows of ten seeded logs: only restricted closers are
    listed."""
    from refold.fold.scoping import closer_frame, closer_readers

    listed = 0
    for seed in range(10):
        mem, _ = _store(tmp_path / str(seed), 100 + seed)
        rows, _ = index_facts(*read_tables(mem.store))
        principals = mem.store.retraction_principals()
        want = {fid: (True, sorted(r)) for fid, (restricted, r) in
                closer_readers({d["fact_id"]: d for d in rows.to_dicts()}, principals).items() if restricted}
        got = {fid: (flag, readers) for fid, flag, readers in closer_frame(rows, principals).iter_rows()}
        assert got == want, seed
        listed += len(want)
    assert listed > 20  # (restricted closers of every kind are among them)


@pytest.mark.search
def test_searches_from_threads_share_one_memory(tmp_path):
    """Searches from several threads on one Memory (as an application might) take turns on the
    view they bring up to date in place, while another thread appends: every answer comes back
    whole, and the view ends up equal to a fresh build. (Without the service's lock this failed
    in one of three runs here: a race, so passing is evidence, not proof.)"""
    import threading

    mem, rng = _store(tmp_path, 5)
    batches = [_events(rng, 2, 60 + 2 * i) for i in range(6)]
    errors: list[BaseException] = []

    def searching():
        try:
            for _ in range(6):
                assert mem.search("Zoe lives in Oslo", k=3, embedder="hashing").height
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    def appending():
        for batch in batches:
            mem.append(batch)

    threads = [threading.Thread(target=searching) for _ in range(2)] + [threading.Thread(target=appending)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    mem.search("Zoe", k=1, embedder="hashing")
    _, view = search_mod._service(mem.store).head[(mem.current_spec().hash, "refold-hashing-v1-d256")]
    oracle = _oracle(mem)
    for kind in ("facts", "events"):
        assert view.indexes[kind].meta.equals(oracle[kind]), kind


#: seeds 10, 16, 40 and 52 append a fact that changes who may see the closing of an input of a
#: closed stored roll-up elsewhere (that roll-up's row itself unchanged)
@pytest.mark.parametrize("seed", [*range(6), 10, 16, 40, 52])
@pytest.mark.slow
def test_a_kept_basis_and_the_overlays_delta_equal_a_whole_read(tmp_path, monkeypatch, seed):
    """While the state tables' tag stays (appends, no fold), a search keeps the tag's basis and
    its items and derives again only what the read overlay touches (refold.search.rows): after
    every append its items equal those built from a whole read of the state and the reference
    fold's, every column; the basis is read once per tag."""
    from refold.search import rows as state_index
    mem, rng = _store(tmp_path, 200 + seed)
    builds = []
    real_basis = state_index.index_basis
    monkeypatch.setattr(state_index, "index_basis", lambda *a: builds.append(a) or real_basis(*a))
    svc = search_mod._service(mem.store)
    principals = mem.store.retraction_principals
    touched_rollups = searched = 0
    for round_ in range(5):
        if round_ == 3:
            mem.fold()  # a new tag: a new basis
        mem.append(_events(rng, 3, 60 + 3 * round_))
        tables = read_tables(mem.store)
        before = len(builds)
        got = search_mod._table_fact_items(mem.store, tables, None, svc).sort("key")
        searched += len(builds) - before
        rows, names = index_facts(*tables)
        whole = fact_items_of_rows(rows, names, principals()).sort("key")
        assert got.equals(whole), round_
        assert got.equals(_oracle(mem)["facts"].sort("key")), round_
        _, basis, _ = svc.basis
        delta = state_index.index_delta(basis, tables[1], tables[2])
        touched_rollups += len(delta.dropped & set(basis.rollups["fact_id"].to_list()))
    assert searched == 2  # the first tag's basis served three reads, the second's two
    assert touched_rollups  # (the deltas re-derived compose roll-ups)


@pytest.mark.search
def test_why_of_a_roll_up_a_search_returned_reads_its_subject_not_the_whole_join(tmp_path, monkeypatch):
    """The index holds no roll-up's inputs, so a search notes the subject of each derived fact
    it returns: a ``why`` of one then derives that subject's roll-ups (its buckets) instead of
    searching the inputs' join of every bucket, and answers what that search answers."""
    from refold.reads import rollups as state_rollups
    mem = refold.init(tmp_path / "store")
    mem.append([fact_event("Zoe", "works_at", "Acme", day=0), fact_event("Acme", "located_in", "Oslo", day=1),
                fact_event("Ann", "works_at", "Initech", day=2), fact_event("Initech", "located_in", "Rome", day=3)])
    mem.fold()
    mem.append(fact_event("Acme", "located_in", "Bergen", day=5))  # after the tag: the overlay derives it
    state_rollups.forget_hints()
    hits = mem.search("Zoe works in Bergen", k=5, embedder="hashing")
    fid = hits.filter((pl.col("derivation") == "works_in") & (pl.col("subject") == "Zoe"))["fact_id"][0]
    assert fid not in state_rollups._HINTS  # (the index's sync derived it without remembering inputs)
    searched = []
    real = state_rollups.pairs_deriving
    monkeypatch.setattr(state_rollups, "pairs_deriving", lambda *a, **kw: searched.append(a) or real(*a, **kw))
    answer = mem.why(fid)
    assert searched == [] and answer["derivation"] == "works_in" and len(answer["inputs"]) == 2
    state_rollups.forget_hints()  # a process that neither read nor searched it: the join is searched
    assert refold.open(tmp_path / "store").why(fid) == answer and searched
