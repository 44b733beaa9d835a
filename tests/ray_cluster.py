"""A real 2-node Ray cluster on this one machine: a head node and a worker node that joins it.

``two_nodes`` (module fixture; :func:`two_node_cluster` is the same as a context manager): the head
(``ray start --head --block``, :func:`tests.ray_head.head_node`) and a worker (``ray start --address
127.0.0.1:GCS --block``), both on 127.0.0.1 with free ports of their own, each with its own
``--temp-dir`` (its session, logs, sockets and the working dirs it unpacks; its processes' TMPDIR
too), ``CPUS`` logical CPUs and a custom resource naming it (``HEAD_RESOURCE`` /
``WORKER_RESOURCE``), so a job's driver can be sent to one node. The worker starts as soon as the
head's GCS answers; the fixture returns once Ray's state API lists both nodes alive. Teardown
stops exactly the two ``ray start`` process groups it started (``ray stop`` would stop every Ray on
the machine): SIGTERM to both at once, SIGKILL to a group still there ``STOP_SECONDS`` later; then
both temp dirs go.

:func:`run_job` submits a job the way ``ray job submit --working-dir .`` does (Ray's job SDK,
without a CLI start-up per job) and reads its summary from the driver's log on whichever node it
ran; :func:`tasks_by_node` says which node ran each task and actor task of a job. Both use Ray's
public state API through the head, so a test shows where work ran without the job reporting it.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import signal
import socket
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.ray_head import (
    REPO,
    Head,
    free_ports,
    head_args,
    node_ports,
    node_temp,
    ray_env,
    ray_node,
    shut_down_local_ray,
    tmpdir_in,
    wait_for_http,
)

__all__ = ["CPUS", "HEAD_RESOURCE", "WORKER_RESOURCE", "Job", "TwoNodes", "run_job", "tasks_by_node",
           "two_node_cluster", "two_nodes"]

#: logical CPUs per node: a pool of two 0.5-CPU actors under Ray Data's SPREAD strategy puts one
#: on each node, and a job's driver takes none
CPUS = 1
HEAD_RESOURCE = "refold_test_head"
#: how long a node may take to shut down after SIGTERM before its process group is killed: a head
#: that ran jobs takes over 10 s to stop them gracefully, and a throwaway cluster needs no grace
STOP_SECONDS = 3
WORKER_RESOURCE = "refold_test_worker"


@dataclass(frozen=True)
class TwoNodes:
    """The running cluster: ``head`` (job API URL, env, temp dir), the head's GCS address, the
    worker's temp dir, and both nodes' ids (as Ray's state API names them)."""

    head: Head
    gcs: str  # host:port: what `ray start --address` and the state API's log reads take
    worker_temp: Path
    head_id: str
    worker_id: str

    @property
    def temps(self) -> tuple[Path, Path]:
        return self.head.temp, self.worker_temp

    def node(self, node_id: str) -> str:
        """``"head"`` or ``"worker"``: the node of ``node_id``."""
        return {self.head_id: "head", self.worker_id: "worker"}[node_id]


@dataclass(frozen=True)
class Job:
    """A finished job: its submission id, its JSON summary line, and the node its driver ran on."""

    submission_id: str
    summary: dict
    driver: str


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[TwoNodes]:
    with two_node_cluster() as cluster:
        yield cluster


def _answers(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False


@contextlib.contextmanager
def two_node_cluster() -> Iterator[TwoNodes]:
    """The head and the worker node, up and joined, for the ``with`` block (see the module doc)."""
    from ray.util.state import list_nodes

    shut_down_local_ray()
    gcs, dash = free_ports(2)
    head_temp = node_temp()
    head_env = {**ray_env(), "TMPDIR": str(tmpdir_in(head_temp))}
    deadline = time.monotonic() + 120
    with contextlib.ExitStack() as stack:
        head = stack.enter_context(ray_node(head_args(gcs=gcs, dashboard=dash, num_cpus=CPUS,
                                                      resources={HEAD_RESOURCE: 1}), temp=head_temp, env=head_env,
                                            stop_timeout=STOP_SECONDS))
        while not _answers(gcs):  # the worker may join once the GCS answers, before the dashboard is up
            assert head.poll() is None, "the head node exited: " + (head_temp / "ray-start.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the head node's GCS never came up"
            time.sleep(0.2)
        args = ["--address", f"127.0.0.1:{gcs}", "--num-cpus", str(CPUS), "--resources",
                json.dumps({WORKER_RESOURCE: 1}), *node_ports(head=False)]
        worker_temp = node_temp()
        worker = stack.enter_context(ray_node(args, temp=worker_temp, stop_timeout=STOP_SECONDS,
                                              env={**ray_env(), "TMPDIR": str(tmpdir_in(worker_temp))}))

        def shut_down_both() -> None:  # first on exit: both at once (then each waited for, worker first)
            for proc in (worker, head):
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)

        stack.callback(shut_down_both)
        address = f"http://127.0.0.1:{dash}"
        wait_for_http(f"{address}/api/version", head, what="the head node's dashboard",
                      log=head_temp / "ray-start.log", seconds=max(1.0, deadline - time.monotonic()))
        while len(nodes := list_nodes(address=address, filters=[("state", "=", "ALIVE")], detail=True,
                                      raise_on_missing_output=False)) < 2:
            assert worker.poll() is None, "the worker node exited: " + (worker_temp / "ray-start.log").read_text()[-3000:]
            assert time.monotonic() < deadline, f"the worker node never joined: {nodes}"
            time.sleep(0.5)
        ids = {name: n.node_id for n in nodes for name in (HEAD_RESOURCE, WORKER_RESOURCE) if name in n.resources_total}
        assert len(nodes) == 2 and len(ids) == 2, nodes
        yield TwoNodes(head=Head(address=address, env=head_env, temp=head_temp), gcs=f"127.0.0.1:{gcs}",
                       worker_temp=worker_temp, head_id=ids[HEAD_RESOURCE], worker_id=ids[WORKER_RESOURCE])


def run_job(cluster: TwoNodes, module: str, *args: str, runtime_env: dict | None = None,
            on_worker: bool = False, seconds: float = 300) -> Job:
    """Submit ``python -m module ARGS`` with the checkout as its working dir (what ``ray job submit
    --working-dir .`` does), its driver on the worker node with ``on_worker`` (else on the head),
    wait for it to end and return it; a failed job fails the test with the driver's log."""
    from ray.job_submission import JobStatus, JobSubmissionClient
    from ray.util.state import get_log, list_jobs

    client = JobSubmissionClient(cluster.head.address)
    submission = f"refold-{module.rsplit('.', 1)[-1]}-{time.monotonic_ns()}"
    client.submit_job(entrypoint=shlex.join(["python", "-m", module, *args]), submission_id=submission,
                      runtime_env={**(runtime_env or {}), "working_dir": str(REPO)},
                      entrypoint_resources={WORKER_RESOURCE: 1} if on_worker else None)
    deadline = time.monotonic() + seconds
    while (status := client.get_job_status(submission)) not in (JobStatus.SUCCEEDED, JobStatus.FAILED,
                                                                 JobStatus.STOPPED):
        assert time.monotonic() < deadline, f"job {submission} still {status} after {seconds} s"
        time.sleep(0.5)
    (job,) = [j for j in list_jobs(address=cluster.head.address, detail=True) if j.submission_id == submission]
    assert job.driver_node_id, f"job {submission} {status} before its driver started: {job.message}"
    # the driver's log, read on its node by node id: the job API's own log read (`ray job logs`)
    # finds the node by IP, which both nodes share, and answers the head's part for a driver that
    # ran on the worker
    log = "".join(get_log(address=cluster.gcs, node_id=job.driver_node_id, filename=f"job-driver-{submission}.log",
                          tail=-1))
    assert status == JobStatus.SUCCEEDED, f"job {submission} {status}:\n{log[-4000:]}"
    lines = [line for line in log.splitlines() if line.startswith("{") and '"job"' in line]
    assert lines, f"no JSON summary in the log of job {submission}:\n{log[-4000:]}"
    return Job(submission_id=submission, summary=json.loads(lines[-1]), driver=cluster.node(job.driver_node_id))


def tasks_by_node(cluster: TwoNodes, job: Job) -> dict[str, Counter]:
    """``{"head" | "worker": Counter(task name)}``: the tasks and actor tasks of ``job`` that
    finished on each node, from Ray's state API."""
    from ray.util.state import list_jobs, list_tasks

    (state,) = [j for j in list_jobs(address=cluster.head.address) if j.submission_id == job.submission_id]
    tasks = list_tasks(address=cluster.head.address, filters=[("job_id", "=", state.job_id)], limit=10_000,
                       detail=True, raise_on_missing_output=False)
    out: dict[str, Counter] = {"head": Counter(), "worker": Counter()}
    for task in tasks:
        if task.state == "FINISHED" and task.node_id:
            out[cluster.node(task.node_id)][task.func_or_class_name] += 1
    return out
