"""Input closure: `refold audit` re-derives every recorded model request from log + spec.

The extractors here are test adapters that build requests exactly as the LLM adapters do
(`build_request`) and answer with a fixed JSON instead of running a model: the audit examines
requests, not model quality, and the real models are exercised in the LLM tests.
"""

from __future__ import annotations

import json
from dataclasses import replace

from click.testing import CliRunner

from refold.cli import main
from refold.fold.extract import Extraction, ModelRequest
from refold.fold.prompts import build_request, default_model_spec
from refold.fold.spec import FoldSpec

SPEC = FoldSpec(extractor="echo", model=default_model_spec("test-model", "0" * 64))


class EchoExtractor:
    """Builds the real request, answers ``{"facts": []}``."""

    name = "echo"

    def default_spec(self) -> FoldSpec:
        return SPEC

    def _request(self, event, spec) -> ModelRequest:
        return build_request(event, spec)

    def extract(self, events, spec):
        out = []
        for e in events:
            request = self._request(e, spec)
            out.append(Extraction(event_id=e.event_id, spec_hash=spec.hash, request=request,
                                  raw_output='{"facts": []}', model_id="test-model", engine="echo"))
        return out


class LeakyExtractor(EchoExtractor):
    """Slips outside text (a 'retrieved' note) into the prompt: exactly what closure forbids."""

    def _request(self, event, spec) -> ModelRequest:
        honest = build_request(event, spec)
        payload = json.loads(honest.payload)
        payload["messages"][0]["content"] += "\nContext from the CRM: customer is a VIP."
        return ModelRequest(event_ids=honest.event_ids,
                            payload=json.dumps(payload, sort_keys=True, separators=(",", ":")))


def _events(mem):
    mem.append([{"kind": "chat_turn", "content": f"Ann: I live in Oslo {i}", "source": f"chat#{i}"}
                for i in range(3)])


def test_audit_passes_when_every_request_is_derived_from_log_and_spec(mem):
    _events(mem)
    report = mem.fold(extractor=EchoExtractor())
    assert report.extraction_calls == 3
    audit = mem.audit()
    assert audit.ok and audit.requests == 3 and audit.findings == ()
    result = CliRunner().invoke(main, ["audit", mem.root])
    assert result.exit_code == 0 and "3 model request(s)" in result.output


def test_audit_fails_naming_the_request_when_outside_text_leaks_in(mem):
    _events(mem)
    mem.fold(extractor=LeakyExtractor())
    audit = mem.audit()
    assert not audit.ok and len(audit.findings) == 3
    finding = audit.findings[0]
    assert "differ" in finding.problem and "CRM" in finding.problem
    rows = mem.cache.frame()
    assert finding.request_id in set(rows["request_id"].to_list())
    result = CliRunner().invoke(main, ["audit", mem.root])
    assert result.exit_code == 1
    assert f"request {finding.request_id}" in result.output and "AUDIT FAILED" in result.output


def test_audit_fails_when_a_request_cites_an_event_not_in_the_log(mem):
    _events(mem)
    event = mem.events()[0]
    ghost = replace(event, event_id="ghost-event")
    request = build_request(ghost, SPEC)
    mem.fold(extractor=EchoExtractor())
    mem.cache.put([Extraction(event_id="ghost-event", spec_hash=SPEC.hash, request=request,
                              raw_output="{}")])
    audit = mem.audit()
    assert not audit.ok
    (finding,) = audit.findings
    assert finding.event_ids == ("ghost-event",) and "not in the log" in finding.problem


def test_audit_fails_when_the_spec_was_never_recorded(mem):
    _events(mem)
    event = mem.events()[0]
    other = replace(SPEC, extractor_version="unrecorded")
    mem.cache.put([Extraction(event_id=event.event_id, spec_hash=other.hash,
                              request=build_request(event, other), raw_output="{}")])
    audit = mem.audit()
    assert not audit.ok and "not recorded in the log" in audit.findings[0].problem


def test_changing_a_prompt_byte_changes_the_spec_hash_and_misses_the_cache(mem):
    _events(mem)
    mem.fold(extractor=EchoExtractor())
    tweaked = replace(SPEC, model=replace(SPEC.model, prompt_template=SPEC.model.prompt_template + " "))
    assert tweaked.hash != SPEC.hash
    report = mem.fold(extractor=EchoExtractor(), spec=tweaked)
    assert report.extraction_calls == 3  # nothing reused across specs
    assert mem.audit().ok and mem.audit().requests == 6
