"""What calibration and the sim-to-real check read of node cpu from a real Prometheus scraping
node_exporter series: hot_node_share (the simulator's hot-node share, tests/e2e/test_retraining.py)
and each node's background cpu (what it uses besides its pods)."""

from __future__ import annotations

import time

import pytest
from prometheus_api_client import PrometheusConnect

from agent.live.history import HistoryError, NodeRecord, RangeReader, _background_cpu, hot_node_share
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


# the pods' cores on each 8-core node: its busy share x 8 less 0.8 cores (so 0.1 of it is background),
# for the nodes the regex names
PODS = ('label_replace(8 * (1 - avg by (instance) (irate(node_cpu_seconds_total{{mode="idle"}}[1m]))) - 0.8, '
        '"node", "$1", "instance", "({nodes}):.*")')


@pytest.mark.parametrize("pods_on, cores, background, note", [
    ("a|b|c|d", 8, {"a": 0.1, "b": 0.1, "c": 0.1, "d": 0.1, "gone": None}, "background cpu unknown for 1 node(s) (gone)"),
    ("a|b", 8, {"a": 0.1, "b": 0.1, "c": 0.9, "d": 0.1, "gone": None}, None),  # no pods on c, d: all background
    ("a|b|c|d", 16, {"a": 0.525, "b": 0.3, "c": 0.5, "d": 0.1, "gone": None}, None),  # the same cores, twice the cpus
    ("nothing", 8, {"a": None, "b": None, "c": None, "d": None, "gone": None}, "no per-node pod cpu"),
])
def test_background_cpu_is_the_busy_share_its_pods_do_not_explain(prometheus, pods_on, cores, background, note):
    client, start, _ = prometheus
    wait_for(lambda: time.time() > start + 14, 20, "five samples of every series")
    end = time.time()
    queries = {"node_cpu_busy": CPU, "node_pod_cpu": PODS.format(nodes=pods_on)}
    nodes = {name: NodeRecord(name, cores * 1000.0, 16e9, 110) for name in background}
    notes: list[str] = []
    _background_cpu(lambda name: RangeReader(client, start, end, 1.0).series(queries[name]), nodes, notes)
    for name, expected in background.items():
        if expected is None:
            assert nodes[name].background_cpu is None, name
        else:
            assert nodes[name].background_cpu == pytest.approx(expected, abs=0.03), name
    if note:
        assert any(note in n for n in notes), notes
