"""The scheduler plugin's in-process scorer (plugin-go/pkg/rlscore: features.go, model.go, rules.go,
local.go) against the Python it ports, through Go's own tests:

- TestParityWithPython: on random states (every policy, 1..5000 nodes, unknown values mixed in,
  pods with and without latency limits) Go's features equal rlscore.core.features.node_features, its
  forward pass the served model's (a node scorer's NumpyScorer, a rule selector's pick and logits,
  for the shipped models and a selector over every servable rule), every hand-written rule's values
  rlscore.core.rules', its integer scores to_node_scores;
- TestLocalScorerMatchesServer: a real suggestion server on a socket, its node table filled with a
  random cluster; the Go scorer fetches /v1/node-metrics and /v1/models/{policy}, builds the state
  from the scheduler's own NodeInfos (the same sizes and requests) and must give the scores POST
  /suggest gives for the same pods.
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
import torch
import uvicorn

from rlscore.core.features import node_features
from rlscore.core.rules import RULES
from rlscore.core.model import LoadedSelector, load_model, servable_rules
from agent.learn.model_io import save_model
from agent.learn.network import RuleSelector
from rlscore.core.scoring import to_node_scores
from rlscore.core.state import NODE_ARRAYS, POLICIES, NodeState, PodRequest
from suggestion_server.api import create_app
from tests.helpers.processes import free_port, wait_for
from tests.server.conftest import MODELS, settings
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


def _run_go(test: str, env: dict) -> None:
    result = subprocess.run([GO, "test", "-count=1", "-run", f"^{test}$", "-v", "./pkg/rlscore/"], cwd=PLUGIN,
                            env={**os.environ, **env}, capture_output=True, text=True, timeout=900)
    lines = [line for line in result.stdout.splitlines() if line.strip().startswith(("---", "parity", "ok", "FAIL"))
             or "_test.go" in line]
    print("\n".join(lines))
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-3000:]
    assert f"--- PASS: {test}" in result.stdout, "the Go test did not run (skipped?)"


def _all_rules_selector(tmp_path) -> LoadedSelector:
    """A selector over every servable rule, its weights drawn so that its pick changes with the state."""
    torch.manual_seed(1)
    selector = RuleSelector(servable_rules(), (16, 16))
    with torch.no_grad():
        for weights in selector.parameters():
            weights.mul_(4.0)
        selector.head[2].bias.zero_()
    return load_model(save_model(tmp_path / "selector.safetensors", selector, "LB", {}))


def _rules_of(nodes: NodeState, request: PodRequest) -> dict[str, list[float | None]]:
    return {name: _list(RULES[name](nodes, request, np.random.default_rng(0))) for name in servable_rules()}


def test_go_features_forward_and_scores_equal_python(tmp_path):
    rng = np.random.default_rng(2026)
    models = {p: load_model(MODELS / f"{p.lower()}.safetensors") for p in POLICIES}
    models["selector"] = _all_rules_selector(tmp_path)
    cases = []
    picked = set()
    for name, model in models.items():
        for size_index, n in enumerate(SIZES):
            # the selector over every rule meets the pods of every policy, latency limits included
            policy = name if name in POLICIES else POLICIES[size_index % len(POLICIES)]
            for _ in range(2):
                arrays = _with_unknowns(random_state(n, rng), rng)
                # the cluster's requests now (unknown, or beyond the candidates') and their recent peak
                # (unknown, below what the candidates hold, or above it)
                held = float(np.nansum(arrays["cpu_requested"]))
                now, peak = (float(rng.choice([np.nan, 1.0, 1.2, 1.5])) * held for _ in range(2))
                nodes = NodeState(names=[f"n{i}" for i in range(n)], cluster_cpu_requested=now,
                                  recent_peak_cpu_requested=peak, **arrays)
                for request in _pods(policy, rng)[: 2 if n >= 1000 else 4]:
                    features, pod_vec = node_features(nodes, request)
                    case = {"model": name}
                    if isinstance(model, LoadedSelector):
                        q, rule = model.decide(nodes, request)
                        case.update(rule=rule, logits=model.logits(features, pod_vec).tolist())
                        picked.add(rule)
                    else:
                        q = model.q_values_from_features(features, pod_vec)
                    if n <= 100:
                        case["rules"] = _rules_of(nodes, request)
                    cases.append({**case, "policy": policy, "nodes": {k: _list(getattr(nodes, k)) for k in NODE_ARRAYS},
                                  "cluster_requested": _list([nodes.cluster_cpu_requested])[0],
                                  "recent_peak": _list([nodes.recent_peak_cpu_requested])[0],
                                  "pod": {"cpu": request.cpu_millicores, "memory": request.memory_bytes,
                                          "soft": request.latency_soft_ms or 0.0, "hard": request.latency_hard_ms or 0.0},
                                  "features": features.astype(np.float64).ravel().tolist(),
                                  "pod_features": pod_vec.astype(np.float64).tolist(),
                                  "q": q.tolist(), "scores": to_node_scores(q).tolist()})
    assert len(picked) >= 4, f"the selector picked {sorted(picked)} only: its pick would hardly be tested"
    path = tmp_path / "parity.json"
    path.write_bytes(orjson.dumps({"models": {p: m.export() for p, m in models.items()}, "cases": cases}))
    _run_go("TestParityWithPython", {"RLSCORE_PARITY_FILE": str(path)})


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


def test_in_process_scorer_matches_the_server(live_server, tmp_path):
    app, url = live_server
    table = app.state.table
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
    _run_go("TestLocalScorerMatchesServer", {"RLSCORE_PARITY_CLUSTER": str(path)})


def test_node_metrics_and_model_endpoints(live_server):
    app, url = live_server
    metrics = httpx.get(f"{url}/v1/node-metrics").json()
    assert metrics["feature_spec_version"] == 3 and metrics["default_policy"] == "EE"
    assert set(metrics["model_versions"]) == set(POLICIES) and all(metrics["model_versions"].values())
    weights = httpx.get(f"{url}/v1/models/el").json()
    assert weights["format"] == "rlscore-deepsets-weights" and weights["policy"] == "EL"
    assert weights["version"] == metrics["model_versions"]["EL"]
    assert len(weights["layers"][0]["lambda"]) == 35 and len(weights["layers"][-1]["bias"]) == 1
    bad = httpx.get(f"{url}/v1/models/fast")
    assert bad.status_code == 422 and "unknown policy" in bad.text
    app.state.registry.policies["LB"].model = None  # as after a model file failed to validate
    missing = httpx.get(f"{url}/v1/models/LB")
    assert missing.status_code == 404 and "heuristic" in missing.text
    assert httpx.get(f"{url}/v1/node-metrics").json()["model_versions"]["LB"] is None
