"""LoCoMo: ingest one real conversation, erase one speaker, scan for 20 of their distinctive
phrases (0 hits) and report the share of the other speaker's facts that survive.

Needs ../shared/data/locomo10.zip (the LoCoMo-10 release); skipped with a message when absent.
"""

from __future__ import annotations

import re

import pytest

import refold
from refold.erasure.scan import scan
from tests.locomo_helpers import conversations

def _conversation() -> dict:
    return conversations()[0]


def _turns(conv: dict) -> list[dict]:
    sessions = sorted((k for k in conv if re.fullmatch(r"session_\d+", k)), key=lambda k: int(k.split("_")[1]))
    return [turn for key in sessions for turn in conv[key] if turn.get("text")]


def _phrases(mine: list[str], others: list[str], names: list[str], n: int = 20) -> list[str]:
    """n five-word phrases from ``mine`` that occur in no other speaker's text and name nobody."""
    theirs = " ".join(others).lower()
    out: list[str] = []
    for text in mine:
        words = text.split()
        for i in range(0, max(len(words) - 4, 0), 5):
            phrase = " ".join(words[i:i + 5])
            low = phrase.lower()
            if len(phrase) >= 20 and low not in theirs and not any(m.lower() in low for m in names) \
                    and all(low not in p.lower() and p.lower() not in low for p in out):
                out.append(phrase)
                break
        if len(out) == n:
            break
    return out


@pytest.mark.slow
def test_locomo_erase_one_speaker(tmp_path):
    conv = _conversation()
    a, b = conv["speaker_a"], conv["speaker_b"]
    turns = _turns(conv)
    ids = {a: "s-speaker-a", b: "s-speaker-b"}
    mem = refold.init(tmp_path / "store")
    mem.append([{"kind": "chat_turn", "content": f"{t['speaker']}: {t['text']}",
                 "source": f"locomo:{t.get('dia_id', i)}", "subjects": [ids[t["speaker"]]],
                 "event_id": f"locomo-{i:05d}"} for i, t in enumerate(turns)])
    mem.register_subject(ids[a], a)
    mem.register_subject(ids[b], b)
    mem.fold()

    by_speaker = {a: [t["text"] for t in turns if t["speaker"] == a],
                  b: [t["text"] for t in turns if t["speaker"] == b]}
    phrases = _phrases(by_speaker[a], by_speaker[b], [a, b])
    assert len(phrases) == 20
    assert all(scan(mem.root, [p]) for p in phrases[:3])  # present before

    b_events = {f"locomo-{i:05d}" for i, t in enumerate(turns) if t["speaker"] == b}

    def b_facts():
        return {(d["subject"], d["relation"], d["object"]) for *_, d in mem.state().graph.edges(data=True)
                if set(d["sources"]) & b_events}

    before = b_facts()
    receipt = mem.erase(ids[a], canaries=phrases)
    assert scan(mem.root, phrases) == []
    # the receipt's scan also looked for the registered name: the other speaker's turns still
    # say it (untagged mentions, kept unless the operator adds --include-mentions), nothing else
    assert {h["needle_index"] for h in receipt.scan["hits"]} <= {0}
    assert mem.verify().ok
    after = b_facts()
    share = len(before & after) / len(before) if before else 1.0
    print(f"\nLoCoMo: erased {len(receipt.events)} turns of {a}; {len(before)} facts from {b}'s turns, "
          f"{share:.1%} survive")
    assert share == 1.0
