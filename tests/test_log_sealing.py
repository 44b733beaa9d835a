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
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refold.fold.chain import DOMAIN, GENESIS, HEADER_FIELDS, reference_header_bytes, seal
from refold.fold.events import Event, Fact, NewEvent
from refold.storage import batch_hashing, event_columns, sealing
from refold.storage.schema import EVENTS_SCHEMA, events_to_table, table_to_events
from refold.storage.datafiles import add_stats
from refold.storage.sealing import COLUMN_WISE_FROM, _seal_plain, seal_rows

_NASTY = st.sampled_from(['"', "\\", "\\\"", "\u2028", "\u2029", "\x7f", "é", "日本", "🦜", "\n\r\t\b\f",
                          "</script>", "null", "{\"a\":1}", " "] + [chr(c) for c in range(0x20)])
_mixed = st.lists(_NASTY | st.text(st.characters(exclude_categories=("Cs",)), max_size=8),
                  min_size=1, max_size=4).map("".join)
# plain values take the path that quotes without escaping; a batch mixes both kinds per column
_text = st.text("abc XYZ-_.:é日🦜", max_size=6) | _mixed
_zones = st.sampled_from([timezone.utc, timezone(timedelta(hours=-7, minutes=-30)),
                          timezone(timedelta(hours=14)), timezone(timedelta(hours=5, minutes=45))])
_when = st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=_zones)


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
    return _seal_plain(new, salts=os.urandom(16 * len(new)), **kwargs)


def _by_seal(new: list[NewEvent], table, *, first_seq, prev_link, recorded_at, version) -> list[Event]:
    """What fold/chain.py's ``seal`` makes of the same events with the same salts."""
    out, prev = [], prev_link
    for i, (e, salt) in enumerate(zip(new, table["salt"].to_pylist())):
        event = seal(Event(
            seq=first_seq + i, event_id=e.event_id, recorded_at=recorded_at, table_version=version,
            kind=e.kind, tenant=e.tenant, source=e.source, content=e.content, subjects=e.subjects,
            principals=e.principals, trace_id=e.trace_id, justification=e.justification,
            valid_from=e.valid_from, valid_to=e.valid_to, ingestion_run=e.ingestion_run, fact=e.fact,
            salt=salt,
        ), prev)
        out.append(event)
        prev = event.link
    return out


@settings(max_examples=150, deadline=None)
@given(st.lists(_events(), min_size=1, max_size=8), st.integers(0, 10**12), st.integers(0, 10**6),
       _when, st.sampled_from([GENESIS, "ab" * 32, os.urandom(32).hex()]))
def test_column_wise_sealing_equals_seal(new, first_seq, version, recorded_at, prev_link):
    table, last, stats = _column_wise(new, first_seq=first_seq, prev_link=prev_link,
                                      recorded_at=recorded_at, table_version=version)
    assert table.schema == EVENTS_SCHEMA
    assert stats == add_stats(table)  # made while the hashes ran: what the file's add action states
    expected = _by_seal(new, table, first_seq=first_seq, prev_link=prev_link,
                        recorded_at=recorded_at, version=version)
    assert list(table_to_events(table)) == expected  # every stored field, chain fields included
    assert table.equals(events_to_table(expected))  # and the same Arrow values
    assert last == expected[-1].link


def test_salts_are_fresh_and_hex_columns_are_lowercase_hex():
    new = [NewEvent(kind="observation", content="same", source="s", event_id=f"e{i}") for i in range(50)]
    table, _, _ = seal_rows(new, first_seq=0, prev_link=GENESIS, recorded_at=datetime.now(timezone.utc),
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
    "times on some events": [_plain(0, valid_from=datetime(1, 1, 1, tzinfo=timezone.utc)),
                             _plain(1, valid_to=datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=timezone(timedelta(hours=-3))))],
}


def test_each_column_shape_equals_seal():
    for shape, new in _SHAPES.items():
        when = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=timezone.utc)
        table, last, _ = _column_wise(new, first_seq=41, prev_link=GENESIS, recorded_at=when, table_version=7)
        expected = _by_seal(new, table, first_seq=41, prev_link=GENESIS, recorded_at=when, version=7)
        assert list(table_to_events(table)) == expected, shape
        assert last == expected[-1].link, shape


