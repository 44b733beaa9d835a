"""The fold embeds: `refold fold --index` brings the vector index up to date with the new state.

Uses the hashing embedder (a deterministic test adapter) so the test stays fast; the real
packaged MiniLM model is exercised in tests/test_search_minilm.py.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from refold.cli import main
from tests.fold_helpers import fact_event


@pytest.mark.search
def test_fold_with_index_embeds_new_facts(mem):
    mem.append([fact_event("Maria", "lives_in", "Berlin", day=0),
                fact_event("Tom", "works_at", "Initech", day=1)])
    result = CliRunner().invoke(main, ["fold", mem.root, "--index", "hashing", "--no-progress"])
    assert result.exit_code == 0, result.output
    view = mem.index(embedder="hashing")
    assert view.report.embedded == 0  # the fold already embedded everything
    hits = mem.search("Maria lives in Berlin", k=1, embedder="hashing")
    assert hits["object"].to_list() == ["Berlin"]
    mem.append(fact_event("Maria", "lives_in", "Paris", day=5))
    report = mem.fold(index="hashing")
    assert mem.index(embedder="hashing").report.last_seq == report.last_seq
    assert mem.search("Maria lives in", k=1, embedder="hashing")["object"].to_list() == ["Paris"]
