"""A fresh local cluster for the end-to-end tests: real etcd, kube-apiserver,
kube-controller-manager, our kube-scheduler, KWOK nodes, Prometheus and the suggestion server."""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from agent.live.loadgen import LiveCluster

ROOT = Path(__file__).resolve().parents[2]
CLUSTER_SH = ROOT / "local-cluster" / "cluster.sh"


@dataclass
class E2ECluster:
    env: dict[str, str]
    kubeconfig: str
    live: LiveCluster
    server_url: str
    prometheus_url: str
    cluster_dir: Path
    values: dict[str, str]  # everything `cluster.sh env` exports

    def sh(self, *args: str) -> None:
        subprocess.run([str(CLUSTER_SH), *args], env=self.env, check=True, timeout=300,
                       stdout=subprocess.DEVNULL)

    def pid(self, component: str) -> int:
        return int((self.cluster_dir / "pids" / f"{component}.pid").read_text().strip())

    def suggest(self, nodes: list[str], policy: str) -> dict:
        body = {"pod": {"name": "probe", "cpu_request_millicores": 250, "memory_request_bytes": 64 * 2**20,
                        "annotations": {"rlscore.io/latency-soft-ms": "20", "rlscore.io/latency-hard-ms": "30"}},
                "nodes": nodes, "policy": policy}
        return httpx.post(f"{self.server_url}/suggest", json=body, timeout=10).json()

    def wait_idle(self, nodes: list[str], timeout_s: float = 180.0) -> None:
        """Wait until the server sees the nodes without pods and with level measured cpu: the
        utilization of an earlier test's pods lingers in Prometheus's rate window after they are gone,
        and a policy that reads measured load rightly avoids those nodes."""
        deadline, rows = time.monotonic() + timeout_s, []
        while time.monotonic() < deadline:
            rows = httpx.get(f"{self.server_url}/state", params={"node": nodes}, timeout=10).json()["nodes"]
            used = [r["cpu_utilization"] for r in rows]
            if all(r["pods"] == 0 for r in rows) and None not in used and max(used) - min(used) < 0.01:
                return
            time.sleep(2)
        raise AssertionError(f"nodes not idle after {timeout_s:.0f} s: {rows}")


def started_cluster(name: str, **extra_env: str):
    """A fresh local cluster of that name (cluster.sh up), yielded once the server sees every node with
    its metrics and latency, deleted afterwards (unless RLSCORE_E2E_KEEP=1)."""
    env = {**os.environ, "CLUSTER_NAME": name, "NODES": "4", "NODE_CPUS": "8", "RLSCORE_REFRESH_INTERVAL_S": "1",
           **extra_env}
    subprocess.run([str(CLUSTER_SH), "down"], env=env, timeout=300, stdout=subprocess.DEVNULL)
    up = subprocess.run([str(CLUSTER_SH), "up"], env=env, timeout=600, capture_output=True, text=True)
    assert up.returncode == 0, f"cluster.sh up failed:\n{up.stdout}\n{up.stderr}"
    exported = subprocess.run([str(CLUSTER_SH), "env"], env=env, check=True, capture_output=True, text=True).stdout
    values = {k: v.strip("'") for k, v in (line.removeprefix("export ").split("=", 1)
                                         for line in exported.splitlines() if "=" in line)}
    live = LiveCluster(values["KUBECONFIG"], namespace="e2e")
    live.ensure_namespace()
    c = E2ECluster(env, values["KUBECONFIG"], live, values["RLSCORE_LOCAL_SERVER_URL"], values["RLSCORE_LOCAL_PROMETHEUS_URL"],
                   Path(values["RLSCORE_LOCAL_CLUSTER_DIR"]), values)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        r = c.suggest([f"kwok-node-{i}" for i in range(4)], "EL")
        if not r.get("degraded", True):
            break
        time.sleep(1)
    try:
        yield c
    finally:
        if os.environ.get("RLSCORE_E2E_KEEP") != "1":
            subprocess.run([str(CLUSTER_SH), "down"], env=env, timeout=300, stdout=subprocess.DEVNULL)


@pytest.fixture(scope="session")
def cluster():
    yield from started_cluster("rlscore-e2e")


def cleanup(c: E2ECluster) -> None:
    """Every deployment and pod of the test namespace gone."""
    c.live.cleanup(timeout_s=60)


@pytest.fixture(autouse=True)
def empty_namespace(cluster):
    cleanup(cluster)
    yield
    cleanup(cluster)