@pytest.mark.parametrize("convert", [event_columns.user_columns, event_columns.python_columns])
def test_values_every_event_shares_are_found_and_still_stored_per_row(convert):
    columns, shared, _ = convert(_SHAPES["kind and tenant shared, run differs"])
    assert shared == {"kind": "observation", "tenant": "t"}  # the run differs, so it is per row
    assert columns["kind"].to_pylist() == ["observation"] * 2 and columns["tenant"].to_pylist() == ["t"] * 2
    assert columns["ingestion_run"].to_pylist() == ["a", None]
    _, shared, _ = convert([_plain(0), _plain(1)])
    assert shared["ingestion_run"] is None  # shared absence: "null" in every header


@settings(max_examples=200, deadline=None)
@given(st.lists(_events(), min_size=1, max_size=12))
def test_native_columns_equal_pyarrows(new):
    """storage/_columns.c reads the fields into the Arrow arrays pyarrow makes of them."""
    columns, shared, bounds = event_columns.user_columns(new)
    expected, expected_shared, _ = event_columns.python_columns(new)
    assert shared == expected_shared
    for name, array in expected.items():
        columns[name].validate(full=True)
        assert columns[name].equals(array), name
    for name in event_columns.BOUNDED:  # found while reading: what Arrow's min_max finds
        low_high = pc.min_max(expected[name])
        assert bounds[name] == (low_high["min"].as_py(), low_high["max"].as_py()), name


class _Loose:
    """Not a NewEvent: its attributes are read the generic way."""

    def __init__(self, event: NewEvent, **changes):
        for name in NewEvent.__slots__:
            setattr(self, name, changes.get(name, getattr(event, name)))


@pytest.mark.parametrize("change", [
    {"content": 5}, {"subjects": ("a", None)}, {"subjects": ["a", "b"]}, {"principals": "ab"},
    {"source": "\ud800"}, {"subjects": ("\udfff",)}, {"trace_id": b"bytes"}, {"kind": None},
])
def test_values_the_native_reader_does_not_take_give_what_pyarrow_gives(change):
    """A value of an unexpected type, text without UTF-8, or an object of another class: the
    field goes to pyarrow, which converts it or raises exactly as without the native reader."""
    new = [_plain(0), _Loose(_plain(1), **change), _plain(2)]
    try:
        expected = event_columns.python_columns(new)
    except Exception as exc:  # noqa: BLE001 - the same error is expected below
        with pytest.raises(type(exc)):
            event_columns.user_columns(new)
        return
    columns, shared, _ = event_columns.user_columns(new)
    assert shared == expected[1]
    for name, array in expected[0].items():
        assert columns[name].equals(array), name


def test_an_unset_slot_raises_attribute_error_either_way():
    blank = object.__new__(NewEvent)
    for convert in (event_columns.user_columns, event_columns.python_columns):
        with pytest.raises(AttributeError):
            convert([_plain(0), blank])


def test_seal_rows_takes_either_path_with_the_same_result():
    when = datetime(2026, 1, 2, tzinfo=timezone.utc)
    for n in (1, COLUMN_WISE_FROM - 1, COLUMN_WISE_FROM, 3 * COLUMN_WISE_FROM):
        new = [_plain(i, subjects=("a", f"s{i}"), trace_id=None if i % 2 else "t") for i in range(n)]
        table, last, _ = seal_rows(new, first_seq=0, prev_link=GENESIS, recorded_at=when, table_version=1)
        assert table.schema == EVENTS_SCHEMA and table.num_rows == n
        expected = _by_seal(new, table, first_seq=0, prev_link=GENESIS, recorded_at=when, version=1)
        assert list(table_to_events(table)) == expected and last == expected[-1].link


# -- the native hashing loop (storage/_sealhash.c) ---------------------------------------------------

