"""CLI: refold subjects / find / erase [--dry-run] / receipt verify / scan."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import refold.cli.erasure_cmds  # noqa: F401  (registers the commands until refold.cli imports it)
from refold.cli import main
from tests import erasure_helpers as H


def _run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


@pytest.mark.slow
def test_erasure_commands_end_to_end(tmp_path):
    mem = H.build(tmp_path / "store")
    root = mem.root

    out = _run("subjects", root, "--json")
    assert out.exit_code == 0
    assert [json.loads(line)["subject_id"] for line in out.output.splitlines()] == [H.X, H.Y]
    out = _run("subjects", root, "--add", "s-z", "--name", "Zed Zulu", "--alias", "Zed")
    assert out.exit_code == 0 and "Zed Zulu" in out.output and "3 subject(s)" in out.output

    found = [json.loads(line) for line in _run("find", root, "--subject", H.X, "--json").output.splitlines()]
    assert len([e for e in found if e["match"] == "tagged"]) == 12
    assert [e["event_id"] for e in found if e["match"] == "untagged_mention"] == ["ev-mention"]

    dry = _run("erase", root, "--subject", H.X, "--dry-run", "--include-mentions")
    assert dry.exit_code == 0 and "erase 13 event(s)" in dry.output and "out of scope" in dry.output

    hits = _run("scan", root, "--needle", H.CANARIES[0], "--needle", H.X_NAME)
    assert hits.exit_code == 1 and "events/" in hits.output

    args = ["erase", root, "--subject", H.X, "--include-mentions", "--json"]
    for canary in H.CANARIES:
        args += ["--canary", canary]
    done = _run(*args)
    assert done.exit_code == 0
    receipt = json.loads(done.output)
    assert receipt["status"] == "erased" and receipt["scan"]["hits"] == []

    clean = _run("scan", root, "--needle", H.CANARIES[0], "--needle", H.X_NAME, "--json")
    assert clean.exit_code == 0 and json.loads(clean.output)["hits"] == []

    verified = _run("receipt", "verify", root, receipt["erasure_id"], "--needle", H.X_NAME)
    assert verified.exit_code == 0 and "FAIL" not in verified.output and "residue scan" in verified.output

    again = _run("erase", root, "--subject", H.X)
    assert again.exit_code == 0 and "nothing to erase" in again.output

    unknown = _run("erase", root, "--subject", "s-nobody")
    assert unknown.exit_code == 2 and "unknown subject" in unknown.output
