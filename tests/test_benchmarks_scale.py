"""The scale benchmark keeps working: --quick runs every step at two small sizes in child
processes and prints its tables, the ratios against issues #17's and #35's targets and its
correctness checks (no timing is asserted: the machine is shared)."""

from __future__ import annotations

import re

import pytest

from tests.bench_helpers import run_quick


@pytest.fixture(scope="module")
def out() -> str:
    """One ``--quick`` run (two small sizes) for the module's tests."""
    return run_quick("scale.py", timeout=1500)


@pytest.mark.slow
@pytest.mark.search
def test_scale_benchmark_quick(out):
    assert "== state tables, local, in-process ==" in out
    assert "graph engine" not in out
    rows = re.findall(r"^\s+(1000|4000)\s+\d+\.\d+\s+\d+\.\d+\s+\d+\.\d+\s+\d+\.\d+\s+\d+\.\d+x", out, re.MULTILINE)
    assert rows == ["1000", "4000"], out
    checks = re.findall(r"checks: (.*)", out)
    assert len(checks) == 2 and all("NO" not in c for c in checks), out
    assert re.search(r"refold / floor \d+\.\dx \(target <= 20x\)", out)
    assert re.search(r"read one subject: first \d+\.\d ms, median \d+\.\d ms", out)
    # past reads: time travel to a tagged state version (and its overlay) against a read at the head
    assert len(re.findall(r"past reads of one subject: as of the refold's position first \d+\.\d ms.*"
                          r"at the head \(the baseline, same process\) median \d+\.\d ms: as_of / head "
                          r"\d+\.\dx at the tag, \d+\.\dx with the overlay", out)) == 2, out
    # the erasure's state-table refold step is timed apart from the whole erasure (the receipt's timings)
    assert len(re.findall(r"/ erasure refold step \d+\.\dx \(refold \+ digest \d+\.\d+ s, purge \d+\.\d+ s\)",
                          out)) == 2, out
    # the index is built and followed by the agent's searches (the state tables' items, issue #17)
    assert len(re.findall(r"search \(hashing embedder\): index build \d+\.\d+ s \(\d+ facts, \d+ events.*"
                          r"first search after the incremental fold \d+\.\d+ s, after the erasures \d+\.\d+ s; query median "
                          r"\d+\.\d ms; right after an append \d+\.\d+ s", out)) == 2, out
    # the floors of the two ratio targets, measured in the same run
    assert len(re.findall(r"floors: incremental \d+\.\d+ s \(read the \d+ new events .*incremental / floor "
                          r"\d+\.\dx, refold / floor \d+\.\dx .*erasure step \d+\.\d+ s \(delete X's [1-9]\d* "
                          r"rows from one table.*refold / floor \d+\.\dx", out)) == 2, out


@pytest.mark.slow
@pytest.mark.search
def test_scale_benchmark_prints_what_erasures_folds_and_reads_cost_as_the_store_grows(out):
    """Issue #35's rows: every step at both sizes with its growth, the erasures against their
    plain-deltalake floors, files rewritten per erased event, the residue scan against reading
    every file, and the shred-mode store beside the delete-mode one."""
    table = out.split("== what an erasure, an incremental fold and a read cost as the store grows (issue #35) ==")[1]
    for label in ("refold from cache", "incremental fold of new events", "first search after it",
                  "one subject's read, warm (median)", "erase one subject (ordinary)", "erase 100 subjects as one batch",
                  "residue scan alone", "read every file once", "why of a compose roll-up, fresh process",
                  "append (shred mode)", "erase one subject (shred mode)"):
        assert re.search(re.escape(label) + r"\s+\d+\.\d{3}s\s+\d+\.\d{3}s\s+\d+\.\dx", table), (label, table)
    lines = re.findall(r"^(1,000|4,000) events: refold / erase one .*", table, re.MULTILINE)
    assert lines == ["1,000", "4,000"], table
    for line in re.findall(r"^(?:1,000|4,000) events: refold / erase one .*", table, re.MULTILINE):
        assert re.search(r"erase one / its floor \d+\.\d+x \(floor \d+\.\d+ s, [1-9]\d* files", line), line
        assert re.search(r"batch / its floor \d+\.\d+x", line), line
        assert re.search(r"files rewritten per erased event: one subject \d+\.\d+ \([1-9]\d* files, [1-9]\d* events\)",
                         line), line
        assert re.search(r"residue scan / read every file \d+\.\dx .*clean\)", line), line
        assert re.search(r"shred mode: append / delete-mode append \d+\.\dx", line), line
