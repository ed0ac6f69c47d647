"""Static checks of deploy/: every overlay renders, and every container runs locked down."""

import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
KUBECTL = ROOT / "bin" / "kubectl"
OVERLAYS = sorted(p.parent for p in (ROOT / "deploy" / "overlays").glob("*/kustomization.yaml"))


def render(overlay: Path) -> list[dict]:
    if not KUBECTL.exists():
        pytest.fail(f"{KUBECTL} missing: run `make local-bin` (make py-test builds it)")
    out = subprocess.run([str(KUBECTL), "kustomize", str(overlay)], capture_output=True, text=True, check=True)
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def pod_specs(objects: list[dict]):
    for obj in objects:
        if obj["kind"] in ("Deployment", "DaemonSet", "StatefulSet", "Job"):
            yield obj, obj["spec"]["template"]["spec"]


def test_overlays_exist():
    assert {p.name for p in OVERLAYS} >= {"kind", "cluster"}


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.name)
def test_every_container_is_locked_down_and_pinned(overlay):
    objects = render(overlay)
    kinds = {o["kind"] for o in objects}
    assert {"Namespace", "Deployment", "DaemonSet", "Service", "NetworkPolicy", "ConfigMap"} <= kinds
    checked = 0
    for obj, spec in pod_specs(objects):
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        assert obj["metadata"]["namespace"] == "rlscore-system", where
        pod_ctx = spec.get("securityContext", {})
        for c in spec.get("initContainers", []) + spec["containers"]:
            ctx = c.get("securityContext", {})
            name = f"{where} container {c['name']}"
            assert ctx.get("runAsNonRoot", pod_ctx.get("runAsNonRoot")) is True, name
            assert ctx.get("allowPrivilegeEscalation") is False, name
            assert ctx.get("readOnlyRootFilesystem") is True, name
            assert "ALL" in ctx.get("capabilities", {}).get("drop", []), name
            image = c["image"]
            assert ":" in image.rsplit("/", 1)[-1] and not image.endswith(":latest"), f"{name}: {image}"
            assert "limits" in c.get("resources", {}) and "requests" in c["resources"], name
            checked += 1
    assert checked >= 5


def test_scheduler_uses_the_generated_config_and_the_server_service():
    objects = render(ROOT / "deploy" / "overlays" / "kind")
    config_maps = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ConfigMap"}
    scheduler = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "rl-scheduler")
    volume = scheduler["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"]
    config = yaml.safe_load(config_maps[volume]["data"]["scheduler-config.yaml"])
    assert config["profiles"][0]["schedulerName"] == "rl-scheduler"
    args = config["profiles"][0]["pluginConfig"][0]["args"]
    services = {o["metadata"]["name"] for o in objects if o["kind"] == "Service"}
    host = args["suggestionURL"].split("//")[1].split(".")[0]
    assert host in services


def test_kind_targets_fail_early_and_clearly_without_a_docker_engine():
    import shutil
    if shutil.which("docker") and subprocess.run(["docker", "info"], capture_output=True).returncode == 0:
        pytest.skip("a Docker engine is running here: make kind-up would really run")
    r = subprocess.run(["make", "-s", "kind-up"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "Docker" in r.stdout + r.stderr and "make local-up" in r.stdout + r.stderr
    assert "kind create cluster" not in r.stdout  # stopped before doing anything
