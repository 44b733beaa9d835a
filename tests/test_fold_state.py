"""The fold against a real store: state as Delta tables under state/<spec-hash>/.

Each test folds a real log into real Delta tables and compares the state they hold (read back as
a networkx view) with the reference fold of the same log (refold.fold.reference: merge and
roll-ups on one in-memory graph, the test oracle), attribute for attribute: after a full fold,
an incremental one, and an erasure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import json

import pytest
from deltalake import DeltaTable

import refold
from refold.fold.partition import bucket_of, stored_rules
from refold.fold.merge import node_id
from refold.reads.queries import graph_view
from refold.erasure.scan import scan_report
from tests.fold_helpers import canonical_graph, fact_event, reference_facts, reference_of
from tests.test_state_scoping import UNREADABLE, garble_buckets, restore_files

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from snapshot_workload import events as workload  # noqa: E402


def _log(n: int, start: int = 0) -> list:
    return list(workload(n, seed=3, people=25, start=start))


def _state_graph(mem):
    store = mem.state_store(mem.current_spec())
    return graph_view(store, store.tag())


def _reference(root: Path):
    """The reference fold of the store's log (its events read by a fresh Memory)."""
    return reference_of(refold.open(root)).graph


def _extras(day: int) -> list[dict]:
    """A retraction, an alias surface and a second tenant: what the workload lacks."""
    return [
        fact_event("Person1", "likes", "chess", day=day),
        {**fact_event("Person1", "likes", "chess", day=day + 1), "kind": "retraction"},
        fact_event("the Acme", "located_in", "Oslo", day=day + 2),
        fact_event("Person2", "works_at", "Acme", day=day + 3, tenant="other"),
    ]


def test_full_then_incremental_fold_equal_the_reference(mem, tmp_path):
    mem.append(_log(400))
    mem.append(_extras(10))
    first = mem.fold(full=True)
    assert first.started_from == -1 and first.derived_facts > 0
    assert canonical_graph(_state_graph(mem)) == canonical_graph(_reference(Path(mem.root)))

    mem.append(_log(60, start=400))
    mem.append(_extras(40))
    again = mem.fold()
    assert again.started_from == first.last_seq  # resumed from the tagged state
    assert again.extraction_calls == 60 + 3  # only the new events (the retraction is not extracted)
    assert canonical_graph(_state_graph(mem)) == canonical_graph(_reference(Path(mem.root)))

    fresh = refold.open(mem.root)
    full = fresh.fold(full=True)
    assert (full.facts, full.derived_facts) == (again.facts, again.derived_facts)
    assert full.extraction_calls == 0  # a refold reads the cache


def test_an_incremental_fold_commits_once_per_table_plus_the_tag(mem):
    """The changed merged rows and the roll-ups they change go to ``facts`` in one commit, then
    the tag: a small tail costs one commit per state table (and the tag), not one per stage."""
    mem.append(_log(200))
    mem.fold(full=True, buckets=8)
    store = mem.state_store(mem.current_spec())
    before = {name: DeltaTable(store.path(name)).version() for name in ("items", "facts", "entities")}
    mem.append(_log(20, start=200))
    report = mem.fold()
    assert report.started_from >= 0 and report.derived_facts > 0
    after = {name: DeltaTable(store.path(name)).version() for name in ("items", "facts", "entities")}
    assert {name: after[name] - before[name] for name in after} == {"items": 1, "facts": 2, "entities": 1}
    operations = [info["operation"] for info in DeltaTable(store.path("facts")).history(2)]
    assert operations == ["SET TBLPROPERTIES", "WRITE"]
    assert canonical_graph(_state_graph(refold.open(mem.root))) == canonical_graph(_reference(Path(mem.root)))


