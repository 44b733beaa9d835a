"""The scale benchmark keeps working: --quick runs every step at two small sizes in child
processes and prints its table, the ratios against issue #17's targets and its correctness checks
(no timing is asserted: the machine is shared)."""

from __future__ import annotations

import re

import pytest

from tests.bench_helpers import run_quick


@pytest.mark.slow
@pytest.mark.search
def test_scale_benchmark_quick():
    out = run_quick("scale.py")
    assert "== state tables, local, in-process ==" in out
    assert "graph engine" not in out
    rows = re.findall(r"^\s+(1000|4000)\s+\d+\.\d+\s+\d+\.\d+\s+\d+\.\d+\s+\d+\.\d+\s+\d+\.\d+x", out, re.M)
    assert rows == ["1000", "4000"], out
    checks = re.findall(r"checks: (.*)", out)
    assert len(checks) == 2 and all("NO" not in c for c in checks), out
    assert re.search(r"refold / floor \d+\.\dx \(target <= 20x\)", out)
    assert re.search(r"read one subject: first \d+\.\d ms, median \d+\.\d ms", out)
    # past reads: time travel to a tagged state version (and its overlay) against a read at the head
    assert len(re.findall(r"past reads of one subject: as of the refold's position first \d+\.\d ms.*"
                          r"at the head \(the baseline, same process\) median \d+\.\d ms: as_of / head "
                          r"\d+\.\dx at the tag, \d+\.\dx with the overlay", out)) == 2, out
    # the erasure's state-table refold step is timed apart from the whole erasure
    assert len(re.findall(r"/ erasure refold step \d+\.\dx \(step \d+\.\d+ s, digest \d+\.\d+ s\)", out)) == 2, out
    # the index is built and followed by the agent's searches (the state tables' items, issue #17)
    assert len(re.findall(r"search \(hashing embedder\): index build \d+\.\d+ s \(\d+ facts, \d+ events.*"
                          r"first search after the incremental fold and the erasure \d+\.\d+ s; query median "
                          r"\d+\.\d ms; right after an append \d+\.\d+ s", out)) == 2, out
    # the floors of the two ratio targets, measured in the same run
    assert len(re.findall(r"floors: incremental \d+\.\d+ s \(read the \d+ new events .*incremental / floor "
                          r"\d+\.\dx, refold / floor \d+\.\dx .*erasure step \d+\.\d+ s \(delete X's [1-9]\d* "
                          r"rows from one table.*refold / floor \d+\.\dx", out)) == 2, out
