"""The cluster state a scheduling decision is made on, shared by the simulator and the server.

Nodes are kept as a struct of numpy arrays rather than a list of objects: the server scores up to
tens of thousands of nodes per request, and every feature is a vectorised expression over them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

POLICIES = ("EE", "LB", "EL")

# Thesis defaults for pods of latency-aware scenarios (milliseconds).
DEFAULT_LATENCY_SOFT_MS = 20.0
DEFAULT_LATENCY_HARD_MS = 30.0


def normalize_policy(name: str) -> str:
    """Policies are case-insensitive everywhere (annotations, CLI, API)."""
    policy = str(name).strip().upper()
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {name!r}: expected one of {', '.join(POLICIES)}")
    return policy


@dataclass(frozen=True)
class PodRequest:
    """What the scorer needs to know about the pod being placed."""

    cpu_millicores: float
    memory_bytes: float
    latency_soft_ms: float | None = None
    latency_hard_ms: float | None = None

    def __post_init__(self) -> None:
        for name in ("cpu_millicores", "memory_bytes"):
            value = getattr(self, name)
            if not np.isfinite(value) or value < 0:
                raise ValueError(f"pod {name} must be a finite number >= 0, got {value!r}")
        for name in ("latency_soft_ms", "latency_hard_ms"):
            value = getattr(self, name)
            if value is not None and (not np.isfinite(value) or value <= 0):
                raise ValueError(f"pod {name} must be a finite number > 0, got {value!r}")
        soft, hard = self.latency_soft_ms, self.latency_hard_ms
        if soft is not None and hard is not None and soft > hard:
            raise ValueError(f"pod latency_soft_ms ({soft}) must not exceed latency_hard_ms ({hard})")

    @property
    def has_latency_limits(self) -> bool:
        return self.latency_soft_ms is not None or self.latency_hard_ms is not None

    @property
    def soft_limit(self) -> float:
        """Soft limit, or the hard one when only that is given (inf when neither)."""
        if self.latency_soft_ms is not None:
            return self.latency_soft_ms
        return self.latency_hard_ms if self.latency_hard_ms is not None else np.inf

    @property
    def hard_limit(self) -> float:
        """Hard limit, or the soft one when only that is given (inf when neither)."""
        if self.latency_hard_ms is not None:
            return self.latency_hard_ms
        return self.latency_soft_ms if self.latency_soft_ms is not None else np.inf


@dataclass
class NodeState:
    """State of a set of nodes, one array entry per node.

    Utilizations are measured fractions 0..1 (NaN when unknown, then the request share stands in);
    latency is node-to-user round-trip time in ms (NaN when unknown).
    """

    names: list[str]
    cpu_capacity: np.ndarray  # millicores (allocatable)
    memory_capacity: np.ndarray  # bytes (allocatable)
    max_pods: np.ndarray
    cpu_requested: np.ndarray  # millicores requested by pods already bound
    memory_requested: np.ndarray  # bytes
    pods: np.ndarray  # number of pods bound
    cpu_utilization: np.ndarray = field(default=None)  # type: ignore[assignment]
    memory_utilization: np.ndarray = field(default=None)  # type: ignore[assignment]
    latency_ms: np.ndarray = field(default=None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        n = len(self.names)
        for name in ("cpu_capacity", "memory_capacity", "max_pods", "cpu_requested",
                     "memory_requested", "pods", "cpu_utilization", "memory_utilization",
                     "latency_ms"):
            value = getattr(self, name)
            if value is None:
                value = np.full(n, np.nan)
            value = np.asarray(value, dtype=np.float64)
            if value.shape != (n,):
                raise ValueError(f"node field {name} has shape {value.shape}, expected ({n},)")
            setattr(self, name, value)

    def __len__(self) -> int:
        return len(self.names)

    def subset(self, index: np.ndarray) -> NodeState:
        index = np.asarray(index)
        if index.dtype == bool:
            index = np.flatnonzero(index)
        return NodeState(
            names=[self.names[i] for i in index],
            cpu_capacity=self.cpu_capacity[index],
            memory_capacity=self.memory_capacity[index],
            max_pods=self.max_pods[index],
            cpu_requested=self.cpu_requested[index],
            memory_requested=self.memory_requested[index],
            pods=self.pods[index],
            cpu_utilization=self.cpu_utilization[index],
            memory_utilization=self.memory_utilization[index],
            latency_ms=self.latency_ms[index],
        )
