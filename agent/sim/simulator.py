"""A discrete-event cluster simulator: heterogeneous nodes, pods with requests and lifetimes,
measured utilization, drifting node-to-user latency, and nodes that leave and join.

`Simulation` advances a scenario's event stream to the next pod that needs a node, offers the
feasible nodes as a `NodeState` (what the scheduler's filters would pass to our score plugin), and
applies the chosen placement. The Gymnasium environment and the evaluation both drive it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

from agent.sim.scenarios import GIB, Event, LatencyLimits, SimPod, make_scenario
from agent.state import NodeState, PodRequest


@dataclass(frozen=True)
class NodeSize:
    name: str
    cpu_millicores: float
    memory_bytes: float
    max_pods: int


NODE_SIZES = (
    NodeSize("small", 4000.0, 8.0 * GIB, 110),
    NodeSize("medium", 8000.0, 16.0 * GIB, 110),
    NodeSize("large", 16000.0, 32.0 * GIB, 110),
)

LATENCY_RANGE_MS = (3.0, 60.0)  # with the 20/30 ms limits: ~30% soft, ~18% between, ~52% over
LATENCY_DRIFT_MS_PER_SQRT_S = 0.15
MAX_EVENTS_PER_DECISION = 100_000


class Cluster:
    """Mutable node arrays plus the pods bound to each node."""

    def __init__(self, sizes: list[NodeSize], latency_ms: np.ndarray, rng: np.random.Generator):
        n = len(sizes)
        self.names = [f"node-{i}" for i in range(n)]
        self.cpu_capacity = np.array([s.cpu_millicores for s in sizes])
        self.memory_capacity = np.array([s.memory_bytes for s in sizes])
        self.max_pods = np.array([float(s.max_pods) for s in sizes])
        self.cpu_requested = np.zeros(n)
        self.memory_requested = np.zeros(n)
        self.cpu_used = np.zeros(n)  # millicores really used by the pods (request x usage)
        self.memory_used = np.zeros(n)
        self.pods = np.zeros(n)
        self.present = np.ones(n, dtype=bool)
        self.latency_ms = np.asarray(latency_ms, dtype=np.float64).copy()
        self.background_cpu = rng.uniform(0.02, 0.08, n)  # system daemons, kubelet, ...
        self.background_memory = rng.uniform(0.05, 0.15, n)
        self.placement: dict[int, tuple[int, SimPod]] = {}

    @classmethod
    def random(cls, nodes: int, rng: np.random.Generator, heterogeneous: bool = True) -> Cluster:
        if nodes < 1:
            raise ValueError(f"a cluster needs at least one node, got {nodes}")
        if heterogeneous:
            sizes = [NODE_SIZES[i] for i in rng.integers(len(NODE_SIZES), size=nodes)]
        else:
            sizes = [NODE_SIZES[1]] * nodes
        latency = rng.uniform(*LATENCY_RANGE_MS, size=nodes)
        return cls(sizes, latency, rng)

    def __len__(self) -> int:
        return len(self.names)

    def state(self, noise_rng: np.random.Generator | None = None) -> NodeState:
        """All nodes, present or not; utilization = pods' real usage + background (+ noise)."""
        cpu_util = self.cpu_used / self.cpu_capacity + self.background_cpu
        mem_util = self.memory_used / self.memory_capacity + self.background_memory
        if noise_rng is not None:
            cpu_util = cpu_util + noise_rng.normal(0.0, 0.01, len(self))
            mem_util = mem_util + noise_rng.normal(0.0, 0.005, len(self))
        return NodeState(
            names=self.names,
            cpu_capacity=self.cpu_capacity,
            memory_capacity=self.memory_capacity,
            max_pods=self.max_pods,
            cpu_requested=self.cpu_requested.copy(),
            memory_requested=self.memory_requested.copy(),
            pods=self.pods.copy(),
            cpu_utilization=np.clip(cpu_util, 0.0, 1.0),
            memory_utilization=np.clip(mem_util, 0.0, 1.0),
            latency_ms=self.latency_ms.copy(),
        )

    def feasible(self, pod: SimPod) -> np.ndarray:
        """Indices of present nodes that pass the NodeResourcesFit filter for `pod`."""
        fits = (
            self.present
            & (self.cpu_requested + pod.cpu_millicores <= self.cpu_capacity)
            & (self.memory_requested + pod.memory_bytes <= self.memory_capacity)
            & (self.pods + 1 <= self.max_pods)
        )
        return np.flatnonzero(fits)

    def bind(self, pod: SimPod, node: int) -> None:
        self.placement[pod.id] = (node, pod)
        self._account(node, pod, +1)

    def unbind(self, pod_id: int) -> bool:
        entry = self.placement.pop(pod_id, None)
        if entry is None:
            return False
        self._account(entry[0], entry[1], -1)
        return True

    def _account(self, node: int, pod: SimPod, sign: int) -> None:
        self.cpu_requested[node] += sign * pod.cpu_millicores
        self.memory_requested[node] += sign * pod.memory_bytes
        self.cpu_used[node] += sign * pod.cpu_millicores * pod.usage
        self.memory_used[node] += sign * pod.memory_bytes * pod.usage
        self.pods[node] += sign

    def node_down(self, node: int) -> list[SimPod]:
        """Take a node out (never the last one); returns its pods, which their controllers recreate."""
        if not self.present[node] or self.present.sum() <= 1:
            return []
        evicted = [pod for n, pod in self.placement.values() if n == node]
        for pod in evicted:
            self.unbind(pod.id)
        self.present[node] = False
        return evicted

    def node_up(self, node: int) -> None:
        self.present[node] = True

    def drift_latency(self, seconds: float, rng: np.random.Generator) -> None:
        if seconds <= 0:
            return
        step = rng.normal(0.0, LATENCY_DRIFT_MS_PER_SQRT_S * np.sqrt(seconds), len(self))
        self.latency_ms = np.clip(self.latency_ms + step, 1.0, 200.0)

    def shift_latency(self, rng: np.random.Generator) -> None:
        """A sudden change (the thesis's "latency change"): nodes swap their latencies, so the
        best node becomes another one. A single node gets a new latency instead."""
        if len(self) == 1:
            self.latency_ms = rng.uniform(*LATENCY_RANGE_MS, size=1)
            return
        order = rng.permutation(len(self))
        while np.all(order == np.arange(len(self))):
            order = rng.permutation(len(self))
        self.latency_ms = self.latency_ms[order]


