"""The jobs' contract without a cluster: flags and environment, JSON summary, exit status.

The jobs run as ``refold job <name>`` in this process (click's CliRunner) with ``--no-ray`` (the
Ray path is covered by test_jobs_cluster.py and test_ray_sharding.py), and as
``python -m refold.jobs.<name>`` in a subprocess, the form ``ray job submit`` runs; stores are
real Delta tables in tmp_path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import refold
from refold.cli import main
from refold.jobs import project as project_job
from refold.jobs.config import load_config

REPO = Path(__file__).resolve().parents[1]
#: every variable a job reads; cleared so that the caller's environment does not leak in
JOB_ENV = ("REFOLD_EXTRACTOR", "REFOLD_EXTRACTOR_OPTIONS", "REFOLD_RAY_ADDRESS", "REFOLD_RAY", "REFOLD_BATCH_SIZE",
           "REFOLD_NUM_ACTORS", "REFOLD_CPUS_PER_ACTOR", "REFOLD_GPUS_PER_ACTOR", "REFOLD_FLUSH_EVENTS",
           "REFOLD_FLUSH_SECONDS", "REFOLD_STORAGE_OPTIONS", "REFOLD_PROGRESS", "REFOLD_VACUUM_HOURS", "RAY_ADDRESS")


@pytest.fixture
def store(tmp_path):
    mem = refold.init(tmp_path / "store")
    mem.append([
        {"kind": "chat_turn", "content": "Ana: I live in Lisbon.", "source": "chat#1", "subjects": ["s-ana"]},
        {"kind": "chat_turn", "content": "Ben: I work at Acme.", "source": "chat#2", "subjects": ["s-ben"]},
        {"kind": "chat_turn", "content": "Acme is located in Berlin.", "source": "doc#1"},
    ])
    mem.register_subject("s-ana", "Ana Lima")
    return tmp_path / "store"


def _invoke(*argv: str, env: dict[str, str] | None = None):
    """``refold *argv`` in this process, the job variables cleared, then set from ``env``."""
    return CliRunner().invoke(main, [str(a) for a in argv], env={**dict.fromkeys(JOB_ENV), **(env or {})},
                              prog_name="refold")


def _job(name: str, *argv) -> tuple[int, dict]:
    """``refold job NAME *argv``: its exit status and its summary, the one line on stdout."""
    result = _invoke("job", name, *argv)
    out = result.stdout.strip().splitlines()
    assert len(out) == 1, f"a job prints exactly one line on stdout, got {out}"
    return result.exit_code, json.loads(out[0])


def _python_m(name: str, *argv, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python -m refold.jobs.NAME *argv`` in a subprocess (what `ray job submit -- ...` runs)."""
    clean = {k: v for k, v in os.environ.items() if k not in JOB_ENV}
    return subprocess.run([sys.executable, "-m", f"refold.jobs.{name}", *map(str, argv)], cwd=REPO,
                          capture_output=True, text=True, timeout=300, check=False,
                          env={**clean, "PYTHONPATH": str(REPO), **(env or {})})


def test_project_then_refold(store):
    status, summary = _job("project", str(store), "--no-ray", "--no-progress")
    assert status == 0 and summary["ok"] and summary["job"] == "project"
    assert summary["fold"]["extraction_calls"] == 3 and summary["fold"]["facts"] == 3
    assert "ray_extraction" not in summary

    refold.open(store).append({"kind": "chat_turn", "content": "Ben: I live in Oslo.", "source": "chat#3"})
    status, summary = _job("project", str(store), "--no-ray", "--no-progress")
    assert summary["fold"]["extraction_calls"] == 1  # only the new event

    status, summary = _job("refold", str(store), "--no-ray", "--no-progress")
    assert status == 0 and summary["job"] == "refold"
    assert summary["fold"]["extraction_calls"] == 0 and summary["fold"]["facts"] == 4


def test_erase_each_subject_gets_a_receipt(store, tmp_path):
    subjects = tmp_path / "subjects.txt"
    subjects.write_text("# backfill\ns-ana\n\ns-ben\n")
    status, summary = _job("erase", str(store), "--subjects-file", str(subjects), "--dry-run")
    assert status == 0 and summary["dry_run"]
    assert [s["events"] for s in summary["subjects"]] == [1, 1]
    assert summary["receipts"] == []
    assert len(refold.open(store).events()) == 3  # a dry run writes nothing

    status, summary = _job("erase", str(store), "--subjects-file", str(subjects))
    assert status == 0, summary
    assert [s["status"] for s in summary["subjects"]] == ["erased", "erased"]
    for path in summary["receipts"]:
        assert json.loads(open(path).read())["status"] == "erased"
    texts = " ".join(e.content or "" for e in refold.open(store).events())
    assert "Lisbon" not in texts and "Acme" in texts  # the untagged document stays

    # the same job again: nothing left, a noop receipt each
    status, summary = _job("erase", str(store), "--subject", "s-ana")
    assert status == 0 and summary["subjects"][0]["status"] == "noop"


