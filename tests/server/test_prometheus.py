"""Names-only /suggest against a real Prometheus scraping node_exporter-format metrics."""

import time

import pytest
from fastapi.testclient import TestClient

from suggestion_server.api import create_app
from tests.helpers.processes import FakeNodeExporter, PrometheusServer, wait_for
from tests.server.conftest import pod, post, settings

NODES = ["worker-1", "worker-2", "worker-3"]


@pytest.fixture
def stack(tmp_path):
    exporter = FakeNodeExporter({"worker-1": 0.9, "worker-2": 0.1, "worker-3": 0.15})
    prometheus = PrometheusServer(tmp_path, [f"127.0.0.1:{exporter.port}"])
    app = create_app(settings(prometheus_url=prometheus.url, refresh_interval_s=0.5, stale_after_s=30,
                              prometheus_timeout_s=1.0))
    with TestClient(app) as client:
        yield client, prometheus
    prometheus.stop()
    exporter.close()


def _has_metrics(client):
    r = post(client, {"pod": pod(), "nodes": NODES, "policy": "LB"}).json()
    return r if not any("utilization unknown" in x or "capacity unknown" in x for x in r["reasons"]) else None


def test_busy_node_in_prometheus_gets_the_score_its_policy_implies(stack):
    client, prometheus = stack
    lb = wait_for(lambda: _has_metrics(client), 60, "utilization from Prometheus in the snapshot", 0.5)
    assert lb["source"] == "model"
    assert min(lb["scores"], key=lb["scores"].get) == "worker-1"  # LB avoids the busy node
    ee = post(client, {"pod": pod(), "nodes": NODES, "policy": "EE"}).json()
    assert max(ee["scores"], key=ee["scores"].get) == "worker-1"  # EE packs onto it
    # capacity came from node_exporter's cpu count and MemTotal; requests were estimated
    assert any("estimated from utilization" in reason for reason in lb["reasons"])
    snapshot = client.get("/policies").json()["snapshot"]
    assert snapshot["nodes"] == 3 and snapshot["problems"] == []

    prometheus.stop()
    time.sleep(1.5)  # a refresh or two against the stopped server
    r = post(client, {"pod": pod(), "nodes": NODES, "policy": "LB"})
    assert r.status_code == 200
    body = r.json()
    assert body["degraded"] is True and set(body["scores"]) == set(NODES)
    assert any("prometheus" in reason for reason in body["reasons"])
    assert "rlscore_degraded_total" in client.get("/metrics").text
