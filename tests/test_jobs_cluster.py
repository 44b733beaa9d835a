"""The jobs submitted to a real local Ray head node with ``ray job submit --working-dir .``.

One head node for the module (the ``head`` fixture of :mod:`tests.ray_head`: ``ray start --head``
on 127.0.0.1, torn down by stopping exactly the processes it started). Four submits: an interrupted projection, the same projection again, a full refold, and an
erasure backfill in which one subject fails.

Every submit passes ``--working-dir .`` (the checkout), and the job runs ``python -m refold.jobs.…``
in the folder Ray unpacked it to: ``python -m`` puts that folder first on ``sys.path``, so the
layout that Ray uploaded (refold/ with its subpackages; ``.rayignore`` leaves out the top-level
symlinks, which Ray would follow and copy) is the code that runs, not an installed copy.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import polars as pl
import pytest

import refold
from refold.fold.spec import FoldSpec
from refold.storage.cache.table import ExtractionCache
from refold.storage.layout import Layout

from tests.ray_head import REPO, Head, api, chat_events, head, ray_cli, submit  # noqa: F401 - head: the fixture
from tests.ray_head import summary as job_summary

pytestmark = [pytest.mark.ray, pytest.mark.slow]

N_EVENTS = 400


def _events() -> list[dict]:
    return chat_events(N_EVENTS)


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
    mem.register_subject("s-ana", "Ana")
    reference = refold.init(tmp_path / "reference")
    reference.append(_events())
    reference.fold()

    # 1. a projection stopped part-way through its extraction
    job_id = f"refold-project-{os.getpid()}-{time.monotonic_ns()}"
    # the job's driver stops for good after its second cache write (every 8 extractions, never on
    # time: 16 rows): the stop below lands mid-extraction whatever the machine's speed
    # (tests/fault_driver.py, --pause)
    started = submit(head, "tests.fault_driver", "--pause", "jobs.cache_written:2", "-m", "refold.jobs.project",
                     str(store), "--batch-size", "4", "--flush-events", "8", "--flush-seconds", "3600",
                     "--no-progress", wait=False, submission_id=job_id)
    assert started.returncode == 0, started.stderr[-3000:]
    deadline = time.monotonic() + 240
    while _rows(store) < 16:
        assert time.monotonic() < deadline, ray_cli(head, "job", "logs", "--address", head.address, job_id).stdout
        time.sleep(0.3)
    assert api(head, f"/api/jobs/{job_id}/stop", post=True)["stopped"]  # = `ray job stop`
    before, stable_since = _rows(store), time.monotonic()
    while time.monotonic() - stable_since < 4:  # the job's actors die with its driver
        time.sleep(0.5)
        if (now := _rows(store)) != before:
            before, stable_since = now, time.monotonic()
    deadline = time.monotonic() + 60
    while (status := api(head, f"/api/jobs/{job_id}")["status"]) in ("PENDING", "RUNNING"):
        assert time.monotonic() < deadline, "the stopped job is still running after 60 s"
        time.sleep(0.5)
    assert status == "STOPPED"
    assert 16 <= before < N_EVENTS, f"the stop came too late to test a resume ({before} cached)"

    # 2. the same job submitted again: extracts only what is missing, on the cluster's Ray
    done = submit(head, "refold.jobs.project", str(store), "--batch-size", "32", "--no-progress")
    summary = job_summary(done)
    assert done.returncode == 0 and summary["ok"], summary
    assert summary["config"]["ray"] is True  # RAY_ADDRESS of the submitted job turned Ray on
    assert summary["fold"]["extraction_calls"] == N_EVENTS - before
    assert summary["ray_extraction"]["events"] == N_EVENTS - before
    frame = refold.open(store).cache.frame()
    assert frame.height == frame["event_id"].n_unique() == N_EVENTS  # no duplicates
    assert _facts(refold.open(store)).equals(_facts(reference))
    _assert_uploaded_layout(head)

    # 3. a full refold: nothing to extract, same state
    done = submit(head, "refold.jobs.refold", str(store), "--no-progress")
    summary = job_summary(done)
    assert done.returncode == 0 and summary["ok"] and summary["job"] == "refold", summary
    assert summary["fold"]["extraction_calls"] == 0
    assert summary["fold"]["facts"] == _facts(reference).filter(pl.col("derivation") == "extracted").height

    # 4. erasure backfill from a subjects file; an unknown subject fails the job, not the others
    subjects = tmp_path / "subjects.txt"
    subjects.write_text("s-ana\nnobody\n")
    done = submit(head, "refold.jobs.erase", str(store), "--subjects-file", str(subjects))
    summary = job_summary(done)
    assert done.returncode != 0 and summary["ok"] is False, summary
    assert summary["failed"] == ["nobody"]
    (ana,) = [s for s in summary["subjects"] if s["subject"] == "s-ana"]
    assert ana["status"] == "erased" and ana["events"] == N_EVENTS // 5
    assert json.loads(Path(ana["receipt"]).read_text())["subject_id"] == "s-ana"
    after = refold.open(store)
    assert not any(e.content and e.content.startswith("Ana:") for e in after.events())
    assert after.facts(subject="Ana").height == 0
