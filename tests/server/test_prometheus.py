"""Names-only /suggest against a real Prometheus scraping node_exporter-format metrics."""

import asyncio
import threading
import time
from contextlib import contextmanager

import httpx
import pytest
from fastapi.testclient import TestClient

from suggestion_server.app import create_app
from suggestion_server.config import Settings
from suggestion_server.node_state.prometheus_source import PrometheusSource, certificate_check
from tests.helpers.certs import CA
from tests.helpers.metrics import counter
from tests.helpers.processes import FakeNodeExporter, PrometheusServer, free_port, wait_for
from tests.server.conftest import pod, post, settings

NODES = ["worker-1", "worker-2", "worker-3"]


POWER = {"worker-1": (200.0, 400.0), "worker-2": (60.0, 220.0)}  # worker-3: no Kepler series


@contextmanager
def scraped(tmp_path, exporter: FakeNodeExporter):
    """A real Prometheus scraping `exporter`, and a server reading it every 0.5 s: (client, prometheus)."""
    prometheus = PrometheusServer(tmp_path, [f"127.0.0.1:{exporter.port}"])
    try:
        app = create_app(settings(prometheus_url=prometheus.url, refresh_interval_s=0.5, stale_after_s=30,
                                  prometheus_timeout_s=1.0))
        with TestClient(app) as client:
            yield client, prometheus
    finally:
        prometheus.stop()
        exporter.close()


@pytest.fixture
def stack(tmp_path):
    with scraped(tmp_path, FakeNodeExporter({"worker-1": 0.9, "worker-2": 0.1, "worker-3": 0.15}, power=POWER)) as both:
        yield both


def _has_metrics(client):
    r = post(client, {"pod": pod(), "nodes": NODES, "policy": "LB"}).json()
    return r if not any("utilization unknown" in x or "capacity unknown" in x for x in r["reasons"]) else None


def _ee_picks(client, rule: str) -> float:
    """How often EE's selector has picked `rule` in this process (the counter outlives one app)."""
    return counter(client.get("/metrics").text, "rlscore_selector_rules_total", policy="EE", rule=rule)


def test_busy_node_in_prometheus_gets_the_score_its_policy_implies(stack):
    client, prometheus = stack
    lb = wait_for(lambda: _has_metrics(client), 60, "utilization from Prometheus in the snapshot", 0.5)
    assert lb["source"] == "model"
    assert min(lb["scores"], key=lb["scores"].get) == "worker-1"  # LB avoids the busy node
    before = _ee_picks(client, "efficient-first")
    ee = post(client, {"pod": pod(), "nodes": NODES, "policy": "EE"}).json()
    # EE's selector picks efficient-first here (power from Kepler): the pod goes where its cores cost the
    # fewest watts, worker-2 (60-220 W), not the busy worker-1 (200-400 W) a pure packer would fill
    assert _ee_picks(client, "efficient-first") == before + 1
    assert max(ee["scores"], key=ee["scores"].get) == "worker-2"
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


def test_power_model_from_kepler_and_the_thesis_metrics_from_node_exporter(stack):
    client, _ = stack

    def state():
        r = client.get("/state", params={"node": NODES})
        assert r.status_code == 200, r.text
        rows = {row["name"]: row for row in r.json()["nodes"]}
        return rows if rows["worker-2"]["network_receive_bytes_per_s"] and rows["worker-1"]["power_max_watts"] else None

    rows = wait_for(state, 60, "Kepler and node_exporter series in the snapshot", 0.5)
    # Kepler: idle watts directly, full load from the active watts at the usage ratio
    assert rows["worker-1"]["power_idle_watts"] == pytest.approx(200.0)
    assert rows["worker-1"]["power_max_watts"] == pytest.approx(400.0, rel=0.02)
    assert rows["worker-2"]["power_idle_watts"] == pytest.approx(60.0)
    assert rows["worker-2"]["power_max_watts"] == pytest.approx(220.0, rel=0.02)
    assert rows["worker-3"]["power_idle_watts"] is None and rows["worker-3"]["power_max_watts"] is None
    # node_exporter: eth0 only (not lo), connections, root filesystem
    assert rows["worker-1"]["network_receive_bytes_per_s"] == pytest.approx(0.9e6, rel=0.05)
    assert rows["worker-1"]["tcp_established"] == pytest.approx(100.0)
    assert rows["worker-2"]["disk_utilization"] == pytest.approx(0.05)
    # unknown power is reported
    body = post(client, {"pod": pod(), "nodes": ["worker-2", "worker-3"], "policy": "EE"}).json()
    assert any("power model unknown for 1 node(s) (worker-3)" in reason for reason in body["reasons"])