def test_failures_exit_1_with_the_error_in_the_summary(store, tmp_path):
    status, summary = _job("erase", str(store), "--subject", "s-ana", "--subject", "nobody")
    assert status == 1 and not summary["ok"]
    assert summary["failed"] == ["nobody"]
    assert summary["subjects"][0]["ok"]  # the other subject still ran
    assert "unknown subject" in summary["subjects"][1]["error"]

    status, summary = _job("project", str(tmp_path / "missing"), "--no-ray")
    assert status == 1 and "StoreError" in summary["error"]
    assert not (tmp_path / "missing").exists()  # a job never creates a store

    status, summary = _job("project", "relative/store", "--no-ray")
    assert status == 1 and "absolute path" in summary["error"]

    status, summary = _job("project", str(store), "--no-ray", "--options", "[1]")
    assert status == 1 and "JSON object" in summary["error"]

    status, summary = _job("project", str(store), "--no-ray", "--extractor", "nope")
    assert status == 1 and "unknown extractor" in summary["error"]


def _config(argv, env, monkeypatch):
    """The JobConfig the project job would run with: its flags parsed, defaults from ``env``."""
    for name in JOB_ENV:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return load_config(project_job.command.make_context("project", list(argv)).params)


def test_environment_gives_defaults_and_flags_win(monkeypatch):
    env = {"REFOLD_EXTRACTOR": "openai", "REFOLD_EXTRACTOR_OPTIONS": '{"base_url": "http://h:1/v1"}',
           "REFOLD_BATCH_SIZE": "4", "REFOLD_NUM_ACTORS": "3", "REFOLD_CPUS_PER_ACTOR": "0.25",
           "REFOLD_PROGRESS": "0", "REFOLD_FLUSH_SECONDS": "0.5"}
    cfg = _config(["/s"], env, monkeypatch)
    assert (cfg.extractor, dict(cfg.options), cfg.batch_size, cfg.num_actors, cfg.cpus_per_actor) == \
        ("openai", {"base_url": "http://h:1/v1"}, 4, 3, 0.25)
    assert cfg.progress is False and cfg.use_ray is False and cfg.flush_seconds == 0.5
    cfg = _config(["/s", "--extractor", "rules", "--batch-size", "16"], env, monkeypatch)
    assert (cfg.extractor, cfg.batch_size) == ("rules", 16)


def test_ray_is_on_where_a_cluster_is_known(monkeypatch):
    assert not _config(["/s"], {}, monkeypatch).use_ray
    assert _config(["/s"], {"RAY_ADDRESS": "127.0.0.1:6379"}, monkeypatch).use_ray  # inside `ray job submit`
    assert _config(["/s"], {"REFOLD_RAY_ADDRESS": "ray://head:10001"}, monkeypatch).use_ray
    assert not _config(["/s", "--no-ray"], {"RAY_ADDRESS": "127.0.0.1:6379"}, monkeypatch).use_ray
    assert not _config(["/s"], {"RAY_ADDRESS": "127.0.0.1:6379", "REFOLD_RAY": "0"}, monkeypatch).use_ray
    assert _config(["/s", "--ray"], {}, monkeypatch).use_ray


def test_erase_makes_missing_model_extractions_then_resumes(tmp_path):
    """Under a model spec, the refold after an erasure needs every surviving event extracted; the
    job extracts the missing one with the configured extractor and resumes the erasure. The model
    server is the scripted stub of tests/llm_server.py (no model can be made to answer on cue)."""
    from refold.extractors.openai import OpenAIExtractor
    from tests.llm_server import StubServer

    stub = StubServer()
    try:
        mem = refold.init(tmp_path / "store")
        mem.append([{"kind": "chat_turn", "content": "Ana: I live in Quillacollo.", "source": "chat#1",
                     "subjects": ["s-ana"]},
                    {"kind": "chat_turn", "content": "Ben: I work at Acme.", "source": "chat#2",
                     "subjects": ["s-ben"]}])
        extractor = OpenAIExtractor(stub.base_url, model="stub-model")
        for _ in range(3):
            stub.answer_content('{"facts": []}')
        assert mem.fold(extractor=extractor).extraction_calls == 2
        mem.append({"kind": "chat_turn", "content": "Ben: I moved to Oslo.", "source": "chat#3",
                    "subjects": ["s-ben"]})  # not extracted yet
        options = json.dumps({"base_url": stub.base_url, "model": "stub-model"})
        status, summary = _job("erase", tmp_path / "store", "--subject", "s-ana", "--no-ray", "--no-progress",
                               "--extractor", "openai", "--options", options)
        assert status == 0, summary
        (ana,) = summary["subjects"]
        assert ana["status"] == "erased"
        assert ana["extraction_before_resume"]["fold"]["extraction_calls"] == 1
        assert len(stub.bodies) == 3  # two before, one for the new event; none for erased Ana
        assert b"Quillacollo" in stub.bodies[0] and b"Quillacollo" not in stub.bodies[-1]
    finally:
        stub.close()


