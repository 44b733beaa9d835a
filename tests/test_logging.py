"""refold logs what a fold and an erasure did, with timings, and never the personal data an erasure
removes (a log line naming the erased subject would be residue the erasure cannot reach)."""

from __future__ import annotations

import logging
import re

import refold
from tests.fold_helpers import fact_event

SUBJECT = "s-quillon-7f3a"
NAME, ALIAS, EMAIL = "Quillon Varga", "Quill", "quillon@example.org"
SECONDS = re.compile(r"\d+\.\d{3}s")


def _lines(caplog, prefix: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith(prefix)]


def test_a_fold_and_an_erasure_log_timings_and_no_personal_data(tmp_path, caplog):
    mem = refold.init(tmp_path / "s")
    mem.append([fact_event(NAME, "lives_in", "Zorbton", day=1, subjects=[SUBJECT]),
                fact_event(NAME, "works_at", "Acme", day=2, subjects=[SUBJECT]),
                fact_event("Yolanda Brisk", "lives_in", "Oslo", day=3, subjects=["s-other"]),
                {"kind": "chat_turn", "content": f"I wrote to {ALIAS} at {EMAIL}.", "source": "chat#1",
                 "subjects": [SUBJECT]}])
    mem.register_subject(SUBJECT, NAME, aliases=[ALIAS], identifiers=[EMAIL])
    with caplog.at_level(logging.DEBUG, logger="refold"):
        mem.fold()
        receipt = mem.erase(SUBJECT)
    assert receipt.status == "erased"

    folds = _lines(caplog, "refold.engine")
    assert any(line.startswith("fold (full") and " events folded" in line and SECONDS.search(line)
               for line in folds), folds
    erasure = _lines(caplog, "refold.erasure")
    for step in ("tombstones", "purge", "refold", "scan", "receipt"):
        assert any(f": {step} in " in line and SECONDS.search(line) for line in erasure), (step, erasure)
    assert any(line.endswith("s") and ": done in " in line for line in erasure), erasure

    everything = "\n".join(f"{r.name} {r.getMessage()} {r.exc_text or ''}" for r in caplog.records)
    for secret in (SUBJECT, NAME, ALIAS, EMAIL, "Zorbton"):
        assert secret not in everything, secret