def test_full_load_power_is_right_when_kepler_reports_usage_above_one(tmp_path):
    """An emulation that does not throttle (KWOK's) reports usage ratios above 1, with the active
    watts of that usage: full load is still idle + active / usage (it read 1.4x the dynamic range)."""
    with scraped(tmp_path, FakeNodeExporter({"worker-1": 1.4}, power={"worker-1": (200.0, 400.0)})) as (client, _):
        def state():
            row = client.get("/state", params={"node": ["worker-1"]}).json()["nodes"][0]
            return row if row["power_max_watts"] is not None else None
        row = wait_for(state, 60, "worker-1's Kepler series in the snapshot", 0.5)
        assert row["power_max_watts"] == pytest.approx(400.0, rel=0.02)


def test_sizes_and_power_beyond_what_a_node_can_report_are_unknown_not_infinite(tmp_path):
    """node_exporter's 1e20 bytes of memory are past Kubernetes' int64, Kepler's full load of 4e12 W
    past 1e9 W: each reads as unknown (the server's defaults and reasons), and the nodes are served."""
    exporter = FakeNodeExporter({"worker-1": 0.5, "worker-2": 0.5}, memory_bytes=1e20,
                                power={"worker-1": (200.0, 4e12), "worker-2": (60.0, 220.0)})
    with scraped(tmp_path, exporter) as (client, _):
        def state():
            answer = client.get("/state", params={"node": ["worker-1", "worker-2"]}).json()
            rows = {row["name"]: row for row in answer["nodes"]}
            known = rows["worker-2"]["power_max_watts"] and rows["worker-1"]["cpu_utilization"] is not None
            return (rows, answer["reasons"]) if known else None
        rows, reasons = wait_for(state, 60, "both nodes' series in the snapshot", 0.5)
        assert rows["worker-1"]["power_max_watts"] is None and rows["worker-1"]["power_idle_watts"] is None
        assert rows["worker-2"]["power_max_watts"] == pytest.approx(220.0, rel=0.02)
        assert "power model unknown for 1 node(s) (worker-1)" in reasons
        assert "memory capacity unknown for 2 node(s) (worker-1, worker-2)" in reasons
        assert all(row["cpu_capacity_millicores"] == 4000.0 for row in rows.values())  # 4 cpus: kept
        body = post(client, {"pod": pod(), "nodes": ["worker-1", "worker-2"], "policy": "EE"})
        assert body.status_code == 200, body.text
        assert set(body.json()["scores"]) == {"worker-1", "worker-2"}


def test_a_restarted_server_knows_the_power_model_of_nodes_idle_now_from_prometheus_history(tmp_path, caplog):
    """Kepler tells full-load watts only while a node is busy. worker-1 was busy (usage 0.9) and is
    idle (0) when the server starts: the history query still gives its model; without the query
    (the control) it is unknown, as it was before the history was read."""
    exporter = FakeNodeExporter({"worker-1": 0.9, "worker-2": 0.1}, power={"worker-1": (200.0, 400.0)})
    prometheus = PrometheusServer(tmp_path, [f"127.0.0.1:{exporter.port}"])
    try:
        def samples(query):
            r = httpx.get(f"{prometheus.url}/api/v1/query", params={"query": query}, timeout=5).json()
            return [float(s["value"][1]) for s in r["data"]["result"]]

        wait_for(lambda: (samples("count_over_time(kepler_node_cpu_usage_ratio[1m])") or [0])[0] >= 5, 60,
                 "five scrapes of worker-1's busy power series", 0.5)
        exporter.busy["worker-1"] = 0.0
        wait_for(lambda: samples("kepler_node_cpu_usage_ratio") == [0.0], 30, "worker-1 idle in Prometheus", 0.5)
        history = ("avg_over_time((sum by (node_name) (kepler_node_cpu_idle_watts) + sum by (node_name) "
                   "(kepler_node_cpu_active_watts) / (avg by (node_name) (kepler_node_cpu_usage_ratio) >= 0.05))[10m:1s])")
        rows = {}
        broken = "avg_over_time(kepler_node_cpu_idle_watts[6h"  # a typo in the setting
        for query in (history, "", broken):
            app = create_app(settings(prometheus_url=prometheus.url, refresh_interval_s=0.5, stale_after_s=30,
                                      prometheus_timeout_s=2.0, power_max_history_query=query))
            with TestClient(app) as client:
                def state():
                    r = client.get("/state", params={"node": ["worker-1"]}).json()["nodes"][0]
                    return r if r["cpu_utilization"] is not None else None
                wait_for(state, 30, "worker-1's metrics in the snapshot", 0.5)
                time.sleep(1.5)  # three more refreshes: the history is read before the first
                rows[query] = state()
        assert rows[history]["power_idle_watts"] == pytest.approx(200.0)
        assert rows[history]["power_max_watts"] == pytest.approx(400.0, rel=0.02)
        assert rows[""]["power_max_watts"] is None  # the control: an idle node says nothing of full load
        # a query Prometheus refuses is said in the log, and costs nothing but the estimate
        assert rows[broken]["cpu_utilization"] is not None and rows[broken]["power_max_watts"] is None
        assert any("power history unavailable" in r.getMessage() and "power_max_watts" in r.getMessage()
                   for r in caplog.records), [r.getMessage() for r in caplog.records]
    finally:
        prometheus.stop()
        exporter.close()


