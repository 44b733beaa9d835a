"""Shred-mode encryption: round trip, multi-subject keys, tamper detection, and a real shred store."""

from __future__ import annotations

import base64

import pytest

import refold
from refold.fold.errors import IntegrityError
from refold.fold.events import Event, Fact, NewEvent
from refold.storage.erased_ids import pseudonyms
from refold.storage.keys.crypto import CIPHER, encrypt_event, open_event
from refold.storage.keys.port import FileKeyStore, KeyOwner, MemoryKeyStore


def _stored(new: NewEvent, overrides: dict) -> Event:
    from datetime import datetime, timezone

    return Event(seq=0, event_id=new.event_id, recorded_at=datetime.now(timezone.utc), table_version=1,
                 kind=new.kind, tenant=new.tenant, source=new.source, content=new.content,
                 subjects=new.subjects, justification=new.justification, fact=new.fact).with_(**overrides)


def _event(**kw) -> NewEvent:
    values = dict(kind="memory_written", content="Ada lives in London", source="tool#1",
                  subjects=("s-ada", "s-bob"), justification="Ada said so",
                  fact=Fact("Ada", "lives_in", "London"))
    values.update(kw)
    return NewEvent(**values)


def test_round_trip_hides_every_readable_field():
    ks = MemoryKeyStore()
    new = _event()
    over = encrypt_event(new, ks)
    assert over["cipher"] == CIPHER and over["justification"] is None and over["fact"] is None
    assert "Ada" not in over["content"] and "London" not in over["content"]
    assert "London" not in base64.b64decode(over["content"]).decode("latin-1")
    assert len(over["key_ids"]) == 2
    opened = open_event(_stored(new, over), ks)
    assert opened.content == new.content and opened.justification == new.justification
    assert opened.fact == new.fact and opened.cipher is None


def test_destroying_any_one_subject_key_makes_the_event_unreadable():
    for victim in ("s-ada", "s-bob"):
        ks = MemoryKeyStore()
        new = _event()
        stored = _stored(new, encrypt_event(new, ks))
        ks.destroy(victim)
        assert open_event(stored, ks) is None


def test_events_without_subjects_use_the_tenant_key():
    ks = MemoryKeyStore()
    new = _event(subjects=(), tenant="acme")
    over = encrypt_event(new, ks)
    assert list(over["key_ids"]) == ks.key_ids(KeyOwner.tenant("acme"))
    stored = _stored(new, over)
    assert open_event(stored, ks).content == new.content
    ks.destroy(KeyOwner.tenant("acme"))
    assert open_event(stored, ks) is None


def test_a_subject_named_like_a_tenant_key_has_its_own_key():
    """Issue #16 item 8: subject id "tenant:acme" and tenant acme's subject-less events used to
    share one key (one name space), so erasing the subject shredded the tenant's events."""
    ks = MemoryKeyStore()
    tenant_event = _event(subjects=(), tenant="acme")
    subject_event = _event(subjects=("tenant:acme",), tenant="acme")
    tenant_stored = _stored(tenant_event, encrypt_event(tenant_event, ks))
    subject_stored = _stored(subject_event, encrypt_event(subject_event, ks))
    assert set(tenant_stored.key_ids).isdisjoint(subject_stored.key_ids)
    ks.destroy("tenant:acme")
    assert open_event(subject_stored, ks) is None
    assert open_event(tenant_stored, ks).content == tenant_event.content


def test_associated_data_binds_event_id_and_subjects():
    ks = MemoryKeyStore()
    new = _event()
    stored = _stored(new, encrypt_event(new, ks))
    with pytest.raises(IntegrityError):
        open_event(stored.with_(subjects=("s-ada",) + ("s-eve",)), ks)
    with pytest.raises(IntegrityError):
        open_event(stored.with_(event_id="another-id"), ks)
    flipped = bytearray(base64.b64decode(stored.content))
    flipped[-1] ^= 1
    with pytest.raises(IntegrityError):
        open_event(stored.with_(content=base64.b64encode(bytes(flipped)).decode()), ks)


def test_plain_events_pass_through_and_tombstones_are_erased():
    ks = MemoryKeyStore()
    plain = _stored(_event(), {})
    assert open_event(plain, ks) is plain
    assert open_event(plain.with_(kind="tombstone", content=None), ks) is None


def test_shred_store_encrypts_on_append_and_verifies_without_keys(tmp_path):
    mem = refold.init(tmp_path / "s", mode="shred")
    mem.append({"kind": "chat_turn", "content": "Quillon Varga moved to Oslo", "source": "chat#1",
                "subjects": ["s-q"]})
    raw = mem.log_store.events()[0]
    assert raw.cipher == CIPHER and "Quillon" not in raw.content
    assert mem.events()[0].content == "Quillon Varga moved to Oslo"
    FileKeyStore(mem.layout.keys).destroy("s-q")
    assert mem.events()[0].content is None
    assert mem.verify().ok


def test_erasing_a_subject_named_tenant_colon_keeps_the_tenants_events(tmp_path):
    """Issue #16 item 8, in a real shred store: erasing subject "tenant:acme" leaves tenant
    acme's subject-less events readable."""
    mem = refold.init(tmp_path / "s", mode="shred")
    mem.append([{"kind": "observation", "content": "acme-wide note", "source": "obs#1", "tenant": "acme",
                 "event_id": "ev-tenant"},
                {"kind": "observation", "content": "about the odd subject", "source": "obs#2", "tenant": "acme",
                 "event_id": "ev-subject", "subjects": ["tenant:acme"]}])
    receipt = mem.erase("tenant:acme")
    assert [e["event_id"] for e in receipt.events] == [pseudonyms(mem.root)("ev-subject")]
    by_id = {e.event_id: e for e in mem.events()}
    assert by_id["ev-tenant"].content == "acme-wide note" and by_id["ev-subject"].content is None
