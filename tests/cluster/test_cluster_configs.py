"""Every autoscaler config under cluster/ validates against Ray's schema and keeps the safe defaults.

Schema: cloud configs go through `prepare_config` (merge with the provider's defaults.yaml) and
`validate_config` (jsonschema against ray/autoscaler/ray-schema.json) -- what `ray up` does
before it touches a cloud. The fake-multinode config is the complete file the autoscaler reads
(no defaults are merged for that provider), so it is validated as is, as the monitor does.
"""

from __future__ import annotations

import copy
import json
import re
import tomllib
from pathlib import Path

import jsonschema
import pytest
import yaml
from packaging.requirements import Requirement
from ray.autoscaler._private.util import prepare_config, validate_config

REPO = Path(__file__).resolve().parents[2]
CONFIGS = sorted((REPO / "cluster").glob("*.yaml"))
CLOUD = [p for p in CONFIGS if p.stem in ("aws", "gcp")]
IAM_DOCS = sorted((REPO / "cluster" / "iam").glob("*.json"))


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def _validate(config: dict) -> None:
    if config["provider"]["type"] == "fake_multinode":
        validate_config(config)
    else:
        validate_config(prepare_config(copy.deepcopy(config)))


def _ray_pin() -> str:
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    ray = next(Requirement(d) for d in deps if Requirement(d).name == "ray")
    (spec,) = ray.specifier
    assert spec.operator == "==", f"ray must be pinned with ==, got {spec}"
    return spec.version