def test_queries_prometheus_refuses_or_answers_in_another_shape_are_named_and_the_rest_served(stack):
    """Each query fails alone, with Prometheus's own reason; a query that is not an instant vector
    (a scalar, a range) says so instead of being read as node values; a port that is not Prometheus
    is a named problem, not a crash."""
    client, prometheus = stack
    source = PrometheusSource(prometheus.url, 2.0, {
        "cpu_utilization": '1 - avg by (instance) (irate(node_cpu_seconds_total{mode="idle"}[1m]))',
        "memory_utilization": "scalar(vector(0.5))",
        "disk_utilization": "node_filesystem_avail_bytes[1m]",
        "tcp_established": "sum by (instance) (",
    })
    wait_for(lambda: len(asyncio.run(source.collect({}))[0]) == 3, 30, "cpu utilization of every node")
    values, problems = asyncio.run(source.collect({}))
    assert all(set(fields) == {"cpu_utilization"} for fields in values.values()), values
    assert any("memory_utilization" in p and "gives a scalar, not an instant vector" in p for p in problems)
    assert any("disk_utilization" in p and "gives a matrix" in p for p in problems)
    assert any("tcp_established" in p and "HTTP 400: bad_data" in p for p in problems), problems
    assert len(problems) == 3
    exporter = FakeNodeExporter({"worker-1": 0.5})
    try:
        _, problems = asyncio.run(PrometheusSource(f"http://127.0.0.1:{exporter.port}", 1.0, {"cpu_utilization": "up"})
                                  .collect({}))
    finally:
        exporter.close()
    assert len(problems) == 1 and "not a Prometheus API answer" in problems[0], problems
    _, problems = asyncio.run(PrometheusSource(f"http://127.0.0.1:{free_port()}", 1.0, {"cpu_utilization": "up"})
                              .collect({}))
    assert len(problems) == 1 and "ConnectError" in problems[0], problems


def test_an_https_prometheus_is_verified_against_the_configured_ca(tmp_path):
    """Against a real Prometheus serving https with a certificate of its own CA: the system's CAs
    refuse it (a named problem, the rest of the refresh goes on), the configured CA accepts it, a
    foreign CA refuses it, and skipping verification is an explicit choice."""
    ca = CA(tmp_path / "ca")
    served = ca.issue("prometheus", "localhost")
    exporter = FakeNodeExporter({"worker-1": 0.5})
    prometheus = PrometheusServer(tmp_path, [f"127.0.0.1:{exporter.port}"],
                                  tls=(served.cert, served.key, ca.files.cert))
    query = {"cpu_utilization": '1 - avg by (instance) (irate(node_cpu_seconds_total{mode="idle"}[1m]))'}
    try:
        def read(verify):
            return asyncio.run(PrometheusSource(prometheus.url, 2.0, query, verify=verify).collect({}))
        trusted = certificate_check(ca.files.cert)
        wait_for(lambda: read(trusted)[0], 30, "worker-1's cpu over https")
        values, problems = read(trusted)
        assert values["worker-1"]["cpu_utilization"] == pytest.approx(0.5, abs=0.1) and not problems
        for verify in (certificate_check(), certificate_check(CA(tmp_path / "other").files.cert)):
            values, problems = read(verify)
            assert not values and len(problems) == 1 and "CERTIFICATE_VERIFY_FAILED" in problems[0], problems
        values, problems = read(certificate_check(insecure=True))
        assert values and not problems
    finally:
        prometheus.stop()
        exporter.close()
    with pytest.raises(ValueError, match="not both"):
        Settings(prometheus_ca_file=ca.files.cert, prometheus_insecure_skip_verify=True)
    with pytest.raises(OSError):
        certificate_check(tmp_path / "missing.pem")