def test_the_native_modules_are_built():
    """The install (setup.py) compiles storage/_sealhash.c and storage/_columns.c where a C
    compiler and the OpenSSL headers exist, as on every machine this project runs its tests on;
    without them appends are slower (hashlib per value, pyarrow converting Python lists), so a
    silent fallback here would hide a broken build."""
    assert batch_hashing._sealhash is not None, (
        "refold.storage._sealhash was not built: install a C compiler and OpenSSL headers "
        "(Debian: gcc libssl-dev) and reinstall with `pip install -e .`")
    assert event_columns._columns is not None, (
        "refold.storage._columns was not built: install a C compiler and reinstall with `pip install -e .`")


_bytes = st.binary(max_size=300)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(_bytes, _bytes), min_size=0, max_size=40), st.integers(0, 5), st.binary(min_size=32, max_size=32))
def test_native_hashes_equal_hashlib(rows, cut, prev):
    """commit_digests and chain_links give hashlib's bytes, sliced arrays (offset > 0) included."""
    contents = pa.array([b"x"] * cut + [c for c, _ in rows], pa.binary()).slice(cut)
    headers = pa.array([h for _, h in rows] + [b"y"] * cut, pa.binary())
    salts = os.urandom(16 * len(rows))
    sha = hashlib.sha256
    expected = b"".join(
        sha(DOMAIN + h + sha(salts[16 * i:16 * i + 16] + c).digest()).digest() for i, (c, h) in enumerate(rows))
    links, link = [prev], prev
    for i in range(len(rows)):
        link = sha(link + expected[32 * i:32 * i + 32]).digest()
        links.append(link)
    assert batch_hashing.commit_digests(salts, contents, headers) == expected
    assert batch_hashing.chain_links(prev, expected) == b"".join(links)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=700))
def test_native_hexlify_writes_what_bytes_hex_writes(data):
    """The hex columns' text: lowercase, two digits per byte, from bytes or any buffer."""
    native = batch_hashing._sealhash
    assert native.hexlify(data) == data.hex().encode()
    assert native.hexlify(memoryview(data)) == data.hex().encode()
    assert native.hexlify(bytearray(data)) == data.hex().encode()


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_native_escape_scan_agrees_with_json(text):
    """needs_escaping is True exactly when json.dumps would escape a byte of ``text``."""
    data = text.encode()
    escaped = json.dumps(text, ensure_ascii=False)[1:-1] != text
    assert batch_hashing._sealhash.needs_escaping(data) is escaped
    assert batch_hashing._sealhash.needs_escaping(memoryview(data)) is escaped


def test_hex_columns_cut_the_text_into_equal_values(monkeypatch):
    """_hex gives one string per part (Arrow offsets every 2*width bytes), natively or not."""
    data = os.urandom(32 * 5)
    expected = pa.array([data[32 * i:32 * i + 32].hex() for i in range(5)], pa.string())
    native = sealing._hex(data, 5)
    native.validate(full=True)
    assert native.equals(expected)
    monkeypatch.setattr(batch_hashing, "_sealhash", None)
    assert sealing._hex(data, 5).equals(expected)


def test_the_hashlib_fallback_seals_the_same_bytes(monkeypatch):
    """Where the native loop was not built, sealing runs hashlib per value: same stored rows."""
    new = [_plain(i, content=f"c{i} \u2028 é\"") for i in range(40)]
    kwargs = dict(first_seq=7, prev_link="ab" * 32, recorded_at=datetime(2026, 1, 2, tzinfo=timezone.utc),
                  table_version=3, salts=os.urandom(16 * len(new)))
    native, native_head, _ = _seal_plain(new, **kwargs)
    monkeypatch.setattr(batch_hashing, "_sealhash", None)
    fallback, fallback_head, _ = _seal_plain(new, **kwargs)
    assert fallback.equals(native) and fallback_head == native_head
    assert native_head == native["link"][-1].as_py()


