"""The reads that once folded the whole store in one process stay within bounded memory at 100k
events (issue #33 item 5): an ``as_of`` read of one subject at the position of the previous fold,
a principal's read of one subject, and a shred-mode read after a key was destroyed outside an
erasure. Each runs in a fresh process whose peak RSS is measured, and each answer is checked.
No timing is asserted (the machine is shared).

The stores hold the project's synthetic workload (``benchmarks/snapshot_workload.py``, as
``benchmarks/scale.py`` and ``benchmarks/shred_reads.py`` use it), appended in batches of 1,000
and folded with the rules extractor; one store per mode is built once for the module (the reads
write nothing, so the cases share it). About 3 minutes in all, building the stores included.

Peak RSS is ``ru_maxrss`` of the measured process, started through a small launcher process:
on Linux a process started straight from this (large) test process reports this process's
high-water mark as its own, inherited through exec.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import refold
from tests.fold_helpers import fact_event

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from snapshot_workload import append_all, events as workload  # noqa: E402

pytestmark = pytest.mark.slow

N = 100_000
SUBJECT, OTHER = "Person7", "Person8"
SECRET = "secretfondue"  # a fact about SUBJECT that only principal "hr" may read
#: the bound on a read's peak RSS (interpreter and imports included); the whole-store graph the
#: old fallback built took 1.0-1.5 GiB at this size
BOUND = int(0.8 * 2**30)

_LAUNCH = "import subprocess, sys; sys.exit(subprocess.run(sys.argv[1:]).returncode)"
_READ = """
import json, resource, sys
import refold
m = refold.open(sys.argv[1])
args = json.loads(sys.argv[2])
def rows(frame):
    return sorted(json.dumps(r, default=str, sort_keys=True) for r in frame.to_dicts())
out = {}
%s
out["rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
out["hwm"] = int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) * 1024
print(json.dumps(out))
"""


def _rows(frame) -> list[str]:
    return sorted(json.dumps(r, default=str, sort_keys=True) for r in frame.to_dicts())


def _read_in_fresh_process(root: Path, code: str, **args) -> dict:
    """Run ``code`` (``m``: the store opened afresh; ``args``; it fills ``out``) in a new process;
    what it put in ``out``, with its peak RSS (``rss``; ``hwm``: the same from /proc)."""
    done = subprocess.run([sys.executable, "-c", _LAUNCH, sys.executable, "-c", _READ % code, str(root),
                           json.dumps(args)], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _bounded(out: dict) -> None:
    print(f"peak RSS {out['rss'] / 2**30:.2f} GiB (VmHWM {out['hwm'] / 2**30:.2f} GiB)")
    assert out["rss"] < BOUND, f"peak RSS {out['rss'] / 2**30:.2f} GiB"
    assert out["hwm"] < BOUND, f"peak RSS (VmHWM) {out['hwm'] / 2**30:.2f} GiB"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A delete-mode store: N events folded, 1,000 more (SUBJECT's restricted fact among them)
    folded again. Returns (root, the log version of the first fold's position, SUBJECT's facts
    read then, SUBJECT's facts now)."""
    root = tmp_path_factory.mktemp("bounded") / "store"
    mem = refold.init(root)
    append_all(mem, list(workload(N, seed=21)))
    mem.fold()
    then_version = mem.log_store.version()
    then = _rows(mem.facts(subject=SUBJECT))
    sid = [f"s-{SUBJECT.lower()}"]
    append_all(mem, list(workload(1_000, seed=22, start=N)) + [
        fact_event(SUBJECT, "lives_in", "Reykjavik", day=400, subjects=sid),
        fact_event(SUBJECT, "likes", SECRET, day=401, subjects=sid, principals=["hr"])])
    mem.fold()
    now = _rows(mem.facts(subject=SUBJECT))
    assert then and now != then
    return root, then_version, then, now


@pytest.fixture(scope="module")
def shred_store(tmp_path_factory):
    """A shred-mode store of N events, folded, then SUBJECT's key destroyed outside an erasure
    (no receipt, no fold). Returns (root, OTHER's facts before, the organisations SUBJECT worked at)."""
    root = tmp_path_factory.mktemp("bounded-shred") / "store"
    mem = refold.init(root, mode="shred")
    # (1,000 people, so 1,000 keys: creating a key file costs an fsync or two, ~3 ms each here)
    append_all(mem, list(workload(N, seed=31, people=1_000)))
    mem.fold()
    mine = mem.facts(subject=SUBJECT)
    employers = sorted(set(mine.filter(mine["relation"] == "works_at")["object"].to_list()))
    assert mine.height and employers
    other = _rows(mem.facts(subject=OTHER))
    mem.key_store.destroy(f"s-{SUBJECT.lower()}")
    return root, other, employers


def test_an_as_of_read_of_one_subject_at_the_previous_fold_is_bounded(store):
    root, then_version, then, _ = store
    out = _read_in_fresh_process(root, 'out["rows"] = rows(m.facts(subject=args["subject"], as_of=args["as_of"]))',
                                 subject=SUBJECT, as_of=then_version)
    assert out["rows"] == then  # what a read answered at that position
    _bounded(out)


def test_a_principals_read_of_one_subject_is_bounded(store):
    root, _, _, now = store
    out = _read_in_fresh_process(root, 'out["dave"] = rows(m.facts(subject=args["subject"], principal="dave")); '
                                       'out["hr"] = rows(m.facts(subject=args["subject"], principal="hr"))',
                                 subject=SUBJECT)
    assert out["hr"] == now  # (hr may read every event about the subject)
    assert out["dave"] == [r for r in now if SECRET not in r] and len(out["dave"]) == len(now) - 1
    _bounded(out)


def test_a_shred_mode_read_after_a_key_destroyed_outside_an_erasure_is_bounded(shred_store):
    root, other, employers = shred_store
    out = _read_in_fresh_process(root, """
out["mine"] = rows(m.facts(subject=args["subject"]))
out["other"] = rows(m.facts(subject=args["other"]))
employs = [m.facts(subject=org, relation="employs") for org in args["employers"]]
out["employs"] = sum(f.height for f in employs)
out["employs_me"] = sum(f.filter(f["object"] == args["subject"]).height for f in employs)
""", subject=SUBJECT, other=OTHER, employers=employers)
    assert out["mine"] == []  # no fact of the destroyed key's owner, not even in this first read
    assert out["employs_me"] == 0 and out["employs"] > 0  # nor one derived from theirs
    assert out["other"] == other  # the other subjects' facts are untouched
    _bounded(out)
