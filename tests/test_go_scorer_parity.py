"""The scheduler plugin's in-process scorer against a real suggestion server (Go's
TestLocalScorerMatchesServer): the server on a socket, its node table filled with a random cluster;
the Go scorer fetches /v1/node-metrics and /v1/models/{policy}, builds the state from the scheduler's
own NodeInfos (the same sizes and requests) and must give the scores POST /suggest gives for the same
pods. Features, rules and forward passes alone are checked by Go's TestGolden against committed
fixtures (tests/golden.py), without Python.
"""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

import httpx
import numpy as np
import orjson
import pytest
import uvicorn

from rlscore.core.features import FEATURE_SPEC_VERSION, NUM_NODE_FEATURES, NUM_POD_FEATURES
from rlscore.core.state import POLICIES, PodRequest
from suggestion_server.app import create_app
from tests.helpers.processes import free_port, wait_for
from tests.server.conftest import settings
from tests.server.test_exactness import random_state

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "plugin-go"
GO = os.environ.get("GO", "go")
SIZES = (1, 2, 7, 100, 1000, 5000)
MIB = 2**20


def _list(values: np.ndarray) -> list[float | None]:
    return [None if not np.isfinite(v) else float(v) for v in np.asarray(values, dtype=np.float64).tolist()]


def _with_unknowns(state: dict, rng: np.random.Generator) -> dict:
    """Blank some measured values, as a live cluster has them: no metrics yet, no probe, no power."""
    n = len(state["cpu_capacity"])
    out = dict(state)
    for key, share in (("cpu_utilization", 0.2), ("memory_utilization", 0.2), ("latency_ms", 0.2),
                       ("network_receive_bytes_per_s", 0.1), ("tcp_established", 0.1), ("disk_utilization", 0.1)):
        out[key] = np.where(rng.random(n) < share, np.nan, state[key])
    out["cpu_requested_since_metrics"] = np.where(rng.random(n) < 0.3, rng.uniform(0, 2000, n), 0.0)
    out["cpu_utilization_stddev"] = np.where(rng.random(n) < 0.3, np.nan, rng.uniform(0, 0.3, n))
    return out


def _pods(policy: str, rng: np.random.Generator) -> list[PodRequest]:
    cpu = [float(rng.choice([0, 100, 500, 2000])) for _ in range(4)]
    if policy != "EL":
        return [PodRequest(c, float(rng.choice([0, 64, 256, 4096])) * MIB) for c in cpu]
    return [PodRequest(cpu[0], 256 * MIB, 20.0, 40.0), PodRequest(cpu[1], 64 * MIB, 10.0, None),
            PodRequest(cpu[2], 128 * MIB, None, 30.0), PodRequest(cpu[3], 0.0, 50.0, 50.0)]


@pytest.fixture(scope="module")
def go_test_binary(tmp_path_factory) -> Path:
    """The Go test binary, compiled before the server's snapshot starts to age: a cold build takes
    longer than the snapshot's stale_after_s on a slow machine, and a stale snapshot is left to the server."""
    binary = tmp_path_factory.mktemp("go") / "rlscore.test"
    result = subprocess.run([GO, "test", "-c", "-o", str(binary), "./pkg/rlscore/"], cwd=PLUGIN,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return binary


def _run_go(binary: Path, test: str, env: dict) -> None:
    result = subprocess.run([str(binary), "-test.count=1", "-test.run", f"^{test}$", "-test.v"],
                            cwd=PLUGIN / "pkg" / "rlscore", env={**os.environ, **env}, capture_output=True, text=True,
                            timeout=300)
    lines = [line for line in result.stdout.splitlines() if line.strip().startswith(("---", "parity", "ok", "FAIL"))
             or "_test.go" in line]
    print("\n".join(lines))
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-3000:]
    assert f"--- PASS: {test}" in result.stdout, "the Go test did not run (skipped?)"


class _ThreadServer(uvicorn.Server):
    def install_signal_handlers(self) -> None:  # not the main thread
        pass


