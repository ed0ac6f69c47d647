"""The fault suite: every fault an adversarial run found in the suggestion server, and the ones that held,
replayed against a real server process fed by a real Prometheus (through a proxy that misbehaves on
command). Each case checks that the server stays up, answers valid requests, keeps its last good model,
names the problem (in /policies, /readyz or the metrics) and that its memory returns within 50 MB of
where it started. `make bench` measures /suggest's latency while each fault is in progress."""

from __future__ import annotations

import gzip
import json
import shutil
import time

import httpx
import numpy as np
import pytest
from safetensors.numpy import save

from rlscore.core.model import sha256_of, sidecar_path
from tests.faults.harness import TOKEN, ServerProcess, Stack, copy_models, raw_request, suggest_body
from tests.helpers.processes import wait_for

pytestmark = pytest.mark.integration
MEMORY_SLACK_MB = 50


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    stack = Stack(tmp_path_factory.mktemp("faults"))
    server = stack.server
    wait_for(lambda: server.get("/readyz").status_code == 200, 60, "ready")
    wait_for(lambda: _power(server, "kepler-a")[0] is not None, 60, "Kepler's power in the snapshot")
    for _ in range(200):  # warm: the allocator's steady state is the baseline
        server.post("/suggest", json=suggest_body("EE"))
    stack.baseline_mb = server.rss_mb()
    stack.versions = {p["policy"]: p["model_version"] for p in server.get("/policies").json()["policies"]}
    yield stack
    stack.close()


def _power(server: ServerProcess, node: str) -> tuple[float | None, float | None]:
    row = server.get("/state", params={"node": node}).json()["nodes"][0]
    return row["power_idle_watts"], row["power_max_watts"]


def _healthy(stack: Stack, policies=("EE", "LB", "EL")) -> None:
    """The server is up, answers a valid request per policy from its model, with the models it had."""
    server = stack.server
    assert server.alive(), server.log()[-3000:]
    for policy in policies:
        answer = server.post("/suggest", json=suggest_body(policy)).json()
        assert answer["source"] == "model", answer
        assert answer["model_version"] == stack.versions[policy], answer


def _memory_returns(stack: Stack) -> None:
    wait_for(lambda: stack.server.rss_mb() <= stack.baseline_mb + MEMORY_SLACK_MB, 20,
             f"memory back within {MEMORY_SLACK_MB} MB of {stack.baseline_mb:.0f} MB")


def _status(stack: Stack, policy: str) -> dict:
    return {p["policy"]: p for p in stack.server.get("/policies").json()["policies"]}[policy]


def _metric(stack: Stack, name: str) -> float:
    total = 0.0
    for line in stack.server.get("/metrics").text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            total += float(line.rsplit(" ", 1)[1])
    return total


# --- models and sidecars --------------------------------------------------------------------------

def _replace_sidecar(stack: Stack, policy: str, mutate) -> dict:
    side = sidecar_path(stack.model_dir / f"{policy.lower()}.safetensors")
    original = side.read_bytes()
    record = json.loads(original)
    side.write_bytes(mutate(record))
    return {"path": side, "original": original}


def _reload_refuses(stack: Stack, policy: str, named: str) -> None:
    r = stack.server.post("/models/reload", json={})
    assert r.status_code == 200, r.text
    status = _status(stack, policy)
    assert status["model_version"] == stack.versions[policy] and status["serving"] == "model", status
    assert status["error"] and named in status["error"], status
    assert str(stack.model_dir) not in status["error"], f"a path in the error: {status['error']}"  # names, not paths
    _healthy(stack)


def _put_back(stack: Stack, saved: dict) -> None:
    saved["path"].write_bytes(saved["original"])
    assert stack.server.post("/models/reload", json={}).status_code == 200


def test_a_sidecar_nested_thousands_deep_is_refused_on_reload(stack):
    saved = _replace_sidecar(stack, "EE", lambda r: (b'{"policy": "EE", "x": ' + b"[" * 3000 + b"]" * 3000 + b"}"))
    try:
        _reload_refuses(stack, "EE", "nested 3001 levels deep")
    finally:
        _put_back(stack, saved)
    _memory_returns(stack)


def test_a_sidecar_whose_training_is_not_a_record_is_refused(stack):
    saved = _replace_sidecar(stack, "LB", lambda r: json.dumps({**r, "training": "x"}).encode())
    try:
        _reload_refuses(stack, "LB", "training")
        assert stack.server.get("/policies").status_code == 200
    finally:
        _put_back(stack, saved)


@pytest.mark.parametrize("field, value, named", [("feature_spec_version", 99, "feature spec version 99"),
                                                  ("format", "bogus", "invalid sidecar")])
