"""Hand-written node scorers: the baselines the policies are measured against, and the fallback
the server answers with when no valid model is loaded.

The kube-scheduler ones follow the upstream NodeResourcesFit (LeastAllocated / MostAllocated) and
NodeResourcesBalancedAllocation formulas, integer truncation included, so that ties (which the
scheduler breaks at random) come out as they do in a real cluster.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from agent.features import latency_tiers
from agent.state import NodeState, PodRequest

MAX_NODE_SCORE = 100
# kube-scheduler scores a pod without requests as if it asked for these (non-zero defaults).
DEFAULT_MILLI_CPU_REQUEST = 100.0
DEFAULT_MEMORY_REQUEST = 200.0 * 1024 * 1024

Heuristic = Callable[[NodeState, PodRequest, np.random.Generator], np.ndarray]


def _requested_after(nodes: NodeState, pod: PodRequest) -> tuple[np.ndarray, np.ndarray]:
    cpu = pod.cpu_millicores or DEFAULT_MILLI_CPU_REQUEST
    mem = pod.memory_bytes or DEFAULT_MEMORY_REQUEST
    return nodes.cpu_requested + cpu, nodes.memory_requested + mem


def _per_resource(requested: np.ndarray, capacity: np.ndarray, most: bool) -> np.ndarray:
    safe_cap = np.where(capacity > 0, capacity, 1.0)
    req = np.minimum(requested, safe_cap)
    used = req if most else safe_cap - req
    return np.where(capacity > 0, np.floor(used * MAX_NODE_SCORE / safe_cap), 0.0)


def least_allocated(nodes: NodeState, pod: PodRequest, rng: np.random.Generator) -> np.ndarray:
    """NodeResourcesFit, LeastAllocated strategy, cpu and memory weight 1: favours empty nodes."""
    cpu, mem = _requested_after(nodes, pod)
    total = _per_resource(cpu, nodes.cpu_capacity, False) + _per_resource(mem, nodes.memory_capacity, False)
    return np.floor(total / 2)


def most_allocated(nodes: NodeState, pod: PodRequest, rng: np.random.Generator) -> np.ndarray:
    """NodeResourcesFit, MostAllocated strategy, cpu and memory weight 1: favours full nodes."""
    cpu, mem = _requested_after(nodes, pod)
    total = _per_resource(cpu, nodes.cpu_capacity, True) + _per_resource(mem, nodes.memory_capacity, True)
    return np.floor(total / 2)


def balanced_allocation(nodes: NodeState, pod: PodRequest, rng: np.random.Generator) -> np.ndarray:
    """NodeResourcesBalancedAllocation: favours nodes whose cpu and memory shares are equal."""
    cpu, mem = _requested_after(nodes, pod)
    with np.errstate(divide="ignore", invalid="ignore"):
        cpu_frac = np.minimum(cpu / nodes.cpu_capacity, 1.0)
        mem_frac = np.minimum(mem / nodes.memory_capacity, 1.0)
    std = np.abs(cpu_frac - mem_frac) / 2
    return np.floor((1 - np.nan_to_num(std, nan=1.0)) * MAX_NODE_SCORE)


def default_scheduler(nodes: NodeState, pod: PodRequest, rng: np.random.Generator) -> np.ndarray:
    """The default profile's resource scoring: LeastAllocated + BalancedAllocation, weight 1 each.

    The other default score plugins (TaintToleration, NodeAffinity, PodTopologySpread, ...) give
    every node the same score for the unconstrained single-replica pods of our scenarios.
    """
    return least_allocated(nodes, pod, rng) + balanced_allocation(nodes, pod, rng)


def random_scores(nodes: NodeState, pod: PodRequest, rng: np.random.Generator) -> np.ndarray:
    return rng.random(len(nodes))


def latency_greedy(nodes: NodeState, pod: PodRequest, rng: np.random.Generator) -> np.ndarray:
    """The lowest node-to-user latency wins; unknown latency loses to every known one."""
    latency = nodes.latency_ms
    return np.where(np.isfinite(latency), -latency, -1e9)


def latency_pack(nodes: NodeState, pod: PodRequest, rng: np.random.Generator) -> np.ndarray:
    """EL's intent by hand: the best latency tier the pod can get (soft, then hard), then pack
    (MostAllocated) inside that tier so that few nodes stay on."""
    return latency_tiers(nodes, pod) * 1000.0 + most_allocated(nodes, pod, rng)


HEURISTICS: dict[str, Heuristic] = {
    "default-scheduler": default_scheduler,
    "least-allocated": least_allocated,
    "most-allocated": most_allocated,
    "random": random_scores,
    "latency-greedy": latency_greedy,
    "latency-pack": latency_pack,
}

# The fallback of the same intent for each policy.
POLICY_HEURISTIC = {"EE": "most-allocated", "LB": "least-allocated", "EL": "latency-pack"}