@pytest.mark.slow
def test_a_refold_from_the_cache_reads_each_cached_extraction_once(mem, monkeypatch):
    """A full refold with an extractor reads the cached extractions of each batch once (for their
    facts), not once more to find which events still need the model.

    A second look-up returns what the first did, so no answer shows it: a spy records the event
    ids asked of every read of the extraction cache (the methods of ``ExtractionCache``, the
    class of ``Store.cache``, which the fold reads through), and every extractable event must
    be asked about exactly once; a read of every row (``keys``, ``frame``) is refused."""
    from refold.extractors import get_extractor
    from refold.fold.extract import needs_extraction
    from refold.storage.cache.table import ExtractionCache

    mem.append(_log(120))
    mem.fold(full=True)
    mem.append(_log(5, start=120))
    asked: list[str] = []

    def asking(real):
        def read(self, spec_hash, event_ids=None, *args, **kw):
            if event_ids is None:
                pytest.fail("the refold read every cached row of the spec")
            ids = list(event_ids)
            asked.extend(ids)
            return real(self, spec_hash, ids, *args, **kw)
        return read

    for method in ("missing", "get", "facts"):
        monkeypatch.setattr(ExtractionCache, method, asking(getattr(ExtractionCache, method)))
    for method in ("keys", "frame"):
        monkeypatch.setattr(ExtractionCache, method, lambda self, *a, **kw: pytest.fail("every cached row read"))
    report = refold.open(mem.root).fold(full=True, extractor=get_extractor("rules"))
    monkeypatch.undo()
    assert sorted(asked) == sorted(e.event_id for e in mem.events() if needs_extraction(e))
    assert report.extraction_calls == 5
    assert canonical_graph(_state_graph(refold.open(mem.root))) == canonical_graph(_reference(Path(mem.root)))


def test_a_warm_incremental_fold_writes_through_the_open_state_table_handles(mem, monkeypatch):
    """The state tables' Delta handles stay open in a Memory and are brought up to date
    incrementally; writes go through them instead of loading each table afresh."""
    import deltalake

    mem.append(_log(200))
    mem.fold(full=True, buckets=8)
    mem.append(_log(10, start=200))
    mem.fold()  # (every state table's handle open now)
    opened = []
    original = deltalake.DeltaTable.__init__

    def counting(self, table_uri, *args, **kwargs):
        opened.append(str(table_uri))
        original(self, table_uri, *args, **kwargs)
    monkeypatch.setattr(deltalake.DeltaTable, "__init__", counting)
    mem.append(_log(10, start=210))
    report = mem.fold()
    monkeypatch.undo()
    assert report.started_from >= 0
    assert [uri for uri in opened if "/state/" in uri] == []
    assert canonical_graph(_state_graph(refold.open(mem.root))) == canonical_graph(_reference(Path(mem.root)))


def test_facts_of_one_subject_open_only_its_bucket(mem):
    mem.append(_log(300))
    mem.fold(full=True)
    want = reference_facts(_reference(Path(mem.root)), subject="Person4")
    store = mem.state_store(mem.current_spec())
    tag = store.tag()
    # every facts file outside Person4's bucket gone: a read that opened one would fail
    mine = bucket_of(node_id("default", "Person4"), tag.buckets)
    for folder in list(Path(store.path("facts")).rglob("bucket=*")):
        if folder.name != f"bucket={mine}":
            shutil.rmtree(folder)
    got = mem.facts(subject="Person4")
    assert got.height > 0 and got.equals(want)
    with pytest.raises(Exception):
        mem.facts()  # the whole state needs the files just removed


def test_facts_match_the_reference_fold(mem):
    mem.append(_log(300))
    mem.append(_extras(5))
    mem.fold(full=True)
    from refold.fold.timeutil import parse_time_or_none

    reference = _reference(Path(mem.root))
    rows = 0
    for subject, valid_at, relation in (("Person1", None, None), ("Person2", "2024-01-08T00:00:00+00:00", None),
                                        ("acme", None, "based_in")):
        got = mem.facts(subject=subject, valid_at=valid_at, relation=relation)
        want = reference_facts(reference, subject=subject, valid_at=parse_time_or_none(valid_at),
                               relation=mem.current_spec().canonical_relation(relation) if relation else None)
        assert got.equals(want), subject
        rows += got.height
    assert rows and mem.facts(current_only=True).equals(reference_facts(reference, current_only=True))


