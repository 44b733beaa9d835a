"""Append throughput of the refold log against plain Parquet files and SQLite, measured in one run.

    python benchmarks/append.py            # full run (a few minutes on 2 cores)
    python benchmarks/append.py --quick    # small counts, < 30 s; the test suite runs this

Workloads: single-event appends, and batches of 10, 100, 1k and 10k events. Every backend gets
the same pre-built, already validated events and must make each batch durable-as-configured and
visible as one unit before the next starts:

- refold: ``EventLog.append(batch)``: idempotency check, seq assignment, sealing into the hash
  chain (salt, commitment, link per event), one Parquet data file and one Delta commit through
  delta-rs (compare-and-append, see storage/datafiles.py), published head, and its share of
  checkpoints and compaction.
- parquet: build an Arrow table of the same user fields plus seq and record time, and
  ``pyarrow.parquet.write_table`` it as one new file per batch (no transaction log, no chain,
  no idempotency).
- sqlite: WAL journal, ``synchronous=NORMAL`` (no fsync per commit, like the other two), one
  transaction per batch, ``event_id`` UNIQUE as the idempotency key.

A second part measures many concurrent single-event callers in one process (threads): refold
with a commit per call (threads take turns), refold with :class:`~refold.storage.log.group.GroupCommit`
(calls that arrive while a commit is in flight share the next one), and SQLite with a connection
and a one-row transaction per call.

Each cell is the best of ``--repeat`` runs (the machine is shared and noisy). Printed ratios are
time ratios, refold / baseline (lower is better; 2.5 means refold takes 2.5× as long). For
batches, a breakdown shows where refold's time goes: sealing (header, hashing, the Arrow table),
the data file and Delta commit (delta-rs), and the rest (id index, head publication, every
100th commit's compaction). For batches of 1k and more it also prints two floors measured on
the same rows: the three SHA-256 per event alone, over prebuilt inputs, with hashlib, and
pyarrow writing refold's 23-column rows to a bare Parquet file (what the data file costs before
any commit).

A third part compares the erasure modes: the same events of the scale workload
(``snapshot_workload.events``: about one data subject per 10 events) appended through
``Memory.append`` in batches of 1,000 to a delete-mode store and to a shred-mode store (file key
store), interleaved, median of ``--repeat`` runs. Shred mode's extra cost is making each new
subject's key durable (two small files fsync'd, a batch's files together), fetching the batch's
keys in one key-store call, and one HKDF, AES-GCM and base64 per event; ``--shred-only`` runs
this part alone (``--shred-events`` events, default 100,000).

The append floors (printed as met or MISSED, never asserted by the tests; see
docs/benchmarks.md): a 1k-event batch within :data:`TARGET` × plain Parquet; the median
single-event append at most :data:`SINGLE_MEDIAN_MS`; group commit from 8 threads at least
:data:`GROUP_EVENTS_PER_S`; shred-mode appends at most :data:`SHRED_TARGET` × delete mode's.
"""

from __future__ import annotations

import argparse
import functools
import gc
import hashlib
import json
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

import refold
from refold.fold.chain import DOMAIN, GENESIS, header_bytes
from refold.fold.events import NewEvent
from refold.storage.log.group import GroupCommit
from refold.storage.log.schema import table_to_events
from refold.storage.log.sealing import seal_rows

sys.path.insert(0, str(Path(__file__).resolve().parent))

from snapshot_workload import append_all  # noqa: E402
from snapshot_workload import timed as timed_run  # noqa: E402
from snapshot_workload import events as workload  # noqa: E402

TARGET = 2.5  # refold time / plain Parquet time at >= 1k events per batch
SINGLE_MEDIAN_MS = 30.0  # median single-event append on a local store
GROUP_EVENTS_PER_S = 500.0  # 8 threads appending single events through group commit
SHRED_TARGET = 3.0  # shred-mode append time / delete-mode append time, same events

BASE_SCHEMA = pa.schema([
    ("seq", pa.int64()), ("event_id", pa.string()), ("recorded_at", pa.timestamp("us", tz="UTC")),
    ("kind", pa.string()), ("tenant", pa.string()), ("source", pa.string()),
    ("content", pa.string()), ("subjects", pa.list_(pa.string())),
    ("principals", pa.list_(pa.string())), ("trace_id", pa.string()),
    ("justification", pa.string()), ("valid_from", pa.timestamp("us", tz="UTC")),
    ("valid_to", pa.timestamp("us", tz="UTC")), ("ingestion_run", pa.string()),
    ("fact", pa.string()),
])


