"""Reads of a store at a past version that an erasure must not leave stale (issue #16, item 6).

Also runnable as ``python -m tests.epoch_reader ROOT VERSION FACT_ID``: a reader process opened
before an erasure. It reads once (filling its caches), prints the result as a JSON line, waits
for a line on stdin (the parent erases meanwhile), reads again and prints that.
"""

from __future__ import annotations

import json
import sys

import refold
from refold.fold.errors import NotFoundError

SECRET = "Zephyrtown"  # the object of the erased subject's fact
EMB = "hashing"


def store_events() -> list[dict]:
    from tests.fold_helpers import fact_event

    return [
        fact_event("Quillon", "lives_in", SECRET, day=1, event_id="ev-x", subjects=["s-x"]),
        fact_event("Yolanda", "lives_in", "Oslo", day=2, event_id="ev-y", subjects=["s-y"]),
        fact_event("Cy", "likes", "Tea", day=3, event_id="ev-z"),
    ]


def reads(mem: refold.Memory, version: int, fact_id: str) -> dict[str, bool]:
    """For each read at ``version``: does the erased subject's fact show?"""
    try:
        why = SECRET in json.dumps(mem.why(fact_id, as_of=version), default=str)
    except NotFoundError:
        why = False
    searched = mem.search(SECRET, k=10, as_of=version, history=True, embedder=EMB)
    return {
        "facts": SECRET in mem.facts(as_of=version)["object"].to_list(),
        "graph": any(d["name"] == SECRET for _, d in mem.graph(as_of=version).nodes(data=True)),
        "state": any(d["name"] == SECRET for _, d in mem.state(as_of=version).graph.nodes(data=True)),
        "why": why,
        "search": SECRET in searched["object"].to_list(),
        "facts_now": SECRET in mem.facts()["object"].to_list(),
    }


def main(root: str, version: int, fact_id: str) -> None:
    mem = refold.open(root, create=False)
    print(json.dumps(reads(mem, version, fact_id)), flush=True)
    sys.stdin.readline()
    print(json.dumps(reads(mem, version, fact_id)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
