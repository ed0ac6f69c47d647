"""Shared fixtures, and the test tiers.

Every test belongs to one tier (a pytest marker), given here by module unless the test marks itself:
- unit: the code on hand-built inputs, in process;
- integration: against real components started for the test (Prometheus, uvicorn on a socket, the
  scheduler framework, Go, helm, podman);
- e2e: a fresh local cluster (tests/e2e);
- reproduction: an experiment re-run, e.g. a shipped model's whole evaluation (`make verify`).
`make test` runs every tier but reproduction, which holds a cheap reproduction of each shipped model.
"""

from pathlib import Path

import numpy as np
import pytest

from rlscore.core.state import NodeState

INTEGRATION = {"test_calibration", "test_dashboard", "test_go_scorer_parity", "test_helm", "test_hot_node_share",
               "test_tuned_profile", "test_architecture", "test_images", "test_deploy"}
TIERS = ("unit", "integration", "e2e", "reproduction")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if any(item.get_closest_marker(tier) for tier in TIERS):
            continue
        path = Path(str(item.fspath))
        if "e2e" in path.parts:
            item.add_marker(pytest.mark.e2e)
        elif "server" in path.parts or "faults" in path.parts or path.stem in INTEGRATION:
            item.add_marker(pytest.mark.integration)
        else:
            item.add_marker(pytest.mark.unit)


def make_nodes(cpu_cap, cpu_req=None, pods=None, latency=None, mem_cap=None, mem_req=None, max_pods=None):
    """A NodeState from short lists; memory mirrors cpu (1 millicore ~ 1 MiB) unless given."""
    n = len(cpu_cap)
    cpu_cap = np.asarray(cpu_cap, float)
    cpu_req = np.zeros(n) if cpu_req is None else np.asarray(cpu_req, float)
    return NodeState(
        names=[f"n{i}" for i in range(n)],
        cpu_capacity=cpu_cap,
        memory_capacity=cpu_cap * 2**20 if mem_cap is None else np.asarray(mem_cap, float),
        max_pods=np.full(n, 110.0) if max_pods is None else np.asarray(max_pods, float),
        cpu_requested=cpu_req,
        memory_requested=cpu_req * 2**20 if mem_req is None else np.asarray(mem_req, float),
        pods=(cpu_req > 0).astype(float) if pods is None else np.asarray(pods, float),
        latency_ms=None if latency is None else np.asarray(latency, float),
    )


@pytest.fixture
def nodes_factory():
    return make_nodes