@pytest.fixture
def live_server():
    app = create_app(settings(), background=False)
    port = free_port()
    server = _ThreadServer(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    wait_for(lambda: httpx.get(f"{url}/healthz", timeout=1).status_code == 200, 60, "server up")
    # the server's own first refresh (nothing to read here), so the snapshot has an age
    httpx.post(f"{url}/suggest", json={"pod": {"name": "settle", "namespace": "default"}, "nodes": ["settle"]})
    yield app, url
    server.should_exit = True
    thread.join(10)


def test_in_process_scorer_matches_the_server(go_test_binary, live_server, tmp_path):
    app, url = live_server
    table = app.state.services.table
    rng = np.random.default_rng(7)
    n = 300
    names = [f"node-{i}" for i in range(n)]
    state = _with_unknowns(random_state(n, rng), rng)
    nodes, later = [], []
    for i, name in enumerate(names):
        power = None if np.isnan(state["power_idle_watts"][i]) else float(state["power_idle_watts"][i])
        table.set_node(name, cpu_capacity=float(state["cpu_capacity"][i]),
                       memory_capacity=float(state["memory_capacity"][i]), max_pods=110.0,
                       power_idle_watts=power, power_max_watts=None if power is None else float(state["power_max_watts"][i]))
        pods = [[int(rng.integers(0, 1500)), int(rng.integers(0, 2048)) * MIB] for _ in range(int(rng.integers(0, 4)))]
        for cpu, memory in pods:
            table.add_usage(name, cpu, memory, 1)
        bound_later = [int(rng.integers(0, 800)), 64 * MIB] if rng.random() < 0.3 else None
        later.append(bound_later)
        nodes.append({"name": name, "cpu_millicores": int(state["cpu_capacity"][i]),
                      "memory_bytes": int(state["memory_capacity"][i]), "max_pods": 110,
                      "pods": pods + ([bound_later] if bound_later else [])})
    table.replace_metrics({name: {key: float(state[key][i]) for key in (
        "cpu_utilization", "memory_utilization", "latency_ms", "network_receive_bytes_per_s", "tcp_established",
        "disk_utilization") if np.isfinite(state[key][i])} for i, name in enumerate(names)})
    for name, pod in zip(names, later):  # bound after the metrics were read
        if pod:
            table.add_usage(name, pod[0], pod[1], 1)

    pods = [{"name": "plain", "namespace": "default", "cpu": 250, "memory": 64 * MIB, "annotations": {}},
            {"name": "ee", "namespace": "default", "cpu": 1000, "memory": 512 * MIB,
             "annotations": {"rlscore.io/policy": "ee"}},
            {"name": "lb", "namespace": "default", "cpu": 100, "memory": 0,
             "annotations": {"rlscore.io/policy": "LB"}},
            {"name": "el", "namespace": "default", "cpu": 500, "memory": 128 * MIB,
             "annotations": {"rlscore.io/policy": "EL", "rlscore.io/latency-soft-ms": "15",
                             "rlscore.io/latency-hard-ms": "40ms"}},
            {"name": "el-thesis", "namespace": "default", "cpu": 2000, "memory": 0,
             "annotations": {"rlscore.io/policy": "EL", "latencyHardConstraint": "25"}},
            {"name": "el-defaults", "namespace": "default", "cpu": 0, "memory": 0,
             "annotations": {"rlscore.io/policy": "el"}}]
    expected = {}
    for pod in pods:
        body = {"pod": {"name": pod["name"], "namespace": pod["namespace"], "cpu_request_millicores": pod["cpu"],
                        "memory_request_bytes": pod["memory"], "annotations": pod["annotations"]}, "nodes": names}
        answer = httpx.post(f"{url}/suggest", json=body).json()
        assert answer["source"] == "model", answer
        expected[pod["name"]] = answer["scores"]
    path = tmp_path / "cluster.json"
    path.write_bytes(orjson.dumps({"server": url, "nodes": nodes, "pods": pods, "expected": expected}))
    _run_go(go_test_binary, "TestLocalScorerMatchesServer", {"RLSCORE_PARITY_CLUSTER": str(path)})


def test_node_metrics_and_model_endpoints(live_server):
    app, url = live_server
    metrics = httpx.get(f"{url}/v1/node-metrics").json()
    assert metrics["feature_spec_version"] == FEATURE_SPEC_VERSION and metrics["default_policy"] == "EE"
    assert set(metrics["model_versions"]) == set(POLICIES) and all(metrics["model_versions"].values())
    weights = httpx.get(f"{url}/v1/models/el").json()
    assert weights["format"] == "rlscore-deepsets-weights" and weights["policy"] == "EL"
    assert weights["version"] == metrics["model_versions"]["EL"]
    # exported in the plugin's feature spec, whatever spec the model was trained on
    assert len(weights["layers"][0]["lambda"]) == NUM_NODE_FEATURES + NUM_POD_FEATURES
    assert len(weights["layers"][-1]["bias"]) == 1
    bad = httpx.get(f"{url}/v1/models/fast")
    assert bad.status_code == 422 and "unknown policy" in bad.text
    app.state.services.registry.policies["LB"].model = None  # as after a model file failed to validate
    missing = httpx.get(f"{url}/v1/models/LB")
    assert missing.status_code == 404 and "heuristic" in missing.text
    assert httpx.get(f"{url}/v1/node-metrics").json()["model_versions"]["LB"] is None
