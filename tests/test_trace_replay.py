"""Decision replay (issue #20 item 5): a traced search is recorded as a ``memory_read`` event,
``trace`` shows what a trace wrote and read in log order, and each read replays against the log
as it stood then. Real stores, the hashing embedder, the CLI through click's CliRunner."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import refold
from refold.storage.erased_ids import pseudonyms
from refold.agent import tools
from refold.cli import main
from refold.fold.events import KINDS, validate_event
from refold.search.replay import READ_KIND, ReadRecord

EMB = "hashing"


def _cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def _store(root):
    mem = refold.init(root)
    mem.append([
        {"kind": "chat_turn", "content": "Xena: I live in Quuxville.", "source": "chat#1", "subjects": ["s-x"],
         "tenant": "acme"},
        {"kind": "chat_turn", "content": "Bob: I live in Rome.", "source": "chat#2", "tenant": "acme"},
        {"kind": "chat_turn", "content": "Cy: I live in Oslo.", "source": "chat#3", "tenant": "other"},
    ])
    mem.fold()
    return mem


def _ctx(mem, tenant="acme"):
    return tools.ToolContext(memory=mem, tenant=tenant, embedder=EMB)


@pytest.mark.search
def test_a_traced_tool_search_replays_what_it_returned_then_after_later_writes_changed_the_answer(tmp_path):
    mem = _store(tmp_path / "s")
    then = tools.handle("search_memory", {"query": "where does Xena live", "k": 2, "trace_id": "run-1"},
                        _ctx(mem))
    returned = [r["fact_id"] for r in then["results"]]
    assert then["results"][0]["object"] == "Quuxville"
    # a later write supersedes the fact the agent was shown: today's answer differs
    mem.append({"kind": "chat_turn", "content": "Xena: I live in Zorbton.", "source": "chat#4",
                "subjects": ["s-x"], "tenant": "acme"})
    mem.fold()
    now = mem.search("where does Xena live", k=2, tenant="acme", embedder=EMB)
    assert now["object"][0] == "Zorbton" and now["fact_id"].to_list() != returned

    report = mem.trace("run-1", replay=True)
    [read] = report.reads
    assert list(read.read.ids) == returned and read.read.tenant == "acme" and read.read.k == 2
    assert read.replay.same and list(read.replay.ids) == returned and report.ok

    out = _cli("trace", tmp_path / "s", "run-1", "--replay", "--json")
    assert out.exit_code == 0, out.output
    body = json.loads(out.output)
    assert body["ok"] and body["entries"][0]["replay"]["ids"] == returned


@pytest.mark.search
def test_trace_lists_what_the_trace_wrote_and_read_in_log_order(tmp_path):
    mem = _store(tmp_path / "s")
    ctx = _ctx(mem)
    tools.handle("search_memory", {"query": "Bob", "k": 1, "trace_id": "run-7"}, ctx)
    tools.handle("write_memory", {"subject": "Bob", "relation": "likes", "object": "tea",
                                  "justification": "Bob said so in chat#2", "trace_id": "run-7"}, ctx)
    mem.search("Bob likes", k=3, tenant="acme", principal="agent-7", embedder=EMB, trace_id="run-7")
    mem.search("Bob", k=1, tenant="acme", embedder=EMB, trace_id="another-run")

    report = mem.trace("run-7")
    assert [e.kind for e in report.entries] == [READ_KIND, "memory_written", READ_KIND]
    assert [e.seq for e in report.entries] == sorted(e.seq for e in report.entries)
    assert report.entries[1].fact == {"subject": "Bob", "relation": "likes", "object": "tea"}
    assert report.entries[2].read.principal == "agent-7" and report.entries[2].read.k == 3
    assert not report.replayed and all(e.replay is None for e in report.entries)

    out = _cli("trace", tmp_path / "s", "run-7")
    assert out.exit_code == 0 and "2 read(s)" in out.output and "1 write(s)" in out.output
    missing = _cli("trace", tmp_path / "s", "no-such-run")
    assert missing.exit_code == 2 and "no event carries trace id 'no-such-run'" in missing.output


@pytest.mark.search
def test_a_read_is_never_extracted_and_recording_it_changes_no_answer(tmp_path):
    mem = _store(tmp_path / "s")
    facts_before = mem.facts().sort("fact_id")
    first = mem.search("where does Bob live", k=3, tenant="acme", embedder=EMB, trace_id="run-1")
    head_after_read = mem.head().seq
    assert mem.log()["kind"][head_after_read] == READ_KIND
    # the fold moved past the read without an extraction and without a new fact
    report = mem.fold()
    assert report.extraction_calls == 0 and report.last_seq == head_after_read
    assert mem.facts().sort("fact_id").equals(facts_before)
    read_id = mem.trace("run-1").reads[0].event_id
    assert mem.cache.missing(mem.current_spec().hash, [read_id]) == [read_id]
    again = mem.search("where does Bob live", k=3, tenant="acme", embedder=EMB)
    assert again.select("fact_id", "score").equals(first.select("fact_id", "score"))
    # nor does the index move: the head view is reused, only its position follows the log
    view = mem.index(embedder=EMB)
    mem.search("Bob", k=1, tenant="acme", embedder=EMB, trace_id="run-2")
    moved = mem.index(embedder=EMB)
    assert moved.indexes is view.indexes and moved.last_seq == mem.head().seq == view.last_seq + 1
    # a read is no searchable event either
    events = mem.search("where does Bob live", k=10, kind="events", embedder=EMB)
    assert read_id not in events["event_id"].to_list()
    # and users cannot append one: it is a system kind
    with pytest.raises(refold.ValidationError, match="unknown kind"):
        mem.append({"kind": READ_KIND, "content": "{}", "source": "me"})


@pytest.mark.search
def test_replay_reports_a_read_whose_record_does_not_match_the_log(tmp_path):
    mem = _store(tmp_path / "s")
    mem.search("where does Bob live", k=1, tenant="acme", embedder=EMB, trace_id="run-1")
    [entry] = mem.trace("run-1").reads
    forged = ReadRecord.from_json({**entry.read.as_json(), "ids": ["f_0000000000000000"]})
    mem.log_store.append([validate_event(
        {"kind": READ_KIND, "content": json.dumps(forged.as_json()), "source": "refold:read",
         "tenant": "acme", "trace_id": "run-1"}, allowed_kinds=KINDS)])

    report = mem.trace("run-1", replay=True)
    assert [e.replay.same for e in report.reads] == [True, False] and not report.ok
    out = _cli("trace", tmp_path / "s", "run-1", "--replay")
    assert out.exit_code == 1 and "DIFFERS" in out.output


@pytest.mark.search
def test_erasing_a_subject_erases_the_reads_that_showed_it_and_keeps_other_tenants_reads(tmp_path):
    mem = _store(tmp_path / "s")
    x_facts = mem.search("does Xena live in Quuxville", k=1, tenant="acme", embedder=EMB, trace_id="run-x")
    assert x_facts["object"].to_list() == ["Quuxville"]
    mem.search("does Cy live in Oslo", k=1, tenant="other", embedder=EMB, trace_id="run-o")
    x_read = mem.trace("run-x").reads[0]
    assert "s-x" in mem.log().filter(mem.log()["event_id"] == x_read.event_id)["subjects"][0].to_list()

    receipt = mem.erase("s-x", canaries=["Quuxville", x_facts["fact_id"][0]])
    assert pseudonyms(mem.root)(x_read.event_id) in receipt.event_ids  # receipts keep ids' pseudonyms
    assert not receipt.scan["hits"], receipt.scan  # neither the query nor the fact id survives anywhere
    with pytest.raises(refold.NotFoundError):
        mem.trace("run-x")
    # the other tenant's read showed nothing of s-x: it stays, and still replays the same
    other = mem.trace("run-o", replay=True, embedder=EMB)
    assert other.ok and other.reads[0].read.tenant == "other"


@pytest.mark.search
def test_in_shred_mode_an_erased_subjects_reads_keep_only_their_trace_id(tmp_path):
    mem = refold.init(tmp_path / "s", mode="shred")
    mem.append([
        {"kind": "chat_turn", "content": "Xena: I live in Quuxville.", "source": "chat#1", "subjects": ["s-x"],
         "tenant": "acme"},
        {"kind": "chat_turn", "content": "Bob: I live in Rome.", "source": "chat#2", "tenant": "acme"},
    ])
    shown = mem.search("does Xena live in Quuxville", k=1, tenant="acme", embedder=EMB, trace_id="run-x")
    assert mem.trace("run-x", replay=True).ok

    receipt = mem.erase("s-x", canaries=["Quuxville", shown["fact_id"][0]])
    assert not receipt.scan["hits"], receipt.scan
    report = mem.trace("run-x", replay=True)
    [entry] = report.entries
    assert entry.kind == READ_KIND and entry.erased and entry.read is None and entry.replay is None
    out = _cli("trace", tmp_path / "s", "run-x", "--replay")
    assert out.exit_code == 0 and "erased: its key was destroyed" in out.output


@pytest.mark.search
def test_event_searches_and_valid_time_filters_are_recorded_and_replayed(tmp_path):
    mem = _store(tmp_path / "s")
    ctx = _ctx(mem)
    events = tools.handle("search_memory", {"query": "Rome", "k": 2, "kind": "events", "trace_id": "run-e"}, ctx)
    past = tools.handle("search_memory", {"query": "Xena", "k": 1, "valid_at": "2000-01-01T00:00:00+00:00",
                                          "trace_id": "run-e"}, ctx)
    assert past["results"] == []  # nothing was valid then
    mem.append({"kind": "chat_turn", "content": "Rome is lovely.", "source": "chat#9", "tenant": "acme"})
    report = mem.trace("run-e", replay=True)
    first, second = report.reads
    assert first.read.kind == "events" and list(first.read.ids) == [r["event_id"] for r in events["results"]]
    assert second.read.valid_at == "2000-01-01T00:00:00+00:00" and second.read.ids == ()
    assert report.ok and first.replay.ids == first.read.ids
    # today's answer has the new event; the replay does not
    assert len(mem.search("Rome", k=3, kind="events", tenant="acme", embedder=EMB)) == 3
