"""Every optimized path gives the reference's scores: the numpy forward pass against the torch
network in float64, and the server's cached, vectorized state (names only, /v1/scores and /suggest)
against the same state built directly and scored by the reference, on random states, for every
policy, at 1 to 5000 nodes."""

import numpy as np
import pytest

from rlscore.core.features import node_features
from agent.learn.model_io import reference_values as torch_reference
from rlscore.core.model import LoadedSelector, load_model
from rlscore.core.scoring import to_node_scores
from rlscore.core.state import NodeState, PodRequest
from tests.server.conftest import MODELS, pod, post
from tests.server.test_compact import compact

MIB = 2**20
SIZES = (1, 2, 7, 100, 1000, 5000)


def random_state(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    cpu = rng.choice([2000.0, 4000.0, 8000.0, 16000.0, 64000.0], n)
    requested = cpu * rng.uniform(0, 0.95, n)
    known = rng.random(n) < 0.8  # some nodes without a power model
    return {"cpu_capacity": cpu, "memory_capacity": cpu * rng.choice([1.0, 2.0, 4.0], n) * MIB,
            "max_pods": np.full(n, 110.0), "cpu_requested": requested,
            "memory_requested": requested * rng.uniform(0.5, 3.0, n) * MIB,
            "pods": np.floor(requested / 250.0), "cpu_utilization": np.clip(requested / cpu * rng.uniform(0.2, 1.5, n), 0, 1),
            "memory_utilization": rng.uniform(0, 0.9, n), "latency_ms": rng.uniform(1, 80, n),
            "power_idle_watts": np.where(known, cpu / 1000 * rng.uniform(5, 15, n), np.nan),
            "power_max_watts": np.where(known, cpu / 1000 * rng.uniform(20, 35, n), np.nan),
            "network_receive_bytes_per_s": rng.uniform(0, 1e7, n), "tcp_established": rng.integers(0, 500, n) * 1.0,
            "disk_utilization": rng.uniform(0, 1, n)}


def reference_answer(model, nodes: NodeState, request: PodRequest) -> np.ndarray:
    """The torch network's answer; a rule selector's is the values of the rule its torch network picks."""
    features, pod_vec = node_features(nodes, request)
    if isinstance(model, LoadedSelector):
        return model.rule_values(model.rules[int(np.argmax(torch_reference(model, features, pod_vec)))], nodes, request)
    return torch_reference(model, features, pod_vec)


def reference_scores(policy: str, names: list[str], state: dict, request: PodRequest) -> list[int]:
    model = load_model(MODELS / f"{policy.lower()}.safetensors")
    nodes = NodeState(names=names, cpu_requested_since_metrics=np.zeros(len(names)), **state)
    return to_node_scores(reference_answer(model, nodes, request)).tolist()


@pytest.mark.parametrize("policy", ["EE", "LB", "EL"])
@pytest.mark.parametrize("n", SIZES)
def test_numpy_forward_equals_the_torch_reference(policy, n):
    model = load_model(MODELS / f"{policy.lower()}.safetensors")
    rng = np.random.default_rng(n)
    for _ in range(3):
        nodes = NodeState(names=[f"n{i}" for i in range(n)], **random_state(n, rng))
        request = PodRequest(float(rng.choice([100, 500, 2000])), 256 * MIB, 20.0, 40.0) if policy == "EL" \
            else PodRequest(float(rng.choice([100, 500, 2000])), 256 * MIB)
        features, pod_vec = node_features(nodes, request)
        if isinstance(model, LoadedSelector):  # the selector's logits, then the values of the rule they pick
            np.testing.assert_allclose(model.logits(features, pod_vec), torch_reference(model, features, pod_vec),
                                       rtol=0, atol=1e-9)
            fast = model.q_values(nodes, request)
        else:
            fast = model.q_values_from_features(features, pod_vec)
            np.testing.assert_allclose(fast, torch_reference(model, features, pod_vec), rtol=0, atol=1e-9)
        assert to_node_scores(fast).tolist() == to_node_scores(reference_answer(model, nodes, request)).tolist()


def _fill_table(client, names: list[str], state: dict) -> None:
    post(client, {"pod": pod(), "nodes": ["settle"]})  # the server's own first (empty) refresh
    table = client.app.state.services.table
    metrics = {}
    for i, name in enumerate(names):
        table.set_node(name, cpu_capacity=state["cpu_capacity"][i], memory_capacity=state["memory_capacity"][i],
                       max_pods=state["max_pods"][i], power_idle_watts=_opt(state["power_idle_watts"][i]),
                       power_max_watts=_opt(state["power_max_watts"][i]))
        table.add_usage(name, state["cpu_requested"][i], state["memory_requested"][i], state["pods"][i])
        metrics[name] = {key: float(state[key][i]) for key in ("cpu_utilization", "memory_utilization", "latency_ms",
                                                               "network_receive_bytes_per_s", "tcp_established",
                                                               "disk_utilization")}
    table.replace_metrics(metrics)


def _opt(value: float) -> float | None:
    return None if np.isnan(value) else float(value)


@pytest.mark.parametrize("policy", ["EE", "LB", "EL"])
@pytest.mark.parametrize("n", SIZES)
def test_server_paths_equal_the_reference(make_client, policy, n):
    client = make_client(max_body_bytes=64 * MIB)
    rng = np.random.default_rng(1000 + n)
    names = [f"node-{i:05d}" for i in range(n)]
    state = random_state(n, rng)
    _fill_table(client, names, state)
    limits = {"rlscore.io/latency-soft-ms": "20", "rlscore.io/latency-hard-ms": "40"}
    request = PodRequest(250.0, 64 * MIB, 20.0, 40.0) if policy == "EL" else PodRequest(250.0, 64 * MIB)
    expected = reference_scores(policy, names, state, request)

    names_only = compact(client, pod(limits), names, policy)
    assert names_only.status_code == 200 and names_only.headers["x-rlscore-degraded"] == "false"
    assert list(names_only.content) == expected

    suggest = post(client, {"pod": pod(limits), "nodes": names, "policy": policy}).json()
    assert [suggest["scores"][name] for name in names] == expected

    # the state carried in the request, not the server's cache
    objects = [{"name": name, "cpu_capacity_millicores": state["cpu_capacity"][i],
                "memory_capacity_bytes": state["memory_capacity"][i], "max_pods": int(state["max_pods"][i]),
                "cpu_requested_millicores": state["cpu_requested"][i],
                "memory_requested_bytes": state["memory_requested"][i], "pods": int(state["pods"][i]),
                **{key: float(state[key][i]) for key in ("cpu_utilization", "memory_utilization", "latency_ms",
                                                         "network_receive_bytes_per_s", "tcp_established",
                                                         "disk_utilization")},
                **({"power_idle_watts": state["power_idle_watts"][i], "power_max_watts": state["power_max_watts"][i]}
                   if not np.isnan(state["power_idle_watts"][i]) else {})}
               for i, name in enumerate(names)]
    in_request = make_client(max_body_bytes=64 * MIB)
    answer = post(in_request, {"pod": pod(limits), "nodes": objects, "policy": policy}).json()
    assert [answer["scores"][name] for name in names] == expected