def test_a_sidecar_contradicting_its_model_is_refused(stack, field, value, named):
    saved = _replace_sidecar(stack, "EL", lambda r: json.dumps({**r, field: value}).encode())
    try:
        _reload_refuses(stack, "EL", named)
    finally:
        _put_back(stack, saved)


def test_a_huge_sidecar_is_refused_by_its_size(stack):
    saved = _replace_sidecar(stack, "EE", lambda r: json.dumps({**r, "padding": "x" * (40 * 2**20)}).encode())
    try:
        started = time.monotonic()
        _reload_refuses(stack, "EE", "over the")
        assert time.monotonic() - started < 5
    finally:
        _put_back(stack, saved)
    _memory_returns(stack)


def test_a_small_file_declaring_huge_layers_is_refused_before_anything_is_allocated(stack):
    path = stack.model_dir / "lb.safetensors"
    original, original_side = path.read_bytes(), sidecar_path(path).read_bytes()
    architecture = {"hidden": [4096] * 8, "node_features": 45, "pod_features": 3}
    header = {"format": "rlscore-deepsets-scorer", "policy": "LB", "feature_spec_version": "4",
              "architecture": json.dumps(architecture)}
    path.write_bytes(save({"layers.0.Lambda.bias": np.zeros(120_000, np.float32)}, metadata=header))  # ~500 KB
    sidecar_path(path).unlink()
    try:
        _reload_refuses(stack, "LB", "parameters, over the limit")
    finally:
        path.write_bytes(original)
        sidecar_path(path).write_bytes(original_side)
        assert stack.server.post("/models/reload", json={}).status_code == 200
    _memory_returns(stack)


def test_a_candidate_with_a_deep_sidecar_is_refused_by_the_rollout(stack):
    candidates = stack.model_dir / "candidates"
    candidates.mkdir(exist_ok=True)
    shutil.copy(stack.model_dir / "ee.safetensors", candidates / "ee.safetensors")
    (candidates / "ee.json").write_bytes(b'{"gate": ' + b"[" * 5000 + b"]" * 5000 + b"}")
    try:
        r = stack.server.post("/v1/rollout/EE/candidate", json={})
        assert r.status_code == 409 and "nested" in r.text, r.text
        _healthy(stack)
    finally:
        shutil.rmtree(candidates)


def test_a_server_starts_with_a_poisoned_sidecar_and_says_which_policy_is_degraded(tmp_path):
    models = copy_models(tmp_path / "models")
    sidecar_path(models / "ee.safetensors").write_bytes(b"[" * 10000 + b"]" * 10000)
    server = ServerProcess(tmp_path, models, api_token=TOKEN)
    try:
        wait_for(lambda: server.get("/readyz").status_code == 200, 60, "ready")
        ready = server.get("/readyz").json()
        assert ready["degraded_policies"] == ["EE"] and ready["refused_models"] == ["EE"], ready
        ee = server.post("/suggest", json=suggest_body("EE")).json()
        assert ee["source"] == "heuristic" and any("nested" in reason for reason in ee["reasons"]), ee
        assert not any(str(tmp_path) in reason for reason in ee["reasons"]), ee["reasons"]  # no server paths
        assert server.post("/suggest", json=suggest_body("LB")).json()["source"] == "model"
    finally:
        server.stop()
    strict = ServerProcess(tmp_path, models, api_token=TOKEN, ready_requires_models="true")
    try:
        time.sleep(3)
        r = strict.get("/readyz")
        assert r.status_code == 503 and r.json()["degraded_policies"] == ["EE"]
    finally:
        strict.stop()


# --- Prometheus ----------------------------------------------------------------------------------

def test_kepler_power_is_package_plus_dram(stack):
    """The exporter's truth: kepler-a 48 W idle / 192 W at full load, kepler-b 96 / 672 W (package +
    dram, two sockets); summing every zone would say 68 / 322 and 136 / 1152."""
    for node, (idle, peak) in {"kepler-a": (48.0, 192.0), "kepler-b": (96.0, 672.0)}.items():
        got_idle, got_max = _power(stack.server, node)
        assert got_idle == pytest.approx(idle, rel=0.01), (node, got_idle)
        wait_for(lambda: (p := _power(stack.server, node)[1]) is not None and abs(p - peak) <= 0.01 * peak, 20,
                 f"{node}'s full-load watts at {peak}")


def test_a_prometheus_that_trickles_is_cut_off_per_answer(stack):
    stack.faulty.mode = "trickle"
    try:
        wait_for(lambda: any("no answer within 1.5 s" in p for p in
                             stack.server.get("/policies").json()["snapshot"]["problems"])
                 and _metric(stack, 'rlscore_prometheus_errors_total{field="cpu_utilization",reason="timeout"}') >= 1,
                 40, "the timeout named and counted")
        _healthy(stack)
    finally:
        stack.faulty.mode = "pass"
    wait_for(lambda: not stack.server.get("/policies").json()["snapshot"]["problems"], 60, "the snapshot whole again")


