"""Shred-mode encryption: round trip, multi-subject keys, tamper detection, and a real shred store."""

from __future__ import annotations

import base64

import pytest

import refold
from refold.fold.errors import IntegrityError
from refold.fold.events import Event, Fact, NewEvent
from refold.storage.erased_ids import pseudonyms
from refold.storage.keys.crypto import CIPHER, encrypt_events, open_event
from refold.storage.keys.port import FileKeyStore, KeyOwner, MemoryKeyStore


def _stored(new: NewEvent, overrides: dict) -> Event:
    from datetime import datetime, timezone

    return Event(seq=0, event_id=new.event_id, recorded_at=datetime.now(timezone.utc), table_version=1,
                 kind=new.kind, tenant=new.tenant, source=new.source, content=new.content,
                 subjects=new.subjects, justification=new.justification, fact=new.fact).with_(**overrides)


def encrypt_event(new: NewEvent, ks) -> dict:
    """The stored values :func:`encrypt_events` gives one event."""
    return {name: values[0] for name, values in encrypt_events([new], ks).items()}


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


def test_a_batch_makes_each_owners_key_once_and_every_event_opens():
    """Keys for a whole batch in one call: one key per subject (and per tenant of subject-less
    events), fresh nonces per event, each event opening alone with its own keys."""
    ks = MemoryKeyStore()
    ks.get_or_create("s-3")  # an existing subject among new ones
    existing = ks.key_ids("s-3")
    batch = [_event(event_id=f"ev-{i}", content=f"note {i}", subjects=(f"s-{i % 5}",) if i % 6 else (),
                    tenant="acme") for i in range(30)] + [_event(event_id="ev-both", subjects=("s-1", "s-3"))]
    columns = encrypt_events(batch, ks)
    assert set(columns) == {"content", "justification", "fact", "cipher", "key_ids"}
    assert all(len(values) == len(batch) for values in columns.values())
    for subject in (f"s-{i}" for i in range(5)):
        assert len(ks.key_ids(subject)) == 1
    assert ks.key_ids("s-3") == existing and len(ks.key_ids(KeyOwner.tenant("acme"))) == 1
    nonces = {base64.b64decode(c)[:12] for c in columns["content"]}
    assert len(nonces) == len(batch)
    for i, new in enumerate(batch):
        stored = _stored(new, {name: values[i] for name, values in columns.items()})
        assert open_event(stored, ks).content == new.content
    ks.destroy("s-1")
    both = _stored(batch[-1], {name: values[-1] for name, values in columns.items()})
    assert open_event(both, ks) is None


def test_the_event_key_is_hkdf_sha256_of_the_sorted_keys_and_the_event_id():
    """The derivation shred-mode rows were written with (docs: crypto module), whichever way a
    batch computes it."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    from refold.storage.keys.crypto import event_key

    keys = [("bb" * 16, b"\x02" * 32), ("aa" * 16, b"\x01" * 32)]
    expected = HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                    info=b"refold/event-key/v1\x00" + "ev-é".encode()).derive(
        b"\x01" * 32 + b"\x02" * 32)
    assert event_key(keys, "ev-é") == expected


def test_a_shred_store_batch_of_new_and_known_subjects_opens_and_verifies(tmp_path):
    """An append large enough to be sealed column by column: every event reads back in clear,
    the chain verifies without keys, and erasing one subject shreds exactly its events."""
    mem = refold.init(tmp_path / "s", mode="shred")
    mem.append([{"kind": "chat_turn", "content": "first", "source": "chat#0", "subjects": ["s-0"],
                 "event_id": "ev-first"}])
    batch = [{"kind": "chat_turn", "content": f"turn {i}", "source": "chat#1", "event_id": f"ev-{i}",
              **({"subjects": [f"s-{i % 4}"]} if i % 5 else {"tenant": "acme"})} for i in range(40)]
    mem.append(batch)
    stored = {e.event_id: e for e in mem.log_store.events()}
    assert all(e.cipher == CIPHER and e.content.startswith("turn") is False for e in stored.values())
    assert {e.event_id: e.content for e in mem.events()} == {"ev-first": "first",
                                                            **{b["event_id"]: b["content"] for b in batch}}
    assert mem.verify().ok
    assert len(FileKeyStore(mem.layout.keys).key_ids("s-0")) == 1
    mem.erase("s-1")
    readable = {e.event_id for e in mem.events() if e.content is not None and e.kind != "erasure"}
    assert readable == {"ev-first"} | {b["event_id"] for b in batch if b.get("subjects") != ["s-1"]}


@pytest.mark.parametrize("text", ['plain', 'q"uote\\back', "é日🦜\u2028\x00\n", "</script>"])
def test_batch_ciphertext_is_the_canonical_payload_under_the_canonical_associated_data(text):
    """What a batch encrypts and binds is exactly canonical JSON (the stored format), whatever
    characters ids, subjects, tenant and fields hold."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from refold.fold.canonical import canonical_json
    from refold.storage.keys.crypto import associated_data, event_key

    ks = MemoryKeyStore()
    events = [_event(event_id=f"ev-{text}", subjects=(f"s-{text}", "s-b"), tenant=f"t-{text}", content=text,
                     justification=None if i else text, fact=Fact(text, "r", text) if i else None)
              for i in range(2)]
    columns = encrypt_events(events, ks)
    for new, blob, ids in zip(events, columns["content"], columns["key_ids"]):
        raw = base64.b64decode(blob)
        keys = [(k, ks.get(k)) for k in ids]
        aad = associated_data(event_id=new.event_id, subjects=new.subjects, tenant=new.tenant, key_ids=ids)
        plain = AESGCM(event_key(keys, new.event_id)).decrypt(raw[:12], raw[12:], aad)
        assert plain == canonical_json({"content": new.content, "justification": new.justification,
                                        "fact": new.fact.as_dict() if new.fact else None})
