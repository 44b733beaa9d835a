"""Retention and legal holds (issue #20 item 6): rules per kind and/or tenant in
``ROOT/retention.json``, the ``refold.jobs.retain`` job erasing expired events through the erasure
procedure with one receipt per run, and holds that retention skips and ``erase`` refuses.
Real stores; the CLI through click's CliRunner, the job as a subprocess. The clock is the job's
``--now`` (events are recorded now; expiring them means asking about a later time)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

import refold
from refold.storage.erased_ids import pseudonyms
from refold.agent import retention
from refold.cli import main
from refold.erasure.receipts import load_receipt

LATER = (datetime.now(timezone.utc) + timedelta(days=120)).isoformat()  # past 90d, before 1y
MUCH_LATER = (datetime.now(timezone.utc) + timedelta(days=800)).isoformat()  # past 2y


def _hidden(store, ids) -> set[str]:
    """The pseudonyms a receipt names erased events by (receipts never keep a caller's id)."""
    return {pseudonyms(str(store))(i) for i in ids}


def _cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def _lines(result) -> list[dict]:
    """A list command's ``--json`` output: JSON Lines, one object per line (docs/cli.md)."""
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


def _job(store, *args) -> tuple[int, dict]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, "-m", "refold.jobs.retain", str(store), "--no-progress", *args],
                          capture_output=True, text=True, env=env, timeout=300)
    return done.returncode, json.loads(done.stdout)


def _store(root):
    mem = refold.init(root)
    mem.append([
        {"kind": "chat_turn", "content": "Ann: I live in Quuxville.", "source": "chat#1", "subjects": ["s-ann"],
         "tenant": "acme"},
        {"kind": "chat_turn", "content": "Ben: I live in Rome.", "source": "chat#2", "subjects": ["s-ben"],
         "tenant": "acme"},
        {"kind": "document", "content": "Cy lives in Oslo.", "source": "doc#1", "tenant": "acme"},
        {"kind": "chat_turn", "content": "Dee: I live in Zorbton.", "source": "chat#3", "tenant": "bank"},
    ])
    mem.fold()
    return mem


def _ids(mem, content_word: str) -> list[str]:
    return [e.event_id for e in mem.events() if e.content and content_word in e.content]


def _files(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in root.rglob("*") if p.is_file()}


def test_rules_are_set_listed_and_removed_through_the_cli(tmp_path):
    store = tmp_path / "s"
    refold.init(store)
    assert _cli("retention", store, "--kind", "chat_turn", "--keep", "90d").exit_code == 0
    assert _cli("retention", store, "--tenant", "bank", "--keep", "7y").exit_code == 0
    assert _cli("retention", store, "--kind", "chat_turn", "--keep", "30d").exit_code == 0  # replaces
    listed = _cli("retention", store)
    assert "chat_turn@*" in listed.output and "keep 30d" in listed.output and "*@bank" in listed.output
    assert "2 rule(s)" in listed.output
    rules = _lines(_cli("retention", store, "--json"))
    assert {(r["name"], r["keep"], r["seconds"]) for r in rules} == {
        ("chat_turn@*", "30d", 30 * 86400), ("*@bank", "7y", 7 * 365 * 86400)}
    on_disk = json.loads((store / "retention.json").read_text())
    assert on_disk["format"] == "refold-retention/v1" and len(on_disk["rules"]) == 2

    assert _cli("retention", store, "--tenant", "bank", "--remove").exit_code == 0
    assert [r["name"] for r in _lines(_cli("retention", store, "--json"))] == ["chat_turn@*"]
    for bad, says in ((["--kind", "chat_turn", "--keep", "ninety days"], "is not a duration"),
                      (["--kind", "spec_changed", "--keep", "1d"], "cannot expire"),
                      (["--keep", "1d"], "needs --kind KIND, --tenant TENANT or both"),
                      (["--tenant", "bank", "--remove"], "no retention rule *@bank"),
                      (["--kind", "chat_turn"], "need --keep DURATION")):
        out = _cli("retention", store, *bad)
        assert out.exit_code == 2 and says in out.output and out.output.count("\n") == 1, (bad, out.output)
    assert [r["name"] for r in _lines(_cli("retention", store, "--json"))] == ["chat_turn@*"]


def test_the_most_specific_rule_decides_and_the_longer_keep_breaks_a_tie(tmp_path):
    mem = refold.init(tmp_path / "s")
    retention.set_rule(mem, kind="chat_turn", keep="90d")
    retention.set_rule(mem, tenant="bank", keep="2y")
    retention.set_rule(mem, kind="document", tenant="acme", keep="1d")
    retention.set_rule(mem, tenant="acme", keep="30d")
    policy = retention.read_policy(mem)
    assert policy.rule_for("document", "acme").name == "document@acme"  # kind and tenant: most specific
    assert policy.rule_for("chat_turn", "bank").name == "*@bank"         # a tie: the longer keep
    assert policy.rule_for("chat_turn", "acme").name == "chat_turn@*"    # 90d beats acme's 30d
    assert policy.rule_for("observation", "other") is None
    assert policy.rule_for("spec_changed", "acme") is None                # system events never expire
    assert policy.rule_for("tombstone", None) is None


