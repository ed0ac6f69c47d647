"""The images `make images` builds, run with podman as a cluster would run them: non-root, read-only root
filesystem, host network. The server image serves the shipped models from rlscore[serve] alone; the
probe image serves its metric; the scheduler image is one static kube-scheduler with RLScore. (The
e2e test tests/e2e/test_containers.py schedules pods with the images on the local cluster.)"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.helpers.processes import free_port, wait_for

ROOT = Path(__file__).resolve().parents[1]
REGISTRY = os.environ.get("REGISTRY", "rlscore")
SCHEDULER = f"{REGISTRY}/kube-scheduler:v1.35.4-rlscore.0"
SERVER = f"{REGISTRY}/suggestion-server:0.1.0"
PROBE = f"{REGISTRY}/latency-probe:0.1.0"
LIMITS_MB = {SERVER: 400, SCHEDULER: 120, PROBE: 150}
PODMAN = ["podman", "--storage-driver", "vfs", "--runtime", "runc", "--cgroup-manager", "cgroupfs"]
ENV = {**os.environ, "CONTAINERS_CONF": str(ROOT / "deploy" / "images" / "containers.conf")}


def podman(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*PODMAN, *args], capture_output=True, text=True, env=ENV, timeout=timeout)


def inspect(image: str) -> dict:
    out = podman("image", "inspect", image)
    assert out.returncode == 0, f"{image} is not built (make images): {out.stderr[-300:]}"
    return json.loads(out.stdout)[0]


@pytest.mark.parametrize("image", [SERVER, SCHEDULER, PROBE])
def test_images_are_small_non_root_and_labelled(image):
    meta = inspect(image)
    size_mb = meta["Size"] / 1e6
    assert size_mb <= LIMITS_MB[image], f"{image}: {size_mb:.0f} MB, over {LIMITS_MB[image]} MB"
    config = meta["Config"]
    assert config.get("User") not in (None, "", "0", "root", "0:0"), config.get("User")
    labels = config.get("Labels") or {}
    assert labels.get("org.opencontainers.image.version") and labels.get("org.opencontainers.image.source")


def test_the_server_image_has_no_training_stack():
    out = podman("run", "--rm", "--read-only", "--entrypoint", "/opt/rlscore/bin/python", SERVER, "-c",
                 "import importlib.util as u; print([m for m in ('torch', 'gymnasium', 'optuna', 'tensorboard', "
                 "'matplotlib', 'scipy', 'agent') if u.find_spec(m)])")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


class Container:
    def __init__(self, image: str, *args: str, env: dict | None = None, volumes: tuple[str, ...] = ()):
        self.name = f"rlscore-test-{free_port()}"
        run = ["run", "-d", "--name", self.name, "--network", "host", "--read-only", "--tmpfs", "/tmp"]
        for key, value in (env or {}).items():
            run += ["-e", f"{key}={value}"]
        for volume in volumes:
            run += ["-v", volume]
        started = podman(*run, image, *args)
        assert started.returncode == 0, started.stderr[-2000:]

    def logs(self) -> str:
        return podman("logs", self.name).stdout + podman("logs", self.name).stderr

    def stop(self) -> None:
        podman("rm", "-f", "-t", "5", self.name)


def test_the_server_image_serves_the_shipped_models():
    port = free_port()
    server = Container(SERVER, "--port", str(port), env={"RLSCORE_KUBERNETES": "off"})
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: httpx.get(f"{url}/readyz", timeout=2).status_code == 200, 120,
                 f"the server container ready ({server.name})")
        assert httpx.get(f"{url}/healthz", timeout=5).json() == {"status": "ok"}
        nodes = [{"name": "a", "cpu_capacity_millicores": 4000, "cpu_requested_millicores": 1000, "pods": 2,
                  "latency_ms": 5.0}, {"name": "b", "cpu_capacity_millicores": 8000, "latency_ms": 40.0}]
        for policy in ("EE", "LB", "EL"):
            answer = httpx.post(f"{url}/suggest", timeout=10, json={
                "pod": {"name": "p", "namespace": "default", "cpu_request_millicores": 250}, "nodes": nodes,
                "policy": policy}).json()
            assert answer["source"] == "model" and answer["model_version"].startswith(policy.lower()), answer
        versions = {p["policy"]: p["serving"] for p in httpx.get(f"{url}/policies", timeout=5).json()["policies"]}
        assert versions == {"EE": "model", "LB": "model", "EL": "model"}
    finally:
        logs = server.logs()
        server.stop()
    assert "Traceback" not in logs, logs[-3000:]


def test_the_probe_image_serves_its_metric():
    port, target = free_port(), free_port()
    import socket
    listener = socket.socket()
    listener.bind(("127.0.0.1", target))
    listener.listen()
    probe = Container(PROBE, "--port", str(port), "--targets", f"127.0.0.1:{target}", "--interval", "1",
                      env={"NODE_NAME": "test-node"})
    try:
        wait_for(lambda: "rlscore_node_user_latency_ms{" in httpx.get(f"http://127.0.0.1:{port}/metrics",
                                                                       timeout=2).text, 60, "the probe's metric")
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
        assert 'node="test-node"' in text and f'target="127.0.0.1:{target}"' in text
    finally:
        probe.stop()
        listener.close()


def test_the_scheduler_image_is_our_kube_scheduler():
    out = podman("run", "--rm", "--read-only", SCHEDULER, "--version")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "v1.35.4-rlscore" in out.stdout
    files = podman("image", "inspect", "--format", "{{.RootFS.Layers}}", SCHEDULER)
    assert files.returncode == 0
