"""The JSON Lines input format as a JSON Schema (issue #34 item 4): ``refold/data/event.schema.json``,
shipped in the package and printed by ``refold schema``, states what ``validate_event`` checks.

The schema and ``validate_event`` must agree: on a table of valid and invalid inputs, on generated
inputs (hypothesis), and on every character Python calls whitespace. The rules a schema cannot
state (content bytes, the time range, ``valid_to`` before ``valid_from``, lone surrogates) are
listed in its ``$comment``, and only they make the two differ. Blank ids (``"subjects": ["  "]``)
are refused with one line naming the field; the batch is rejected and nothing is written. Real
stores in tmp_path.
"""

from __future__ import annotations

import json
import re
import tomllib
from datetime import datetime
from fnmatch import fnmatch
from pathlib import Path

import pytest
from click.testing import CliRunner
from deltalake import DeltaTable
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

import refold
from refold.cli import main
from refold.fold.errors import EventValidationError
from refold.fold.events import (
    FACT_FIELDS, FACT_KINDS, USER_KINDS, input_schema, input_schema_text, parse_jsonl, validate_event,
)

REPO = Path(__file__).resolve().parents[1]
SCHEMA = input_schema()
VALIDATOR = Draft202012Validator(SCHEMA)

GOOD = {"kind": "chat_turn", "content": "Ana: I live in Lisbon.", "source": "chat#1"}
FACT = {"kind": "memory_written", "content": "Ana lives in Lisbon.", "source": "tool#write_memory",
        "fact": {"subject": "Ana", "relation": "lives_in", "object": "Lisbon"},
        "justification": "chat#1"}


def _accepted(raw, **kwargs) -> bool:
    try:
        validate_event(raw, **kwargs)
    except EventValidationError:
        return False
    return True


def _with(base: dict, **changes) -> dict:
    return {**base, **changes}


def _without(base: dict, name: str) -> dict:
    return {k: v for k, v in base.items() if k != name}


VALID = [
    GOOD,
    FACT,
    _with(FACT, kind="retraction"),
    _with(GOOD, event_id="order-1842", tenant="acme", subjects=["s-ana", " s-ben "], principals=[],
          trace_id="t-1", justification="why", ingestion_run="run-1"),
    _with(GOOD, event_id=None, tenant=None, subjects=None, principals=None, trace_id=None,
          justification=None, ingestion_run=None, valid_from=None, valid_to=None, fact=None),
    _with(GOOD, valid_from="2024-05-01T12:00:00+00:00", valid_to="2024-06-01T12:00:00Z"),
    _with(GOOD, valid_from="2024-05-01T12:00:00.123456-05:00"),
    _with(GOOD, valid_from="2024-05-01 12:00+0130"),
    _with(GOOD, valid_from="20240501T120000Z"),
    _with(GOOD, valid_from="2024-05-01T12+01"),
    _with(GOOD, kind="observation"), _with(GOOD, kind="document"), _with(GOOD, kind="tool_call"),
    _with(GOOD, content="\u00e9t\u00e9 \U0001f600"),
]

