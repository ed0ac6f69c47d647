"""POST /v1/scores, the plugin's compact format: the same answer as /suggest, and every bad body a
clear 4xx."""

import json

import numpy as np
import pytest

from suggestion_server.http.compact import MAX_REASONS_HEADER
from tests.server.conftest import pod, post

MIB = 2**20


def compact(client, pod_body, names, policy=None, headers=None, raw=None):
    header = {"pod": pod_body, **({"policy": policy} if policy else {})}
    body = raw if raw is not None else json.dumps(header).encode() + b"\n" + "\n".join(names).encode()
    return client.post("/v1/scores", content=body,
                       headers={"content-type": "application/x-rlscore-names", **(headers or {})})


def warm(client, n: int, seed: int = 0) -> list[str]:
    """Fill the server's node table the way the watch and a metrics refresh do."""
    # settle the server's own first metrics refresh (no Prometheus here), which would replace them
    post(client, {"pod": pod(), "nodes": ["settle"]})
    rng = np.random.default_rng(seed)
    table = client.app.state.services.table
    names = [f"node-{i:05d}" for i in range(n)]
    metrics = {}
    for name in names:
        cpu = float(rng.choice([4000.0, 8000.0, 16000.0]))
        table.set_node(name, cpu_capacity=cpu, memory_capacity=cpu * 2 * MIB, max_pods=110.0,
                       power_idle_watts=cpu / 1000 * 12, power_max_watts=cpu / 1000 * 30)
        requested = float(rng.uniform(0, 0.8)) * cpu
        table.add_usage(name, requested, requested * 2 * MIB, float(requested // 250))
        metrics[name] = {"cpu_utilization": requested / cpu * 0.6, "memory_utilization": requested / cpu * 0.5,
                         "latency_ms": float(rng.uniform(2, 60)), "network_receive_bytes_per_s": 1e5,
                         "tcp_established": 20.0, "disk_utilization": 0.3}
    table.replace_metrics(metrics)
    return names


@pytest.mark.parametrize("policy", ["EE", "LB", "EL"])
@pytest.mark.parametrize("n", [1, 7, 300])
def test_compact_answers_exactly_what_suggest_answers(client, policy, n):
    names = warm(client, 400, seed=n)[:n]
    limits = {"rlscore.io/latency-soft-ms": "20", "rlscore.io/latency-hard-ms": "40"}
    reference = post(client, {"pod": pod(limits), "nodes": names, "policy": policy}).json()
    r = compact(client, pod(limits), names, policy)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/octet-stream"
    assert list(r.content) == [reference["scores"][name] for name in names]
    assert r.headers["x-rlscore-policy"] == reference["policy"] == policy
    assert r.headers["x-rlscore-source"] == reference["source"] == "model"
    assert r.headers["x-rlscore-model-version"] == reference["model_version"]
    assert r.headers["x-rlscore-degraded"] == str(reference["degraded"]).lower()
    assert json.loads(r.headers["x-rlscore-reasons"]) == reference["reasons"]


def test_compact_takes_the_policy_from_the_annotation(client):
    names = warm(client, 5)
    r = compact(client, pod({"rlscore.io/policy": "lb"}), names)
    assert r.status_code == 200 and r.headers["x-rlscore-policy"] == "LB"


def test_compact_unknown_nodes_are_degraded_not_errors(client):
    r = compact(client, pod(), ["never-seen-1", "never-seen-2"], "EE")
    assert r.status_code == 200 and len(r.content) == 2
    assert r.headers["x-rlscore-degraded"] == "true"
    assert any("capacity unknown for 2 node(s)" in m for m in json.loads(r.headers["x-rlscore-reasons"]))


@pytest.mark.parametrize("raw, field, message", [
    (b"", "header", "Invalid JSON"),
    (b"not json\nnode-a", "header", "Invalid JSON"),
    (b'{"pod": {"name": "p"}}', "nodes", "no node names"),
    (b'{"pod": {"name": "p"}}\n', "nodes", "no node names"),
    (b'{"nodes": ["a"]}\nnode-a', "pod", "Field required"),
    (b'{"pod": {"name": "Web_1"}}\nnode-a', "name", "Kubernetes name"),
    (b'{"pod": {"name": "p"}, "policy": "fast"}\nnode-a', "policy", "unknown policy"),
    (b'{"pod": {"name": "p", "cpu_request_millicores": -1}}\nnode-a', "cpu_request_millicores", "greater than"),
    (b'{"pod": {"name": "p"}}\nnode-a\nNode-B', "nodes", "node 1 ('Node-B') must be a Kubernetes name"),
    (b'{"pod": {"name": "p"}}\nnode-a\n\nnode-b', "nodes", "node 1 is an empty line"),
    (b'{"pod": {"name": "p"}}\nnode-a\nnode-b\n', "nodes", "node 2 is an empty line"),
    (b'{"pod": {"name": "p"}}\nnode-a\r\nnode-b', "nodes", "node 0"),
    (b'{"pod": {"name": "p"}}\nnode-a\nnode-a', "nodes", "duplicate node name 'node-a'"),
    (b'{"pod": {"name": "p"}}\n' + b"a" * 254, "nodes", "longer than 253"),
    (b'{"pod": {"name": "p"}}\nn\xc3\xa9ud', "nodes", "node 0"),
    (b'{"pod": {"name": "p", "annotations": {"rlscore.io/latency-hard-ms": "soon"}}, "policy": "EL"}\nnode-a',
     "rlscore.io/latency-hard-ms", "not a number"),
])
def test_bad_compact_bodies_are_422_naming_the_problem(client, raw, field, message):
    r = compact(client, None, None, raw=raw)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"][0]
    assert field in [str(part) for part in detail["loc"]], detail
    assert message in detail["msg"], detail


def test_compact_limits_are_413(make_client):
    client = make_client(max_nodes=3, max_body_bytes=2048)
    assert compact(client, pod(), ["a", "b", "c", "d"]).status_code == 413
    assert compact(client, pod(), [f"node-{i:04d}" for i in range(300)]).status_code == 413
    assert compact(client, pod(), ["a", "b", "c"]).status_code == 200


def test_reasons_header_stays_bounded(client):
    names = [f"n{i}-" + "x" * 200 for i in range(2000)]
    r = compact(client, pod(), names, "EL")
    assert r.status_code == 200 and len(r.content) == 2000
    assert len(r.headers["x-rlscore-reasons"]) <= MAX_REASONS_HEADER + 100
    json.loads(r.headers["x-rlscore-reasons"])