@pytest.mark.search
@pytest.mark.slow
def test_the_job_erases_expired_events_with_one_receipt_saying_which_rule_expired_which(tmp_path):
    store = tmp_path / "s"
    mem = _store(store)
    mem.search("where does Ann live", k=1, tenant="acme", embedder="hashing", trace_id="run-1")
    for args in (["--kind", "chat_turn", "--keep", "90d"], ["--tenant", "bank", "--keep", "2y"],
                 ["--kind", "memory_read", "--keep", "30d"]):
        assert _cli("retention", store, *args).exit_code == 0
    acme_chats = _ids(mem, "Quuxville") + _ids(mem, "Rome")
    bank_chat = _ids(mem, "Zorbton")
    [read_id] = [r.event_id for r in mem.trace("run-1").reads]
    (tmp_path / "canaries.txt").write_text("Quuxville\n")

    status, summary = _job(store, "--now", LATER, "--canaries-file", tmp_path / "canaries.txt")
    assert status == 0 and summary["ok"], summary
    assert summary["by_rule"] == {"chat_turn@*": acme_chats, "memory_read@*": [read_id]}
    assert summary["residue_hits"] == 0 and summary["erased"] == 3
    receipt = load_receipt(summary["receipt"])
    assert receipt.subject_id == retention.RETENTION_SUBJECT and set(receipt.event_ids) == _hidden(store, {*acme_chats, read_id})
    notes = " ".join(receipt.notes)
    hidden = _hidden(store, {*acme_chats, read_id})
    assert "retention rule chat_turn@* (keep 90d)" in notes and all(i in notes for i in _hidden(store, acme_chats))
    assert "retention rule memory_read@* (keep 30d)" in notes and all(i in notes for i in _hidden(store, [read_id]))
    assert not any(i in notes for i in (*acme_chats, read_id))  # the callers' ids are not kept

    mem = refold.open(store)
    assert mem.verify().ok and mem.verify_receipt(receipt).ok
    kinds = dict(zip(mem.log()["event_id"].to_list(), mem.log()["kind"].to_list()))
    assert all(kinds[i] == "tombstone" for i in hidden)
    assert set(mem.facts(current_only=True)["object"].to_list()) == {"Oslo", "Zorbton"}  # the rest stays
    # a second run at the same time finds nothing; a later one expires the bank's chat
    status, again = _job(store, "--now", LATER)
    assert status == 0 and again["erased"] == 0 and again["erasure_id"] is None
    status, later = _job(store, "--now", MUCH_LATER)
    assert later["by_rule"] == {"*@bank": bank_chat} and later["erased"] == 1


@pytest.mark.slow
def test_a_dry_run_lists_what_would_go_and_writes_nothing(tmp_path):
    store = tmp_path / "s"
    mem = _store(store)
    retention.set_rule(mem, kind="chat_turn", keep="90d")
    before = _files(store)
    status, summary = _job(store, "--now", LATER, "--dry-run")
    assert status == 0 and summary["dry_run"] and summary["erasure_id"] is None
    assert [e["event_id"] for e in summary["expired"]] == _ids(mem, "Quuxville") + _ids(mem, "Rome") \
        + _ids(mem, "Zorbton")
    assert all(e["rule"] == "chat_turn@*" for e in summary["expired"])
    assert _files(store) == before
    bad_now, out = _job(store, "--now", "next tuesday")
    assert bad_now == 1 and "--now 'next tuesday' is not an ISO-8601 time" in out["error"]


@pytest.mark.slow
def test_retention_skips_events_under_a_legal_hold_until_it_is_released(tmp_path):
    store = tmp_path / "s"
    mem = _store(store)
    [ann], [ben], [dee] = _ids(mem, "Quuxville"), _ids(mem, "Rome"), _ids(mem, "Zorbton")
    retention.set_rule(mem, kind="chat_turn", keep="90d")
    assert _cli("hold", store, "--subject", "s-ann", "--reason", "case 2026-17").exit_code == 0
    assert _cli("hold", store, "--tenant", "bank", "--reason", "regulator's order 9").exit_code == 0
    listed = _cli("hold", store)
    assert "subject s-ann" in listed.output and "case 2026-17" in listed.output and "2 hold(s)" in listed.output
    assert {(h["subject"], h["tenant"]) for h in _lines(_cli("hold", store, "--json"))} == {
        ("s-ann", None), (None, "bank")}

    status, summary = _job(store, "--now", LATER)
    assert summary["by_rule"] == {"chat_turn@*": [ben]}
    assert {(e["event_id"], e["hold"]) for e in summary["held"]} == {(ann, "subject s-ann"), (dee, "tenant bank")}
    assert "2 expired event(s) kept under legal hold" in load_receipt(summary["receipt"]).notes

    assert _cli("hold", store, "--release", "--subject", "s-ann").exit_code == 0
    status, after = _job(store, "--now", LATER)
    assert after["by_rule"] == {"chat_turn@*": [ann]}
    assert [e["hold"] for e in after["held"]] == ["tenant bank"]
    for bad, says in ((["--subject", "s-x"], "needs --reason"),
                      (["--release", "--subject", "s-ann"], "no legal hold on subject s-ann"),
                      (["--subject", "a", "--tenant", "b", "--reason", "r"], "exactly one of"),
                      (["--reason", "why"], "--reason needs --subject")):
        out = _cli("hold", store, *bad)
        assert out.exit_code == 2 and says in out.output and out.output.count("\n") == 1, (bad, out.output)


