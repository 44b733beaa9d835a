"""The residue scanner finds needles however they are stored: compressed Parquet pages, JSON,
base64, UTF-16, compressed streams; and reports file and location."""

from __future__ import annotations

import base64
import bz2
import gzip
import json
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from refold.fold.errors import ValidationError
from refold.erasure.scan import scan, scan_report

NEEDLE = "Quillon Varga"


def _table(values: list[str]) -> pa.Table:
    return pa.table({"seq": list(range(len(values))), "content": values,
                     "tags": [["x", v.split()[0]] for v in values]})


def _rows(n: int = 40, at: int = 17, text: str = f"hello {NEEDLE} here") -> list[str]:
    rnd = random.Random(7)
    words = ["alpha", "brick", "cobalt", "delta", "ember", "fjord", "garnet", "harbor", "indigo", "onyx"]
    filler = [" ".join(rnd.choice(words) + str(rnd.randint(0, 999)) for _ in range(30)) for _ in range(n)]
    return [(text + " " if i == at else "") + f for i, f in enumerate(filler)]


@pytest.mark.parametrize("codec", ["zstd", "snappy", "gzip", "brotli", "lz4"])
def test_compressed_parquet_pages_are_decoded(tmp_path, codec):
    path = tmp_path / f"data.{codec}.parquet"
    pq.write_table(_table(_rows()), path, compression=codec, write_statistics=False, use_dictionary=False)
    if codec in ("zstd", "gzip", "brotli"):
        # entropy-coded pages: the needle is not in the raw bytes, only decoding the pages finds it
        assert NEEDLE.encode() not in path.read_bytes()
    hits = scan(tmp_path, [NEEDLE.lower()])
    assert "row group 0, column content, row 17" in {h.location for h in hits}
    assert all(h.file == path.name and h.needle == NEEDLE.lower() for h in hits)


def test_nested_list_columns_and_row_groups_are_located(tmp_path):
    values = _rows(8, at=6, text="Zorblax met someone")
    pq.write_table(_table(values), tmp_path / "d.parquet", compression="zstd", row_group_size=4,
                   write_statistics=False)
    locations = {h.location for h in scan(tmp_path, ["zorblax"])}
    assert "row group 1, column content, row 2" in locations
    assert "row group 1, column tags[], row 2" in locations
    assert not any("row group 0" in loc for loc in locations)


def test_parquet_statistics_are_reported(tmp_path):
    pq.write_table(pa.table({"name": ["Aaron Quillon", "zz"]}), tmp_path / "s.parquet", compression="zstd")
    locations = {h.location for h in scan(tmp_path, ["aaron quillon"])}
    assert "row group 0, column name, statistics min" in locations


def test_delta_style_json_with_nested_stats_and_escapes(tmp_path):
    log = tmp_path / "_delta_log"
    log.mkdir()
    stats = json.dumps({"numRecords": 2, "minValues": {"content": "Zoë Quark"}})  # ensure_ascii escapes ë
    commit = [{"commitInfo": {"operation": "WRITE"}}, {"add": {"path": "part-0.parquet", "stats": stats}}]
    (log / "00000000000000000001.json").write_text("\n".join(json.dumps(a) for a in commit) + "\n")
    assert "Zoë".encode() not in (log / "00000000000000000001.json").read_bytes()
    hits = scan(tmp_path, ["zoë quark"])
    assert [h.location for h in hits] == ["line 2, JSON path add.stats → JSON path minValues.content"]
    assert hits[0].file == "_delta_log/00000000000000000001.json"


def test_base64_inside_json_and_parquet_values(tmp_path):
    secret = base64.b64encode(f"payload about {NEEDLE}, nothing else".encode()).decode()
    (tmp_path / "meta.json").write_text(json.dumps({"blob": secret}))
    pq.write_table(pa.table({"b": ["plain", f"data:{secret}"]}), tmp_path / "b.parquet", compression="snappy")
    hits = scan(tmp_path, [NEEDLE])
    files = {h.file for h in hits}
    assert files == {"meta.json", "b.parquet"}
    assert any(h.location.startswith("JSON path blob, base64") for h in hits)
    assert any(h.location.startswith("row group 0, column b, row 1, base64") for h in hits)