def test_the_native_loop_rejects_malformed_buffers():
    """Offsets that point outside the data, salts of the wrong length, or header parts of the
    wrong kind raise instead of reading out of bounds."""
    ok = pa.array([b"abc", b"de"], pa.binary())
    _, offsets, data = ok.buffers()
    native = batch_hashing._sealhash
    short = data.to_pybytes()[:-1]
    with pytest.raises(ValueError, match="content: offset of row 1 out of range"):
        native.commit(2, bytes(32), offsets, short, 0, [b"{}"], DOMAIN)
    with pytest.raises(ValueError, match="header column: offset of row 1 out of range"):
        native.commit(2, bytes(32), offsets, data, 0, [b"{", (offsets, short, 0)], DOMAIN)
    with pytest.raises(ValueError, match="too short"):
        native.commit(3, bytes(48), offsets, data, 0, [], DOMAIN)
    with pytest.raises(ValueError, match="too short"):
        native.commit(2, bytes(32), offsets, data, 1, [], DOMAIN)
    with pytest.raises(ValueError, match="salts"):
        native.commit(2, bytes(31), offsets, data, 0, [], DOMAIN)
    with pytest.raises(TypeError):
        native.commit(2, bytes(32), offsets, data, 0, [42], DOMAIN)
    with pytest.raises(ValueError, match="32 bytes"):
        native.chain(bytes(31), bytes(32))
    with pytest.raises(ValueError, match="nulls"):
        batch_hashing.commit_digests(bytes(32), pa.array([b"a", None]), ok)


def test_a_native_hashing_thread_gives_what_the_call_gives():
    """``start`` runs ``commit`` on a thread of its own: the same bytes (with ``prev``, the links
    too); its result is taken once; a job dropped unread is waited for, not left reading freed
    buffers; bad arguments fail at the start, before any thread runs."""
    contents = pa.array([os.urandom(100 + i) for i in range(300)], pa.binary())
    headers = pa.array([os.urandom(i % 40) for i in range(300)], pa.binary())
    salts, prev = os.urandom(16 * 300), os.urandom(32)
    _, coff, cdata = contents.buffers()
    _, hoff, hdata = headers.buffers()
    args = (300, salts, coff, cdata, 0, [b"{", (hoff, hdata, 0), b"}"], DOMAIN)
    native = batch_hashing._sealhash
    commitments = native.commit(*args)
    job = native.start(*args)
    assert job.result() == commitments
    with pytest.raises(RuntimeError, match="taken already"):
        job.result()
    assert native.start(*args, prev).result() == (commitments, batch_hashing.chain_links(prev, commitments))
    for _ in range(20):
        native.start(*args)  # dropped at once: the deallocator joins the thread
    with pytest.raises(ValueError, match="salts"):
        native.start(300, salts[:-1], coff, cdata, 0, [], DOMAIN)
    with pytest.raises(ValueError, match="prev must be 32 bytes"):
        native.start(*args, prev[:-1])


def test_header_parts_hash_like_the_joined_header():
    """A header given as parts (constant text and per-row columns) hashes as their concatenation."""
    a = pa.array(["x", "", "é\u2028"], pa.string()).slice(1)
    b = pa.array([b"1", b"22", b"333"], pa.binary()).slice(1)
    contents = pa.array(["c1", "c2"])
    salts = os.urandom(32)
    joined = pa.array([b'{"a":"' + x.encode() + b'","b":' + y + b"}" for x, y in zip(a.to_pylist(), b.to_pylist())])
    whole = batch_hashing.commit_digests(salts, contents, joined)
    assert batch_hashing.commit_digests(salts, contents, ['{"a":"', a, '","b":', b, "}"]) == whole
    assert batch_hashing.native_commit(salts, contents.cast(pa.binary()), [b'{"a":"', a.cast(pa.binary()), b'","b":', b, b"}"], 0, 2) == whole


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-2**63, 2**63 - 1), min_size=1, max_size=30), st.integers(0, 3))
def test_integer_header_parts_hash_as_their_decimal_text(values, cut):
    """An int64 column in the header (the seq) is written in decimal by the native loop, as
    json.dumps writes an int: extremes, negatives and sliced arrays (offset > 0) included."""
    ints = pa.array([0] * cut + values, pa.int64()).slice(cut)
    contents = pa.array([f"c{i}" for i in range(len(values))])
    salts = os.urandom(16 * len(values))
    joined = pa.array([f'{{"seq":{json.dumps(v)}}}' for v in values])
    whole = batch_hashing.commit_digests(salts, contents, joined)
    assert batch_hashing.commit_digests(salts, contents, ['{"seq":', ints, "}"]) == whole
    assert batch_hashing.native_commit(salts, contents, [b'{"seq":', ints, b"}"], 0, len(values)) == whole


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.text("abc é日🦜-", max_size=4), max_size=3), min_size=1, max_size=20), st.integers(0, 3))
def test_list_header_parts_hash_as_json_arrays(lists, cut):
    """A list-of-strings column in the header (subjects, principals) is written by the native loop
    as the JSON array json.dumps makes of it: empty lists, a sliced list array (offset > 0) and
    items cut from a longer array (the child's offset) included; the fallback writes the same."""
    contents = pa.array([f"c{i}" for i in range(len(lists))])
    salts = os.urandom(16 * len(lists))
    joined = pa.array(['{"s":' + json.dumps(v, ensure_ascii=False, separators=(",", ":")) + "}" for v in lists])
    whole = batch_hashing.commit_digests(salts, contents, joined)
    sliced = pa.array([["pad"]] * cut + lists, pa.list_(pa.string())).slice(cut)
    items = pa.array(["pad"] * cut + [x for v in lists for x in v], pa.string()).slice(cut)
    offsets = pa.array([sum(len(v) for v in lists[:i]) for i in range(len(lists) + 1)], pa.int32())
    from_items = pa.ListArray.from_arrays(offsets, items)
    for array in (sliced, from_items):
        assert batch_hashing.commit_digests(salts, contents, ['{"s":', array, "}"]) == whole
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(batch_hashing, "_sealhash", None)
            assert batch_hashing.commit_digests(salts, contents, ['{"s":', array, "}"]) == whole


