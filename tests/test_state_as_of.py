"""Reads as of a past log position answer from the state tables' time travel (issue #17 item 1,
issue #33; docs/state.md "How far back as_of reads go"), on real stores.

"State as of log seq S" is the newest tagged ``facts`` version at or before S plus the read
overlay of the events between the tag and S (with no version that old: the overlay of the log's
prefix on an empty state, up to ``Memory.read_overlay_limit`` events, else a one-line refusal
naming the oldest readable position): no graph of the whole store is folded, nothing is
written, no model is called. Every answer is held to the reference fold of the same log prefix
(refold.fold.reference, the oracle), with a retraction, a stated fact, roll-ups and valid time
in the log.
"""

from __future__ import annotations

import shutil
import sys
from datetime import timedelta
from pathlib import Path

import polars as pl
import pytest

import refold
from refold.agent import tools
from refold.fold.merge import node_id
from refold.fold.errors import ValidationError
from refold.fold.partition import bucket_of
from refold.reads.tables import read_tables
from tests.fold_helpers import fact_event, reference_facts, reference_of
from tests.test_reads_pure import WRITE, _files

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from snapshot_workload import events as workload  # noqa: E402


X = "Quillon Varga"  # the data subject the erasure tests erase ("s-x")


def _oracle(mem, as_of, **filters) -> pl.DataFrame:
    """The reference fold's answer: a fold of the log as it stood at ``as_of``."""
    return reference_facts(reference_of(mem, as_of=as_of), **filters)


def _history(root: Path) -> tuple[refold.Memory, list[int]]:
    """A store folded into state tables after the first, second and fourth of five writes (the
    third and fifth are read through the overlay); the log version after each write."""
    mem = refold.init(root)
    ctx = tools.ToolContext(memory=mem, embedder="hashing")
    versions = []
    mem.append(list(workload(120, seed=7, people=10)) + [
        fact_event("Acme", "located_in", "Paris", day=1),  # (so works_in is derived from the start)
        fact_event(X, "works_at", "Acme", day=2, subjects=["s-x"]),
        fact_event(X, "lives_in", "Quimper", day=3, subjects=["s-x"])])
    versions.append(mem.log_store.version())
    mem.fold()
    mem.append(list(workload(60, seed=8, people=10, start=120)))
    versions.append(mem.log_store.version())
    mem.fold()
    tools.handle("write_memory", {**WRITE, "subject": "Person3"}, ctx)
    victim = mem.facts(subject="Person2", current_only=True)["fact_id"][0]
    tools.handle("retract_memory", {"fact_id": victim, "justification": "wrong", "trace_id": "run-2"}, ctx)
    versions.append(mem.log_store.version())
    mem.append(list(workload(60, seed=9, people=10, start=180)) + [fact_event("the Acme", "located_in", "Oslo", day=40)])
    versions.append(mem.log_store.version())
    mem.fold()
    mem.append(list(workload(40, seed=10, people=10, start=240)))
    versions.append(mem.log_store.version())
    return mem, versions


@pytest.mark.slow
def test_reads_as_of_every_past_version_equal_the_fold_of_that_prefix(tmp_path):
    mem, versions = _history(tmp_path / "store")
    spec = mem.current_spec()
    first_tag = mem.state_store(spec).tags()[0]
    reader = refold.open(tmp_path / "store")  # a fresh process-local Memory: nothing kept in memory
    for version in range(versions[0] + 1, versions[-1] + 1):  # (from the first fold's spec event on)
        before = _files(tmp_path / "store")
        got = reader.facts(as_of=version)
        assert _files(tmp_path / "store") == before  # a read writes nothing
        found = read_tables(reader.store, version, spec)
        assert found is not None and found[1].log_seq >= first_tag.log_seq  # from the state tables
        assert got.equals(_oracle(mem, version)), version
    assert got.filter(pl.col("derivation") != "extracted").height  # roll-ups are in the comparison
    assert (~got["current"]).any()  # so are closed facts (supersession, the retraction)
    # one subject, a relation, a valid time, current only: the same filters as the oracle's
    when = "2024-01-20T00:00:00+00:00"
    for as_of in (versions[1], versions[2], versions[4]):
        for filters in ({"subject": "Person3"}, {"subject": "Person2", "current_only": True},
                        {"relation": "works_in"}):
            assert reader.facts(as_of=as_of, **filters).equals(_oracle(mem, as_of, **filters)), (as_of, filters)
        got = reader.facts(as_of=as_of, valid_at=when)
        from refold.fold.timeutil import parse_time_or_none

        assert got.equals(_oracle(mem, as_of, valid_at=parse_time_or_none(when)))


