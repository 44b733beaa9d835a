"""The column-wise sealer (storage/sealing.py) gives exactly what fold/chain.py's ``seal`` gives.

Every append goes through the column-wise path, and ``verify`` recomputes commitments with
``seal``'s functions, so the two must agree byte for byte on any input: strings that need JSON
escaping (quotes, backslashes, every control character), non-ASCII and U+2028/U+2029 (which
``json.dumps`` keeps as they are), empty lists, absent optional fields, facts, timestamps in any
zone. Pure functions; nothing is mocked.
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refold.fold.chain import DOMAIN, GENESIS, HEADER_FIELDS, reference_header_bytes, seal
from refold.fold.events import Event, Fact, NewEvent
from refold.storage.log import sealing
from refold.storage.log.schema import EVENTS_SCHEMA, events_to_table, table_to_events
from refold.storage.log.sealing import COLUMN_WISE_FROM, _seal_columns, chain_links, commit_digests, seal_rows

_NASTY = st.sampled_from(['"', "\\", "\\\"", "\u2028", "\u2029", "\x7f", "é", "日本", "🦜", "\n\r\t\b\f",
                          "</script>", "null", "{\"a\":1}", " "] + [chr(c) for c in range(0x20)])
_mixed = st.lists(_NASTY | st.text(st.characters(exclude_categories=("Cs",)), max_size=8),
                  min_size=1, max_size=4).map("".join)
# plain values take the path that quotes without escaping; a batch mixes both kinds per column
_text = st.text("abc XYZ-_.:é日🦜", max_size=6) | _mixed
_zones = st.sampled_from([timezone.utc, timezone(timedelta(hours=-7, minutes=-30)),
                          timezone(timedelta(hours=14)), timezone(timedelta(hours=5, minutes=45))])
_when = st.datetimes(min_value=datetime(1, 1, 3), max_value=datetime(9999, 12, 29), timezones=_zones)


@st.composite
def _events(draw):
    fact = draw(st.none() | st.builds(Fact, _text, _text, _text))
    return NewEvent(
        kind=draw(st.sampled_from(["observation", "memory_written"]) | _text), content=draw(_text),
        source=draw(_text), event_id=draw(_text), tenant=draw(_text),
        subjects=tuple(draw(st.lists(_text, max_size=3))), principals=tuple(draw(st.lists(_text, max_size=2))),
        trace_id=draw(st.none() | _text), justification=draw(st.none() | _text),
        valid_from=draw(st.none() | _when), valid_to=draw(st.none() | _when),
        ingestion_run=draw(st.none() | _text), fact=fact,
    )


def _column_wise(new: list[NewEvent], **kwargs):
    """The column-wise sealer itself (seal_rows takes it from COLUMN_WISE_FROM events on)."""
    return _seal_columns(new, salts=os.urandom(16 * len(new)), overrides={}, **kwargs)


def _by_seal(new: list[NewEvent], table, *, first_seq, prev_link, recorded_at, version,
             overrides=None) -> list[Event]:
    """What fold/chain.py's ``seal`` makes of the same events with the same salts (each event
    with its values of ``overrides`` stored instead of its own)."""
    out, prev = [], prev_link
    for i, (e, salt) in enumerate(zip(new, table["salt"].to_pylist())):
        event = Event(
            seq=first_seq + i, event_id=e.event_id, recorded_at=recorded_at, table_version=version,
            kind=e.kind, tenant=e.tenant, source=e.source, content=e.content, subjects=e.subjects,
            principals=e.principals, trace_id=e.trace_id, justification=e.justification,
            valid_from=e.valid_from, valid_to=e.valid_to, ingestion_run=e.ingestion_run, fact=e.fact,
            salt=salt,
        )
        mine = {name: values[i] for name, values in (overrides or {}).items()}
        if "key_ids" in mine:
            mine["key_ids"] = tuple(mine["key_ids"])
        event = seal(event.with_(**mine), prev)
        out.append(event)
        prev = event.link
    return out


@settings(max_examples=150, deadline=None)
@given(st.lists(_events(), min_size=1, max_size=8), st.integers(0, 10**12), st.integers(0, 10**6),
       _when, st.sampled_from([GENESIS, "ab" * 32, os.urandom(32).hex()]))
@pytest.mark.slow
def test_column_wise_sealing_equals_seal(new, first_seq, version, recorded_at, prev_link):
    table, last = _column_wise(new, first_seq=first_seq, prev_link=prev_link,
                               recorded_at=recorded_at, table_version=version)
    assert table.schema == EVENTS_SCHEMA
    expected = _by_seal(new, table, first_seq=first_seq, prev_link=prev_link,
                        recorded_at=recorded_at, version=version)
    assert list(table_to_events(table)) == expected  # every stored field, chain fields included
    assert table.equals(events_to_table(expected))  # and the same Arrow values
    assert last == expected[-1].link


def test_salts_are_fresh_and_hex_columns_are_lowercase_hex():
    new = [NewEvent(kind="observation", content="same", source="s", event_id=f"e{i}") for i in range(50)]
    table, _ = seal_rows(new, first_seq=0, prev_link=GENESIS, recorded_at=datetime.now(timezone.utc),
                         table_version=1)
    salts = table["salt"].to_pylist()
    assert len(set(salts)) == 50 and all(len(s) == 32 for s in salts)
    for name, width in (("salt", 32), ("commitment", 64), ("prev_link", 64), ("link", 64)):
        assert all(len(v) == width and v == v.lower() and bytes.fromhex(v) for v in table[name].to_pylist())
    assert len(set(table["commitment"].to_pylist())) == 50  # same content, different salt


def test_header_fields_are_the_sorted_keys_of_the_reference_header():
    event = Event(seq=0, event_id="e", recorded_at=datetime.now(timezone.utc), table_version=1,
                  kind="observation", tenant="t", source="s", content="c")
    assert HEADER_FIELDS == tuple(json.loads(reference_header_bytes(event)))
    assert list(HEADER_FIELDS) == sorted(HEADER_FIELDS)


def _plain(i: int, **fields) -> NewEvent:
    return NewEvent(**({"kind": "observation", "content": f"c{i}", "source": f"s{i}", "event_id": f"e{i}"} | fields))


# each column shape the column-wise header treats on its own path
_SHAPES = {
    "all plain, no nulls": [_plain(0, subjects=("a",), trace_id="t"), _plain(1, subjects=("b", "c"), trace_id="u")],
    "some nulls, some empty lists": [_plain(0, subjects=("a",), trace_id="t"), _plain(1)],
    "all nulls, all lists empty": [_plain(0), _plain(1)],
    "one value needs escaping": [_plain(0, subjects=('a"b',), justification="x\\y"), _plain(1, subjects=("c",))],
    "escaping with nulls and empty lists": [_plain(0, trace_id="\x00", principals=("\n",)), _plain(1)],
    "facts on some events": [_plain(0, fact=Fact('s"', "r", "o\u2028")), _plain(1)],
    "kind, tenant and run shared, escaped": [_plain(i, kind='k"\n', tenant="t\\é", ingestion_run="r\u2028")
                                             for i in range(2)],
    "kind and tenant shared, run differs": [_plain(0, tenant="t", ingestion_run="a"), _plain(1, tenant="t")],
    "times on some events": [_plain(0, valid_from=datetime(1, 1, 2, tzinfo=timezone.utc)),
                             _plain(1, valid_to=datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=timezone(timedelta(hours=-3))))],
}


def test_each_column_shape_equals_seal():
    for shape, new in _SHAPES.items():
        when = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=timezone.utc)
        table, last = _column_wise(new, first_seq=41, prev_link=GENESIS, recorded_at=when, table_version=7)
        expected = _by_seal(new, table, first_seq=41, prev_link=GENESIS, recorded_at=when, version=7)
        assert list(table_to_events(table)) == expected, shape
        assert last == expected[-1].link, shape


def test_values_every_event_shares_are_found_and_still_stored_per_row():
    columns, shared = sealing.user_columns(_SHAPES["kind and tenant shared, run differs"])
    assert shared == {"kind": "observation", "tenant": "t"}  # the run differs, so it is per row
    assert columns["kind"].to_pylist() == ["observation"] * 2 and columns["tenant"].to_pylist() == ["t"] * 2
    assert columns["ingestion_run"].to_pylist() == ["a", None]
    _, shared = sealing.user_columns([_plain(0), _plain(1)])
    assert shared["ingestion_run"] is None  # shared absence: "null" in every header


def test_seal_rows_takes_either_path_with_the_same_result():
    when = datetime(2026, 1, 2, tzinfo=timezone.utc)
    for n in (1, COLUMN_WISE_FROM - 1, COLUMN_WISE_FROM, 3 * COLUMN_WISE_FROM):
        new = [_plain(i, subjects=("a", f"s{i}"), trace_id=None if i % 2 else "t") for i in range(n)]
        table, last = seal_rows(new, first_seq=0, prev_link=GENESIS, recorded_at=when, table_version=1)
        assert table.schema == EVENTS_SCHEMA and table.num_rows == n
        expected = _by_seal(new, table, first_seq=0, prev_link=GENESIS, recorded_at=when, version=1)
        assert list(table_to_events(table)) == expected and last == expected[-1].link


def _protected(n: int) -> dict:
    """Stored columns a protector gives: ciphertext-like content, cipher and key ids on most rows,
    an erasure id and a fact on some, values that need JSON escaping on a few."""
    return {
        "content": [f"Y2lwaGVy{i}==" for i in range(n)],
        "justification": [None if i % 3 else f'kept "{i}"' for i in range(n)],
        "fact": [Fact("s", "r", f"o\n{i}") if i % 5 == 4 else None for i in range(n)],
        "cipher": ["aes256gcm-v1" if i % 7 else None for i in range(n)],
        "key_ids": [[f"{i:032x}", "ab" * 16][: 1 + i % 2] if i % 7 else [] for i in range(n)],
        "erasure_id": [None if i % 4 else f"er-{i}\u2028" for i in range(n)],
    }


@pytest.mark.parametrize("n", [1, COLUMN_WISE_FROM - 1, COLUMN_WISE_FROM, 3 * COLUMN_WISE_FROM])
@pytest.mark.parametrize("columns", [("content", "justification", "fact", "cipher", "key_ids"), ("erasure_id",),
                                     ("content", "justification", "fact", "cipher", "key_ids", "erasure_id")])
def test_overridden_columns_seal_like_events_holding_them(n, columns):
    """Stored columns given as overrides (shred mode's ciphertext, an erasure record's id) give
    the rows, commitments and links fold/chain.py's ``seal`` gives the events holding those
    values, on either path."""
    when = datetime(2026, 1, 2, tzinfo=timezone.utc)
    new = [_plain(i, subjects=("a", f"s{i}"), trace_id=None if i % 2 else "t", justification=f"j{i}",
                  fact=Fact("x", "y", "z") if i % 2 else None) for i in range(n)]
    overrides = {name: values for name, values in _protected(n).items() if name in columns}
    table, last = seal_rows(new, first_seq=5, prev_link=GENESIS, recorded_at=when, table_version=3,
                            overrides=overrides)
    expected = _by_seal(new, table, first_seq=5, prev_link=GENESIS, recorded_at=when, version=3,
                        overrides=overrides)
    assert list(table_to_events(table)) == expected and last == expected[-1].link
    assert table.equals(events_to_table(expected))


def test_overrides_of_unknown_columns_or_wrong_length_are_refused():
    new = [_plain(i) for i in range(2)]
    when = datetime.now(timezone.utc)
    with pytest.raises(ValueError, match="'seq' cannot be overridden"):
        seal_rows(new, first_seq=0, prev_link=GENESIS, recorded_at=when, table_version=1, overrides={"seq": [1, 2]})
    with pytest.raises(ValueError, match="1 values of cipher for 2 events"):
        seal_rows(new, first_seq=0, prev_link=GENESIS, recorded_at=when, table_version=1, overrides={"cipher": ["c"]})


# -- the hashes --------------------------------------------------------------------------------------

_bytes = st.binary(max_size=300)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(_bytes, _bytes), min_size=0, max_size=40), st.integers(0, 5), st.binary(min_size=32, max_size=32))
def test_batch_hashes_equal_hashlib_per_event(rows, cut, prev):
    """commit_digests and chain_links give the hashes fold/chain.py defines, sliced arrays
    (offset > 0) included."""
    contents = pa.array([b"x"] * cut + [c for c, _ in rows], pa.binary()).slice(cut)
    headers = pa.array([h for _, h in rows] + [b"y"] * cut, pa.binary()).slice(0, len(rows))
    salts = os.urandom(16 * len(rows))
    sha = hashlib.sha256
    expected = b"".join(
        sha(DOMAIN + h + sha(salts[16 * i:16 * i + 16] + c).digest()).digest() for i, (c, h) in enumerate(rows))
    links, link = [prev], prev
    for i in range(len(rows)):
        link = sha(link + expected[32 * i:32 * i + 32]).digest()
        links.append(link)
    assert commit_digests(salts, contents, headers) == expected
    assert chain_links(prev, expected) == b"".join(links)


def test_header_parts_hash_like_the_joined_header():
    """A header given as parts (constant text and per-row columns) hashes as their concatenation."""
    a = pa.array(["x", "", "é\u2028"], pa.string()).slice(1)
    b = pa.array(["1", "22", "333"], pa.string()).slice(1)
    contents = pa.array(["c1", "c2"])
    salts = os.urandom(32)
    joined = pa.array([b'{"a":"' + x.encode() + b'","b":' + y.encode() + b"}" for x, y in zip(a.to_pylist(), b.to_pylist())])
    assert commit_digests(salts, contents, ['{"a":"', a, '","b":', b, "}"]) == commit_digests(salts, contents, joined)


def test_a_hashed_column_with_nulls_is_refused():
    with pytest.raises(ValueError, match="nulls"):
        commit_digests(bytes(32), pa.array(["a", "b"]), ["{", pa.array(["1", None]), "}"])
    with pytest.raises(ValueError, match="nulls"):
        commit_digests(bytes(32), pa.array(["a", None]), ["{}"])


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_the_escape_scan_agrees_with_json(text):
    """_needs_escaping is True exactly when json.dumps would escape a byte of ``text``."""
    escaped = json.dumps(text, ensure_ascii=False)[1:-1] != text
    assert sealing._needs_escaping(pa.array([text])) is escaped


def test_hex_columns_cut_the_text_into_equal_values():
    """_hex gives one string per part (Arrow offsets every 2*width bytes)."""
    data = os.urandom(32 * 5)
    expected = pa.array([data[32 * i:32 * i + 32].hex() for i in range(5)], pa.string())
    got = sealing._hex(data, 5)
    got.validate(full=True)
    assert got.equals(expected)


# -- golden values ------------------------------------------------------------------------------------

def _golden_batch(n: int) -> list[NewEvent]:
    nasty = ['"', "\\", "\u2028", "é日🦜", "\n\t", "\x00", "plain", "</script>"]
    return [NewEvent(
        kind="observation" if i % 3 else "memory_written", content=f"content {i} {nasty[i % 8]}",
        source=f"doc#{i}{nasty[(i + 1) % 8]}", event_id=f"evt-{i:04d}", tenant="acme" if i % 5 else "t\\2",
        subjects=tuple(f"subj{j}{nasty[j % 8]}" for j in range(i % 3)), principals=("p",) if i % 2 else (),
        trace_id=None if i % 4 else f"trace-{i}", justification=None if i % 2 else f"because {nasty[i % 8]}",
        valid_from=None if i % 6 else datetime(2020, 1, 2, 3, 4, 5, 6789, tzinfo=timezone(timedelta(hours=5, minutes=45))),
        valid_to=None if i % 7 else datetime(2030, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc),
        ingestion_run="run-1", fact=Fact(f"s{i}", "lives_in", f"o{nasty[i % 8]}") if i % 4 == 1 else None,
    ) for i in range(n)]


#: (events, last link, SHA-256 of the commitments' hex joined): made by the sealer that stores hold
#: rows of (before the native hashing was removed, with and without it); a change here means
#: that new rows no longer chain like the old ones
_GOLDEN = [
    (3, "eb8318248df72c2d71437ff70d8e9867412d6b4ae208819243822bb88add6de0",
     "edefc74f4acc768199970da17b71931c778b681a0cb7b816ff1c84407c226e21"),
    (40, "4d616ca990dac4b200e0b67b35f23b2ec82d37019b864ca396bb3ee708e7eded",
     "3be490d6104d43570186eabe5fdeb3cb5a5d0eb57486c557740e526dff9b2e61"),
    (600, "573b73bfa04ef2214633a13d73f4abad63c1dc00b8cf267baabff5142e39f959",
     "1180ea35f9ea0c6d724428ca5c25a3d6a36739f5a59212065422689d59a9fff0"),
]


@pytest.mark.parametrize(("n", "link", "commitments"), _GOLDEN)
def test_sealed_bytes_equal_the_golden_values(n, link, commitments):
    """Fixed events and salts seal to the same commitments and links as before (both paths:
    one event at a time below COLUMN_WISE_FROM, column-wise from it)."""
    table, last = seal_rows(_golden_batch(n), first_seq=100, prev_link="ab" * 32,
                            recorded_at=datetime(2026, 12, 4, 7, 50, 1, 234567, tzinfo=timezone.utc),
                            table_version=9, salts=bytes((7 * j + 3) % 256 for j in range(16 * n)))
    assert last == link == table["link"][n - 1].as_py()
    assert hashlib.sha256("".join(table["commitment"].to_pylist()).encode()).hexdigest() == commitments
    assert list(table_to_events(table)) == _by_seal(  # and fold/chain.py's seal agrees
        _golden_batch(n), table, first_seq=100, prev_link="ab" * 32,
        recorded_at=datetime(2026, 12, 4, 7, 50, 1, 234567, tzinfo=timezone.utc), version=9)


def test_salts_given_must_be_16_bytes_per_event():
    with pytest.raises(ValueError, match="16 per event"):
        seal_rows(_golden_batch(2), first_seq=0, prev_link=GENESIS, recorded_at=datetime.now(timezone.utc),
                  table_version=1, salts=bytes(31))
