"""A real local Ray head node for the job tests, and ``ray job submit`` against it.

``head`` (module fixture): ``ray start --head --block`` on 127.0.0.1, free ports, its own temp dir,
``RAY_AUTH_MODE=disabled`` (Ray 2.60 turns token authentication on whenever a token exists in
~/.ray, and the loopback test cluster needs none). Teardown stops exactly the processes the
fixture started (the ``ray start`` process group), never every Ray on the machine as ``ray stop``
would. A test module uses it with ``from tests.ray_head import head``. The pieces it is made of
(:func:`ray_node`: one ``ray start --block`` process group with its own temp dir, stopped on exit;
:func:`head_args`, :func:`node_ports`) also start the nodes of :mod:`tests.ray_cluster`.

:func:`submit` runs ``ray job submit --working-dir .`` (the checkout): the job runs
``python -m refold.jobs.…`` in the folder Ray unpacked it to, so the code that runs is the
checkout's (``.rayignore`` leaves out the top-level symlinks). :func:`summary` picks the job's
JSON summary line out of the submit's output. :func:`chat_events` is the log the job tests fold.
"""

from __future__ import annotations

import contextlib
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
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

__all__ = ["REPO", "Head", "api", "chat_events", "free_ports", "head", "head_args", "node_ports", "node_temp",
           "ray_cli", "ray_env", "ray_node", "shut_down_local_ray", "stop_group", "submit", "summary", "tmpdir_in",
           "wait_for_http"]

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
RAY = str(VENV_BIN / "ray")


@dataclass(frozen=True)
class Head:
    address: str  # the job API (dashboard) URL
    env: dict
    temp: Path  # the node's --temp-dir

    def working_dirs(self) -> list[Path]:
        """The working dirs this node unpacked for submitted jobs (one per distinct upload)."""
        files = self.temp / "session_latest" / "runtime_resources" / "working_dir_files"
        return sorted(p for p in files.glob("_ray_pkg_*") if p.is_dir())  # not the downloaded zips


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def stop_group(proc: subprocess.Popen, timeout: float = 10) -> None:
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


def ray_env() -> dict[str, str]:
    """The environment of a loopback test node and of the CLI calls to it (no token auth, no
    usage stats, the venv's ``ray`` and ``python`` first on PATH)."""
    return {**os.environ, "RAY_AUTH_MODE": "disabled", "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}",
            "RAY_USAGE_STATS_ENABLED": "0"}


def node_temp() -> Path:
    """A fresh temp dir for one node (short: Ray's socket paths must fit 107 bytes)."""
    return Path(tempfile.mkdtemp(prefix="rj", dir="/tmp"))


def tmpdir_in(temp: Path) -> Path:
    """``temp``/tmp, made: a node's own TMPDIR, inside its temp dir."""
    (temp / "tmp").mkdir(exist_ok=True)
    return temp / "tmp"


