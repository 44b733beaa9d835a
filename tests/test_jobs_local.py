"""The jobs' contract without a cluster: flags and environment, JSON summary, exit status.

The jobs run in this process with ``--no-ray`` (the Ray path is covered by test_jobs_cluster.py
and test_ray_sharding.py); stores are real Delta tables in tmp_path.
"""

from __future__ import annotations

import json

import pytest

import refold
from refold import erasing
from refold.jobs import erase as erase_job
from refold.jobs import project as project_job
from refold.jobs import refold as refold_job
from refold.jobs.config import job_parser, load_config


@pytest.fixture
def store(tmp_path):
    mem = refold.init(tmp_path / "store")
    mem.append([
        {"kind": "chat_turn", "content": "Ana: I live in Lisbon.", "source": "chat#1", "subjects": ["s-ana"]},
        {"kind": "chat_turn", "content": "Ben: I work at Acme.", "source": "chat#2", "subjects": ["s-ben"]},
        {"kind": "chat_turn", "content": "Acme is located in Berlin.", "source": "doc#1"},
    ])
    erasing.register_subject(mem, "s-ana", "Ana Lima")
    return tmp_path / "store"


def _run(main, argv, capsys) -> tuple[int, dict]:
    status = main(argv)
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1, f"a job prints exactly one line on stdout, got {out}"
    return status, json.loads(out[0])


def test_project_then_refold(store, capsys):
    status, summary = _run(project_job.main, [str(store), "--no-ray", "--no-progress"], capsys)
    assert status == 0 and summary["ok"] and summary["job"] == "project"
    assert summary["fold"]["extraction_calls"] == 3 and summary["fold"]["facts"] == 3
    assert "ray_extraction" not in summary

    refold.open(store).append({"kind": "chat_turn", "content": "Ben: I live in Oslo.", "source": "chat#3"})
    status, summary = _run(project_job.main, [str(store), "--no-ray", "--no-progress"], capsys)
    assert summary["fold"]["extraction_calls"] == 1  # only the new event

    status, summary = _run(refold_job.main, [str(store), "--no-ray", "--no-progress"], capsys)
    assert status == 0 and summary["job"] == "refold"
    assert summary["fold"]["extraction_calls"] == 0 and summary["fold"]["facts"] == 4


def test_erase_each_subject_gets_a_receipt(store, tmp_path, capsys):
    subjects = tmp_path / "subjects.txt"
    subjects.write_text("# backfill\ns-ana\n\ns-ben\n")
    status, summary = _run(erase_job.main, [str(store), "--subjects-file", str(subjects), "--dry-run"], capsys)
    assert status == 0 and summary["dry_run"]
    assert [s["events"] for s in summary["subjects"]] == [1, 1]
    assert summary["receipts"] == []
    assert len(refold.open(store).events()) == 3  # a dry run writes nothing

    status, summary = _run(erase_job.main, [str(store), "--subjects-file", str(subjects)], capsys)
    assert status == 0, summary
    assert [s["status"] for s in summary["subjects"]] == ["erased", "erased"]
    for path in summary["receipts"]:
        assert json.loads(open(path).read())["status"] == "erased"
    texts = " ".join(e.content or "" for e in refold.open(store).events())
    assert "Lisbon" not in texts and "Acme" in texts  # the untagged document stays

    # the same job again: nothing left, a noop receipt each
    status, summary = _run(erase_job.main, [str(store), "--subject", "s-ana"], capsys)
    assert status == 0 and summary["subjects"][0]["status"] == "noop"


def test_failures_exit_1_with_the_error_in_the_summary(store, tmp_path, capsys):
    status, summary = _run(erase_job.main, [str(store), "--subject", "s-ana", "--subject", "nobody"], capsys)
    assert status == 1 and not summary["ok"]
    assert summary["failed"] == ["nobody"]
    assert summary["subjects"][0]["ok"]  # the other subject still ran
    assert "unknown subject" in summary["subjects"][1]["error"]

    status, summary = _run(project_job.main, [str(tmp_path / "missing"), "--no-ray"], capsys)
    assert status == 1 and "StoreError" in summary["error"]
    assert not (tmp_path / "missing").exists()  # a job never creates a store

    status, summary = _run(project_job.main, ["relative/store", "--no-ray"], capsys)
    assert status == 1 and "absolute path" in summary["error"]

    status, summary = _run(project_job.main, [str(store), "--no-ray", "--options", "[1]"], capsys)
    assert status == 1 and "JSON object" in summary["error"]

    status, summary = _run(project_job.main, [str(store), "--no-ray", "--extractor", "nope"], capsys)
    assert status == 1 and "unknown extractor" in summary["error"]


def test_bad_arguments_exit_2():
    with pytest.raises(SystemExit) as exc:
        project_job.main(["--batch-size", "x"])
    assert exc.value.code == 2


def _config(argv, env):
    return load_config(job_parser("job", "test", env=env).parse_args(argv))


def test_environment_gives_defaults_and_flags_win():
    env = {"REFOLD_EXTRACTOR": "openai", "REFOLD_EXTRACTOR_OPTIONS": '{"base_url": "http://h:1/v1"}',
           "REFOLD_BATCH_SIZE": "4", "REFOLD_NUM_ACTORS": "3", "REFOLD_CPUS_PER_ACTOR": "0.25",
           "REFOLD_PROGRESS": "0", "REFOLD_FLUSH_SECONDS": "0.5"}
    cfg = _config(["/s"], env)
    assert (cfg.extractor, dict(cfg.options), cfg.batch_size, cfg.num_actors, cfg.cpus_per_actor) == \
        ("openai", {"base_url": "http://h:1/v1"}, 4, 3, 0.25)
    assert cfg.progress is False and cfg.use_ray is False and cfg.flush_seconds == 0.5
    cfg = _config(["/s", "--extractor", "rules", "--batch-size", "16"], env)
    assert (cfg.extractor, cfg.batch_size) == ("rules", 16)


def test_ray_is_on_where_a_cluster_is_known():
    assert not _config(["/s"], {}).use_ray
    assert _config(["/s"], {"RAY_ADDRESS": "127.0.0.1:6379"}).use_ray  # inside `ray job submit`
    assert _config(["/s"], {"REFOLD_RAY_ADDRESS": "ray://head:10001"}).use_ray
    assert not _config(["/s", "--no-ray"], {"RAY_ADDRESS": "127.0.0.1:6379"}).use_ray
    assert not _config(["/s"], {"RAY_ADDRESS": "127.0.0.1:6379", "REFOLD_RAY": "0"}).use_ray
    assert _config(["/s", "--ray"], {}).use_ray


def test_erase_makes_missing_model_extractions_then_resumes(tmp_path, capsys):
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
        status, summary = _run(erase_job.main, [str(tmp_path / "store"), "--subject", "s-ana", "--no-ray",
                                                "--no-progress", "--extractor", "openai",
                                                "--options", options], capsys)
        assert status == 0, summary
        (ana,) = summary["subjects"]
        assert ana["status"] == "erased"
        assert ana["extraction_before_resume"]["fold"]["extraction_calls"] == 1
        assert len(stub.bodies) == 3  # two before, one for the new event; none for erased Ana
        assert b"Quillacollo" in stub.bodies[0] and b"Quillacollo" not in stub.bodies[-1]
    finally:
        stub.close()
