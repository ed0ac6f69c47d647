import numpy as np
import pytest

from rlscore.core.state import NodeState


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