@pytest.mark.slow
def test_erasure_rewrites_the_touched_partitions_and_leaves_no_residue(tmp_path):
    mem = refold.init(tmp_path / "store")
    name = "Quillon Varga"
    x = [fact_event(name, "likes", f"zephyrmarmalade{i}", day=i, subjects=["s-x"]) for i in range(5)]
    x.append(fact_event(name, "works_at", "Acme", day=6, subjects=["s-x"]))
    mem.append(_log(200) + x)
    mem.fold(full=True)
    mem.register_subject("s-x", name)
    store = mem.state_store(mem.current_spec())
    before = store.tag()
    assert scan_report(store.root, [name, "zephyrmarmalade"]).hits
    # the roll-ups of X's facts (Acme employs X) are replaced by fact id, a predicate delta-rs
    # keeps in its commit: the erasure's scrub removes that commit file with the others
    replaced = pl.from_arrow(store.read("facts", layer="derived")).filter(
        pl.col("input_subjects").list.contains(node_id("default", name)))["fact_id"].to_list()
    assert replaced
    receipt = mem.erase("s-x", canaries=["zephyrmarmalade"])
    assert receipt is not None
    assert not scan_report(store.root, [name, "zephyrmarmalade"]).hits
    logs = [f for table in ("items", "facts", "entities") for f in Path(store.path(table), "_delta_log").iterdir()]
    assert not [f.name for f in logs if any(i.encode() in f.read_bytes() for i in replaced)]
    with pytest.raises(Exception):  # the pre-erasure version was vacuumed
        DeltaTable(store.path("facts"), version=before.facts_version).to_pyarrow_table()
    after = refold.open(mem.root)
    assert canonical_graph(_state_graph(after)) == canonical_graph(_reference(Path(mem.root)))
    assert after.facts(subject=name).height == 0


@pytest.mark.slow
def test_an_erasure_that_renames_a_node_reads_only_its_referrers_buckets(tmp_path):
    """A node whose display name came from the erased events is renamed; the summaries naming it
    are refreshed from the buckets of the surviving facts pointing at it, not a scan of every
    bucket: with the ``facts`` files of every bucket but the erased subject's, those of the
    nodes only its events named and the referrer's garbled, the erasure succeeds (its receipt's
    state digest reuses the per-bucket hashes kept beforehand for the buckets it did not change),
    and the state equals the reference fold's."""
    from refold.engine.merge import group_size

    mem = refold.init(tmp_path / "store")
    name = "Quillon Varga"
    x = [fact_event(name, "likes", f"zephyrmarmalade{i}", day=i, subjects=["s-x"]) for i in range(3)]
    others = [fact_event("Person1", "knows", "quillon varga", day=9)]  # the same node, another surface
    mem.append(_log(200) + x + others)
    mem.fold(full=True)
    mem.register_subject("s-x", name)
    store = mem.state_store(mem.current_spec())
    tag = store.tag()
    store.bucket_digest(buckets=tag.buckets, group=group_size(store, tag.buckets))  # (kept beside the tables)
    needed = [name, "Person1", *(f"zephyrmarmalade{i}" for i in range(3))]
    garbled = garble_buckets(store.path("facts"), {bucket_of(node_id("default", n), tag.buckets) for n in needed})
    with pytest.raises(UNREADABLE):
        refold.open(mem.root).facts()  # (a scan of every bucket fails on the garbled files)
    mem.erase("s-x")
    restore_files(garbled)
    after = refold.open(mem.root)
    assert canonical_graph(_state_graph(after)) == canonical_graph(_reference(Path(mem.root)))
    assert after.facts(subject="Person1", relation="knows").height == 1


def test_state_versions_are_snapshots_readable_by_any_delta_reader(mem):
    mem.append(_log(200))
    mem.fold(full=True)
    mem.append(_log(50, start=200))
    mem.fold()
    store = mem.state_store(mem.current_spec())
    tags = store.tags()
    assert [t.log_seq for t in tags][-2:] == [200, 250]
    old = store.tag_at(220)
    assert old.log_seq == 200
    ref = refold.open(mem.root)
    prefix = reference_of(ref, events=[e for e in ref.events() if e.seq <= 200]).graph
    assert canonical_graph(graph_view(store, old)) == canonical_graph(prefix)
    frame = pl.read_delta(store.path("facts"), version=old.facts_version)
    assert set(frame["layer"].unique()) == {"merged", "derived"}
    # no name reaches the commit log: statistics only on numbers and partition columns
    logs = " ".join(p.read_text() for p in Path(store.root).rglob("_delta_log/*.json"))
    assert "Person1" not in logs and "Boston" not in logs


