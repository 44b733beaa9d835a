"""`refold checkpoint` and `refold proof inclusion|consistency|verify` (issue #36): an operator
prints checkpoints and proofs from a store; an auditor checks them with the operator's key and
nothing else (the store is deleted before the checks here). Exit 0 when verified, 1 when a proof
or checkpoint does not verify (one line on stderr saying which), 2 for usage errors."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import refold
from refold.cli import main
from refold.storage.log.signing import KEY_ENV
from tests.log_helpers import _event


def _run(*args, code: int = 0, env: dict | None = None) -> tuple[str, str]:
    result = CliRunner(env=env).invoke(main, [str(a) for a in args])
    assert result.exit_code == code, (result.exit_code, result.output, result.stderr)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.stdout, result.stderr


@pytest.fixture(scope="module")
def audit(tmp_path_factory):
    """An operator's store (10 events signed by `signing-key`, then 6 more by a signing writer,
    then 4 unsigned), the checkpoints of sizes 10 and 16, proofs, and the public key as PEM
    and as a verifier key; then the store is removed: the auditor has only the files."""
    base = tmp_path_factory.mktemp("audit")
    store, key = base / "store", base / "operator" / "key.pem"
    mem = refold.init(store)
    mem.append([_event(i, subjects=[f"subj-{i % 3}"]) for i in range(10)])
    _run("signing-key", store, "--key", key)
    files = {"cp10": base / "cp10.txt"}
    files["cp10"].write_text(_run("checkpoint", store)[0])
    writer_env = {KEY_ENV: str(key)}
    (base / "more.jsonl").write_text("".join(json.dumps(_event(i)) + "\n" for i in range(10, 16)))
    _run("append", store, base / "more.jsonl", env=writer_env)
    (base / "unsigned.jsonl").write_text("".join(json.dumps(_event(i)) + "\n" for i in range(16, 20)))
    _run("append", store, base / "unsigned.jsonl")
    files["cp16"] = base / "cp16.txt"
    files["cp16"].write_text(_run("checkpoint", store)[0])
    files["inc16"] = base / "inc16.json"
    files["inc16"].write_text(_run("proof", "inclusion", store, "--seq", 3, "--size", 16, "--json")[0])
    files["inc20"] = base / "inc20.json"
    files["inc20"].write_text(_run("proof", "inclusion", store, "--seq", 3, "--json")[0])
    files["con"] = base / "con.json"
    files["con"].write_text(_run("proof", "consistency", store, "--from", 10, "--to", 16, "--json")[0])
    files["pem"] = store / "receipts" / "heads" / "signing-key.pem"
    files["vkey"] = base / "operator.vkey"
    files["vkey"].write_text(_run("checkpoint", store, "--verifier-key")[0])
    files["commitment"] = refold.open(store).log(since=3, until=4)["commitment"][0]
    files["unsigned"] = _run("checkpoint", store, "--unsigned", "--json")[0]
    files["cp_json"] = _run("checkpoint", store, "--size", 10, "--json")[0]
    files["pem_copy"] = base / "operator.pub.pem"
    shutil.copy(files["pem"], files["pem_copy"])
    files["store"] = store
    shutil.rmtree(store)
    return files


def test_checkpoints_and_proofs_print_as_transparency_logs_print_them(audit):
    cp10 = audit["cp10"].read_text()
    origin, size, root_line, blank, signature, end = cp10.split("\n")
    assert origin.startswith("refold/") and size == "10" and len(base64.b64decode(root_line)) == 32
    assert blank == "" and signature.startswith(f"— {origin} ") and end == ""
    assert audit["vkey"].read_text().startswith(origin + "+")
    inc = json.loads(audit["inc16"].read_text())
    assert set(inc) == {"leaf_index", "tree_size", "leaf_hash", "entry", "commitment", "proof", "root"}
    assert inc["leaf_index"] == 3 and inc["tree_size"] == 16 and inc["commitment"] == audit["commitment"]
    assert base64.b64decode(inc["entry"]).hex() == audit["commitment"]
    assert inc["root"] == audit["cp16"].read_text().split("\n")[2]
    con = json.loads(audit["con"].read_text())
    assert set(con) == {"size1", "size2", "proof", "root1", "root2"} and (con["size1"], con["size2"]) == (10, 16)
    unsigned = json.loads(audit["unsigned"])
    assert unsigned["tree_size"] == 20 and unsigned["note"] is None and unsigned["origin"] == origin
    assert json.loads(audit["cp_json"])["note"] == cp10


@pytest.mark.parametrize("key", ["pem_copy", "vkey"])
def test_the_auditor_verifies_with_the_key_and_the_files_alone(audit, key):
    out, _ = _run("proof", "verify", audit["inc16"], "--checkpoint", audit["cp16"], "--public-key", audit[key])
    assert out.startswith(f"ok: commitment {audit['commitment']} is seq 3 of the log of 16 events")
    out, _ = _run("proof", "verify", audit["con"], "--checkpoint", audit["cp10"], "--checkpoint", audit["cp16"],
                  "--public-key", audit[key], "--json")
    report = json.loads(out)
    assert report["ok"] and report["kind"] == "consistency" and report["checkpoints"] == [10, 16]
    _run("proof", "verify", audit["inc16"], "--checkpoint", audit["cp16"], "--public-key", audit[key],
         "--commitment", audit["commitment"])
    out, _ = _run("proof", "verify", audit["con"], "--checkpoint", audit["cp10"], "--public-key", audit[key])
    assert "root of size 16 comes from the proof file" in out


def _fails(audit, proof, *checkpoints, key="pem_copy", extra=()) -> str:
    args = ["proof", "verify", proof, *[a for c in checkpoints for a in ("--checkpoint", c)],
            "--public-key", audit[key], *extra]
    _, err = _run(*args, code=1)
    assert err.startswith("FAILED: ") and err.count("\n") == 1, err
    return err


def test_what_does_not_verify_is_refused_in_one_line(audit, tmp_path):
    assert "tree of size 20, the checkpoint for size 16: ask for the proof with --size 16" in _fails(
        audit, audit["inc20"], audit["cp16"])
    assert "not commitment" in _fails(audit, audit["inc16"], audit["cp16"], extra=("--commitment", "ab" * 32))
    inc = json.loads(audit["inc16"].read_text())
    cases = {
        "garbage-before": "x" + audit["inc16"].read_text(),
        "garbage-after": audit["inc16"].read_text() + "]",
        "truncated": json.dumps(inc | {"proof": inc["proof"][:-1]}),
        "extended": json.dumps(inc | {"proof": inc["proof"] + inc["proof"][:1]}),
        "modified": json.dumps(inc | {"proof": [inc["proof"][1], inc["proof"][0], *inc["proof"][2:]]}),
        "wrong-index": json.dumps({k: v for k, v in inc.items() if k not in ("entry", "commitment")} | {"leaf_index": 4}),
        "other-root": json.dumps(inc | {"root": base64.b64encode(b"r" * 32).decode()}),
    }
    for name, text in cases.items():
        path = tmp_path / f"{name}.json"
        path.write_text(text)
        _fails(audit, path, audit["cp16"])
    con = json.loads(audit["con"].read_text())
    swapped = tmp_path / "swapped.json"
    swapped.write_text(json.dumps(con | {"root1": con["root2"], "root2": con["root1"]}))
    _fails(audit, swapped, audit["cp10"], audit["cp16"])


def test_a_checkpoint_that_is_not_the_operators_is_refused(audit, tmp_path):
    note = audit["cp16"].read_text()
    for name, text in {"size": note.replace("\n16\n", "\n17\n"), "tail": note + "x\n", "head": "x\n" + note,
                       "crlf": note.replace("\n", "\r\n")}.items():
        path = tmp_path / f"{name}.txt"
        path.write_text(text)
        assert f"checkpoint {path}:" in _fails(audit, audit["inc16"], path)
    other = tmp_path / "other.pem"
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    other.write_bytes(Ed25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    assert "no signature by" in _run("proof", "verify", audit["inc16"], "--checkpoint", audit["cp16"],
                                     "--public-key", other, code=1)[1]


def test_usage_errors_exit_2_in_one_line(audit, tmp_path):
    for args in (["proof", "verify", tmp_path / "missing.json", "--checkpoint", audit["cp16"], "--public-key", audit["vkey"]],
                 ["proof", "verify", audit["inc16"], "--checkpoint", tmp_path / "missing", "--public-key", audit["vkey"]],
                 ["proof", "verify", audit["inc16"], "--checkpoint", audit["cp16"], "--public-key", audit["cp16"]],
                 ["proof", "verify", audit["inc16"], "--checkpoint", audit["cp16"], "--public-key", audit["vkey"],
                  "--commitment", "xyz"],
                 ["proof", "inclusion", audit["store"], "--seq", 1],
                 ["checkpoint", audit["store"]]):
        _, err = _run(*args, code=2)
        assert err.startswith("refold: error: ") and err.count("\n") == 1, err


def test_store_side_errors_say_what_to_do(tmp_path):
    store = tmp_path / "store"
    refold.init(store).append([_event(i) for i in range(5)])
    assert "pass a --size above 3" in _run("proof", "inclusion", store, "--seq", 3, "--size", 2, code=2)[1]
    assert "no tree of size 9" in _run("proof", "consistency", store, "--from", 2, "--to", 9, code=2)[1]
    assert "refold signing-key" in _run("checkpoint", store, code=2)[1]
    assert "refold signing-key" in _run("checkpoint", store, "--verifier-key", code=2)[1]
    out, _ = _run("proof", "inclusion", store, "--seq", 2)
    assert out.startswith("seq 2 (commitment ") and "tree of size 5" in out
    out, _ = _run("checkpoint", store, "--unsigned")
    assert out.split("\n")[1] == "5" and out.count("\n") == 3


@pytest.mark.slow
def test_the_installed_script_verifies_in_a_fresh_process(audit):
    script = str(Path(sys.executable).parent / "refold")
    done = subprocess.run([script, "proof", "verify", str(audit["inc16"]), "--checkpoint", str(audit["cp16"]),
                           "--public-key", str(audit["vkey"])], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("ok: ") and done.stderr == "", done.stderr