@pytest.mark.parametrize("mode, named", [("huge", "over the"), ("deep", "not a Prometheus API answer")])
def test_an_answer_too_large_or_too_deep_is_refused(stack, mode, named):
    stack.faulty.mode = mode
    try:
        wait_for(lambda: any(named in p for p in stack.server.get("/policies").json()["snapshot"]["problems"]), 40,
                 f"the {mode} answer named")
        _healthy(stack)
    finally:
        stack.faulty.mode = "pass"
    wait_for(lambda: not stack.server.get("/policies").json()["snapshot"]["problems"], 60, "the snapshot whole again")
    _memory_returns(stack)


def test_node_names_no_cluster_has_are_forgotten(stack):
    stack.faulty.mode = "invent"
    try:
        wait_for(lambda: _metric(stack, "rlscore_known_nodes") >= 15000, 40, "the flood of invented names")
        time.sleep(5)
        assert _metric(stack, "rlscore_known_nodes") <= 20000  # the bound
        _healthy(stack)
    finally:
        stack.faulty.mode = "pass"
    wait_for(lambda: _metric(stack, "rlscore_known_nodes") <= 10, 30, "the invented names forgotten")
    _memory_returns(stack)


# --- requests ---------------------------------------------------------------------------------------

def test_json_nested_a_thousand_deep_is_a_422(stack):
    body = b'{"pod": {"name": "p", "namespace": "d", "annotations": ' + b"[" * 1000 + b"]" * 1000 + b'}, "nodes": ["a"]}'
    r = stack.server.post("/suggest", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    deep_nodes = b'{"pod": {"name": "p", "namespace": "d"}, "nodes": ' + b"[" * 1000 + b"]" * 1000 + b"}"
    r = stack.server.post("/suggest", content=deep_nodes, headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    _healthy(stack)


def test_state_changes_need_a_token_and_json(stack, tmp_path):
    r = httpx.post(f"{stack.server.url}/models/reload", timeout=10)
    assert r.status_code == 401
    r = stack.server.post("/models/reload", content=b"a=1", headers={"content-type": "application/x-www-form-urlencoded"})
    assert r.status_code == 415
    r = stack.server.post("/v1/rollout/EE/promote", content=b"x", headers={"content-type": "text/plain"})
    assert r.status_code == 415
    open_server = ServerProcess(tmp_path, stack.model_dir)  # no token configured
    try:
        for path in ("/models/reload", "/v1/rollout/LB/rollback"):
            r = httpx.post(f"{open_server.url}{path}", timeout=10)
            assert r.status_code == 403 and "RLSCORE_API_TOKEN" in r.text
    finally:
        open_server.stop()


def test_slow_and_oversized_senders_are_cut_off(stack):
    port = stack.server.port
    started = time.monotonic()
    answer = raw_request(port, b"POST /suggest HTTP/1.1\r\nHost: x\r\n", wait_s=10)  # headers never end
    assert time.monotonic() - started < 6 and answer == b""
    started = time.monotonic()
    answer = raw_request(port, b"POST /suggest HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                               b"Content-Length: 1000\r\n\r\n{", wait_s=10)  # the body never ends
    assert time.monotonic() - started < 6
    answer = raw_request(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (16 * 2**20) + b"\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 431"), answer[:100]
    _healthy(stack)


def test_what_held_still_holds(stack):
    """A 100k-node body is a 413; a gzip-bomb body is not inflated; a torch pickle where a model
    should be runs nothing; a conflicting Content-Length and Transfer-Encoding is refused."""
    big = {"pod": {"name": "p", "namespace": "d"}, "nodes": [f"n{i}" for i in range(100_000)]}
    r = stack.server.post("/suggest", json=big)
    assert r.status_code == 413
    bomb = gzip.compress(b"{" + b" " * (64 * 2**20) + b"}")
    r = stack.server.post("/suggest", content=bomb, headers={"content-type": "application/json",
                                                             "content-encoding": "gzip"})
    assert r.status_code == 422
    answer = raw_request(stack.server.port, b"POST /suggest HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
                                            b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400") or answer == b"", answer[:80]
    path = stack.model_dir / "ee.safetensors"
    original, side = path.read_bytes(), sidecar_path(path).read_bytes()
    import torch

    class Evil:
        def __reduce__(self):
            return (open, (str(stack.model_dir / "pwned"), "w"))

    torch.save({"format": Evil()}, path)
    try:
        _reload_refuses(stack, "EE", "not a readable model file")
        assert not (stack.model_dir / "pwned").exists()
    finally:
        path.write_bytes(original)
        sidecar_path(path).write_bytes(side)
        assert sha256_of(path) and stack.server.post("/models/reload", json={}).status_code == 200
    _healthy(stack)
    _memory_returns(stack)