def test_a_read_as_of_a_time_resolves_to_the_log_prefix_recorded_by_then(tmp_path):
    mem, versions = _history(tmp_path / "store")
    log = mem.log()
    at = log.filter(pl.col("table_version") == versions[2])["recorded_at"].max()
    as_of = (at + timedelta(microseconds=1)).isoformat()
    assert mem.log_store.prefix_end(as_of) == log.filter(pl.col("table_version") <= versions[2])["seq"].max()
    assert read_tables(mem.store, as_of, mem.current_spec())[1].log_seq >= 0  # a tagged state version
    assert mem.facts(as_of=as_of).equals(mem.facts(as_of=versions[2]))


def test_a_past_read_of_one_subject_opens_only_its_bucket(tmp_path):
    """At a tagged position (no overlay: the overlay reads the buckets of the subjects its
    events touch) a read of one subject as of then opens only the buckets of that subject and
    of its roll-ups' partners."""
    mem, versions = _history(tmp_path / "store")
    want = _oracle(mem, versions[1], subject="Person4")
    store = mem.state_store(mem.current_spec())
    tag = store.tag_at(mem.log_store.prefix_end(versions[1]))
    assert tag.log_seq == mem.log_store.prefix_end(versions[1]) and tag != store.tag()
    # its bucket, and its employers' (the compose roll-up works_in joins their located_in)
    nodes = ["Person4"] + want.filter(pl.col("relation") == "works_at")["object"].to_list()
    keep = {f"bucket={bucket_of(node_id('default', n), tag.buckets)}" for n in nodes}
    assert len(keep) < tag.buckets / 4
    for folder in list(Path(store.path("facts")).rglob("bucket=*")):
        if folder.name not in keep:
            shutil.rmtree(folder)  # a read that opened another bucket would fail
    reader = refold.open(tmp_path / "store")
    got = reader.facts(subject="Person4", as_of=versions[1])
    assert got.height > 0 and got.equals(want)
    with pytest.raises(Exception):
        reader.facts(as_of=versions[1])  # the whole state needs the files just removed


def test_without_a_tagged_version_that_old_the_prefix_is_overlaid_on_an_empty_state(tmp_path):
    """Before the first fold's tag there is no state version to travel to: the read overlays the
    log's prefix on an empty state (the same code as every read) and answers."""
    mem = refold.init(tmp_path / "store")
    mem.append(list(workload(50, seed=1, people=5)))
    early = mem.log_store.version()
    mem.append(list(workload(50, seed=2, people=5, start=50)))
    mem.fold()
    first = mem.state_store(mem.current_spec()).tags()[0]
    assert mem.log_store.prefix_end(early) < first.log_seq
    before = _files(tmp_path / "store")
    got = mem.facts(as_of=early)
    assert got.height > 0 and got.equals(_oracle(mem, early))
    assert mem.facts(as_of=0).height == 0  # the table's creation: nothing recorded yet
    assert _files(tmp_path / "store") == before


def test_a_read_whose_overlay_would_pass_the_limit_is_refused_in_one_line(tmp_path):
    """``Memory.read_overlay_limit`` bounds the events a read overlays in memory: past it, an
    ``as_of`` read says which positions are readable, and a read of the head says to fold."""
    mem = refold.init(tmp_path / "store")
    mem.append(list(workload(40, seed=1, people=5)))
    early = mem.log_store.version()
    mem.append(list(workload(40, seed=2, people=5, start=40)))
    mem.fold()
    tag = mem.state_store(mem.current_spec()).tag()
    mem.append(list(workload(30, seed=3, people=5, start=80)))
    reader = refold.open(tmp_path / "store")
    reader.read_overlay_limit = 35  # (the instance's own limit: the default is 50,000)
    with pytest.raises(ValidationError) as caught:
        reader.facts(as_of=early)  # 40 events overlaid on an empty state
    message = str(caught.value)
    assert "\n" not in message and "oldest readable position" in message and "as_of" in message
    assert reader.facts(as_of=mem.log_store.version()).equals(_oracle(mem, mem.log_store.version()))  # 30 after the tag
    reader.read_overlay_limit = 20
    with pytest.raises(ValidationError, match="fold") as caught:
        reader.facts()  # the head: 30 events after the tag
    assert "\n" not in str(caught.value) and str(tag.log_seq) in str(caught.value)
    reader.fold()
    assert reader.facts().equals(_oracle(mem, None))