def test_graph_views_and_why_read_the_state_tables(mem):
    mem.append(_log(300))
    mem.append(_extras(5))
    reference = _reference(Path(mem.root))
    mem.fold(full=True)
    from refold.reads.queries import neighbourhood

    for subject, depth in (("Person1", 1), ("Person2", 2), ("acme", 1)):
        view = mem.graph(subject=subject, depth=depth)
        assert view.number_of_edges() > 0
        assert canonical_graph(view) == canonical_graph(neighbourhood(reference, subject=subject, depth=depth))
    other = mem.graph(tenant="other")
    assert {d["tenant"] for _, _, d in other.edges(data=True)} == {"other"}
    derived = next(k for _, _, k, d in reference.edges(keys=True, data=True) if d["derivation"] == "works_in")
    from refold.fold.queries import why

    by_id = {e.event_id: e for e in mem.events()}
    assert mem.why(derived) == why(reference, derived, lambda ids: {i: by_id[i] for i in ids if i in by_id})
    assert mem.why(derived)["inputs"]  # down to the extracted facts and their events


@pytest.mark.slow
def test_cli_folds_into_state_tables_and_reads_them(tmp_path):
    mem = refold.init(tmp_path / "store")
    mem.append(_log(120))
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def cli(*args):
        return subprocess.run([sys.executable, "-c", "from refold.cli import main; main()", *map(str, args)],
                              env=env, capture_output=True, text=True)

    done = cli("fold", mem.root, "--buckets", "8", "--json", "--no-progress")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["facts"] > 0 and report["extraction_calls"] == 120
    store = mem.state_store(mem.current_spec())
    assert store.tag().buckets == 8 and {p.name for p in Path(store.path("facts")).glob("layer=merged/*")} \
        <= {f"bucket={b}" for b in range(8)}
    rows = [json.loads(line) for line in cli("facts", mem.root, "--subject", "Person3", "--format", "jsonl")
            .stdout.splitlines()]
    assert rows and {r["subject"] for r in rows} == {"Person3"}
    view = json.loads(cli("graph", mem.root, "--subject", "Person3").stdout)
    assert {n["id"] for n in view["nodes"]} >= {"default/person3"}
    bad = cli("fold", mem.root, "--extractor", "llamacpp", "--option", "model=/nope")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_many_incremental_folds_then_compaction_then_erasure(tmp_path, monkeypatch):
    """Incremental folds append row versions; reads take the newest; a compaction and an
    erasure (which rewrites buckets) keep the state equal to the reference fold."""
    from refold.engine import fold as state_fold
    monkeypatch.setattr(state_fold, "COMPACT_FILES", 3)  # compact after a few folds, not after dozens
    mem = refold.init(tmp_path / "store")
    mem.append(_log(150))
    mem.fold(full=True, buckets=4)
    store = mem.state_store(mem.current_spec())
    for step in range(6):
        mem.append(_log(25, start=150 + 25 * step) + _extras(50 + 5 * step)[step % 4:step % 4 + 1])
        report = mem.fold()
        reference = _reference(Path(mem.root))
        assert canonical_graph(_state_graph(mem)) == canonical_graph(reference), step
        stored = {r.name for r in stored_rules(mem.current_spec().rollups)}  # (compose: derived when read)
        assert (report.facts, report.derived_facts) == (
            sum(1 for *_, d in reference.edges(data=True) if d["derivation"] == "extracted"),
            sum(1 for *_, d in reference.edges(data=True) if d["derivation"] in stored))
    assert any(info.get("refold.compacted") for info in DeltaTable(store.path("facts")).history())
    mem.register_subject("s-person3", "Person3")
    mem.erase("s-person3")
    after = refold.open(mem.root)
    assert canonical_graph(_state_graph(after)) == canonical_graph(_reference(Path(mem.root)))
    assert not scan_report(store.root, ["Person3"]).hits


