"""Synthetic workload shared by the benchmarks (scale, reads, shred, one-engine reads):
memory_written facts and chat turns. (The module keeps its old name: tests import it.)

Deterministic for a seed. People move, change jobs and state likes (so supersession and
corroboration happen), organisations are located in cities and move now and then (0.2% of the
events; so the works_in roll-up fires), and a share of chat turns match no pattern (so not every
event yields a fact).
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Iterable, Iterator

from refold.fold.events import Fact, NewEvent
from refold.fold.extractors.rules import RulesExtractor

CITIES = ("Boston", "Paris", "Lyon", "Berlin", "Oslo", "Rome", "Madrid", "Lisbon", "Porto", "Vienna")
ORGS = ("Acme", "Globex", "Initech", "Umbrella", "Hooli", "Stark", "Wayne", "Tyrell")
CHATTER = ("nice weather today!", "see you tomorrow", "thanks, that helps", "what do you think?")


def events(n: int, *, seed: int = 0, people: int | None = None, start: int = 0,
           subject: tuple[str, str] | None = None) -> Iterator[NewEvent]:
    """``n`` events; with ``subject=(id, name)`` every event is about that one data subject."""
    rng = random.Random(seed)
    people = people or max(n // 10, 10)
    for i in range(start, start + n):
        if subject is not None:
            sid, name = subject
        else:
            name = f"Person{rng.randrange(people)}"
            sid = f"s-{name.lower()}"
        roll = rng.random()
        if roll < 0.448:
            relation, obj = rng.choice((("lives_in", rng.choice(CITIES)), ("works_at", rng.choice(ORGS)),
                                        ("likes", f"hobby{rng.randrange(40)}")))
            yield NewEvent(kind="memory_written", content=f"{name} {relation.replace('_', ' ')} {obj}.",
                           source="tool#write_memory", fact=Fact(name, relation, obj),
                           justification=f"the agent was told so in session {i}", subjects=(sid,),
                           event_id=f"ev-{seed}-{i}")
        elif roll < 0.45:  # organisations move rarely (each move re-derives works_in for all staff)
            org = rng.choice(ORGS)
            yield NewEvent(kind="memory_written", content=f"{org} is located in {rng.choice(CITIES)}.",
                           source="tool#write_memory", fact=Fact(org, "located_in", rng.choice(CITIES)),
                           justification="company register", event_id=f"ev-{seed}-{i}")
        else:
            text = rng.choice((f"I live in {rng.choice(CITIES)}.", f"I work at {rng.choice(ORGS)}.",
                               f"My favorite color is {rng.choice(('blue', 'red', 'green'))}.",
                               rng.choice(CHATTER), rng.choice(CHATTER)))
            yield NewEvent(kind="chat_turn", content=f"{name}: {text}", source=f"chat#{i // 20}",
                           subjects=(sid,), event_id=f"ev-{seed}-{i}")


def append_all(mem, events: Iterable[NewEvent | dict], *, size: int = 1000) -> int:
    """Append ``events`` (any iterable: a generator is never held whole) in batches of ``size``;
    return how many were appended."""
    batch, total = [], 0
    for event in events:
        batch.append(event)
        if len(batch) == size:
            mem.append(batch)
            total, batch = total + len(batch), []
    if batch:
        mem.append(batch)
        total += len(batch)
    return total


class Seconds(float):
    """Wall-clock seconds, with the process's CPU seconds over the same span in ``.cpu`` (this
    machine is shared: CPU time is the steadier of the two; Delta's Rust threads count in it)."""

    cpu: float = 0.0


def timed(fn: Callable[[], object]) -> tuple[Seconds, object]:
    start, cpu = time.perf_counter(), time.process_time()
    result = fn()
    took = Seconds(time.perf_counter() - start)
    took.cpu = time.process_time() - cpu
    return took, result


def median(values: list[Seconds]) -> Seconds:
    """The median wall time, carrying the median CPU time."""
    out = Seconds(statistics.median(values))
    out.cpu = statistics.median(v.cpu for v in values)
    return out


def ratio(slow: Seconds, fast: Seconds) -> str:
    return f"{slow / fast:.1f}x wall, {slow.cpu / fast.cpu:.1f}x CPU"


def best(values: list[Seconds]) -> Seconds:
    """The fastest run (wall), carrying the least CPU time."""
    out = Seconds(min(values))
    out.cpu = min(v.cpu for v in values)
    return out


class CountingRules(RulesExtractor):
    """The rules extractor, counting the events it is asked to extract (calls = events)."""

    def __init__(self) -> None:
        self.calls = 0

    def extract(self, batch, spec):
        self.calls += len(batch)
        return super().extract(batch, spec)
