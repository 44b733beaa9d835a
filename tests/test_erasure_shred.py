"""Shred-mode erasure: X's keys are destroyed, derived data purged, the fold sees X's events as
erased; old table versions and copies of the table stay unreadable for X; the chain verifies."""

from __future__ import annotations

import shutil

import pytest
from deltalake import DeltaTable

from refold.fold.extract import ExtractedFact, Extraction
from refold.storage.keys.crypto import open_event
from refold.storage.delta.io import read_arrow
from refold.storage.keys.port import FileKeyStore
from refold.erasure.scan import scan
from refold.storage.log.schema import EVENTS_SCHEMA, table_to_events
from tests import erasure_helpers as H


@pytest.fixture
def store(tmp_path):
    return H.build(tmp_path / "store", mode="shred")


def test_the_log_holds_only_ciphertext_but_derived_data_is_plain(store):
    hits = scan(store.root, H.NEEDLES)
    assert hits, "the extraction cache and registry hold X in clear before the erasure"
    assert not any(h.file.startswith("events/") for h in hits)


@pytest.mark.slow
def test_shred_erasure(store, tmp_path):
    copy = tmp_path / "copy-of-events"
    shutil.copytree(store.layout.events, copy)  # e.g. a replica made before the erasure
    before = store.head()
    keys = FileKeyStore(store.layout.keys)
    x_keys = keys.key_ids(H.X)
    assert x_keys

    receipt = store.erase(H.X, canaries=H.CANARIES)

    assert receipt.mode == "shred" and list(receipt.destroyed_key_ids) == x_keys
    assert all(not keys.exists(k) for k in x_keys)
    assert {e["how"] for e in receipt.events} == {"shredded"} and len(receipt.events) == len(H.CANARIES)
    assert "events" not in receipt.delta  # nothing in the log was rewritten
    assert scan(store.root, H.NEEDLES) == [] and receipt.scan["hits"] == []
    assert store.verify().ok
    # the untagged mention stays (encrypted under Y's key) until the operator includes it
    assert [e.event_id for e in store.find(H.X).untagged] == []  # the registry entry is gone
    expected = H.reference_facts(tmp_path / "reference")
    assert H.facts(store) == expected
    # the pre-erasure version still loads (shredding rewrites nothing) but X's rows do not open
    old = DeltaTable(store.layout.events, version=before.table_version)
    for table in (old, DeltaTable(str(copy))):
        rows = list(table_to_events(read_arrow(table, EVENTS_SCHEMA)))
        x_rows = [e for e in rows if e.event_id in H.X_EVENT_IDS - {"ev-mention"}]
        y_rows = [e for e in rows if e.event_id.startswith("ev-y-")]
        assert len(x_rows) == len(H.CANARIES) and all(open_event(e, keys) is None for e in x_rows)
        assert all(open_event(e, keys) is not None for e in y_rows)
    assert store.verify_receipt(receipt, needles=H.NEEDLES).ok


def test_y_keeps_its_own_key_and_later_events_about_x_are_refused(store):
    """After the erasure X's erased marker stays: a later event about X is refused, naming the
    erasure, and nothing is written (issue #16 item 7; it used to get a fresh key)."""
    from refold.fold.errors import ErasedSubjectError

    y_key = FileKeyStore(store.layout.keys).key_ids(H.Y)
    receipt = store.erase(H.X, include_mentions=True)
    keys = FileKeyStore(store.layout.keys)
    assert keys.key_ids(H.Y) == y_key
    head = store.head()
    with pytest.raises(ErasedSubjectError, match=receipt.erasure_id):
        store.append({"kind": "chat_turn", "content": "new text about x", "source": "chat#99", "subjects": [H.X]})
    assert store.head() == head and keys.key_ids(H.X) == []
    store.append({"kind": "chat_turn", "content": "new text about y", "source": "chat#98", "subjects": [H.Y]})
    assert store.events()[-1].content == "new text about y"


def test_twice_is_a_noop_and_unknown_subject_fails(store):
    first = store.erase(H.X, include_mentions=True)
    second = store.erase(H.X)
    assert second.status == "noop" and second.previous_erasure_id == first.erasure_id
    with pytest.raises(Exception, match="unknown subject"):
        store.erase("s-nobody")


def test_out_of_scope_names_the_model_engines_that_saw_x(store):
    x_event = next(e for e in store.events() if e.event_id == "ev-x-01")
    store.cache.put([Extraction(event_id=x_event.event_id, spec_hash="other-spec",
                                facts=(ExtractedFact("a", "b", "c"),), engine="openai",
                                model_id="some-model-7b", host="gpu-7.internal")])
    plan = store.erase(H.X, dry_run=True)
    assert {"engine": "openai", "model_id": "some-model-7b", "host": "gpu-7.internal", "events": 1} in plan.engines
    assert any("some-model-7b" in item and "gpu-7.internal" in item for item in plan.out_of_scope)
    receipt = store.erase(H.X)
    assert any("some-model-7b" in item for item in receipt.out_of_scope)
    assert "other-spec" not in set(store.cache.frame()["spec_hash"].to_list())


def test_untagged_mentions_are_tombstoned_in_shred_mode(store):
    before = store.head()
    assert [e.event_id for e in store.find(H.X).untagged] == ["ev-mention"]
    receipt = store.erase(H.X, canaries=H.CANARIES, include_mentions=True)
    how = {e["event_id"]: e["how"] for e in receipt.events}
    assert how.pop(H.erased_id(store, "ev-mention")) == "tombstone"  # not under X's key, so it is deleted instead
    assert set(how.values()) == {"shredded"}
    assert "events" in receipt.delta and scan(store.root, H.NEEDLES) == []
    with pytest.raises(Exception):
        DeltaTable(store.layout.events, version=before.table_version)
    assert store.verify().ok and store.verify_receipt(receipt, needles=H.NEEDLES).ok


def test_a_shred_plan_reads_into_python_only_the_events_under_the_subjects_keys(store, monkeypatch):
    """Every event of a shred-mode store is encrypted; the plan's loop needs only those tagged
    with the subject or under one of its live keys (at a million events, the rest cost seconds)."""
    from refold.erasure import planning
    seen = []
    real = planning.plan_rows

    def counted(*args, **kwargs):
        rows = real(*args, **kwargs)
        seen.append({r["event_id"] for r in rows})
        return rows

    monkeypatch.setattr(planning, "plan_rows", counted)
    plan = store.erase(H.X, dry_run=True)
    assert seen == [H.X_EVENT_IDS - {"ev-mention"}]
    assert {e["event_id"] for e in plan.events} == H.X_EVENT_IDS - {"ev-mention"}