INVALID = [
    # blank ids: the bug this schema fixes (whitespace only was accepted and written)
    _with(GOOD, subjects=["  "]),
    _with(GOOD, subjects=["s-ana", "\t"]),
    _with(GOOD, subjects=["\u3000"]),
    _with(GOOD, principals=[" \n"]),
    _with(GOOD, subjects=[""]),
    _with(GOOD, subjects="s-ana"),
    _with(GOOD, subjects=["s-ana", 7]),
    _with(GOOD, principals=[None]),
    _with(GOOD, event_id="  "),
    _with(GOOD, event_id=""),
    _with(GOOD, event_id=7),
    _with(GOOD, event_id="erased:0123"),
    _with(GOOD, tenant="  "),
    _with(GOOD, tenant=""),
    _with(GOOD, trace_id="\u00a0"),
    _with(GOOD, ingestion_run=" "),
    # kind, content, source
    _without(GOOD, "kind"),
    _with(GOOD, kind=None),
    _with(GOOD, kind="spec_changed"),
    _with(GOOD, kind="tombstone"),
    _with(GOOD, kind=3),
    _without(GOOD, "content"),
    _with(GOOD, content=None),
    _with(GOOD, content=" \n "),
    _with(GOOD, content=5),
    _without(GOOD, "source"),
    _with(GOOD, source="   "),
    _with(GOOD, source=["chat#1"]),
    _with(GOOD, colour="blue"),
    # facts
    _with(GOOD, fact=FACT["fact"]),
    _without(FACT, "fact"),
    _with(FACT, fact=None),
    _without(FACT, "justification"),
    _with(FACT, justification=None),
    _with(FACT, justification="  "),
    _with(FACT, fact={**FACT["fact"], "since": "2024"}),
    _with(FACT, fact={**FACT["fact"], "subject": " "}),
    _with(FACT, fact=_without(FACT["fact"], "object")),
    _with(FACT, fact={**FACT["fact"], "relation": None}),
    _with(FACT, fact="Ana lives_in Lisbon"),
    # times
    _with(GOOD, valid_from="2024-05-01T12:00:00"),
    _with(GOOD, valid_from="2024-05-01"),
    _with(GOOD, valid_from="yesterday"),
    _with(GOOD, valid_from=1714564800),
    _with(GOOD, valid_to="2024-05-01T12:00:00+0"),
    # not an object
    [GOOD], "chat_turn", 7, None,
]

#: Shaped like the schema says, refused by the rules it cannot state (its ``$comment`` lists them).
BEYOND_THE_SCHEMA = [
    (_with(GOOD, content="x" * 11), {"max_content_bytes": 10}, "max_content_bytes"),
    (_with(GOOD, content="\u00e9" * 6), {"max_content_bytes": 10}, "max_content_bytes"),  # 6 chars, 12 bytes
    (_with(GOOD, valid_from="2024-13-01T12:00:00Z"), {}, "fromisoformat"),
    (_with(GOOD, valid_from="2024-05-01T24:00:00+00:00"), {}, "fromisoformat"),
    (_with(GOOD, valid_from="0001-01-01T00:00:00+01:00"), {}, "0001-01-02T00:00:00Z"),
    (_with(GOOD, valid_to="9999-12-31T23:59:59-01:00"), {}, "9999-12-30T23:59:59.999999Z"),
    (_with(GOOD, valid_from="2024-05-02T00:00:00Z", valid_to="2024-05-01T00:00:00Z"), {},
     "valid_to is not before valid_from"),
    (_with(GOOD, content="bad \ud800 text"), {}, "lone UTF-16 surrogate"),
    (_with(GOOD, subjects=["s-\udfff"]), {}, "lone UTF-16 surrogate"),
]


@pytest.mark.parametrize("raw", VALID, ids=lambda r: json.dumps(r)[:60])
def test_valid_inputs_pass_both(raw):
    assert VALIDATOR.is_valid(raw), list(VALIDATOR.iter_errors(raw))
    assert _accepted(raw)


@pytest.mark.parametrize("raw", INVALID, ids=lambda r: json.dumps(r)[:60])
def test_invalid_inputs_fail_both(raw):
    assert not VALIDATOR.is_valid(raw)
    assert not _accepted(raw)


@pytest.mark.parametrize("raw,kwargs,rule", BEYOND_THE_SCHEMA, ids=lambda r: str(r)[:40])
def test_the_rules_beyond_the_schema_are_the_ones_its_comment_lists(raw, kwargs, rule):
    assert VALIDATOR.is_valid(raw)
    assert not _accepted(raw, **kwargs)
    assert rule in SCHEMA["$comment"]