# -- one command, two doors: `refold job NAME` and `python -m refold.jobs.NAME` --------------------

def _small_store(root: Path) -> Path:
    mem = refold.init(root)
    mem.append([{"kind": "chat_turn", "content": "Ana: I live in Lisbon.", "source": "chat#1", "subjects": ["s-ana"]},
                {"kind": "chat_turn", "content": "Ben: I work at Acme.", "source": "chat#2"}])
    return root


def test_refold_job_and_python_m_fold_alike(tmp_path):
    """`refold job project STORE` (in this process) and `python -m refold.jobs.project STORE` (a
    subprocess, as `ray job submit` runs it) are one click command: each folds its store and
    prints one summary line with the same keys; progress goes to stderr."""
    via_cli = _invoke("job", "project", _small_store(tmp_path / "a"), "--no-ray")
    assert via_cli.exit_code == 0, via_cli.output
    (line,) = via_cli.stdout.splitlines()
    cli_summary = json.loads(line)
    assert "events" in via_cli.stderr  # the progress lines

    via_module = _python_m("project", _small_store(tmp_path / "b"), "--no-ray")
    assert via_module.returncode == 0, via_module.stderr[-3000:]
    (line,) = via_module.stdout.splitlines()
    module_summary = json.loads(line)

    assert cli_summary.keys() == module_summary.keys() >= {"job", "ok", "config", "fold", "seconds"}
    assert cli_summary["fold"].keys() == module_summary["fold"].keys()
    for summary, root in ((cli_summary, tmp_path / "a"), (module_summary, tmp_path / "b")):
        assert summary["ok"] and summary["job"] == "project" and summary["config"]["store"] == str(root)
        assert summary["fold"]["extraction_calls"] == 2 and summary["fold"]["facts"] == 2
    a, b = (sorted(refold.open(tmp_path / name, create=False).facts().select("subject", "relation", "object").rows())
            for name in "ab")
    assert a and a == b  # the same facts, whichever door the job came in by


@pytest.mark.parametrize("argv, says", [
    (["project", "{store}", "--batch-size", "x"], "'x' is not a valid integer"),
    (["project"], "Missing argument 'STORE'"),
    (["project", "{store}", "--vacuum-hours", "a week"], "whole number of hours"),
    (["refold", "{store}", "--no-such-flag"], "No such option"),
    (["project", "{store}", "--engine", "graph"], "--engine was removed in refold 0.2: there is one engine"),
    (["refold", "{store}", "--engine", "graph"], "--engine was removed in refold 0.2: there is one engine"),
    (["erase", "{store}", "--subject", "s-ana", "--decremental"], "erasure always refolds the touched buckets"),
    (["erase", "{store}", "--subject", "s-ana", "--no-decremental"], "erasure always refolds the touched buckets"),
    (["retain", "{store}", "--no-decremental"], "erasure always refolds the touched buckets"),
])
def test_a_bad_argument_is_one_line_and_exit_2(store, argv, says):
    """Nothing runs: no summary on stdout, one line on stderr naming the command and what is wrong
    (for a removed flag, what replaced it), exit 2."""
    head = refold.open(store, create=False).head()
    argv = [a.format(store=store) for a in argv]
    result = _invoke("job", *argv)
    assert result.exit_code == 2 and not result.stdout, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"refold job {argv[0]}: error: ") and says in line, line
    assert refold.open(store, create=False).head() == head


def test_python_m_says_a_bad_argument_in_one_line(store):
    done = _python_m("project", store, "--engine", "graph")
    assert done.returncode == 2 and not done.stdout
    assert done.stderr.splitlines() == [("python -m refold.jobs.project: error: --engine was removed in refold 0.2: "
                                         "there is one engine, the state tables; drop the flag")]
    done = _python_m("erase", store, "--subject", "s-ana", env={"REFOLD_BATCH_SIZE": "eight"})
    assert done.returncode == 2 and not done.stdout
    (line,) = done.stderr.splitlines()
    assert "REFOLD_BATCH_SIZE" in line and "'eight' is not a valid integer" in line  # a bad default, at the edge


def test_refold_job_help_lists_the_four_jobs():
    result = _invoke("job", "--help")
    assert result.exit_code == 0
    listed = result.stdout.split("Commands:")[1].split()
    assert {"project", "refold", "erase", "retain"} <= set(listed)
    assert "job " in _invoke("--help").stdout  # and `refold --help` lists `refold job`
    for name in ("project", "refold", "erase", "retain"):
        page = _invoke("job", name, "-h").stdout
        assert f"Usage: refold job {name} [OPTIONS] STORE" in page and "REFOLD_BATCH_SIZE" in page
        assert "--engine" not in page and "decremental" not in page  # removed flags stay out of help