def test_the_native_loop_rejects_malformed_list_columns():
    ok = pa.array([b"abc", b"de"], pa.binary())
    _, offsets, data = ok.buffers()
    lists = pa.array([["a"], ["b", "c"]], pa.list_(pa.string()))
    list_offsets = lists.buffers()[1]
    _, item_offsets, item_data = lists.values.buffers()
    native = batch_hashing._sealhash
    with pytest.raises(ValueError, match="list column: offsets buffer too short"):
        native.commit(2, bytes(32), offsets, data, 0, [(list_offsets, item_offsets, item_data, 1, 0)], DOMAIN)
    with pytest.raises(ValueError, match="list items: offsets buffer too short"):
        native.commit(2, bytes(32), offsets, data, 0, [(list_offsets, item_offsets, item_data, 0, 1)], DOMAIN)
    backwards = pa.py_buffer(bytes(pa.array([0, 2, 1], pa.int32()).buffers()[1]))
    with pytest.raises(ValueError, match="list column: offset of row 1 out of range"):
        native.commit(2, bytes(32), offsets, data, 0, [(backwards, item_offsets, item_data, 0, 0)], DOMAIN)


def test_the_native_loop_rejects_a_short_integer_column():
    ok = pa.array([b"abc", b"de"], pa.binary())
    _, offsets, data = ok.buffers()
    with pytest.raises(ValueError, match="int64 column: values buffer too short"):
        batch_hashing._sealhash.commit(2, bytes(32), offsets, data, 0, [(bytes(8), 0)], DOMAIN)
    with pytest.raises(ValueError, match="nulls"):
        batch_hashing.commit_digests(bytes(32), ok, ["{", pa.array([1, None]), "}"])


@pytest.mark.parametrize("cores", [1, 2, 3])
def test_hashing_in_parallel_slices_gives_the_same_bytes(monkeypatch, cores):
    """Large batches are hashed in one slice per core; the bytes do not depend on the split."""
    rows = [(os.urandom(i % 50), os.urandom(100 + i % 7)) for i in range(101)]
    contents = pa.array([c for c, _ in rows], pa.binary())
    headers = pa.array([h for _, h in rows], pa.binary())
    salts = os.urandom(16 * len(rows))
    serial = batch_hashing.native_commit(salts, contents, [headers], 0, len(rows))
    monkeypatch.setattr(batch_hashing, "PARALLEL_FROM", 10)
    monkeypatch.setattr(batch_hashing, "_cores", lambda: cores)
    assert len(batch_hashing._parts(len(rows))) == cores
    assert batch_hashing.commit_digests(salts, contents, headers) == serial
