"""The server as users start it: `rlscore-server` on a real socket, and the latency probe."""

import asyncio
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from suggestion_server.node_state.latency_source import ProbeLatencySource
from latency_probe.probe import icmp_rtt_ms_blocking
from tests.helpers.processes import free_port, wait_for
from tests.server.conftest import MODELS, node, pod

BIN = Path(sys.executable).parent


@pytest.fixture
def server(tmp_path):
    port = free_port()
    env = {**os.environ, "RLSCORE_MODEL_DIR": str(MODELS), "RLSCORE_KUBERNETES": "off",
           "RLSCORE_REFRESH_INTERVAL_S": "1"}
    log = open(tmp_path / "server.log", "wb")
    proc = subprocess.Popen([str(BIN / "rlscore-server"), "--host", "127.0.0.1", "--port", str(port)],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: httpx.get(f"{url}/readyz", timeout=1).status_code == 200, 60, "server ready")
        yield url, tmp_path / "server.log"
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def test_suggest_over_a_real_socket_with_keep_alive(server):
    url, log = server
    with httpx.Client(base_url=url, timeout=5) as client:
        for i in range(20):
            r = client.post("/suggest", json={"pod": pod(name=f"web-{i}"), "policy": "EE",
                                              "nodes": [node("a", cpu_req=2000, pods=4), node("b")]})
            assert r.status_code == 200 and r.json()["scores"] == {"a": 100, "b": 0}
        assert client.post("/suggest", content=b"{", headers={"content-type": "application/json"}).status_code == 422
        assert "rlscore_suggest_requests_total" in client.get("/metrics").text
        assert len(client.get("/policies").json()["policies"]) == 3
    text = log.read_text()
    assert '"pod": "default/web-3"' in text and '"top_node": "a"' in text  # one decision log line each


def test_invalid_configuration_is_a_clear_error():
    env = {**os.environ, "RLSCORE_DEFAULT_POLICY": "fast"}
    r = subprocess.run([str(BIN / "rlscore-server")], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "default_policy" in r.stderr and "unknown policy" in r.stderr


def test_latency_probe_measures_tcp_rtt_to_a_local_target(tmp_path):
    target = socket.socket()
    target.bind(("127.0.0.1", 0))
    target.listen(16)
    port = free_port()
    log = open(tmp_path / "probe.log", "wb")
    proc = subprocess.Popen([str(BIN / "rlscore-latency-probe"), "--targets",
                             f"127.0.0.1:{target.getsockname()[1]},127.0.0.1:1", "--interval", "0.2",
                             "--node-name", "worker-9", "--host", "127.0.0.1", "--port", str(port)],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        body = wait_for(lambda: (b := httpx.get(f"http://127.0.0.1:{port}/latency", timeout=1).json())
                        and b["latency_ms"] is not None and b, 30, "probe measurement")
        assert body["node"] == "worker-9" and 0 <= body["latency_ms"] < 1000
        assert body["targets"]["127.0.0.1:1"] is None  # refused: no measurement, not a fake number
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=1).text
        assert 'rlscore_node_user_latency_ms{node="worker-9",target="127.0.0.1:' in metrics
        assert 'target="127.0.0.1:1"' not in metrics

        # the server's `probe` latency source reads the same endpoint, all nodes at once
        async def collect():
            source = ProbeLatencySource(port, timeout_s=1.0)
            try:
                return await source.collect({"worker-9": "127.0.0.1", "silent": "127.0.0.2"})
            finally:
                await source.close()

        latencies, problems = asyncio.run(collect())
        assert set(latencies) == {"worker-9"} and 0 <= latencies["worker-9"] < 1000
        assert problems == ["latency probe: no answer from 1 of 2 nodes"]
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
        target.close()
    bad = subprocess.run([str(BIN / "rlscore-latency-probe"), "--targets", "host:notaport"],
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "host:notaport" in bad.stderr


def test_icmp_measures_only_where_the_kernel_allows_unprivileged_ping():
    low, high = map(int, Path("/proc/sys/net/ipv4/ping_group_range").read_text().split())
    allowed = any(low <= gid <= high for gid in os.getgroups() + [os.getgid()])
    rtt = icmp_rtt_ms_blocking("127.0.0.1", 1.0)
    if allowed:
        assert rtt is not None and 0 <= rtt < 1000
    else:
        assert rtt is None  # no permission: no measurement, never a made-up number


def test_every_blas_of_a_started_server_runs_one_thread():
    """The compiled forward pass's np.dot loads scipy's OpenBLAS at its first call; a limit set
    before that left it at two threads, and on two busy cores every request from ~500 nodes up
    waited for a scheduler tick (8 ms instead of 0.7). A fresh interpreter, as a server starts.
    (OpenMP's limit is per thread, and TestClient runs the app on a thread of its own: not read.)"""
    code = ("import json\n"
            "from fastapi.testclient import TestClient\n"
            "from threadpoolctl import threadpool_info\n"
            "from suggestion_server.app import create_app\n"
            "from tests.server.conftest import settings\n"
            "with TestClient(create_app(settings(), background=False)):\n"
            "    print(json.dumps([[i['internal_api'], i['filepath'], i['num_threads']] for i in threadpool_info()\n"
            "                      if i['user_api'] == 'blas']))\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         cwd=Path(__file__).resolve().parents[2])
    assert run.returncode == 0, run.stderr[-2000:]
    pools = json.loads(run.stdout.strip().splitlines()[-1])
    assert any(api == "openblas" and "scipy_openblas-" in path for api, path, _ in pools), pools  # the dot's
    assert all(threads == 1 for _, _, threads in pools), pools
