import json
import shutil
from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient

from rlscore.core.features import NODE_FEATURES
from agent.learn.model_io import save_model
from agent.learn.network import NodeScorer
from suggestion_server.app import create_app
from suggestion_server.config import Settings

MODELS = Path(__file__).resolve().parents[2] / "models"
MIB = 2**20


def node(name, cpu_req=0.0, pods=0, latency=None, cpu_cap=4000.0, util=None, **extra):
    """A node object with every field of the contract, memory mirroring cpu."""
    body = {"name": name, "cpu_capacity_millicores": cpu_cap, "memory_capacity_bytes": cpu_cap * 2 * MIB,
            "max_pods": 110, "cpu_requested_millicores": cpu_req, "memory_requested_bytes": cpu_req * 2 * MIB,
            "pods": pods, "cpu_utilization": util if util is not None else cpu_req / cpu_cap * 0.6,
            "memory_utilization": cpu_req / cpu_cap * 0.5, "latency_ms": latency,
            "power_idle_watts": cpu_cap / 1000 * 12, "power_max_watts": cpu_cap / 1000 * 30,
            "network_receive_bytes_per_s": cpu_req * 1000.0, "tcp_established": 10 + pods * 5,
            "disk_utilization": 0.3}
    body.update(extra)
    return body


def pod(annotations=None, cpu=250, memory=64 * MIB, name="web-1"):
    return {"name": name, "namespace": "default", "cpu_request_millicores": cpu,
            "memory_request_bytes": memory, "annotations": annotations or {}}


def settings(**overrides) -> Settings:
    values = {"kubernetes": "off", "model_dir": MODELS, "model_watch_interval_s": 0}
    values.update(overrides)
    return Settings(**values)


@pytest.fixture
def make_client():
    clients = []

    def make(**overrides) -> TestClient:
        client = TestClient(create_app(settings(**overrides), background=False))
        client.__enter__()
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.__exit__(None, None, None)


@pytest.fixture
def client(make_client):
    return make_client()


def post(client, body, headers=None):
    return client.post("/suggest", content=json.dumps(body).encode(),
                       headers={"content-type": "application/json", **(headers or {})})


def copy_models(directory: Path) -> Path:
    """The shipped models and sidecars, in a directory a test may change."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("ee", "lb", "el"):
        for suffix in (".safetensors", ".json"):
            shutil.copy(MODELS / f"{name}{suffix}", directory / f"{name}{suffix}")
    return directory


def overflowing_el_model(path: Path, metadata: dict | None = None) -> Path:
    """An EL model that passes the loader's probes but overflows on a far-away node.

    Seven hidden layers multiply latency_over_hard by 2.2e269 (sums over 64 nodes stay finite), the
    output layer by 2.5e38: the loader's probes reach 2.7 (finite in float64), a node at 120 ms
    against a 30 ms limit reaches 4.0 (over float64's 1.8e308)."""
    torch.manual_seed(0)
    net = NodeScorer((1,) * 8)
    with torch.no_grad():
        for p in net.parameters():
            p.zero_()
        net.layers[0].Lambda.weight[0, NODE_FEATURES.index("latency_over_hard")] = 3e38
        for layer in net.layers[1:7]:
            layer.Lambda.weight[0, 0] = 3e38
        net.layers[7].Lambda.weight[0, 0] = 1.0
        net.layers[8].Lambda.weight[0, 0] = 2.5e38
    return save_model(path, net, "EL", metadata or {})
