"""Input closure, checked: every recorded model request must be re-derivable from log + spec.

A request is built only by :func:`refold.fold.prompts.build_request` from the event(s) it names
and the spec. The audit rebuilds it from the events *as they are in the log* and the spec *as it
is recorded in the log*, and compares the bytes. Any outside text that slipped into a prompt, a
cited event that is not in the log, or a spec that was never recorded makes the audit fail, naming
the request.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from refold.fold.events import Event
from refold.fold.extract import ModelRequest
from refold.fold.spec import FoldSpec


@dataclass(frozen=True)
class AuditFinding:
    request_id: str
    event_ids: tuple[str, ...]
    spec_hash: str
    problem: str


def check_request(request: ModelRequest, spec_hash: str, *, events: Mapping[str, Event],
                  specs: Mapping[str, FoldSpec]) -> AuditFinding | None:
    """None when ``request`` is exactly what the log and the recorded spec produce."""
    from refold.fold.prompts import build_request

    def finding(problem: str) -> AuditFinding:
        return AuditFinding(request.request_id, request.event_ids, spec_hash, problem)

    spec = specs.get(spec_hash)
    if spec is None:
        return finding(f"spec {spec_hash} is not recorded in the log (no spec_changed event)")
    missing = [i for i in request.event_ids if i not in events]
    if missing:
        return finding(f"cites event(s) not in the log: {', '.join(missing)}")
    if len(request.event_ids) != 1:
        return finding("requests are built from exactly one event; this one cites "
                       f"{len(request.event_ids)}")
    event = events[request.event_ids[0]]
    if event.content is None:
        return finding(f"cites erased event {event.event_id}; its extraction should have been purged")
    rebuilt = build_request(event, spec)
    if rebuilt.payload != request.payload:
        a, b = rebuilt.payload, request.payload
        at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        return finding(
            f"request bytes differ from the rebuild at byte {at}: recorded …{b[max(0, at - 30):at + 40]!r}… "
            f"vs rebuilt …{a[max(0, at - 30):at + 40]!r}…"
        )
    return None
