"""Model registry: only validated models serve; a bad file never replaces a good one."""

import os

import torch
from safetensors import safe_open
from safetensors.numpy import save

from rlscore.core.features import FEATURE_SPEC_VERSION
from rlscore.core.model import sidecar_path
from agent.learn.model_io import save_model
from agent.learn.network import NodeScorer
from suggestion_server.lifecycle.registry import ModelRegistry
from tests.server.conftest import copy_models, node, overflowing_el_model, pod, post


def _touch_later(path):
    st = path.stat()
    os.utime(path, (st.st_atime + 5, st.st_mtime + 5))


def test_good_models_load_with_versions(tmp_path):
    copy_models(tmp_path)
    registry = ModelRegistry(tmp_path)
    registry.load_all()
    assert registry.ready()
    assert {s["policy"]: s["serving"] for s in registry.status()} == {"EE": "model", "LB": "model", "EL": "model"}
    assert registry.get("EL").version.startswith("el-")


def test_corrupted_file_keeps_the_previous_model_and_is_reported(tmp_path, make_client):
    copy_models(tmp_path)
    client = make_client(model_dir=tmp_path, allow_unauthenticated_changes=True)
    before = post(client, {"pod": pod(), "nodes": [node("a"), node("b", cpu_req=1000, pods=2)], "policy": "EE"}).json()

    (tmp_path / "ee.safetensors").write_bytes(b"\x80\x04 this is not a model")
    r = client.post("/models/reload")
    statuses = {s["policy"]: s for s in r.json()["policies"]}
    assert statuses["EE"]["serving"] == "model" and statuses["EE"]["model_version"] == before["model_version"]
    assert "not a readable model file" in statuses["EE"]["error"]
    after = post(client, {"pod": pod(), "nodes": [node("a"), node("b", cpu_req=1000, pods=2)], "policy": "EE"}).json()
    assert after["source"] == "model" and after["model_version"] == before["model_version"]
    assert 'rlscore_model_load_failures_total{policy="EE"}' in client.get("/metrics").text


def test_wrong_spec_version_is_refused(tmp_path):
    net = NodeScorer((8,))
    path = save_model(tmp_path / "lb.safetensors", net, "LB", {})
    with safe_open(str(path), framework="numpy") as f:
        header, tensors = dict(f.metadata()), {k: f.get_tensor(k) for k in f.keys()}
    path.write_bytes(save(tensors, metadata={**header, "feature_spec_version": str(FEATURE_SPEC_VERSION + 1)}))
    sidecar_path(path).unlink()
    registry = ModelRegistry(tmp_path)
    entry = registry.load("LB")
    assert entry.model is None and "feature spec version" in entry.error


def test_hot_reload_on_file_change(tmp_path):
    copy_models(tmp_path)
    registry = ModelRegistry(tmp_path)
    registry.load_all()
    old = registry.get("LB").version
    assert registry.reload_changed() == []
    torch.manual_seed(123)
    save_model(tmp_path / "lb.safetensors", NodeScorer((16, 16)), "LB", {"training": {"steps": 1}})
    _touch_later(tmp_path / "lb.safetensors")
    assert registry.reload_changed() == ["LB"]
    assert registry.get("LB").version != old
    # a file that breaks later is refused; the new good model keeps serving
    good = registry.get("LB").version
    (tmp_path / "lb.safetensors").write_bytes(b"garbage")
    assert registry.reload_changed() == ["LB"]
    assert registry.get("LB").version == good and registry.policies["LB"].error


def test_model_with_non_finite_output_at_serving_time_falls_back(tmp_path, make_client):
    """Weights that pass the loader's probe but overflow on a far-away node: the heuristic answers."""
    copy_models(tmp_path)
    overflowing_el_model(tmp_path / "el.safetensors")
    client = make_client(model_dir=tmp_path)
    limited = pod({"rlscore.io/latency-soft-ms": "20", "rlscore.io/latency-hard-ms": "30"})
    body = {"pod": limited, "nodes": [node("near", latency=10.0), node("far", latency=120.0)], "policy": "EL"}
    r = post(client, body).json()
    assert r["source"] == "heuristic" and any("non-finite" in reason for reason in r["reasons"])
    assert r["scores"]["near"] == 100
    near_only = post(client, {**body, "nodes": [node("near", latency=10.0), node("mid", latency=20.0)]}).json()
    assert near_only["source"] == "model"


def test_reload_reads_only_files_that_changed_and_a_sidecar_change_counts(tmp_path, make_client):
    """A burst of reloads re-reads nothing unchanged (the scoring path pays nothing), keeps a refusal
    as it was, and a rewritten sidecar alone is a change; force=true reads every file again."""
    copy_models(tmp_path)
    client = make_client(model_dir=tmp_path, allow_unauthenticated_changes=True)
    assert client.post("/models/reload").json()["reloaded"] == []
    failures_before = _load_failures(client, "EE")
    side = sidecar_path(tmp_path / "ee.safetensors")
    side.write_bytes(b"[" * 5000 + b"]" * 5000)
    first = client.post("/models/reload").json()
    assert first["reloaded"] == ["EE"]
    error = {s["policy"]: s for s in first["policies"]}["EE"]["error"]
    assert error and "nest" in error
    again = client.post("/models/reload").json()
    assert again["reloaded"] == [] and {s["policy"]: s for s in again["policies"]}["EE"]["error"] == error
    forced = client.post("/models/reload?force=true").json()
    assert forced["reloaded"] == ["EE", "LB", "EL"]
    assert {s["policy"]: s for s in forced["policies"]}["EE"]["error"] == error
    assert _load_failures(client, "EE") == failures_before + 2  # the first refusal and the forced one


def _load_failures(client, policy: str) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(f'rlscore_model_load_failures_total{{policy="{policy}"}}'):
            return float(line.split()[-1])
    return 0.0