def make_events(n: int, tag: str) -> list[NewEvent]:
    """Chat-like events (~150 bytes of content, a subject, a trace id)."""
    return [
        NewEvent(
            kind="chat_turn", source=f"chat#{i // 20}", subjects=(f"subj-{i % 97}",),
            trace_id=f"trace-{i // 5}", ingestion_run=f"bench-{tag}",
            content=(f"turn {i}: the user mentioned that their sister moved to Lyon last spring "
                     f"and that they will visit her in June; note {i * 7919 % 10007}"),
        )
        for i in range(n)
    ]


def _fact(e: NewEvent):
    return None if e.fact is None else json.dumps(e.fact.as_dict(), sort_keys=True)


# -- backends ------------------------------------------------------------------------------------


def timed(fn, add):
    """``fn`` wrapped so that each call's seconds go to ``add(seconds)``."""
    def wrapper(*args, **kwargs):
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            add(time.perf_counter() - t)

    return wrapper


class Refold:
    name = "refold"

    def __init__(self, root: Path):
        self.log = refold.init(root).log_store
        self.seal_s = self.write_s = 0.0
        self.calls: list[float] = []  # seconds of each append
        self.log._seal_table = timed(self.log._seal_table, self._add_seal)
        self.log._write = timed(self.log._write, self._add_write)

    def _add_seal(self, seconds: float) -> None:
        self.seal_s += seconds

    def _add_write(self, seconds: float) -> None:
        self.write_s += seconds

    def append(self, batch: list[NewEvent]) -> None:
        start = time.perf_counter()
        self.log.append(batch)
        self.calls.append(time.perf_counter() - start)

    def close(self) -> None:
        pass


class Parquet:
    name = "parquet"

    def __init__(self, root: Path):
        self.root = root
        root.mkdir(parents=True)
        self.seq = 0
        self.files = 0

    def append(self, batch: list[NewEvent]) -> None:
        now = datetime.now(timezone.utc)
        n = len(batch)
        columns = {
            "seq": range(self.seq, self.seq + n), "recorded_at": [now] * n,
            "fact": [_fact(e) for e in batch],
        }
        for name in BASE_SCHEMA.names:
            if name not in columns:
                columns[name] = [getattr(e, name) for e in batch]
        table = pa.table([pa.array(columns[f.name], f.type) for f in BASE_SCHEMA], schema=BASE_SCHEMA)
        pq.write_table(table, self.root / f"part-{self.files:06d}.parquet")
        self.seq += n
        self.files += 1

    def close(self) -> None:
        pass


