"""How much of LoCoMo does the ``rules`` extractor turn into facts?

Reads the LoCoMo conversations straight from ``../shared/data/locomo10.zip`` (never copied into
the repository), turns every dialogue turn into a ``chat_turn`` event (content ``"Speaker: text"``,
source ``"locomo:<conversation>:<dia_id>"``, subjects ``[speaker]``, valid_from = the session's
date), runs :class:`RulesExtractor` over them and prints:

* the share of turns that give at least one fact,
* the facts per pattern,
* ten examples (turn text → facts), spread evenly over the fact-bearing turns.

    python benchmarks/locomo_rules.py [--data PATH] [--examples 10] [--all] [--quick]

``--quick`` reads one conversation only; when the data file is absent it then exits 0 with a
"skipped" line (so ``make bench`` passes on a machine without the dataset); otherwise a missing
file exits 2 with a message saying where to put it.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import sys
import time
import zipfile
from datetime import datetime, timezone
from pathlib import Path

from refold.extractors import get_extractor
from refold.fold.events import Event
from refold.fold.spec import FoldSpec

# $REFOLD_LOCOMO_DIR (set by .ci/run) or ../shared/data beside the repository root
DEFAULT_DATA = Path(os.environ.get("REFOLD_LOCOMO_DIR")
                    or Path(__file__).resolve().parents[1].parent / "shared" / "data") / "locomo10.zip"
_SESSION = re.compile(r"session_(\d+)")


def _session_time(text: str | None) -> datetime | None:
    """LoCoMo writes "1:56 pm on 8 May, 2023"; timezone unknown, so UTC by convention."""
    if not text:
        return None
    try:
        return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def load_events(path: Path, *, limit_conversations: int | None = None) -> list[Event]:
    """Every dialogue turn of the zip as a ``chat_turn`` Event, in conversation/session/turn order."""
    events: list[Event] = []
    recorded = datetime(2024, 1, 1, tzinfo=timezone.utc)
    with zipfile.ZipFile(path) as archive:
        names = sorted(n for n in archive.namelist() if n.endswith(".json"))
        for name in names[:limit_conversations]:
            conversation = Path(name).stem
            data = json.loads(archive.read(name))
            sessions = sorted((int(m.group(1)), key) for key in data
                              if (m := _SESSION.fullmatch(key)))
            for number, key in sessions:
                when = _session_time(data.get(f"{key}_date_time"))
                for turn in data[key]:
                    events.append(Event(
                        seq=len(events), event_id=f"locomo-{conversation}-{turn['dia_id']}",
                        recorded_at=recorded, table_version=0, kind="chat_turn", tenant="locomo",
                        source=f"locomo:{conversation}:{turn['dia_id']}",
                        content=f"{turn['speaker']}: {turn['text']}",
                        subjects=(turn["speaker"],), valid_from=when,
                    ))
    return events


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="path to locomo10.zip")
    parser.add_argument("--examples", type=int, default=10, help="how many examples to print")
    parser.add_argument("--all", action="store_true", help="print every fact-bearing turn")
    parser.add_argument("--quick", action="store_true", help="one conversation only")
    args = parser.parse_args(argv)

    path = args.data.resolve()
    if not path.is_file():
        message = (f"LoCoMo data not found at {path}; put locomo10.zip there (see "
                   "../shared/data/README.md) or pass --data PATH")
        if args.quick:
            print(f"skipped: {message}")
            return 0
        print(message, file=sys.stderr)
        return 2

    events = load_events(path, limit_conversations=1 if args.quick else None)
    extractor = get_extractor("rules")
    spec = FoldSpec()
    started = time.perf_counter()
    extractions = extractor.extract(events, spec)
    seconds = time.perf_counter() - started

    hits = [(e, x) for e, x in zip(events, extractions, strict=True) if x.facts]
    per_pattern = collections.Counter(
        name for _, x in hits for name in dict(x.meta).get("patterns", ()))
    facts = sum(len(x.facts) for _, x in hits)
    print(f"turns: {len(events)}  turns with >=1 fact: {len(hits)} "
          f"({100 * len(hits) / max(len(events), 1):.1f}%)  facts: {facts}  "
          f"({len(events) / max(seconds, 1e-9):,.0f} turns/s)")
    print("facts per pattern: " + ", ".join(f"{k} {v}" for k, v in per_pattern.most_common()))

    shown = hits if args.all else hits[:: max(1, len(hits) // max(args.examples, 1))][: args.examples]
    print(f"\n{'all' if args.all else len(shown)} example(s):")
    for event, extraction in shown:
        print(f"- [{event.source}] {event.content}")
        for fact in extraction.facts:
            print(f"    → ({fact.subject}, {fact.relation}, {fact.object})  conf {fact.confidence}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
