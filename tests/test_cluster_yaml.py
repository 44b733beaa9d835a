"""cluster.yaml is a valid Ray cluster launcher config with GPU workers for vLLM extraction.

Validation is Ray's own: ``prepare_config`` (fills the provider's defaults, as ``ray up`` does)
then ``validate_config`` (the JSON schema plus the cross-field checks). No cloud is contacted.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

pytest.importorskip("ray", reason="cluster.yaml is checked with Ray's validator: pip install 'refold[ray]'")

from ray._private.label_utils import validate_node_labels  # noqa: E402
from ray.autoscaler._private.util import prepare_config, validate_config  # noqa: E402

CLUSTER_YAML = Path(__file__).resolve().parents[1] / "cluster.yaml"


@pytest.fixture(scope="module")
def config() -> dict:
    return yaml.safe_load(CLUSTER_YAML.read_text())


def _prepared(config: dict) -> dict:
    prepared = prepare_config(copy.deepcopy(config))
    validate_config(prepared)
    return prepared


def test_ray_accepts_the_config(config):
    prepared = _prepared(config)
    assert prepared["provider"]["type"] == "aws"
    assert prepared["head_node_type"] in prepared["available_node_types"]
    for spec in prepared["available_node_types"].values():
        validate_node_labels(spec.get("labels", {}))


def test_ray_rejects_a_broken_copy(config):
    """The validator is really checking: a fractional GPU count and a missing head type fail."""
    import jsonschema

    broken = copy.deepcopy(config)
    broken["available_node_types"]["worker.gpu.l4"]["resources"]["GPU"] = 0.5
    with pytest.raises(jsonschema.ValidationError):
        _prepared(broken)
    broken = _prepared(config)
    broken["head_node_type"] = "no.such.type"
    with pytest.raises(ValueError, match="head_node_type"):
        validate_config(broken)


def _gpu_types(config: dict) -> dict[str, dict]:
    return {name: spec for name, spec in config["available_node_types"].items()
            if name != config["head_node_type"] and "gpu" in name}


def test_gpu_worker_types_ask_for_gpus_and_install_vllm(config):
    gpu_types = _gpu_types(config)
    assert gpu_types, "no GPU worker node type"
    for name, spec in gpu_types.items():
        resources = spec["resources"]
        assert resources.get("GPU", 0) >= 1, f"{name} asks for no GPU"
        assert resources.get("CPU", 0) >= resources["GPU"], f"{name}: at least a CPU per GPU"
        assert any(key.startswith("accelerator_type:") for key in resources), name
        assert spec["node_config"]["InstanceType"].startswith(("g", "p")), name  # EC2 GPU families
        assert spec.get("min_workers", 0) == 0, f"{name} should scale to zero when idle"
        assert spec["max_workers"] >= 1
        assert any("[vllm]" in command for command in spec["worker_setup_commands"]), name
    # the global cap leaves room for every GPU type at its maximum
    assert config["max_workers"] >= sum(s["max_workers"] for s in gpu_types.values())


def test_head_has_no_gpu_and_auth_stays_on(config):
    head = config["available_node_types"][config["head_node_type"]]
    assert head["resources"].get("GPU", 0) == 0
    assert not head["node_config"]["InstanceType"].startswith(("g", "p"))
    starts = config["head_start_ray_commands"] + config["worker_start_ray_commands"]
    assert all("RAY_AUTH_MODE=token" in c for c in starts if "ray start" in c)
    assert "~/.ray/auth_token" in config["file_mounts"]
