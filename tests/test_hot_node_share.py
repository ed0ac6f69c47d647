"""hot_node_share: the simulator's hot-node share, read from a real Prometheus scraping node_exporter
series (the sim-to-real check of hot-node time, tests/e2e/test_retraining.py)."""

from __future__ import annotations

import time

import pytest
from prometheus_api_client import PrometheusConnect

from agent.live.history import HistoryError, hot_node_share
from tests.helpers.processes import FakeNodeExporter, PrometheusServer, wait_for

# the server's default cpu query, its `instance` (node:9100 here) turned into the `node` label
CPU = ('label_replace(1 - avg by (instance) (irate(node_cpu_seconds_total{mode="idle"}[1m])), '
       '"node", "$1", "instance", "(.*):.*")')


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    exporter = FakeNodeExporter({"a": 0.95, "b": 0.5, "c": 0.9, "d": 0.1, "other": 0.99})
    server = PrometheusServer(tmp_path_factory.mktemp("prom"), [f"127.0.0.1:{exporter.port}"])
    client = PrometheusConnect(server.url, disable_ssl=True)
    started = time.time()
    # irate needs two scrapes of every node
    wait_for(lambda: len(client.custom_query('irate(node_cpu_seconds_total{mode="idle",cpu="0"}[1m])')) == 5, 30,
             "two scrapes")
    time.sleep(3)
    yield client, started, time.time()
    server.stop()
    exporter.close()


@pytest.mark.parametrize("nodes, share", [
    (["a", "b", "c", "d"], 0.5),  # a and c are above 85% cpu
    (["b", "d"], 0.0),
    (["a", "c"], 1.0),
    (["a", "b", "c", "d", "gone"], 0.4),  # a node without samples is not hot
])
def test_the_share_of_node_time_above_85_percent_cpu(prometheus, nodes, share):
    client, start, end = prometheus
    assert hot_node_share(client, CPU, nodes, start, end) == pytest.approx(share, abs=0.05)


def test_no_samples_or_no_window_is_an_error_that_says_so(prometheus):
    client, start, end = prometheus
    with pytest.raises(HistoryError, match="no cpu samples for gone"):
        hot_node_share(client, CPU, ["gone"], start, end)
    with pytest.raises(HistoryError, match="no hot-node share"):
        hot_node_share(client, CPU, ["a"], end, start)