def pod_request(pod: SimPod) -> PodRequest:
    return PodRequest(pod.cpu_millicores, pod.memory_bytes, pod.latency_soft_ms, pod.latency_hard_ms)


class Simulation:
    """A cluster driven by a scenario, stopping at each pod that needs a scheduling decision.

    Exogenous randomness (arrivals, cluster, latency drift, measurement noise) comes from streams
    spawned from `seed`, none of which the decisions touch: every scorer sees the same world.
    """

    def __init__(self, scenario: str, nodes: int, seed: int, limits: LatencyLimits | None = None,
                 churn: bool = False, heterogeneous: bool = True):
        scenario_rng, cluster_rng, self._drift_rng, self._noise_rng = (
            np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(4))
        self.scenario = scenario
        self.cluster = Cluster.random(nodes, cluster_rng, heterogeneous)
        self.limits = limits or LatencyLimits()
        self._events: Iterator[Event] = make_scenario(
            scenario, scenario_rng, self.limits, float(self.cluster.cpu_capacity.sum()), nodes, churn)
        self._requeued: list[SimPod] = []
        self.time = 0.0
        self.decisions = 0
        self.unschedulable = 0
        self.latency_shifts: list[int] = []  # decision index at which each shift happened
        self.pod: SimPod | None = None
        self.candidates = np.zeros(0, dtype=np.int64)

    def next_decision(self) -> None:
        """Process events until a pod arrives that fits at least one node."""
        for _ in range(MAX_EVENTS_PER_DECISION):
            pod = self._requeued.pop(0) if self._requeued else self._next_arrival()
            if pod is None:
                continue
            candidates = self.cluster.feasible(pod)
            if candidates.size:
                self.pod, self.candidates = pod, candidates
                return
            self.unschedulable += 1
        raise RuntimeError(f"no schedulable pod within {MAX_EVENTS_PER_DECISION} events "
                           f"(scenario {self.scenario}, {len(self.cluster)} nodes)")

    def _next_arrival(self) -> SimPod | None:
        event = next(self._events)
        self.cluster.drift_latency(event.time - self.time, self._drift_rng)
        self.time = max(self.time, event.time)
        if event.kind == "arrive":
            return event.pod
        if event.kind == "depart":
            self.cluster.unbind(event.pod_id)
        elif event.kind == "shift-latency":
            self.cluster.shift_latency(self._drift_rng)
            self.latency_shifts.append(self.decisions)
        elif event.kind == "node-down":
            self._requeued.extend(self.cluster.node_down(event.node))
        elif event.kind == "node-up":
            self.cluster.node_up(event.node)
        return None

    def candidate_state(self) -> tuple[NodeState, PodRequest]:
        """The feasible nodes and the pod, as the scorer sees them at serving time."""
        assert self.pod is not None, "call next_decision() first"
        state = self.cluster.state(self._noise_rng).subset(self.candidates)
        return state, pod_request(self.pod)

    def place(self, candidate: int) -> int:
        """Bind the current pod to candidate number `candidate`; returns the node index."""
        assert self.pod is not None, "call next_decision() first"
        node = int(self.candidates[candidate])
        self.cluster.bind(self.pod, node)
        self.decisions += 1
        self.pod = None
        return node