def _walk(node, path=()):
    """Yield (key path, leaf, is_key) for every leaf and every dict key of a parsed YAML tree."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield path + (key,), key, True
            yield from _walk(value, path + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _walk(value, path + (i,))
    else:
        yield path, node, False


def test_all_expected_configs_present():
    assert {p.name for p in CONFIGS} >= {"aws.yaml", "gcp.yaml", "local-autoscaling.yaml"}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_config_validates_against_ray_schema(path):
    _validate(_load(path))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_schema_check_rejects_a_misspelt_field(path):
    config = _load(path)
    config["idle_timeout_minute"] = config.pop("idle_timeout_minutes")
    with pytest.raises(jsonschema.ValidationError):
        _validate(config)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_head_schedules_no_trials(path):
    config = _load(path)
    head = config["available_node_types"][config["head_node_type"]]
    assert head["resources"].get("CPU") == 0
    assert head["resources"].get("GPU", 0) == 0
    for command in config["head_start_ray_commands"]:
        if "ray start" in command:
            assert "--num-cpus=0" in command


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_workers_scale_from_zero_with_an_idle_timeout(path):
    config = _load(path)
    workers = {k: v for k, v in config["available_node_types"].items()
               if k != config["head_node_type"]}
    assert workers and all(w["min_workers"] == 0 for w in workers.values())
    assert any(w["max_workers"] > 0 for w in workers.values())
    assert 0 < config["idle_timeout_minutes"] <= 30


SECRET_KEY = re.compile(r"(secret|password|passwd|access_key|private_key|credential|api_key|"
                        r"auth_token$|^token$)", re.IGNORECASE)
SECRET_VALUE = re.compile(r"AKIA[0-9A-Z]{16}|ASIA[0-9A-Z]{16}|BEGIN [A-Z ]*PRIVATE KEY|"
                          r"RAY_AUTH_TOKEN=|AWS_SECRET_ACCESS_KEY|AWS_ACCESS_KEY_ID|"
                          r"GOOGLE_APPLICATION_CREDENTIALS|\"private_key\"")


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_no_credentials_in_config(path):
    config = _load(path)
    assert "gcp_credentials" not in config["provider"]
    assert "ssh_private_key" not in config.get("auth", {})
    for key_path, leaf, is_key in _walk(config):
        where = "/".join(map(str, key_path))
        if key_path[:1] == ("file_mounts",):
            # The token is mounted from the user's own ~/.ray/auth_token, never inlined.
            if "auth_token" in str(leaf):
                assert str(leaf).endswith(".ray/auth_token"), where
            continue
        assert not (is_key and SECRET_KEY.search(str(leaf))), f"secret-like key {where}"
        assert not SECRET_VALUE.search(str(leaf)), f"credential-like value at {where}"


def test_secret_check_catches_an_inlined_key():
    config = _load(CLOUD[0])
    config["setup_commands"].append("export AWS_SECRET_ACCESS_KEY=abc")
    assert any(SECRET_VALUE.search(str(leaf)) for _, leaf, _ in _walk(config))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_dashboard_bound_to_localhost(path):
    text = path.read_text()
    assert "0.0.0.0" not in text
    for command in _load(path)["head_start_ray_commands"]:
        if "ray start" in command:
            assert re.search(r"--dashboard-host[= ](127\.0\.0\.1|localhost)\b", command), command


@pytest.mark.parametrize("path", CLOUD, ids=lambda p: p.name)
def test_token_auth_kept_on(path):
    config = _load(path)
    assert "RAY_AUTH_MODE=disabled" not in path.read_text()
    starts = config["head_start_ray_commands"] + config["worker_start_ray_commands"]
    for command in (c for c in starts if "ray start" in c):
        assert "RAY_AUTH_MODE=token" in command, command
    assert "--env RAY_AUTH_MODE=token" in config["docker"]["run_options"]
    mounts = config["file_mounts"]
    assert mounts.get("/home/ray/.ray/auth_token") == "~/.ray/auth_token"


@pytest.mark.parametrize("path", CLOUD, ids=lambda p: p.name)
def test_ray_version_and_python_match_pyproject(path):
    version = _ray_pin()
    docker = _load(path)["docker"]
    assert docker["head_image"] == f"rayproject/ray:{version}-py311-cpu"
    assert docker["worker_image"] == f"rayproject/ray:{version}-py311-gpu"
    text = path.read_text()
    pinned = re.findall(r"rayproject/ray:([0-9.]+)-", text)
    assert pinned and set(pinned) == {version}


@pytest.mark.parametrize("path", CLOUD, ids=lambda p: p.name)
def test_gpu_shapes_have_spot_and_on_demand_types(path):
    config = _load(path)
    workers = {k: v for k, v in config["available_node_types"].items()
               if k != config["head_node_type"]}
    assert all(w["resources"].get("GPU", 0) >= 1 for w in workers.values())
    gpu_counts = {w["resources"]["GPU"] for w in workers.values()}
    assert 1 in gpu_counts and 8 in gpu_counts  # small runs and BERT-base runs
    spot = {k for k in workers if "spot" in k}
    on_demand = {k for k in workers if "ondemand" in k}
    assert spot and on_demand and spot | on_demand == set(workers)
    for name in spot:
        node_config = json.dumps(workers[name]["node_config"])
        assert "spot" in node_config.lower(), name


@pytest.mark.parametrize("path", CLOUD, ids=lambda p: p.name)
def test_setup_installs_the_project_with_pinned_torch(path):
    config = _load(path)
    torch_pin = next(Requirement(d) for d in tomllib.loads(
        (REPO / "pyproject.toml").read_text())["project"]["dependencies"]
        if Requirement(d).name == "torch").specifier
    for commands in (config["head_setup_commands"], config["worker_setup_commands"]):
        torch_at = next(i for i, c in enumerate(commands) if "torch==" in c)
        project_at = next(i for i, c in enumerate(commands) if "/home/ray/bert-objectives" in c)
        assert torch_at < project_at
        assert f'torch{torch_pin}' in commands[torch_at]
    assert config["file_mounts"]["/home/ray/bert-objectives"] == "."


@pytest.mark.parametrize("path", IAM_DOCS, ids=lambda p: p.name)
def test_iam_documents_grant_no_wildcard_storage_access(path):
    doc = json.loads(path.read_text())
    permissions = doc.get("includedPermissions") or [
        action for st in doc["Statement"] for action in
        ([st["Action"]] if isinstance(st["Action"], str) else st["Action"])]
    assert not any(p in ("*", "s3:*", "storage.*") or p.endswith(".*") for p in permissions)
    for statement in doc.get("Statement", []):
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        if any(a.startswith("s3:") for a in actions):
            assert statement["Resource"] != "*" and "BUCKET" in statement["Resource"]


def _gpu_types(config: dict) -> dict:
    return {k: v for k, v in config["available_node_types"].items() if v["resources"].get("GPU", 0)}


@pytest.mark.parametrize("path", CLOUD, ids=lambda p: p.name)
def test_gpu_nodes_boot_one_pinned_image_with_a_current_driver(path):
    """Without an image Ray's AWS default was an Ubuntu 18.04 Deep Learning AMI, and GCP's common-cu124 family
    cannot run the cu128 wheel: one pinned image (an AMI id; a dated GCP image, not a family) for every GPU
    node type, whose name states an NVIDIA driver branch >= 570 where the cloud names it."""
    config = _load(path)
    if config["provider"]["type"] == "aws":
        images = {t["node_config"].get("ImageId") for t in config["available_node_types"].values()}
        assert len(images) == 1 and re.fullmatch(r"ami-[0-9a-f]{17}", images.pop())
        assert "Nvidia Driver GPU AMI (Ubuntu 22.04) 2026" in path.read_text()  # what the id is, said beside it
    else:
        images = {d["initializeParams"]["sourceImage"] for t in _gpu_types(config).values()
                  for d in t["node_config"]["disks"]}
        (image,) = images
        assert "/family/" not in image and int(re.search(r"nvidia-(\d+)", image).group(1)) >= 570
        assert re.search(r"-v20\d{6}$", image)


@pytest.mark.parametrize("path", CLOUD, ids=lambda p: p.name)
def test_a_gpu_node_that_cannot_run_cuda_fails_its_setup(path):
    """Every GPU node's setup ends with the CUDA gate; run here (a CPU-only torch) it exits non-zero with one
    line, so such a node fails setup instead of joining the cluster and failing every trial sent to it."""
    import subprocess
    import sys

    config = _load(path)
    lists = [config["worker_setup_commands"]] + [t["worker_setup_commands"] for t in _gpu_types(config).values()
                                                 if "worker_setup_commands" in t]
    for commands in lists:
        gate = next(c for c in commands if "trainables.gpu_check --usable" in c)
        assert commands.index(gate) > next(i for i, c in enumerate(commands) if "/home/ray/bert-objectives" in c)
    run = subprocess.run([sys.executable, "-m", "trainables.gpu_check", "--usable"], cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 2 and len(run.stdout.strip().splitlines()) == 1 and "CUDA is not usable" in run.stdout


@pytest.mark.parametrize("path", CLOUD, ids=lambda p: p.name)
def test_mps_starts_on_the_gpu_nodes_where_trials_share_a_gpu(path):
    """One-GPU nodes run the fractional-GPU presets (bert-mini 0.5, gpu-quick 0.25): their setup is the common
    worker setup plus the MPS daemon; the 8-GPU nodes (bert-base, whole GPUs over NCCL) keep the common one."""
    config = _load(path)
    for name, node in _gpu_types(config).items():
        if node["resources"]["GPU"] == 1:
            own = node["worker_setup_commands"]
            assert own[:-1] == config["worker_setup_commands"] and "nvidia-cuda-mps-control -d" in own[-1], name
        else:
            assert "worker_setup_commands" not in node, name
    assert not any("mps" in c for c in config["worker_setup_commands"] + config["worker_start_ray_commands"])
