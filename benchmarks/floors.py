"""What a step must at least do, with plain tools: the floors the scale benchmark prints beside
each ratio target (benchmarks/scale.py), and the read that its residue scan is compared with.

Each takes a store's root folder, reads it with polars / delta-rs / pyarrow directly (not
through refold) and returns seconds (and what it counted).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path


def floor(root: Path) -> int:
    """What any merge must do: read the cached extractions' facts and sort them by
    (tenant, subject, relation, seq). Returns the number of facts sorted."""
    import polars as pl

    cache = pl.read_delta(str(root / "extractions"), columns=["seq", "facts"])
    log = pl.read_delta(str(root / "events"), columns=["seq", "tenant"])
    fact = pl.Struct({"subject": pl.String, "relation": pl.String, "object": pl.String})
    facts = (cache.filter(pl.col("facts").is_not_null() & (pl.col("facts") != "[]"))
             .with_columns(pl.col("facts").str.json_decode(pl.List(fact)))
             .explode("facts").unnest("facts")
             .join(log, on="seq", how="left")
             .sort(["tenant", "subject", "relation", "seq"]))
    return facts.height


def incremental_floor(root: Path) -> dict:
    """What any incremental fold of the new events must at least do, with plain tools and no
    merge: read the events after the state's position (a seq-pruned polars scan of the log), run
    the rules extractor on them (the fold's own input; building the events it takes is not
    counted) and commit its output to a Delta table (one append to a scratch table, as the fold
    caches its extractions). Seconds of each part and their sum (``floor_s``)."""
    import dataclasses as dc

    import polars as pl
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    import refold
    from refold.fold.extractors.rules import RulesExtractor
    from refold.storage.log.schema import table_to_events

    mem = refold.open(root)
    spec = mem.current_spec()
    since = mem.state_store(spec).tags()[-1].log_seq
    t0 = time.perf_counter()
    tail = pl.scan_delta(str(root / "events")).filter(pl.col("seq") > since).collect().to_arrow()
    read_s = time.perf_counter() - t0
    events = list(table_to_events(tail))
    t0 = time.perf_counter()
    out = RulesExtractor().extract(events, spec)
    extract_s = time.perf_counter() - t0
    rows = pa.table({"event_id": [x.event_id for x in out],
                     "facts": [json.dumps([dc.asdict(f) for f in x.facts], default=str) for x in out]})
    with tempfile.TemporaryDirectory(prefix="refold-floor-") as scratch:
        write_deltalake(scratch, rows.slice(0, 0))
        table = DeltaTable(scratch)
        t0 = time.perf_counter()
        write_deltalake(table, rows, mode="append")
        commit_s = time.perf_counter() - t0
    return {"events": len(events), "read_s": read_s, "extract_s": extract_s, "commit_s": commit_s,
            "floor_s": read_s + extract_s + commit_s}


def erase_floor(root: Path, subject_name: str) -> dict:
    """The least an erasure's state step must do, with delta-rs alone: delete the rows with
    ``subject_name`` (X) as subject from the facts table and vacuum the file that delete replaced (the issue asks
    that old versions be vacuumed), timed on a copy of the table vacuumed beforehand. It leaves
    out what a real step also does (the items of X's events, the roll-ups and entities that
    named X)."""
    from deltalake import DeltaTable

    import refold
    from refold.fold.entities import node_id

    mem = refold.open(root)
    facts = mem.state_store(mem.current_spec()).path("facts")
    subject = node_id("default", subject_name)
    with tempfile.TemporaryDirectory(prefix="refold-floor-") as scratch:
        copy = Path(scratch) / "facts"
        shutil.copytree(facts, copy)
        vacuum = {"retention_hours": 0, "enforce_retention_duration": False, "dry_run": False}
        DeltaTable(str(copy)).vacuum(**vacuum)
        t0 = time.perf_counter()
        table = DeltaTable(str(copy))
        deleted = table.delete(f"subject = '{subject}'").get("num_deleted_rows", 0)
        table.vacuum(**vacuum)
        seconds = time.perf_counter() - t0
    return {"rows": deleted, "floor_s": seconds}


def read_every_file(root: Path) -> dict:
    """Read every file under ``root`` once: its bytes, and every Parquet file decoded with pyarrow
    (every column of every row group). What a residue scan of the store cannot go below: it
    reads the same files and searches what it decodes. Seconds and the bytes read."""
    import io

    import pyarrow.parquet as pq

    started, size, files = time.perf_counter(), 0, 0
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        size, files = size + len(data), files + 1
        if path.suffix == ".parquet":
            pq.read_table(io.BytesIO(data))
    return {"seconds": time.perf_counter() - started, "bytes": size, "files": files}


def erase_rows_floor(root: Path, subjects: list[str]) -> dict:
    """The least any erasure of ``subjects`` must do, with plain deltalake: delete their events'
    rows from the log (``seq IN …``), the extraction cache and the state items table
    (``event_id IN …``), and vacuum each table (the files holding those rows, rewritten). Run on a
    copy of the store. Seconds per table, their sum (``seconds``), the events and the data files
    rewritten."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    rows = DeltaTable(str(root / "events")).to_pyarrow_table(columns=["seq", "event_id", "subjects"])
    lists = rows["subjects"].combine_chunks()
    hit = rows.take(pc.unique(pc.list_parent_indices(lists).filter(
        pc.is_in(pc.list_flatten(lists), value_set=pa.array(subjects, pa.string())))))
    seqs, ids = hit["seq"].to_pylist(), hit["event_id"].to_pylist()
    quoted = ", ".join("'" + i + "'" for i in ids)
    tables = {"log": (root / "events", f"seq IN ({', '.join(map(str, seqs))})"),
              "cache": (root / "extractions", f"event_id IN ({quoted})")}
    tables.update({f"state items {p.parent.name[:8]}": (p, f"event_id IN ({quoted})")
                   for p in sorted(root.glob("state/*/items"))})
    out: dict = {"events": len(seqs), "rewritten": 0}
    for name, (path, predicate) in tables.items():
        started = time.perf_counter()
        dt = DeltaTable(str(path))
        metrics = dt.delete(predicate)
        dt.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
        out[name] = time.perf_counter() - started
        out["rewritten"] += int(metrics.get("num_removed_files", 0))
    out["seconds"] = sum(v for k, v in out.items() if k not in ("events", "rewritten"))
    return out