@pytest.mark.slow
def test_the_refold_and_project_jobs_fold_into_the_state_tables(mem):
    mem.append(_log(80))
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def job(name, *flags):
        done = subprocess.run([sys.executable, "-m", f"refold.jobs.{name}", mem.root, "--no-ray", "--no-progress",
                               *flags], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    first = job("refold")
    assert first["fold"]["facts"] > 0 and first["fold"]["started_from"] == -1
    mem.append(_log(10, start=80))
    second = job("project")
    assert second["fold"]["started_from"] == first["fold"]["last_seq"] and second["fold"]["extraction_calls"] == 10


@pytest.mark.slow
def test_crypto_shredding_refolds_the_state_tables_too(tmp_path):
    mem = refold.init(tmp_path / "store", mode="shred")
    name = "Quillon Varga"
    mem.append(_log(100) + [fact_event(name, "likes", "zephyrmarmalade", day=3, subjects=["s-x"]),
                            fact_event(name, "works_at", "Acme", day=4, subjects=["s-x"])])
    mem.fold(full=True)
    store = mem.state_store(mem.current_spec())
    mem.register_subject("s-x", name)
    mem.erase("s-x")
    assert not scan_report(store.root, [name, "zephyrmarmalade"]).hits
    purged = store.tag()
    graph = _state_graph(refold.open(mem.root))
    again = refold.open(mem.root).fold(full=True)  # the events are unreadable now
    assert (again.facts, again.derived_facts) == (purged.facts, purged.derived)
    assert canonical_graph(_state_graph(refold.open(mem.root))) == canonical_graph(graph)


def test_events_without_facts_only_move_the_tag(mem):
    """An incremental fold of events that state no fact (here a chat turn no rule matches; an
    erasure's own record is another) tags the new position and reads no state table: with
    every data file of the state tables garbled it still succeeds."""
    mem.append(_log(60))
    mem.fold(full=True, buckets=4)
    store = mem.state_store(mem.current_spec())
    before = store.tag()
    mem.append([{"kind": "chat_turn", "content": "nothing to remember here", "source": "chat#1"}])
    garbled = {}
    for table in ("items", "facts", "entities"):
        garbled.update(garble_buckets(store.path(table)))
    with pytest.raises(UNREADABLE):
        refold.open(mem.root).facts()  # (a read of the state fails on the garbled files)
    report = mem.fold()
    restore_files(garbled)
    after = store.tag()
    assert report.extraction_calls == 1
    assert after.log_seq == before.log_seq + 1 and (after.facts, after.derived) == (before.facts, before.derived)
    assert after.entities_version == before.entities_version
    assert canonical_graph(_state_graph(refold.open(mem.root))) == canonical_graph(_reference(Path(mem.root)))


def _full_refold_digest(root: Path, tmp_path: Path, buckets: int) -> str:
    """The state digest of a full refold of a copy of the store at ``root`` (one version per row)."""
    from refold.engine.merge import group_size

    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    again = refold.open(copy)
    again.fold(full=True, buckets=buckets)
    store = again.state_store(again.current_spec())
    return store.digest(buckets=buckets, group=group_size(store, buckets))


@pytest.mark.slow
def test_an_erasure_renames_only_the_nodes_whose_first_name_it_erased(tmp_path, monkeypatch):
    """The erased events named "ACME" first (the node's display name), "Oslo" long after others
    did, and "zephyrmarmalade" alone. Only the erased subject and the nodes whose first surface
    went are refreshed: "Acme" becomes the name, the node only the erased events named goes, and
    "Oslo" (its first name kept) is left alone; the state equals a full refold's, names' seqs
    included."""
    from refold.engine import purge as state_fold
    name = "Quillon Varga"
    mem = refold.init(tmp_path / "store")
    mine = [fact_event(name, "works_at", "ACME", day=1, subjects=["s-x"]),
            fact_event(name, "likes", "zephyrmarmalade", day=2, subjects=["s-x"])]
    others = [fact_event("Person1", "works_at", "Acme", day=3), fact_event("Person2", "works_at", "ACME", day=4),
              fact_event("Person3", "lives_in", "Oslo", day=5)]
    mem.append(others[2:] + mine + others[:2] + [fact_event(name, "lives_in", "Oslo", day=6, subjects=["s-x"])])
    mem.fold(full=True, buckets=4)
    mem.register_subject("s-x", name)
    refreshed = []
    original = state_fold.refresh_entities
    monkeypatch.setattr(state_fold, "refresh_entities", lambda spec, store, buckets, nodes, renamed, **kw: (
        refreshed.append((set(nodes), set(renamed))) or original(spec, store, buckets, nodes, renamed, **kw)))
    mem.erase("s-x")
    acme, oslo, x = (node_id("default", n) for n in ("Acme", "Oslo", name))
    nodes, renamed = refreshed[0]
    assert acme in renamed and x in nodes and oslo not in nodes
    after = refold.open(mem.root)
    assert _state_graph(after).nodes[acme]["name"] == "Acme"
    assert canonical_graph(_state_graph(after)) == canonical_graph(_reference(Path(mem.root)))
    store = after.state_store(after.current_spec())
    assert store.digest(buckets=4, group=4) == _full_refold_digest(Path(mem.root), tmp_path, 4)


def test_an_incremental_fold_keeps_each_names_first_seq(mem, tmp_path):
    """New surfaces of known nodes become aliases at their own seqs, known ones keep theirs: the
    state after incremental folds digests equal to a full refold's."""
    mem.append(_log(60))
    mem.fold(full=True, buckets=4)
    mem.append([fact_event("Person1", "works_at", "ACME", day=40), fact_event("person1", "likes", "Chess", day=41)])
    mem.fold()
    mem.append(_log(20, start=60) + [fact_event("PERSON1", "lives_in", "oslo", day=42)])
    mem.fold()
    store = mem.state_store(mem.current_spec())
    assert store.digest(buckets=4, group=4) == _full_refold_digest(Path(mem.root), tmp_path, 4)


def test_a_filtered_read_returns_what_an_unfiltered_read_filtered_after_does(mem):
    """A filtered read of the state tables (many files per bucket here) gives the rows of the
    whole read, filtered after: also for a filter no row matches, after an overwrite by fact id,
    and from files a delta-rs DELETE rewrote (a data engineer's; they hold string_view columns,
    which a pushed-down filter cannot test, so the read filters after reading them)."""
    from refold.storage.state import among

    mem.append(_log(300))
    mem.fold(full=True, buckets=32)
    mem.append(_log(40, start=300))
    mem.fold()  # (more files per bucket: the appended items)
    store = mem.state_store(mem.current_spec())
    whole = pl.from_arrow(store.read("items"))
    some = whole["event_id"].unique().sort().to_list()[::37]
    nodes = whole["subject_node"].unique().sort().to_list()[:3]
    for flt, expected in ((among("event_id", some), whole.filter(pl.col("event_id").is_in(some))),
                          (among("subject_node", nodes), whole.filter(pl.col("subject_node").is_in(nodes))),
                          (among("event_id", ["no-such-event"]), whole.clear())):
        got = pl.from_arrow(store.read("items", filter=flt))
        assert got.sort(["seq", "ordinal"]).equals(expected.sort(["seq", "ordinal"]))
    facts = pl.from_arrow(store.read("facts", layer="merged"))
    first = facts.row(0, named=True)
    second = facts.filter(pl.col("subject") != first["subject"]).row(0, named=True)
    store.write("facts", facts.filter(pl.col("fact_id") == first["fact_id"]).to_arrow(), buckets=[first["bucket"]],
                layer="merged", ids=[first["fact_id"]])
    DeltaTable(store.path("facts")).delete(f"fact_id = '{second['fact_id']}'")
    for row, left in ((first, 0), (second, 1)):
        got = pl.from_arrow(store.read("facts", layer="merged", filter=among("subject", [row["subject"]])))
        assert got.height == facts.filter(pl.col("subject") == row["subject"]).height - left > 0
