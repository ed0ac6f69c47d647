"""Drift against the serving model's training profile: the reference a profile gives, the request
mix signal through the server's real request path, flagging, and the retraining hook. (Usage drift
on a live cluster: tests/e2e/test_retraining.py.)"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
import pytest

from rlscore.core.model import sidecar_path
from rlscore.core.profile import ClusterProfile, NodeGroup, NodeType, PodClassProfile, Workload
from suggestion_server.lifecycle.drift import PSI_THRESHOLD, REQUEST_BINS, Reference, psi
from tests.server.conftest import copy_models, node, pod, post


MIX = [250] * 6 + [1000, 2000]  # the profile's pod mix, in order


def profile() -> ClusterProfile:
    return ClusterProfile(
        name="shop", nodeTypes=[NodeType(name="m", cpuMillicores=8000, memoryBytes=16e9, powerIdleWatts=70,
                                         powerMaxWatts=220)],
        nodes=[NodeGroup(type="m", latencyMs=[10.0, 30.0], names=["a", "b"])],
        workload=Workload(podClasses=[
            PodClassProfile(name="web", weight=3, cpuMillicores=[250], usage=[0.2, 0.4]),
            PodClassProfile(name="batch", weight=1, cpuMillicores=[1000, 2000], usage=[1.0, 1.0], lifetimeScale=2.0)]))


def test_reference_of_a_profile():
    ref = Reference.of_profile(profile(), "test")
    # usage weighted by requested cpu-time: web 3 x 250 x 1 at 0.3, batch 1 x 1500 x 2 at 1.0
    assert ref.usage_factor == pytest.approx((750 * 0.3 + 3000 * 1.0) / 3750)
    shares = dict(zip(REQUEST_BINS[:-1], ref.request_shares))
    assert shares[150] == pytest.approx(0.75) and shares[600] == pytest.approx(0.125)
    assert shares[1200] == pytest.approx(0.125) and ref.request_shares.sum() == pytest.approx(1.0)
    assert ref.latency_by_node == {"a": 10.0, "b": 30.0}


def test_psi_is_zero_for_the_same_mix_and_large_for_another():
    ref = Reference.of_profile(profile(), "test").request_shares
    assert psi(ref, ref * 500) == pytest.approx(0.0, abs=1e-9)
    shifted = np.zeros_like(ref)
    shifted[np.searchsorted(REQUEST_BINS, 4000, side="right") - 1] = 100  # every pod asks for 4 cpus
    assert psi(ref, shifted) > 10 * PSI_THRESHOLD


@pytest.fixture
def trained_on_shop(tmp_path):
    """The shipped EE model, its sidecar saying it was trained on the shop profile."""
    models = copy_models(tmp_path / "models")
    side = sidecar_path(models / "ee.safetensors")
    meta = json.loads(side.read_text())
    meta["training_profile"] = profile().model_dump(by_alias=True, mode="json")
    side.write_text(json.dumps(meta))
    return models


def test_a_new_request_mix_is_flagged_after_two_checks_and_starts_retraining(trained_on_shop, tmp_path, make_client):
    marker = tmp_path / "retrain-started"
    command = f"{sys.executable} -c \"import os, pathlib; pathlib.Path({str(marker)!r}).write_text(" \
              f"os.environ['RLSCORE_DRIFT_POLICY'] + ' ' + os.environ['RLSCORE_DRIFT_REASON'])\""
    client = make_client(model_dir=trained_on_shop, drift_retrain_command=command)
    drift = client.app.state.services.drift
    nodes = [node("a", latency=10.0), node("b", latency=30.0)]
    for i in range(60):  # the mix it was trained on
        post(client, {"pod": pod(name=f"w{i}", cpu=MIX[i % 8]), "nodes": nodes, "policy": "EE"})
    drift.check()
    status = client.get("/policies").json()["drift"]["policies"]["EE"]
    assert status["reference"].startswith("training profile shop of ee-")
    assert status["signals"]["requests"]["over"] is False and not status["flagged"]
    for i in range(500):  # now every pod asks for 4 cpus
        post(client, {"pod": pod(name=f"big{i}", cpu=4000), "nodes": nodes, "policy": "EE"})
    drift.check()
    assert client.get("/policies").json()["drift"]["policies"]["EE"]["signals"]["requests"]["over"]
    assert not drift.policies["EE"].flagged  # one check over the threshold is not yet drift
    drift.check()
    status = client.get("/policies").json()["drift"]["policies"]["EE"]
    assert status["flagged"] and status["retrain"].startswith("started ")
    assert 'rlscore_drift_flagged{policy="EE"} 1.0' in client.get("/metrics").text
    deadline = time.monotonic() + 10
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert marker.read_text().startswith("EE requests: PSI")
    # a second flag within the cooldown does not start another
    drift.policies["EE"].flagged = False
    drift.check()
    assert drift.policies["EE"].retrain.startswith("skipped")
    # LB and EL serve models without a training profile: no reference, no verdict
    assert client.get("/policies").json()["drift"]["policies"]["LB"]["reference"] is None


def test_a_reference_profile_file_that_is_invalid_is_reported_not_fatal(tmp_path, make_client, caplog):
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: ClusterProfile\n")
    client = make_client(drift_profile=bad)
    client.app.state.services.drift.check()
    assert client.get("/policies").json()["drift"]["policies"]["EE"]["reference"] is None
    assert "invalid cluster profile" in caplog.text


def test_a_cronjob_without_an_api_is_reported_and_a_bad_reference_refused(trained_on_shop, make_client):
    from pydantic import ValidationError

    from tests.server.conftest import settings

    client = make_client(model_dir=trained_on_shop, drift_retrain_cronjob="rlscore-system/rlscore-retrain")
    drift = client.app.state.services.drift
    nodes = [node("a", latency=10.0), node("b", latency=30.0)]
    for i in range(100):
        post(client, {"pod": pod(name=f"big{i}", cpu=4000), "nodes": nodes, "policy": "EE"})
    drift.check()
    drift.check()
    status = client.get("/policies").json()["drift"]["policies"]["EE"]
    assert status["flagged"] and "no Job created from rlscore-system/rlscore-retrain" in status["retrain"]
    assert "no Kubernetes API" in status["retrain"]
    with pytest.raises(ValidationError, match="drift_retrain_cronjob"):
        settings(drift_retrain_cronjob="not a reference")


def test_a_burst_of_new_pods_is_not_read_as_pods_using_less_than_their_requests(trained_on_shop, make_client):
    """The usage signal counts a pod's request only once its use can show in the metrics
    (RLSCORE_USAGE_ONSET_S), so a burst of new pods is neither a drift nor hides one."""
    from tests.server.test_node_table import Clock

    client = make_client(model_dir=trained_on_shop, usage_onset_s=30.0, usage_linger_s=15.0)
    drift = client.app.state.services.drift
    table = drift.table
    table.now = clock = Clock()
    table.set_node("a", cpu_capacity=8000.0, memory_capacity=16e9, max_pods=110.0)
    table.set_node("b", cpu_capacity=16000.0, memory_capacity=32e9, max_pods=110.0)
    factor = Reference.of_profile(profile(), "shop").usage_factor
    table.add_usage("a", 4000.0, 0.0, 4, bound_at=clock.t - 600.0)  # settled, using what the profile says

    def check(used_b: float) -> dict:
        clock.t += 3.0
        table.replace_metrics({"a": {"cpu_utilization": 4000.0 * factor / 8000.0},
                               "b": {"cpu_utilization": used_b / 16000.0}})
        drift.check()
        return client.get("/policies").json()["drift"]["policies"]["EE"]

    for _ in range(3):
        status = check(0.0)
    assert status["signals"]["usage"]["value"] == pytest.approx(1.0) and not status["flagged"]
    for i in range(4):  # a burst: 4 cpus bound on b, their use not in the metrics yet
        table.add_usage("b", 1000.0, 0.0, 1, bound_at=clock.t)
    for _ in range(6):
        status = check(0.0)
        _, col = table.snapshot(("requested_at", "requested_showing"))
        assert col["requested_at"][1] == 4000.0 and col["requested_showing"][1] == 0.0
        assert status["signals"]["usage"]["value"] == pytest.approx(1.0), status  # counted at once: x0.5
    assert not status["flagged"]
    clock.t += 30.0  # their use shows now: 3x their requests
    for _ in range(5):
        status = check(4000.0 * 3 * factor)
    assert status["signals"]["usage"]["value"] == pytest.approx(2.0) and status["flagged"]
