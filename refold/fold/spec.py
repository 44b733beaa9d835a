"""FoldSpec: everything the fold depends on besides the log, as one frozen, content-hashed value.

The spec hash keys every derived artefact (extraction cache rows, snapshots, the index). Change
any byte of the spec — a prompt, a few-shot example, a decoding parameter, a relation rule, the
code version — and the hash changes, so nothing derived under the old spec is reused by accident.
A spec is recorded in the log (kind ``spec_changed``) before the fold uses it.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from refold.fold.canonical import canonical_json
from refold.fold.errors import ValidationError

CODE_VERSION = "refold-fold/1"


@dataclass(frozen=True)
class ModelSpec:
    """What an LLM extractor sends: model identity, prompt and decoding, all as data."""

    model_id: str
    file_hash: str = ""
    prompt_version: str = "v1"
    prompt_template: str = ""
    #: few-shot examples as (event text, JSON answer) pairs
    few_shot: tuple[tuple[str, str], ...] = ()
    #: decoding parameters as sorted (name, value) pairs, e.g. (("max_tokens", 256), ("temperature", 0.0))
    decoding: tuple[tuple[str, Any], ...] = ()
    max_facts: int = 8
    #: share of a subject/object's normalised tokens that must appear in the event text
    grounding_threshold: float = 0.6

    @property
    def decoding_params(self) -> dict[str, Any]:
        return dict(self.decoding)


@dataclass(frozen=True)
class RollupRule:
    """A rule-based roll-up.

    ``kind="inverse"``: (a, inputs[0], b) ⇒ (b, output, a).
    ``kind="compose"``: (a, inputs[0], b) and (b, inputs[1], c) ⇒ (a, output, c).
    """

    name: str
    kind: str
    inputs: tuple[str, ...]
    output: str

    def __post_init__(self) -> None:
        arity = {"inverse": 1, "compose": 2}
        if self.kind not in arity:
            raise ValidationError(f"roll-up {self.name!r}: unknown kind {self.kind!r}; use 'inverse' or 'compose'")
        if len(self.inputs) != arity[self.kind]:
            raise ValidationError(
                f"roll-up {self.name!r}: kind {self.kind!r} takes {arity[self.kind]} input relation(s)"
            )


DEFAULT_SINGLE_VALUED = (
    "lives_in", "works_at", "risk_tolerance", "age", "email", "phone", "job_title",
    "marital_status", "employer", "located_in", "favorite_color", "address",
)
DEFAULT_ALIASES = (
    ("resides_in", "lives_in"), ("lives_at", "lives_in"), ("moved_to", "lives_in"),
    ("employed_by", "works_at"), ("works_for", "works_at"), ("based_in", "located_in"),
    ("address_is", "lives_in"),
)
DEFAULT_ROLLUPS = (
    RollupRule("works_in", "compose", ("works_at", "located_in"), "works_in"),
    RollupRule("employs", "inverse", ("works_at",), "employs"),
)


@dataclass(frozen=True)
class FoldSpec:
    """The fold's declared inputs besides the log. Hash with :attr:`hash`."""

    extractor: str = "rules"
    extractor_version: str = "1"
    model: ModelSpec | None = None
    single_valued: tuple[str, ...] = DEFAULT_SINGLE_VALUED
    #: (alias, canonical relation) pairs
    relation_aliases: tuple[tuple[str, str], ...] = DEFAULT_ALIASES
    rollups: tuple[RollupRule, ...] = DEFAULT_ROLLUPS
    code_version: str = CODE_VERSION
    extra: tuple[tuple[str, Any], ...] = field(default=())

    def canonical_relation(self, relation: str) -> str:
        """Normalise a relation name (lower snake case) and resolve aliases."""
        name = "_".join(relation.strip().lower().replace("-", " ").split())
        return self._aliases.get(name, name)

    @functools.cached_property  # a frozen value: built once (extractors and the merge ask per fact)
    def _aliases(self) -> dict[str, str]:
        return dict(self.relation_aliases)

    def is_single_valued(self, relation: str) -> bool:
        return self.canonical_relation(relation) in self.single_valued

    def to_json(self) -> dict[str, Any]:
        return _jsonable(asdict(self))

    def canonical_bytes(self) -> bytes:
        """The spec as canonical JSON (:mod:`refold.fold.canonical`): what :attr:`hash` hashes."""
        return canonical_json(self.to_json())

    @functools.cached_property  # a frozen value: computed once (extractors ask for it per event)
    def hash(self) -> str:
        """SHA-256 of the canonical JSON (first 16 hex chars are plenty to key artefacts)."""
        return hashlib.sha256(self.canonical_bytes()).hexdigest()[:16]

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> "FoldSpec":
        model = value.get("model")
        return cls(
            extractor=value["extractor"],
            extractor_version=value.get("extractor_version", "1"),
            model=ModelSpec(
                **{**model, "few_shot": tuple(tuple(p) for p in model.get("few_shot", ())),
                   "decoding": tuple(tuple(p) for p in model.get("decoding", ()))}
            ) if model else None,
            single_valued=tuple(value.get("single_valued", ())),
            relation_aliases=tuple(tuple(p) for p in value.get("relation_aliases", ())),
            rollups=tuple(RollupRule(r["name"], r["kind"], tuple(r["inputs"]), r["output"])
                          for r in value.get("rollups", ())),
            code_version=value.get("code_version", CODE_VERSION),
            extra=tuple(tuple(p) for p in value.get("extra", ())),
        )

    def with_(self, **changes: Any) -> "FoldSpec":
        return replace(self, **changes)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value
