"""An event id can be personal data (an e-mail as ``event_id``). After an erasure it survives
nowhere: tombstones and receipts hold a keyed hash of it (its pseudonym), and no Delta statistic
(``_delta_log`` JSON, checkpoints) or Parquet footer names it; a retry of the erased event is still
deduplicated by that pseudonym. Real Delta tables; the CLI check runs the console script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

import refold
from refold.fold.errors import EventValidationError
from refold.fold.events import parse_jsonl
from refold.storage.erased_ids import KEY_FILE, is_pseudonym, pseudonyms
from refold.erasure.scan import scan
from tests.fold_helpers import fact_event

ANN, BOB = "s-a4n1", "s-b0b2"
# ids that sort first and last, so they are the file's min/max statistics of event_id
FIRST, LAST = "AAA.ann.smith@example.org", "zzz.ann.smith@example.org"
TRACE = "ann.smith"


def _store(root: Path) -> refold.Memory:
    mem = refold.init(root)
    batch = [{"kind": "chat_turn", "content": f"Bob: note {i}", "source": "chat#1", "subjects": [BOB],
              "event_id": f"bob-{i:02d}"} for i in range(6)]
    batch.insert(2, {"kind": "chat_turn", "content": "Ann: I moved to Porto.", "source": "chat#1",
                     "subjects": [ANN], "event_id": FIRST})
    batch.insert(5, {"kind": "chat_turn", "content": "Ann: I like tea.", "source": "chat#1",
                     "subjects": [ANN], "event_id": LAST})
    mem.append(batch)
    mem.register_subject(ANN, "Ann Smith")
    mem.fold()
    return mem


def _stats_ids(dt: DeltaTable) -> set[str]:
    actions = pa.table(dt.get_add_actions(flatten=True))
    return set(actions["min.event_id"].to_pylist()) | set(actions["max.event_id"].to_pylist())


def test_an_erased_event_id_survives_nowhere_and_retries_stay_deduplicated(tmp_path):
    mem = _store(tmp_path / "store")
    assert {FIRST, LAST} <= _stats_ids(DeltaTable(mem.layout.events))  # what used to leak
    tagged = {e.event_id: e.seq for e in mem.events() if ANN in e.subjects}

    receipt = mem.erase(ANN, canaries=[TRACE])
    assert receipt.scan["hits"] == []
    # every file under the store: tombstones, receipts, _delta_log JSON and checkpoints, caches
    assert scan(mem.root, canaries=[TRACE]) == []
    log_dir = Path(mem.layout.events) / "_delta_log"
    assert any(p.name.endswith(".checkpoint.parquet") for p in log_dir.iterdir())
    assert not any(TRACE.encode() in p.read_bytes() for p in Path(mem.root).rglob("*") if p.is_file())
    assert not any(TRACE in i for i in _stats_ids(DeltaTable(mem.layout.events)))

    key = pseudonyms(mem.root)
    assert key is not None and (Path(mem.root) / KEY_FILE).stat().st_mode & 0o077 == 0
    tombs = {e.event_id: e for e in mem.events() if e.is_tombstone}
    assert set(tombs) == {key(FIRST), key(LAST)} and all(is_pseudonym(i) for i in receipt.event_ids)
    assert set(receipt.event_ids) == set(tombs)
    assert mem.verify().ok and mem.verify_receipt(receipt, needles=["Ann Smith"]).ok

    # a caller retrying the erased event gets its (tombstoned) seq back: nothing is resurrected
    count = len(mem.events())
    again = refold.open(mem.root)  # a new process's view: the id index is rebuilt from the files
    retry = [{"kind": "chat_turn", "content": "Ann: I moved to Porto.", "source": "chat#1",
              "subjects": [ANN], "event_id": FIRST}]
    assert again.append(retry) == [tagged[FIRST]]
    assert mem.append(retry) == [tagged[FIRST]]
    assert len(again.events()) == count
    fresh = {"kind": "chat_turn", "content": "Bob: hello", "source": "chat#1", "event_id": "bob-new"}
    assert again.append([fresh, *retry]) == [count, tagged[FIRST]] and len(again.events()) == count + 1

    # an operator naming the erased event again (--include) finds it already done
    plan = mem.erase(BOB, dry_run=True, include=[LAST])
    assert LAST not in plan.event_ids and len(plan.event_ids) == 6


def test_a_state_read_before_another_process_erased_the_subject_is_not_served(tmp_path):
    mem = _store(tmp_path / "store")
    mem.append([fact_event("Ann Smith", "lives_in", "Porto", event_id="ann.smith@example.org/fact",
                           subjects=[ANN])])
    assert ("default/ann smith", "default/porto") in _facts(mem)  # this process's read holds it
    other = refold.open(mem.root)  # another process erases her
    other.erase(ANN)
    # what this process kept of its read holds the erased id, which the log now names only by
    # its pseudonym: its next read answers from the erased state
    assert not any("ann" in u for u, _ in _facts(mem)) and _facts(mem) == _facts(other)


def _facts(mem: refold.Memory) -> set[tuple[str, str]]:
    return set(mem.graph().edges())


def test_the_pseudonym_prefix_is_reserved(tmp_path):
    with pytest.raises(EventValidationError, match="field 'event_id'.*reserves"):
        parse_jsonl([json.dumps({"kind": "observation", "content": "x", "source": "s",
                                 "event_id": "erased:0123"})])
    refold.init(tmp_path / "store")
    script = str(Path(sys.executable).parent / "refold")
    line = json.dumps({"kind": "observation", "content": "x", "source": "s", "event_id": "erased:0123"})
    proc = subprocess.run([script, "append", str(tmp_path / "store"), "-"], input=line + "\n",
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "event_id" in proc.stderr
