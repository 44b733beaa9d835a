"""``refold audit``: run the input-closure check over every request in the extraction cache."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from refold.fold.closure import AuditFinding, check_request
from refold.fold.extract import ModelRequest
from refold.store import Store



@dataclass(frozen=True)
class AuditReport:
    ok: bool
    requests: int
    findings: tuple[AuditFinding, ...]

    def as_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "requests": self.requests,
                "findings": [f.__dict__ for f in self.findings]}


def audit(store: Store) -> AuditReport:

    frame = store.cache.frame()
    rows = frame.filter(frame["request"].is_not_null()).to_dicts() if frame.height else []
    events = {e.event_id: e for e in store.events()}
    specs = store.recorded_specs()
    findings = []
    for row in rows:
        request = ModelRequest(event_ids=tuple(row["request_event_ids"] or ()), payload=row["request"])
        finding = check_request(request, row["spec_hash"], events=events, specs=specs)
        if finding is not None:
            findings.append(finding)
    return AuditReport(ok=not findings, requests=len(rows), findings=tuple(findings))
