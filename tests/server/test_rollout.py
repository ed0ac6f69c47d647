"""Staged rollout in the server: only a candidate with a passing gate verdict is staged; shadow
compares without deciding, canary decides for a stable share of pods, promotion installs it and
rollback restores what served before; all of it visible in /policies, /metrics and /v1/rollout."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from agent.evaluate.gate import Verdict, record
from rlscore.core.features import NODE_FEATURES
from rlscore.core.model import load_model, sha256_of
from agent.learn.model_io import save_model
from agent.learn.network import NodeScorer
from suggestion_server.lifecycle.rollout import canary_fraction
from tests.server.conftest import copy_models, node, overflowing_el_model, pod, post

TOKEN = "s3cret-rollout"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
NODES = [node("empty-a"), node("busy", cpu_req=2000.0, pods=6), node("empty-b"), node("half", cpu_req=1000.0, pods=3)]


def passing_verdict(candidate, promote=True, sha=None):
    record(candidate, Verdict(promote, "beats serving and the best heuristic" if promote else "does not beat serving",
                              candidate.stem.upper(), "test-profile", 3, 300, 0.0,
                              candidate_sha256=sha or sha256_of(candidate)), "test")
    return candidate


def untrained_ee(path, seed=0):
    torch.manual_seed(seed)
    return save_model(path, NodeScorer((64, 64)), "EE", {"training": {"steps": 0}})


def spreading_ee(path):
    """An EE model that prefers the least requested node, so it opens empty nodes where the shipped
    EE packs: its placements cost more energy by construction, not by the luck of a random init."""
    net = NodeScorer((1,))
    with torch.no_grad():
        for p in net.parameters():
            p.zero_()
        net.layers[0].Lambda.weight[0, NODE_FEATURES.index("cpu_share")] = -1.0
        net.layers[0].Lambda.bias[0] = 1.0
        net.layers[1].Lambda.weight[0, 0] = 1.0
    return save_model(path, net, "EE", {"training": {"steps": 0}})


@pytest.fixture
def dirs(tmp_path):
    """Serving: an untrained EE model; candidate: the shipped EE model, with a passing verdict."""
    models = copy_models(tmp_path / "models")
    untrained_ee(models / "ee.safetensors")
    candidates = copy_models(tmp_path / "models" / "candidates")
    for name in ("lb", "el"):
        (candidates / f"{name}.safetensors").unlink()
        (candidates / f"{name}.json").unlink()
    return models, candidates


def ask(client, name, policy="EE"):
    return post(client, {"pod": pod(name=name), "nodes": NODES, "policy": policy}, AUTH).json()


def rollout_of(client, policy="EE"):
    return client.get("/v1/rollout", headers=AUTH).json()["policies"][policy]


def test_a_candidate_without_a_passing_verdict_is_not_staged(dirs, make_client):
    models, candidates = dirs
    client = make_client(model_dir=models, api_token=TOKEN, rollout_auto=False)
    r = client.post("/v1/rollout/ee/candidate", headers=AUTH)
    assert r.status_code == 409 and "no gate verdict" in r.json()["detail"][0]["msg"]
    passing_verdict(candidates / "ee.safetensors", promote=False)
    r = client.post("/v1/rollout/ee/candidate", headers=AUTH)
    assert r.status_code == 409 and "the gate refused it: does not beat serving" in r.json()["detail"][0]["msg"]
    passing_verdict(candidates / "ee.safetensors", sha="0" * 64)
    r = client.post("/v1/rollout/ee/candidate", headers=AUTH)
    assert r.status_code == 409 and "verdict is for another file" in r.json()["detail"][0]["msg"]
    assert rollout_of(client)["stage"] == "none"
    assert ask(client, "web-1")["model_version"] == load_model(models / "ee.safetensors").version
    passing_verdict(candidates / "ee.safetensors")
    r = client.post("/v1/rollout/ee/candidate", headers=AUTH)
    assert r.status_code == 200 and r.json()["stage"] == "shadow"
    assert client.post("/v1/rollout/ee/candidate", headers=AUTH).status_code == 409  # one at a time


def test_the_rollout_api_needs_a_token(dirs, make_client):
    models, _ = dirs
    open_server = make_client(model_dir=models, rollout_auto=False)
    r = open_server.post("/v1/rollout/ee/promote")
    assert r.status_code == 403 and "RLSCORE_API_TOKEN" in r.json()["detail"][0]["msg"]
    guarded = make_client(model_dir=models, api_token=TOKEN, rollout_auto=False)
    assert guarded.post("/v1/rollout/ee/promote", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert guarded.post("/v1/rollout/xx/promote", headers=AUTH).status_code == 422
    r = guarded.post("/v1/rollout/ee/promote", headers=AUTH)
    assert r.status_code == 409 and "no candidate to promote" in r.json()["detail"][0]["msg"]


def test_shadow_canary_serving_and_rollback_through_the_api(dirs, make_client):
    models, candidates = dirs
    serving_version = load_model(models / "ee.safetensors").version
    candidate_version = load_model(passing_verdict(candidates / "ee.safetensors")).version
    client = make_client(model_dir=models, api_token=TOKEN, rollout_auto=False, canary_share=0.2)
    assert rollout_of(client)["stage"] == "shadow"  # the server staged it at start-up (the candidate watch)

    # the in-process scorer is told to leave EE's pods to this server while a candidate is staged
    stages = client.get("/v1/node-metrics", headers=AUTH).json()["rollout_stages"]
    assert stages == {"EE": "shadow", "LB": "none", "EL": "none"}

    # shadow: the serving model decides every pod; both are compared
    answers = [ask(client, f"shadow-{i}") for i in range(30)]
    assert {a["model_version"] for a in answers} == {serving_version}
    status = rollout_of(client)
    assert status["compared"] == 30 and 0.0 <= status["agreement"] <= 1.0
    assert set(status["mean_placement_cost"]) == {"serving", "candidate"}
    text = client.get("/metrics", headers=AUTH).text
    assert 'rlscore_rollout_compared_total{policy="EE",stage="shadow"} 30.0' in text
    assert 'rlscore_rollout_stage{policy="EE",stage="shadow"} 1.0' in text
    assert client.get("/policies", headers=AUTH).json()["rollout"]["policies"]["EE"]["stage"] == "shadow"

    # canary: the candidate decides for the pods whose hash falls under the share, the same ones every time
    assert client.post("/v1/rollout/ee/promote", headers=AUTH).json()["stage"] == "canary"
    names = [f"web-{i}" for i in range(1000)]
    by_candidate = [ask(client, n)["source"] == "candidate" for n in names]
    share = float(np.mean(by_candidate))
    assert abs(share - 0.2) <= 0.05, share  # within 5 points of the configured share (measured: 21.8%)
    assert by_candidate == [canary_fraction("default", n) < 0.2 for n in names]
    assert client.get("/v1/node-metrics", headers=AUTH).json()["rollout_stages"]["EE"] == "canary"
    assert [ask(client, n)["source"] == "candidate" for n in names[:50]] == by_candidate[:50]
    assert rollout_of(client)["decided_by_candidate"] == sum(by_candidate) + sum(by_candidate[:50])

    # serving: the candidate's file is installed and loaded; the one it replaced is kept
    r = client.post("/v1/rollout/ee/promote", headers=AUTH).json()
    assert r["stage"] == "none" and r["history"][-1]["to"] == "serving"
    metrics = client.get("/v1/node-metrics", headers=AUTH).json()
    assert metrics["rollout_stages"]["EE"] == "none" and metrics["model_versions"]["EE"] == candidate_version
    assert ask(client, "after")["model_version"] == candidate_version
    assert (models / "ee.safetensors").read_bytes() == (candidates / "ee.safetensors").read_bytes()
    assert load_model(models / "previous" / "ee.safetensors").version == serving_version

    # rollback without a candidate: the previous model serves again
    r = client.post("/v1/rollout/ee/rollback", headers=AUTH).json()
    assert ask(client, "rolled-back")["model_version"] == serving_version
    assert [h["to"] for h in r["history"]] == ["shadow", "canary", "serving", "none"]


def test_auto_advance_promotes_a_cheaper_candidate(dirs, make_client):
    models, candidates = dirs
    candidate_version = load_model(passing_verdict(candidates / "ee.safetensors")).version
    client = make_client(model_dir=models, api_token=TOKEN, shadow_decisions=20, canary_decisions=40)
    assert rollout_of(client)["stage"] == "shadow"  # staged by the server itself at start-up (the watch)
    for i in range(20):
        ask(client, f"a-{i}")
    status = rollout_of(client)
    assert status["stage"] == "canary", status["history"]
    step = status["history"][-1]
    assert step["trigger"] == "auto" and step["mean_placement_cost"]["candidate"] <= step["mean_placement_cost"]["serving"]
    for i in range(40):
        ask(client, f"b-{i}")
    assert rollout_of(client)["history"][-1]["to"] == "serving"
    assert ask(client, "after")["model_version"] == candidate_version


def test_auto_rollback_of_a_candidate_that_costs_more(dirs, make_client):
    """The roles swapped: the shipped model serves, one that spreads is the candidate (its verdict
    forged: the gate would refuse it)."""
    models, candidates = dirs
    copy_models(models)
    spreading_ee(candidates / "ee.safetensors")
    passing_verdict(candidates / "ee.safetensors")
    before = (models / "ee.safetensors").read_bytes()
    client = make_client(model_dir=models, api_token=TOKEN, shadow_decisions=25)
    for i in range(25):
        ask(client, f"a-{i}")
    status = rollout_of(client)
    assert status["stage"] == "none" and status["history"][-1]["trigger"] == "auto"
    assert "costs more than serving" in status["history"][-1]["reason"]
    assert (models / "ee.safetensors").read_bytes() == before


def test_a_candidate_that_fails_to_score_is_rolled_back_and_the_pod_still_scored(dirs, make_client):
    models, candidates = dirs
    passing_verdict(overflowing_el_model(candidates / "el.safetensors"))
    client = make_client(model_dir=models, api_token=TOKEN, rollout_auto=False)
    assert rollout_of(client, "EL")["stage"] == "shadow"
    body = {"pod": pod({"rlscore.io/latency-soft-ms": "20", "rlscore.io/latency-hard-ms": "30"}),
            "nodes": [node("near", latency=10.0), node("far", latency=120.0)], "policy": "EL"}
    r = post(client, body, AUTH).json()
    assert r["scores"]["near"] == 100 and r["source"] == "model"
    assert any("candidate rolled back" in reason for reason in r["reasons"])
    assert rollout_of(client, "EL")["stage"] == "none"


def test_the_stage_survives_a_restart(dirs, make_client):
    models, candidates = dirs
    passing_verdict(candidates / "ee.safetensors")
    first = make_client(model_dir=models, api_token=TOKEN, rollout_auto=False)
    first.post("/v1/rollout/ee/promote", headers=AUTH)
    assert rollout_of(first)["stage"] == "canary"
    again = make_client(model_dir=models, api_token=TOKEN, rollout_auto=False)
    assert rollout_of(again)["stage"] == "canary"
    state = json.loads((candidates / "rollout.json").read_text())
    assert state["policies"]["EE"]["stage"] == "canary"


def test_a_heuristic_candidate_goes_shadow_canary_serving_and_a_rollback_brings_the_model_back(dirs, make_client):
    """The retraining loop's fallback: a model file naming the best heuristic replaces a stale model
    through the same stages; while it serves, answers say `heuristic` with its version, and the
    in-process scorer is told there are no weights to run (it leaves the policy to this server)."""
    from rlscore.core.model import write_heuristic_model

    models, candidates = dirs
    serving_version = load_model(models / "ee.safetensors").version
    write_heuristic_model(candidates / "ee.safetensors", "best-fit", "EE", {"note": "fallback"})
    heuristic_version = load_model(passing_verdict(candidates / "ee.safetensors"), allow_heuristic=True).version
    client = make_client(model_dir=models, api_token=TOKEN, rollout_auto=False, canary_share=0.5)
    assert rollout_of(client)["stage"] == "shadow"
    assert rollout_of(client)["candidate_version"] == heuristic_version
    assert {ask(client, f"s-{i}")["model_version"] for i in range(5)} == {serving_version}

    assert client.post("/v1/rollout/ee/promote", headers=AUTH).json()["stage"] == "canary"
    canary = [ask(client, f"c-{i}") for i in range(40)]
    assert {(a["source"], a["model_version"]) for a in canary} == {("candidate", heuristic_version),
                                                                   ("model", serving_version)}

    client.post("/v1/rollout/ee/promote", headers=AUTH)
    served = ask(client, "after")
    assert (served["source"], served["model_version"], served["degraded"]) == ("heuristic", heuristic_version, False)
    # best-fit: the fullest node the pod fits on
    assert served["scores"]["busy"] == 100 and served["scores"]["empty-a"] < 100
    assert client.get("/v1/node-metrics", headers=AUTH).json()["model_versions"]["EE"] is None
    r = client.get("/v1/models/EE", headers=AUTH)
    assert r.status_code == 404 and "served by the heuristic best-fit" in r.json()["detail"][0]["msg"]
    status = {p["policy"]: p for p in client.get("/policies", headers=AUTH).json()["policies"]}["EE"]
    assert (status["serving"], status["heuristic"], status["model_version"]) == ("heuristic", "best-fit",
                                                                                  heuristic_version)

    client.post("/v1/rollout/ee/rollback", headers=AUTH)
    assert ask(client, "back")["model_version"] == serving_version
    assert client.get("/v1/node-metrics", headers=AUTH).json()["model_versions"]["EE"] == serving_version