def test_an_encoded_value_repeated_over_rows_is_reported_at_every_row_and_hex_values_at_none(tmp_path):
    """A value held by many rows (as node ids are in the state tables) is decoded once, and its
    hit is still reported at each row that holds it, with the location inside the value; values
    that are hex and nothing else (hashes, salts) decode to noise and report nothing."""
    secret = base64.b64encode(f"payload about {NEEDLE}".encode()).decode()
    values = [f"data:{secret}" if i % 3 == 0 else "0123456789abcdef0123456789abcdef" for i in range(30)]
    pq.write_table(pa.table({"v": values, "q": [json.dumps({"x": secret})] * 30}), tmp_path / "r.parquet")
    hits = scan(tmp_path, [NEEDLE])
    rows = sorted({int(h.location.split(", row ")[1].split(",")[0]) for h in hits
                   if h.location.startswith("row group 0, column v, row ")})
    assert rows == list(range(0, 30, 3))
    assert all(", base64 at char 5 → byte offset" in h.location for h in hits
               if h.location.startswith("row group 0, column v, row "))
    quoted = {h.location for h in hits if h.location.startswith("row group 0, column q, row ")}
    assert len(quoted) == 30 and all("→ JSON path x, base64 at char 0" in loc for loc in quoted), sorted(quoted)[:3]


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-32-le"])
def test_utf16_and_utf32_text(tmp_path, encoding):
    (tmp_path / "notes.bin").write_bytes(b"\x00\x01" + f"xx {NEEDLE.upper()} yy".encode(encoding))
    hits = scan(tmp_path, [NEEDLE])
    assert hits and all("byte offset" in h.location and "utf-" in h.location for h in hits)


def test_compressed_streams(tmp_path):
    text = json.dumps({"note": f"{NEEDLE} was here"}).encode()
    (tmp_path / "a.json.gz").write_bytes(gzip.compress(text))
    (tmp_path / "b.zst").write_bytes(pa.compress(text, codec="zstd", asbytes=True))
    (tmp_path / "c.bz2").write_bytes(bz2.compress(text))
    raw = pa.compress(text, codec="snappy", asbytes=True)
    chunk = b"\x00\x00\x00\x00" + raw  # masked CRC (not checked by the scanner) + raw snappy
    framed = b"\xff\x06\x00\x00sNaPpY" + b"\x00" + len(chunk).to_bytes(3, "little") + chunk
    (tmp_path / "d.sz").write_bytes(framed)
    hits = scan(tmp_path, [NEEDLE.lower()])
    by_file = {h.file: h.location for h in hits}
    assert set(by_file) == {"a.json.gz", "b.zst", "c.bz2", "d.sz"}
    assert by_file["a.json.gz"].startswith("gzip stream, ")
    assert by_file["b.zst"].startswith("zstd stream, ")


def test_case_insensitive_raw_bytes_and_no_false_hits(tmp_path):
    (tmp_path / "k.bin").write_bytes(b"\x00\x17quillon VARGA\xff")
    (tmp_path / "other.txt").write_text("nothing to see")
    hits = scan(tmp_path, [NEEDLE])
    assert [(h.file, h.location) for h in hits] == [("k.bin", "byte offset 2 (utf-8)")]
    report = scan_report(tmp_path, ["absent-needle-xyz"])
    assert report.hits == () and report.files == 2 and report.clean