def test_the_server_refuses_to_start_with_an_unreadable_prometheus_ca(tmp_path, monkeypatch, capsys):
    from suggestion_server import cli

    monkeypatch.setenv("RLSCORE_PROMETHEUS_URL", "https://prometheus:9090")
    monkeypatch.setenv("RLSCORE_PROMETHEUS_CA_FILE", str(tmp_path / "missing.pem"))
    assert cli.main([]) == 2
    err = capsys.readouterr().err
    assert "RLSCORE_PROMETHEUS_CA_FILE" in err and "missing.pem" in err
    (tmp_path / "junk.pem").write_text("not a certificate\n")
    monkeypatch.setenv("RLSCORE_PROMETHEUS_CA_FILE", str(tmp_path / "junk.pem"))
    assert cli.main([]) == 2
    assert "junk.pem" in capsys.readouterr().err


def test_the_swing_of_a_nodes_cpu_over_time_comes_from_prometheus(tmp_path):
    """LoadVariationRiskBalancing weighs how much a node's cpu swings, not only its level; served as
    a rule it read no swing at all before. One node swings between 10% and 70% busy, one is steady
    at 40%: /state shows the first's standard deviation over time (cpu_stddev_query, its windows
    shortened to the test's 1 s scrapes) and about 0 for the second; an empty query leaves it unknown."""
    exporter = FakeNodeExporter({"worker-1": 0.1, "worker-2": 0.4})
    prometheus = PrometheusServer(tmp_path, [f"127.0.0.1:{exporter.port}"])
    query = ('stddev_over_time((1 - avg by (instance, node) (irate(node_cpu_seconds_total{mode="idle"}[3s])))'
             '[20s:1s])')
    stop = threading.Event()

    def swing():
        while not stop.wait(2.0):
            exporter.busy["worker-1"] = 0.7 if exporter.busy["worker-1"] == 0.1 else 0.1

    swinging = threading.Thread(target=swing, daemon=True)
    swinging.start()
    try:
        def spread(client):
            r = client.get("/state", params={"node": ["worker-1", "worker-2"]})
            assert r.status_code == 200, r.text
            rows = {row["name"]: row["cpu_utilization_stddev"] for row in r.json()["nodes"]}
            return rows if rows["worker-1"] is not None and rows["worker-1"] > 0.2 else None

        common = dict(prometheus_url=prometheus.url, refresh_interval_s=0.5, stale_after_s=30)
        with TestClient(create_app(settings(cpu_stddev_query=query, **common))) as client:
            rows = wait_for(lambda: spread(client), 90, "a swinging node's cpu spread in /state", 0.5)
            # values between 0.1 and 0.7 spread by at most half that range, 0.3 (in equal parts)
            assert 0.2 < rows["worker-1"] <= 0.301, rows
            assert rows["worker-2"] == pytest.approx(0.0, abs=0.02)
        with TestClient(create_app(settings(cpu_stddev_query="", **common))) as client:
            def measured():
                r = client.get("/state", params={"node": ["worker-1", "worker-2"]}).json()
                return r if all(row["cpu_utilization"] is not None for row in r["nodes"]) else None

            r = wait_for(measured, 60, "utilization from Prometheus in the snapshot", 0.5)
            assert [row["cpu_utilization_stddev"] for row in r["nodes"]] == [None, None]
            assert r["nodes"][1]["cpu_utilization"] == pytest.approx(0.4, abs=0.02)
    finally:
        stop.set()
        swinging.join()
        prometheus.stop()
        exporter.close()