class SQLite:
    name = "sqlite"

    def __init__(self, root: Path):
        root.mkdir(parents=True)
        self.db = sqlite3.connect(root / "events.db", isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute(
            "CREATE TABLE events (seq INTEGER PRIMARY KEY, event_id TEXT UNIQUE NOT NULL, "
            "recorded_at TEXT, kind TEXT, tenant TEXT, source TEXT, content TEXT, subjects TEXT, "
            "principals TEXT, trace_id TEXT, justification TEXT, valid_from TEXT, valid_to TEXT, "
            "ingestion_run TEXT, fact TEXT)"
        )
        self.seq = 0

    def append(self, batch: list[NewEvent]) -> None:
        now = datetime.now(timezone.utc).isoformat()
        rows = [
            (self.seq + i, e.event_id, now, e.kind, e.tenant, e.source, e.content,
             json.dumps(e.subjects), json.dumps(e.principals), e.trace_id, e.justification,
             e.valid_from and e.valid_from.isoformat(), e.valid_to and e.valid_to.isoformat(),
             e.ingestion_run, _fact(e))
            for i, e in enumerate(batch)
        ]
        self.db.execute("BEGIN")
        self.db.executemany("INSERT INTO events VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
        self.db.execute("COMMIT")
        self.seq += len(batch)

    def close(self) -> None:
        self.db.close()


BACKENDS = (Refold, Parquet, SQLite)


# -- running ---------------------------------------------------------------------------------------


def run_one(cls, root: Path, batches: list[list[NewEvent]]) -> tuple[float, object]:
    backend = cls(root)
    try:
        start = time.perf_counter()
        for batch in batches:
            backend.append(batch)
        return time.perf_counter() - start, backend
    finally:
        backend.close()


def measure(workdir: Path, label: str, size: int, count: int, repeat: int) -> dict:
    """Best-of-``repeat`` seconds per backend for ``count`` batches of ``size`` events."""
    best: dict[str, float] = {}
    breakdown = (0.0, 0.0)
    calls: list[float] = []  # refold's per-append seconds, every run
    for r in range(repeat):
        for cls in BACKENDS:  # interleaved, so a noisy moment hits every backend alike
            events = make_events(size * count, f"{label}-{r}-{cls.name}")
            batches = [events[i:i + size] for i in range(0, len(events), size)]
            root = workdir / f"{label}-{r}-{cls.name}"
            seconds, backend = run_one(cls, root, batches)
            if seconds < best.get(cls.name, float("inf")):
                best[cls.name] = seconds
                if cls is Refold:
                    breakdown = (backend.seal_s, backend.write_s)
            if cls is Refold:
                calls += backend.calls
            shutil.rmtree(root, ignore_errors=True)
    floor = floors(workdir, make_events(size, f"{label}-floor"), repeat) if size >= 1000 else None
    return {"label": label, "size": size, "count": count, "seconds": best, "breakdown": breakdown,
            "floor": floor, "median": statistics.median(calls)}


def floors(workdir: Path, batch: list[NewEvent], repeat: int) -> tuple[float, float]:
    """Best-of seconds for (the 3 SHA-256 per event with hashlib, pyarrow writing the sealed rows)."""
    table, _ = seal_rows(batch, first_seq=0, prev_link=GENESIS, recorded_at=datetime.now(timezone.utc),
                         table_version=1)
    rows = list(table_to_events(table))
    sha = hashlib.sha256
    content_in = [bytes.fromhex(e.salt) + e.content.encode() for e in rows]
    commit_in = [DOMAIN + header_bytes(e) + sha(x).digest() for e, x in zip(rows, content_in)]
    commitments = [bytes.fromhex(e.commitment) for e in rows]
    hashing = writing = float("inf")
    for r in range(max(repeat, 3)):
        start = time.perf_counter()
        [sha(x).digest() for x in content_in]  # noqa: B018 - timed for its cost
        [sha(x).digest() for x in commit_in]  # noqa: B018
        prev = bytes(32)
        for c in commitments:
            prev = sha(prev + c).digest()
        hashing = min(hashing, time.perf_counter() - start)
        start = time.perf_counter()
        pq.write_table(table, workdir / f"floor-{r}.parquet")
        writing = min(writing, time.perf_counter() - start)
        (workdir / f"floor-{r}.parquet").unlink()
    return hashing, writing


def _threads(n: int, per: int, call) -> float:
    """Seconds for ``n`` threads to make ``per`` calls each (started together)."""
    start = threading.Barrier(n + 1)
    errors: list[BaseException] = []

    def run(t: int) -> None:
        start.wait()
        try:
            for i in range(per):
                call(t, i)
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(n)]
    for th in threads:
        th.start()
    start.wait()
    t0 = time.perf_counter()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - t0


def measure_concurrent(workdir: Path, n: int, per: int, repeat: int) -> dict:
    """Best-of seconds for ``n`` threads × ``per`` single-event appends, per way of appending."""
    best: dict[str, float] = {}
    commits = 0
    for r in range(repeat):
        events = {k: make_events(n * per, f"conc-{r}-{k}") for k in ("refold", "group", "sqlite")}
        root = workdir / f"conc-{r}"
        log = refold.init(root / "refold").log_store
        seconds = {"refold": _threads(n, per, lambda t, i: log.append([events["refold"][t * per + i]]))}
        glog = refold.init(root / "group").log_store
        group = GroupCommit(glog)
        seconds["group"] = _threads(n, per, lambda t, i: group.append([events["group"][t * per + i]]))
        db_path = root / "sqlite.db"
        # WAL mode and the table are set up before the threads start: eight connections switching
        # a fresh file to WAL at once can fail with "database is locked" (no busy wait there)
        setup = sqlite3.connect(db_path, isolation_level=None)
        setup.execute("PRAGMA journal_mode=WAL")
        setup.execute("CREATE TABLE events (seq INTEGER PRIMARY KEY, event_id TEXT UNIQUE NOT NULL, "
                      "recorded_at TEXT, content TEXT)")
        setup.close()
        local = threading.local()

        def sqlite_call(t: int, i: int) -> None:
            db = getattr(local, "db", None)
            if db is None:
                db = local.db = sqlite3.connect(db_path, isolation_level=None, timeout=60)
                db.execute("PRAGMA synchronous=NORMAL")  # per connection; WAL mode is in the file
            e = events["sqlite"][t * per + i]
            db.execute("BEGIN IMMEDIATE")
            db.execute("INSERT INTO events (event_id, recorded_at, content) VALUES (?,?,?)",
                       (e.event_id, datetime.now(timezone.utc).isoformat(), e.content))
            db.execute("COMMIT")

        seconds["sqlite"] = _threads(n, per, sqlite_call)
        for name, value in seconds.items():
            if value < best.get(name, float("inf")):
                best[name] = value
                if name == "group":
                    commits = group.commits
        shutil.rmtree(root, ignore_errors=True)
    return {"threads": n, "per": per, "seconds": best, "commits": commits}


def measure_shred(workdir: Path, n: int, repeat: int) -> dict:
    """Seconds per run of appending ``n`` workload events in batches of 1,000, per erasure mode
    (the modes take turns, and which goes first alternates, so a noisy moment hits both); each
    also carries the process's CPU seconds (``.cpu``)."""
    seconds: dict[str, list] = {"delete": [], "shred": []}
    keys = 0
    for r in range(repeat):
        batch = list(workload(n, seed=r))
        for mode in ("delete", "shred") if r % 2 == 0 else ("shred", "delete"):
            root = workdir / f"modes-{r}-{mode}"
            mem = refold.init(root, mode=mode)
            gc.collect()  # the runs before leave garbage; collect it outside the timed part
            took, _ = timed_run(functools.partial(append_all, mem, batch, size=1000))
            seconds[mode].append(took)
            if mode == "shred":
                keys = len(os.listdir(root / "keys" / "ids"))
            # (the stores stay until the end: unlinking 20,000 key files between runs would load
            # the file system's journal that the next run's fsyncs wait on)
    return {"events": n, "seconds": seconds, "keys": keys}


def report_shred(res: dict) -> bool:
    s = res["seconds"]
    delete, shred = statistics.median(s["delete"]), statistics.median(s["shred"])
    per_run = statistics.median(b / a for a, b in zip(s["delete"], s["shred"]))
    cpu = statistics.median(x.cpu for x in s["shred"]) / statistics.median(x.cpu for x in s["delete"])
    print()
    print(f"erasure modes: {res['events']:,} workload events appended in batches of 1,000 "
          f"(Memory.append), median of {len(s['delete'])} interleaved runs:")
    print(f"  delete mode  {delete:8.2f} s   runs {', '.join(f'{x:.2f}' for x in s['delete'])}")
    print(f"  shred mode   {shred:8.2f} s   runs {', '.join(f'{x:.2f}' for x in s['shred'])}"
          f"   ({res['keys']:,} subject keys made)")
    ok = shred / delete <= SHRED_TARGET
    print(f"ratio shred/delete append: {shred / delete:.2f}x, per run (median) {per_run:.2f}x"
          f"  (target <= {SHRED_TARGET:.0f}x: {'met' if ok else 'MISSED'}); CPU time {cpu:.2f}x")
    return ok


def report(results: list[dict]) -> bool:
    print()
    print(f"{'workload':<12}{'events':>8}  {'refold ev/s':>12}{'parquet ev/s':>14}{'sqlite ev/s':>13}"
          f"  {'refold/parquet':>15}{'refold/sqlite':>14}")
    for res in results:
        n = res["size"] * res["count"]
        s = res["seconds"]
        print(f"{res['label']:<12}{n:>8}  {n / s['refold']:>12,.0f}{n / s['parquet']:>14,.0f}"
              f"{n / s['sqlite']:>13,.0f}  {s['refold'] / s['parquet']:>14.2f}x"
              f"{s['refold'] / s['sqlite']:>13.2f}x")
    print()
    print("refold time per batch, where it goes (best run):")
    for res in results:
        seal, write = res["breakdown"]
        total = res["seconds"]["refold"]
        per = 1000 / res["count"]
        print(f"  {res['label']:<12} {total * per:8.2f} ms/batch (median {res['median'] * 1000:7.2f})"
              f" = seal {seal * per:7.2f} + data file and delta-rs commit {write * per:7.2f}"
              f" + other {(total - seal - write) * per:7.2f}")
        if res["floor"]:
            hashing, writing = res["floor"]
            print(f"  {'':<12} floors: SHA-256 x3 per event alone {hashing * 1000:7.2f} ms with hashlib;"
                  f" pyarrow writing the same 23-column rows {writing * 1000:7.2f} ms (no commit)")
    print()
    met = True
    for res in results:
        s = res["seconds"]
        to_parquet, to_sqlite = s["refold"] / s["parquet"], s["refold"] / s["sqlite"]
        note = ""
        if res["size"] >= 1000:
            ok = to_parquet <= TARGET
            met &= ok
            note = f"  (target <= {TARGET}x: {'met' if ok else 'MISSED'})"
        print(f"ratio refold/parquet {res['label']}: {to_parquet:.2f}x{note}")
        print(f"ratio refold/sqlite {res['label']}: {to_sqlite:.2f}x")
    for res in results:
        if res["size"] == 1:
            median = res["median"] * 1000
            ok = median <= SINGLE_MEDIAN_MS
            met &= ok
            print(f"floor single-event append median: {median:.2f} ms"
                  f"  (floor <= {SINGLE_MEDIAN_MS:.0f} ms: {'met' if ok else 'MISSED'})")
    return met


def report_concurrent(res: dict) -> None:
    n, per, s = res["threads"], res["per"], res["seconds"]
    total = n * per
    label = f"{n}threads"
    print()
    print(f"{n} threads x {per} single-event appends ({total} events, one process):")
    print(f"  refold, a commit per call      {total / s['refold']:>10,.0f} events/s")
    print(f"  refold, group commit           {total / s['group']:>10,.0f} events/s"
          f"  ({res['commits']} commits, {total / max(res['commits'], 1):.1f} events per commit)")
    print(f"  sqlite, a transaction per call {total / s['sqlite']:>10,.0f} events/s")
    print(f"ratio refold/sqlite {label}: {s['refold'] / s['sqlite']:.2f}x")
    print(f"ratio refold-group/sqlite {label}: {s['group'] / s['sqlite']:.2f}x")
    print(f"ratio refold-group/refold {label}: {s['group'] / s['refold']:.2f}x")
    rate = total / s["group"]
    print(f"floor group commit {label}: {rate:,.0f} events/s"
          f"  (floor >= {GROUP_EVENTS_PER_S:.0f} events/s with 8 threads: {'met' if rate >= GROUP_EVENTS_PER_S else 'MISSED'})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small counts (< 30 s), for the test suite")
    parser.add_argument("--repeat", type=int, default=None, help="runs per cell; the best is kept")
    parser.add_argument("--dir", type=Path, default=None, help="work folder (default: a temp folder)")
    parser.add_argument("--shred-events", type=int, default=None,
                        help="events per run of the erasure-mode comparison (default 100,000; quick 2,000)")
    parser.add_argument("--shred-only", action="store_true", help="run only the erasure-mode comparison")
    args = parser.parse_args(argv)
    shred_events = args.shred_events or (2_000 if args.quick else 100_000)
    if args.quick:
        plan = [("single", 1, 20), ("batch=10", 10, 10), ("batch=100", 100, 5),
                ("batch=1k", 1000, 3), ("batch=10k", 10_000, 1)]
        threads, per = 8, 4
        repeat = args.repeat or 1
    else:
        plan = [("single", 1, 300), ("batch=10", 10, 100), ("batch=100", 100, 40),
                ("batch=1k", 1000, 20), ("batch=10k", 10_000, 5)]
        threads, per = 8, 40
        repeat = args.repeat or 3
    workdir = Path(tempfile.mkdtemp(prefix="refold-bench-", dir=args.dir))
    try:
        print(f"append benchmark ({'quick' if args.quick else 'full'}, "
              f"{'median' if args.shred_only else 'best'} of {repeat}); "
              f"python {sys.version.split()[0]}, sqlite {sqlite3.sqlite_version}, pyarrow {pa.__version__}")
        if args.shred_only:
            report_shred(measure_shred(workdir, shred_events, repeat))
            return 0
        results = []
        for label, size, count in plan:
            results.append(measure(workdir, label, size, count, repeat))
            print(f"  measured {label}", flush=True)
        concurrent = measure_concurrent(workdir, threads, per, repeat)
        print(f"  measured {threads} threads", flush=True)
        modes = measure_shred(workdir, shred_events, repeat)
        print("  measured erasure modes", flush=True)
        report(results)
        report_concurrent(concurrent)
        report_shred(modes)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