def test_hidden_files_and_subfolders_are_scanned(tmp_path):
    (tmp_path / ".hidden" / "deep").mkdir(parents=True)
    (tmp_path / ".hidden" / "deep" / ".tmp-x.json").write_text(json.dumps([NEEDLE]))
    assert {h.file for h in scan(tmp_path, [NEEDLE])} == {".hidden/deep/.tmp-x.json"}


def test_receipt_form_hides_needles(tmp_path):
    (tmp_path / "f.txt").write_text(NEEDLE)
    out = scan_report(tmp_path, ["nope", NEEDLE]).as_json(include_needles=False)
    assert NEEDLE not in json.dumps(out)
    assert out["hits"][0]["needle_index"] == 1


def test_needles_are_required(tmp_path):
    with pytest.raises(ValidationError):
        scan(tmp_path, [])
    with pytest.raises(ValidationError):
        scan(tmp_path, ["  "])


def test_map_columns_like_delta_partition_values(tmp_path):
    maps = pa.array([[("k", "v")], None, [("x", "y"), ("owner", f"{NEEDLE}")]], pa.map_(pa.string(), pa.string()))
    pq.write_table(pa.table({"partitionValues": maps}), tmp_path / "cp.parquet", compression="zstd")
    locations = {h.location for h in scan(tmp_path, [NEEDLE])}
    assert "row group 0, column partitionValues[].value, row 2" in locations


def test_names_match_whole_words_only(tmp_path):
    """'Tim' is not in 'timestamp', 'createdTime' or 'sometimes', however they are stored."""
    (tmp_path / "commit.json").write_text(json.dumps({"add": {"modificationTime": 1, "stats": json.dumps(
        {"minValues": {"timestamp": "sometimes"}})}, "createdTime": "untimely"}))
    pq.write_table(pa.table({"timestamp": ["time flies", "Timothy"], "b": [b"TIMESTAMP", b"xtim"]}),
                   tmp_path / "p.parquet", compression="zstd")
    (tmp_path / "u.bin").write_bytes("timestamps, optimism".encode("utf-16-le"))
    (tmp_path / "g.gz").write_bytes(gzip.compress(b"showtime at ten"))
    assert scan(tmp_path, ["Tim"]) == []


@pytest.mark.parametrize("text", ["we met tim, yesterday", "Tim's bike", "TIM", "ask Tim.", "(tim)"])
def test_names_are_found_as_words_in_every_form(tmp_path, text):
    pq.write_table(pa.table({"content": ["time flies", text]}), tmp_path / "p.parquet", compression="zstd",
                   write_statistics=False)
    (tmp_path / "n.json").write_text(json.dumps({"note": text}))
    (tmp_path / "u.bin").write_bytes(b"\x00\xff" + f"x {text} y".encode("utf-16-be"))
    files = {h.file for h in scan(tmp_path, ["Tim"])}
    assert files == {"p.parquet", "n.json", "u.bin"}


def test_canaries_match_inside_words(tmp_path):
    pq.write_table(pa.table({"content": ["likes zephyrmarmalade07 a lot"]}), tmp_path / "p.parquet",
                   compression="zstd")
    assert scan(tmp_path, ["marmalade"]) == []  # a name: not a word of its own here
    hits = scan(tmp_path, canaries=["MARMALADE"])
    assert {h.location for h in hits} >= {"row group 0, column content, row 0"}
    report = scan_report(tmp_path, ["zephyr"], canaries=["marmalade"])
    assert report.needles == ("zephyr", "marmalade") and {h.needle for h in report.hits} == {"marmalade"}


def test_memory_scan_takes_names_and_canaries(tmp_path):
    import refold

    mem = refold.init(tmp_path / "store")
    mem.append([{"kind": "observation", "content": "Timothy sold zephyrmarmalade", "source": "s"}])
    assert mem.scan(["Tim"]).hits == ()  # Delta's timestamp fields and "Timothy" are not Tim
    assert {h.needle for h in mem.scan(["Timothy"], canaries=["marmalade"]).hits} == {"Timothy", "marmalade"}