def test_the_schema_names_every_field_kind_and_fact_part_the_code_knows():
    with pytest.raises(EventValidationError) as caught:  # its message lists the fields it knows
        validate_event(_with(GOOD, zzz=1))
    assert f"allowed: {sorted(SCHEMA['properties'])}" in caught.value.reason
    assert set(SCHEMA["required"]) == {"kind", "content", "source"}
    assert set(SCHEMA["properties"]["kind"]["enum"]) == USER_KINDS
    (rule,) = SCHEMA["allOf"]
    assert set(rule["if"]["properties"]["kind"]["enum"]) == FACT_KINDS
    assert tuple(SCHEMA["$defs"]["fact"]["required"]) == FACT_FIELDS
    Draft202012Validator.check_schema(SCHEMA)


def test_blank_is_whitespace_as_python_strips_it_for_every_character():
    """``$defs/text`` spells Python's whitespace out (portable to any regex dialect): a string
    matches exactly when ``str.strip`` leaves something."""
    pattern = re.compile(SCHEMA["$defs"]["text"]["pattern"])
    for code in range(0x110000):
        if 0xD800 <= code <= 0xDFFF:
            continue
        char = chr(code)
        assert (pattern.search(char * 2) is None) == char.isspace(), hex(code)


_GOOD_WORDS = ["s-ana", "ok", "a b", " x "]
_BAD_WORDS = ["  ", "", "\t", "\u00a0\u3000", "erased:x", None, 1, ["ok"]]
_GOOD_TIMES = ["2024-05-01T12:00:00+00:00", "2023-01-01T00:00Z", "2024-05-01 12:00-05:00"]
_BAD_TIMES = ["2024-05-01T12:00:00", "2024-05-01", "x", 5, "  "]


@st.composite
def _events(draw) -> dict:
    """Mostly good events (about a third come out valid), each field sometimes absent or bad."""
    def pick(good, bad, *, absent: int, bad_in: int = 10):
        roll = draw(st.integers(0, 99))
        if roll < absent:
            return _ABSENT
        return draw(st.sampled_from(bad if roll < absent + bad_in else good))

    raw = {"kind": pick(sorted(USER_KINDS), ["tombstone", "chat", None, 1], absent=4),
           "content": pick(["hi", "Ana: hi"], ["", " \n", None, 3], absent=4),
           "source": pick(["chat#1"], ["", "\t", None, ["chat#1"]], absent=4)}
    for name in ("event_id", "tenant", "trace_id", "ingestion_run"):
        raw[name] = pick(_GOOD_WORDS, _BAD_WORDS, absent=60, bad_in=8)
    for name in ("subjects", "principals"):
        if draw(st.integers(0, 99)) < 40:
            raw[name] = draw(st.lists(st.sampled_from(_GOOD_WORDS * 8 + _BAD_WORDS), max_size=3))
        else:
            raw[name] = pick([None, []], ["s-ana", 7], absent=50)
    raw["valid_from"] = pick(_GOOD_TIMES, _BAD_TIMES, absent=60, bad_in=8)
    fact_kind = raw["kind"] in FACT_KINDS
    raw["justification"] = pick(_GOOD_WORDS, _BAD_WORDS, absent=5 if fact_kind else 70, bad_in=8)
    good_fact = {"subject": "Ana", "relation": "lives_in", "object": "Lisbon"}
    bad_facts = [None, "Ana lives_in Lisbon", {**good_fact, "object": " "}, {**good_fact, "since": "2024"},
                 {"subject": "Ana", "relation": "lives_in"}, {**good_fact, "relation": 3}]
    raw["fact"] = pick([good_fact], bad_facts, absent=5 if fact_kind else 90, bad_in=10 if fact_kind else 5)
    raw["colour"] = pick(["blue"], [], absent=97, bad_in=0)
    return {k: v for k, v in raw.items() if v is not _ABSENT}


_ABSENT = object()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_events())
def test_generated_inputs_are_judged_the_same_by_both(raw):
    assert VALIDATOR.is_valid(raw) == _accepted(raw), (raw, [e.message for e in VALIDATOR.iter_errors(raw)])