@pytest.mark.slow
def test_an_erasure_leaves_no_older_state_version_to_travel_to(tmp_path):
    """After an erasure only the state it wrote is tagged (older versions held erased data and
    were vacuumed): a read as of a position before it overlays the erased log's prefix on an
    empty state, which shows none of the erased subject's facts."""
    mem, versions = _history(tmp_path / "store")
    spec = mem.current_spec()
    assert read_tables(mem.store, versions[1], spec)[1].log_seq >= 0
    assert sorted(mem.facts(as_of=versions[1], subject=X)["relation"].to_list()) == ["lives_in", "works_at", "works_in"]
    from refold.reads.rollups import _HINTS

    mem.facts(subject=X)  # its works_in roll-up: the read remembers its inputs and their subjects
    assert any(node_id("default", X) in h[3] for h in _HINTS.values())
    mem.register_subject("s-x", X)
    mem.erase("s-x")
    mem.facts(subject="Person1")  # the next read sees the new erasure epoch
    assert not any(node_id("default", X) in h[3] for h in _HINTS.values())
    store = mem.state_store(spec)
    assert len(store.tags()) == 1 and store.tags()[0].log_seq == store.tag().log_seq
    assert read_tables(mem.store, versions[1], spec)[1].log_seq < 0  # (no state version: an empty state)
    assert mem.facts(as_of=versions[1], subject=X).height == 0
    assert mem.facts(as_of=versions[1]).equals(_oracle(mem, versions[1]))
    head = mem.log_store.version()
    assert read_tables(mem.store, head, spec)[1] == store.tag()
    assert mem.facts(as_of=head).equals(_oracle(mem, head))


@pytest.mark.slow
def test_a_past_read_is_kept_in_memory_until_an_erasure(tmp_path):
    mem, versions = _history(tmp_path / "store")
    spec = mem.current_spec()
    first = read_tables(mem.store, versions[2], spec)[2]  # the overlay of that read
    assert read_tables(mem.store, versions[2], spec)[2] is first  # the same log seq: served from memory
    other = refold.open(tmp_path / "store")
    other.register_subject("s-x", X)
    other.erase("s-x")  # another process's erasure: a new epoch
    assert read_tables(mem.store, versions[2], spec)[2] is not first


@pytest.mark.parametrize("as_of", [-1, "yesterday", True])
def test_a_bad_as_of_is_refused_in_one_line(tmp_path, as_of):
    mem, _ = _history(tmp_path / "store")
    with pytest.raises(refold.RefoldError, match="as_of"):
        mem.facts(as_of=as_of)


@pytest.mark.slow
def test_why_and_graph_as_of_a_past_version_equal_the_reference_folds(tmp_path):
    """``why`` and ``graph`` (a subject's neighbourhood) as of a past version: the same answer as
    the reference fold of that prefix (edges with every attribute; entity summaries are not
    compared: the overlay leaves them as the tag has them, docs/state.md "Reads")."""
    from refold.fold.queries import why
    from refold.reads.queries import neighbourhood

    mem, versions = _history(tmp_path / "store")
    reader = refold.open(tmp_path / "store")
    for as_of in (versions[1], versions[2], versions[4]):
        assert read_tables(reader.store, as_of, reader.current_spec())[1].log_seq >= 0
        oracle = reference_of(mem, as_of=as_of).graph
        facts = reader.facts(as_of=as_of)
        assert {"extracted", "employs", "works_in"} <= set(facts["derivation"].to_list())
        for kind in sorted(set(facts["derivation"].to_list())):  # one fact of each derivation
            fid = facts.filter(pl.col("derivation") == kind)["fact_id"][0]
            assert reader.why(fid, as_of=as_of) == why(oracle, fid, mem.events_by_id), (as_of, kind)
        got = reader.graph(as_of=as_of, subject="Person3", depth=2)
        want = neighbourhood(oracle, subject="Person3", depth=2)
        assert sorted(got.edges(keys=True, data=True), key=str) == sorted(want.edges(keys=True, data=True), key=str)
        assert set(got.nodes) == set(want.nodes)


def test_the_prefix_of_a_log_version_not_yet_written_is_read_again(tmp_path):
    """``prefix_end`` keeps the answer for a version already written (its rows never change) and
    not for a later one, which the next append fills."""
    mem = refold.init(tmp_path / "store")
    mem.append(list(workload(20, seed=1, people=3)))
    version, last = mem.log_store.version(), mem.head().seq
    assert mem.log_store.prefix_end(version) == last
    assert mem.log_store.prefix_end(version + 1) == last  # (nothing recorded at version + 1 yet)
    mem.append(list(workload(5, seed=2, people=3, start=20)))
    assert mem.log_store.version() == version + 1
    assert mem.log_store.prefix_end(version + 1) == last + 5
    assert mem.log_store.prefix_end(version) == last
    assert mem.log_store.prefix_end(0) == -1  # the table's creation: no event yet