def test_erase_refuses_a_held_subject_naming_the_hold_and_writes_nothing(tmp_path):
    store = tmp_path / "s"
    mem = _store(store)
    mem.append({"kind": "chat_turn", "content": "Ann and Ben met.", "source": "chat#4",
                "subjects": ["s-ann", "s-ben"], "tenant": "acme"})
    retention.place_hold(mem, subject="s-ben", reason="case 2026-17")
    before = _files(store)

    out = _cli("erase", store, "--subject", "s-ben")
    assert out.exit_code == 2 and out.output.count("\n") == 1
    assert "cannot erase subject 's-ben': legal hold on subject s-ben ('case 2026-17'" in out.output
    # a subject sharing an event with a held one is refused too: the shared event is held
    with pytest.raises(refold.LegalHoldError, match="event at seq 5 is under legal hold on subject s-ben"):
        mem.erase("s-ann")
    with pytest.raises(refold.ErasureError):  # LegalHoldError is an ErasureError
        mem.erase("s-ann", dry_run=True)
    assert _files(store) == before

    retention.place_hold(mem, tenant="acme", reason="audit")
    retention.release_hold(mem, subject="s-ben")
    with pytest.raises(refold.LegalHoldError, match="legal hold on tenant acme"):
        mem.erase("s-ben")
    retention.release_hold(mem, tenant="acme")
    receipt = mem.erase("s-ben")
    assert receipt.status == "erased" and len(receipt.events) == 2


@pytest.mark.slow
def test_a_run_killed_half_way_is_finished_by_the_next_run(tmp_path):
    store = tmp_path / "s"
    mem = _store(store)
    retention.set_rule(mem, kind="chat_turn", keep="90d")
    expired = _ids(mem, "Quuxville") + _ids(mem, "Rome") + _ids(mem, "Zorbton")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    killed = subprocess.run([sys.executable, "-m", "tests.fault_driver", "erasure.purge",
                             "-m", "refold.jobs.retain", str(store), "--no-progress", "--now", LATER],
                            capture_output=True, text=True, env=env, timeout=300)
    assert killed.returncode != 0 and not killed.stdout  # SIGKILLed after the purge step

    status, resumed = _job(store, "--now", LATER)
    assert status == 0 and resumed["erased"] == len(expired) and resumed["by_rule"] == {}
    assert resumed["notes"][0].startswith("resumed the interrupted retention run")
    receipt = load_receipt(resumed["receipt"])
    assert set(receipt.event_ids) == _hidden(store, expired) and "retention rule chat_turn@* (keep 90d)" in receipt.notes[0]
    assert refold.open(store).verify_receipt(receipt).ok
    status, again = _job(store, "--now", LATER)
    assert again["erased"] == 0 and again["expired"] == []


def test_retention_and_hold_print_json_lines_like_every_list(tmp_path):
    """docs/cli.md: ``--json`` prints JSON Lines for a list, on every command (one object per
    line on stdout; the confirmation goes to stderr); an empty list prints nothing."""
    store = tmp_path / "s"
    refold.init(store)
    assert _cli("retention", store, "--json").stdout == "" and _cli("hold", store, "--json").stdout == ""
    _cli("retention", store, "--kind", "chat_turn", "--keep", "90d")
    added = _cli("retention", store, "--tenant", "bank", "--keep", "7y", "--json")
    assert [r["name"] for r in _lines(added)] == ["chat_turn@*", "*@bank"]
    assert "rule *@bank: keep 7y" in added.stderr
    _cli("hold", store, "--subject", "s-ann", "--reason", "case 1")
    placed = _cli("hold", store, "--tenant", "bank", "--reason", "order 9", "--json")
    assert [(h["subject"], h["tenant"]) for h in _lines(placed)] == [("s-ann", None), (None, "bank")]
    assert "placed a legal hold" in placed.stderr