@settings(max_examples=100, deadline=None)
@given(st.datetimes(min_value=datetime(2, 1, 1), max_value=datetime(9998, 12, 31),
                    timezones=st.timezones()),
       st.sampled_from(["auto", "hours", "minutes", "seconds", "milliseconds", "microseconds"]),
       st.sampled_from(["T", " "]))
def test_every_aware_time_python_writes_passes_both(when, timespec, sep):
    text = when.isoformat(sep=sep, timespec=timespec)
    raw = _with(GOOD, valid_from=text)
    assert VALIDATOR.is_valid(raw) and _accepted(raw), text


# -- blank ids in a real store: refused, one line naming the field, nothing written -------------

def _state(mem) -> tuple[int, int, set[str]]:
    root = Path(mem.root)
    return (DeltaTable(mem.layout.events).version(), mem.log().height,
            {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()})


@pytest.mark.parametrize("field,value,noun", [("subjects", ["s-ana", "  "], "subject id"),
                                              ("principals", ["\t"], "principal")])
def test_a_blank_id_in_a_list_is_refused_and_nothing_is_written(tmp_path, field, value, noun):
    mem = refold.init(tmp_path / "store")
    mem.append(GOOD)
    before = _state(mem)
    with pytest.raises(EventValidationError) as caught:
        mem.append([_with(GOOD, event_id="e-1"), _with(GOOD, event_id="e-2", **{field: value})])
    err = caught.value
    assert (err.line, err.field) == (2, field)
    index = len(value) - 1
    assert err.reason == (f"item {index} is blank ({value[index]!r}): a {noun} needs a character that is not "
                          f"whitespace; write the {noun} or drop the item")
    assert "\n" not in str(err) and "nothing was written" in str(err)
    assert _state(mem) == before


@pytest.mark.parametrize("field", ["event_id", "tenant", "trace_id", "ingestion_run"])
def test_a_blank_id_field_is_refused_and_nothing_is_written(tmp_path, field):
    mem = refold.init(tmp_path / "store")
    before = _state(mem)
    with pytest.raises(EventValidationError, match="expected a non-empty string") as caught:
        mem.append([GOOD, _with(GOOD, **{field: " \t"})])
    assert (caught.value.line, caught.value.field) == (2, field)
    assert _state(mem) == before


def test_cli_append_refuses_a_blank_subject_on_one_line_and_writes_nothing(tmp_path):
    store = tmp_path / "store"
    refold.init(store)
    batch = tmp_path / "batch.jsonl"
    batch.write_text(json.dumps(GOOD) + "\n" + json.dumps(_with(GOOD, subjects=["  "])) + "\n")
    result = CliRunner().invoke(main, ["append", str(store), str(batch)])
    assert result.exit_code == 2 and result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("refold: error: line 2, field 'subjects': item 0 is blank ('  ')")
    assert "write the subject id or drop the item" in line and "nothing was written" in line
    assert refold.open(store).log().height == 0


# -- the schema ships and `refold schema` prints it ------------------------------------------------

def test_refold_schema_prints_the_shipped_file_byte_for_byte():
    result = CliRunner().invoke(main, ["schema"])
    assert result.exit_code == 0, result.output
    shipped = (REPO / "refold" / "data" / "event.schema.json").read_text(encoding="utf-8")
    assert result.stdout == shipped == input_schema_text()
    assert json.loads(result.stdout) == SCHEMA


def test_the_package_data_ships_the_schema():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["refold"]
    assert any(fnmatch("data/event.schema.json", p) for p in patterns), patterns


def test_the_sample_events_and_their_parse_agree_with_the_schema():
    lines = (REPO / "refold" / "data" / "sample_events.jsonl").read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in lines if line.strip()]
    assert rows and all(VALIDATOR.is_valid(row) for row in rows)
    # and what parse_jsonl makes of them goes back to the input format the schema describes
    assert all(VALIDATOR.is_valid(event.as_input()) for event in parse_jsonl(lines))

