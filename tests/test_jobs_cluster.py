"""The jobs submitted to a real local Ray head node with ``ray job submit --working-dir .``.

One head node for the module (``ray start --head --block`` on 127.0.0.1, free ports, its own temp
dir, ``RAY_AUTH_MODE=disabled``: Ray 2.60 turns token authentication on whenever a token exists
in ~/.ray, and the loopback test cluster needs none). Teardown stops exactly the processes this
test started (the ``ray start`` process group), never every Ray on the machine as ``ray stop``
would. Four submits: an interrupted projection, the same projection again, a full refold, and an
erasure backfill in which one subject fails.

Every submit passes ``--working-dir .`` (the checkout), and the job runs ``python -m refold.jobs.…``
in the folder Ray unpacked it to: ``python -m`` puts that folder first on ``sys.path``, so the
layout that Ray uploaded (refold/ with its subpackages; ``.rayignore`` leaves out the top-level
symlinks, which Ray would follow and copy) is the code that runs, not an installed copy.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import polars as pl
import pytest

import refold
from refold import erasing
from refold.fold.spec import FoldSpec
from refold.storage.cache import ExtractionCache
from refold.storage.layout import Layout

pytestmark = [pytest.mark.ray, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
RAY = str(VENV_BIN / "ray")
N_EVENTS = 400
_PEOPLE = ("Ana", "Ben", "Chloe", "Dev", "Eli")
_CITIES = ("Lisbon", "Porto", "Berlin", "Oslo", "Quito")


@dataclass(frozen=True)
class Head:
    address: str  # the job API (dashboard) URL
    env: dict
    temp: Path  # the node's --temp-dir

    def working_dirs(self) -> list[Path]:
        """The working dirs this node unpacked for submitted jobs (one per distinct upload)."""
        files = self.temp / "session_latest" / "runtime_resources" / "working_dir_files"
        return sorted(p for p in files.glob("_ray_pkg_*") if p.is_dir())  # not the downloaded zips


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _stop_group(proc: subprocess.Popen, timeout: float = 10) -> None:
    """SIGTERM the `ray start --block` process (it shuts its node down), then SIGKILL its group."""
    pgid = proc.pid  # start_new_session=True: the group is ours alone
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


@pytest.fixture(scope="module")
def head():
    import ray

    if ray.is_initialized():  # one Ray runtime at a time on this machine
        ray.shutdown()
    gcs, dash, client, agent, agent_grpc, env_agent, metrics, node_mgr, obj_mgr = _free_ports(9)
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}",
           "RAY_USAGE_STATS_ENABLED": "0"}
    temp = tempfile.mkdtemp(prefix="rj", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    log = open(Path(temp) / "ray-start.log", "w")
    proc = subprocess.Popen(
        [RAY, "start", "--head", "--block", "--node-ip-address", "127.0.0.1", "--port", str(gcs),
         "--num-cpus", "2", "--include-dashboard", "true", "--dashboard-host", "127.0.0.1",
         "--dashboard-port", str(dash), "--ray-client-server-port", str(client),
         "--dashboard-agent-listen-port", str(agent), "--dashboard-agent-grpc-port", str(agent_grpc),
         "--runtime-env-agent-port", str(env_agent), "--metrics-export-port", str(metrics),
         "--node-manager-port", str(node_mgr), "--object-manager-port", str(obj_mgr),
         "--temp-dir", temp, "--disable-usage-stats"],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, (Path(temp) / "ray-start.log").read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{dash}/api/version", timeout=2):
                    break
            except OSError:
                assert time.monotonic() < deadline, "the head node's dashboard never came up"
                time.sleep(0.5)
        yield Head(address=f"http://127.0.0.1:{dash}", env=env, temp=Path(temp))
    finally:
        _stop_group(proc)
        log.close()
        shutil.rmtree(temp, ignore_errors=True)


def _ray(head: Head, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([RAY, *args], env=head.env, cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


def _submit(head: Head, module: str, *args: str, wait: bool = True,
            submission_id: str | None = None) -> subprocess.CompletedProcess:
    cmd = ["job", "submit", "--address", head.address, "--working-dir", "."]
    if not wait:
        cmd.append("--no-wait")
    if submission_id:
        cmd += ["--submission-id", submission_id]
    return _ray(head, *cmd, "--", "python", "-m", module, *args)


def _api(head: Head, path: str, *, post: bool = False) -> dict:
    """The job REST API that `ray job stop/status` call (without a CLI start-up per call, which
    takes seconds on a loaded 2-core machine: the stop would land after the job finished)."""
    request = urllib.request.Request(f"{head.address}{path}", method="POST" if post else "GET")
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read() or b"{}")


def _summary(done: subprocess.CompletedProcess) -> dict:
    """The job's JSON summary line out of `ray job submit`'s output (the driver's log)."""
    for line in reversed(done.stdout.splitlines()):
        line = line.strip()
        if line.startswith("{") and '"job"' in line:
            return json.loads(line)
    raise AssertionError(f"no JSON summary in the job output:\n{done.stdout[-4000:]}\n{done.stderr[-2000:]}")


def _events() -> list[dict]:
    start = datetime(2024, 1, 1, tzinfo=timezone.utc)
    return [{"kind": "chat_turn", "source": f"chat#{i}", "event_id": f"ev-{i:04d}",
             "content": f"{_PEOPLE[i % 5]}: I live in {_CITIES[(i // 5) % 5]}.",
             "subjects": [f"s-{_PEOPLE[i % 5].lower()}"],
             "valid_from": (start + timedelta(days=i)).isoformat()} for i in range(N_EVENTS)]


def _rows(path: Path) -> int:
    return len(ExtractionCache(Layout(str(path))).keys(FoldSpec().hash))


def _facts(mem) -> pl.DataFrame:
    return mem.facts().sort("fact_id")


def _assert_uploaded_layout(head: Head) -> None:
    """What the jobs ran: refold/ with every module of its subpackages, once; no top-level
    symlinked copies (.rayignore), no virtualenv or VCS folder (Ray's default excludes)."""
    unpacked = head.working_dirs()
    assert unpacked, f"no working dir under {head.temp}"
    expected = {f"refold/{p.relative_to(REPO / 'refold').as_posix()}"
                for layer in ("fold", "fold/extractors", "storage", "jobs", "extractors", "cli")
                for p in (REPO / "refold" / layer).glob("*.py")}
    for folder in unpacked:
        names = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
        assert expected <= names, sorted(expected - names)
        unwanted = {name.split("/")[0] for name in names} & {"fold", "storage", "jobs", ".venv", ".git"}
        assert not unwanted, sorted(unwanted)


def test_jobs_on_a_head_node(head, tmp_path):
    store = tmp_path / "store"  # absolute: the job runs in a copy of the working dir
    mem = refold.init(store)
    mem.append(_events())
    erasing.register_subject(mem, "s-ana", "Ana")
    reference = refold.init(tmp_path / "reference")
    reference.append(_events())
    reference.fold()

    # 1. a projection stopped part-way through its extraction
    job_id = f"refold-project-{os.getpid()}-{time.monotonic_ns()}"
    started = _submit(head, "refold.jobs.project", str(store), "--batch-size", "4", "--flush-events", "8",
                      "--no-progress", wait=False, submission_id=job_id)
    assert started.returncode == 0, started.stderr[-3000:]
    deadline = time.monotonic() + 240
    while _rows(store) < 16:
        assert time.monotonic() < deadline, _ray(head, "job", "logs", "--address", head.address, job_id).stdout
        time.sleep(0.3)
    assert _api(head, f"/api/jobs/{job_id}/stop", post=True)["stopped"]  # = `ray job stop`
    before, stable_since = _rows(store), time.monotonic()
    while time.monotonic() - stable_since < 4:  # the job's actors die with its driver
        time.sleep(0.5)
        if (now := _rows(store)) != before:
            before, stable_since = now, time.monotonic()
    deadline = time.monotonic() + 60
    while (status := _api(head, f"/api/jobs/{job_id}")["status"]) in ("PENDING", "RUNNING"):
        assert time.monotonic() < deadline, "the stopped job is still running after 60 s"
        time.sleep(0.5)
    assert status == "STOPPED"
    assert 16 <= before < N_EVENTS, f"the stop came too late to test a resume ({before} cached)"

    # 2. the same job submitted again: extracts only what is missing, on the cluster's Ray
    done = _submit(head, "refold.jobs.project", str(store), "--batch-size", "32", "--no-progress")
    summary = _summary(done)
    assert done.returncode == 0 and summary["ok"], summary
    assert summary["config"]["ray"] is True  # RAY_ADDRESS of the submitted job turned Ray on
    assert summary["fold"]["extraction_calls"] == N_EVENTS - before
    assert summary["ray_extraction"]["events"] == N_EVENTS - before
    frame = refold.open(store).cache.frame()
    assert frame.height == frame["event_id"].n_unique() == N_EVENTS  # no duplicates
    assert _facts(refold.open(store)).equals(_facts(reference))
    _assert_uploaded_layout(head)

    # 3. a full refold: nothing to extract, same state
    done = _submit(head, "refold.jobs.refold", str(store), "--no-progress")
    summary = _summary(done)
    assert done.returncode == 0 and summary["ok"] and summary["job"] == "refold", summary
    assert summary["fold"]["extraction_calls"] == 0
    assert summary["fold"]["facts"] == _facts(reference).filter(pl.col("derivation") == "extracted").height

    # 4. erasure backfill from a subjects file; an unknown subject fails the job, not the others
    subjects = tmp_path / "subjects.txt"
    subjects.write_text("s-ana\nnobody\n")
    done = _submit(head, "refold.jobs.erase", str(store), "--subjects-file", str(subjects))
    summary = _summary(done)
    assert done.returncode != 0 and summary["ok"] is False, summary
    assert summary["failed"] == ["nobody"]
    (ana,) = [s for s in summary["subjects"] if s["subject"] == "s-ana"]
    assert ana["status"] == "erased" and ana["events"] == N_EVENTS // 5
    assert json.loads(Path(ana["receipt"]).read_text())["subject_id"] == "s-ana"
    after = refold.open(store)
    assert not any(e.content and e.content.startswith("Ana:") for e in after.events())
    assert after.facts(subject="Ana").height == 0