@contextlib.contextmanager
def ray_node(args: list[str], *, temp: Path, env: dict[str, str],
             stop_timeout: float = 10) -> Iterator[subprocess.Popen]:
    """``ray start --block --node-ip-address 127.0.0.1 ARGS --temp-dir TEMP`` in a process group of
    its own, logging to ``TEMP/ray-start.log``, for the ``with`` block; then exactly that group is
    stopped (:func:`stop_group`, SIGKILL after ``stop_timeout`` seconds) and ``temp`` removed."""
    log = open(temp / "ray-start.log", "w")
    proc = subprocess.Popen(
        [RAY, "start", "--block", "--node-ip-address", "127.0.0.1", *args, "--temp-dir", str(temp),
         "--disable-usage-stats"],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        yield proc
    finally:
        stop_group(proc, timeout=stop_timeout)
        log.close()
        shutil.rmtree(temp, ignore_errors=True)


def node_ports(*, head: bool) -> list[str]:
    """``ray start`` flags giving one node free ports of its own (several nodes share 127.0.0.1)."""
    agent, agent_grpc, env_agent, metrics, node_mgr, obj_mgr, client = free_ports(7)
    ports = ["--dashboard-agent-listen-port", str(agent), "--dashboard-agent-grpc-port", str(agent_grpc),
             "--runtime-env-agent-port", str(env_agent), "--metrics-export-port", str(metrics),
             "--node-manager-port", str(node_mgr), "--object-manager-port", str(obj_mgr)]
    return [*ports, "--ray-client-server-port", str(client)] if head else ports


def head_args(*, gcs: int, dashboard: int, num_cpus: int = 2, resources: dict[str, float] | None = None) -> list[str]:
    """``ray start`` flags of a head node: GCS and dashboard (job API) on those ports of 127.0.0.1,
    ``num_cpus`` logical CPUs, custom ``resources``, free ports for the rest."""
    extra = ["--resources", json.dumps(resources)] if resources else []
    return ["--head", "--port", str(gcs), "--num-cpus", str(num_cpus), *extra, "--include-dashboard", "true",
            "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dashboard), *node_ports(head=True)]


def shut_down_local_ray() -> None:
    """Disconnect this process's Ray runtime, if any: one Ray runtime at a time on this machine."""
    import ray

    if ray.is_initialized():
        ray.shutdown()


@pytest.fixture(scope="module")
def head():
    shut_down_local_ray()
    gcs, dash = free_ports(2)
    env, temp = ray_env(), node_temp()
    with ray_node(head_args(gcs=gcs, dashboard=dash), temp=temp, env=env) as proc:
        wait_for_http(f"http://127.0.0.1:{dash}/api/version", proc, what="the head node's dashboard",
                      log=temp / "ray-start.log", seconds=120)
        yield Head(address=f"http://127.0.0.1:{dash}", env=env, temp=temp)


def wait_for_http(url: str, proc: subprocess.Popen, *, what: str, log: Path | None = None,
                  seconds: float = 60) -> None:
    """Return once ``url`` answers; fail if ``proc`` (the server) exits or ``seconds`` pass."""
    deadline = time.monotonic() + seconds
    while True:
        assert proc.poll() is None, f"{what} exited: " + (log.read_text()[-3000:] if log else "")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            assert time.monotonic() < deadline, f"{what} never came up"
            time.sleep(0.3)


def chat_events(n: int) -> list[dict]:
    """``n`` chat turns of five people stating where they live (the job tests' log)."""
    people, cities = ("Ana", "Ben", "Chloe", "Dev", "Eli"), ("Lisbon", "Porto", "Berlin", "Oslo", "Quito")
    start = datetime(2024, 1, 1, tzinfo=timezone.utc)
    return [{"kind": "chat_turn", "source": f"chat#{i}", "event_id": f"ev-{i:04d}",
             "content": f"{people[i % 5]}: I live in {cities[(i // 5) % 5]}.",
             "subjects": [f"s-{people[i % 5].lower()}"],
             "valid_from": (start + timedelta(days=i)).isoformat()} for i in range(n)]


def ray_cli(head: Head, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([RAY, *args], env=head.env, cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


def submit(head: Head, module: str, *args: str, wait: bool = True,
           submission_id: str | None = None, runtime_env: dict | None = None) -> subprocess.CompletedProcess:
    cmd = ["job", "submit", "--address", head.address, "--working-dir", "."]
    if not wait:
        cmd.append("--no-wait")
    if submission_id:
        cmd += ["--submission-id", submission_id]
    if runtime_env:  # (e.g. {"env_vars": {...}}: the job's driver and every worker get them)
        cmd += ["--runtime-env-json", json.dumps(runtime_env)]
    return ray_cli(head, *cmd, "--", "python", "-m", module, *args)


def api(head: Head, path: str, *, post: bool = False) -> dict:
    """The job REST API that `ray job stop/status` call (without a CLI start-up per call, which
    takes seconds on a loaded 2-core machine: the stop would land after the job finished)."""
    request = urllib.request.Request(f"{head.address}{path}", method="POST" if post else "GET")
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read() or b"{}")


def summary(done: subprocess.CompletedProcess) -> dict:
    """The job's JSON summary line out of `ray job submit`'s output (the driver's log)."""
    for line in reversed(done.stdout.splitlines()):
        line = line.strip()
        if line.startswith("{") and '"job"' in line:
            return json.loads(line)
    raise AssertionError(f"no JSON summary in the job output:\n{done.stdout[-4000:]}\n{done.stderr[-2000:]}")


