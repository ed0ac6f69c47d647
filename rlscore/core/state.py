"""The cluster state a scheduling decision is made on, shared by the simulator and the server.

Nodes are kept as a struct of numpy arrays rather than a list of objects: the server scores up to
tens of thousands of nodes per request, and every feature is a vectorised expression over them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

POLICIES = ("EE", "LB", "EL")

# The thesis's limits for the pods of its latency-aware test patterns (milliseconds).
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
    # cpu its workload really uses per cpu it requests (what its siblings were measured to use, or
    # what a recommender such as VPA says); None: unknown
    cpu_usage_ratio: float | None = None

    def __post_init__(self) -> None:
        for name in ("cpu_millicores", "memory_bytes"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"pod {name} must be a finite number >= 0, got {value!r}")
        for name in ("latency_soft_ms", "latency_hard_ms", "cpu_usage_ratio"):
            value = getattr(self, name)
            if value is not None and (not math.isfinite(value) or value <= 0):
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


NODE_ARRAYS = ("cpu_capacity", "memory_capacity", "max_pods", "cpu_requested", "memory_requested", "pods",
               "cpu_utilization", "memory_utilization", "latency_ms", "power_idle_watts", "power_max_watts",
               "network_receive_bytes_per_s", "tcp_established", "disk_utilization", "cpu_utilization_stddev",
               "cpu_requested_since_metrics")


@dataclass
class NodeState:
    """State of a set of nodes, one array entry per node.

    Utilizations are measured fractions 0..1 (NaN when unknown, then the request share stands in);
    latency is node-to-user round-trip time in ms (NaN when unknown). The power model (watts when
    idle and at full cpu) and the thesis's further metrics are NaN when unknown, which the features
    encode as a known state.
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
    power_idle_watts: np.ndarray = field(default=None)  # type: ignore[assignment]
    power_max_watts: np.ndarray = field(default=None)  # type: ignore[assignment]
    network_receive_bytes_per_s: np.ndarray = field(default=None)  # type: ignore[assignment]
    tcp_established: np.ndarray = field(default=None)  # type: ignore[assignment]
    disk_utilization: np.ndarray = field(default=None)  # type: ignore[assignment]
    cpu_utilization_stddev: np.ndarray = field(default=None)  # type: ignore[assignment]  # over time
    # requests bound since the utilization was measured: what the metrics cannot show yet
    cpu_requested_since_metrics: np.ndarray = field(default=None)  # type: ignore[assignment]
    # the cluster's sum of cpu requests (millicores, every node, not only these candidates) now, and
    # its largest within the last RECENT_PEAK_WINDOW_S: the load it carried lately and may again,
    # which the nodes alone do not show once it has left (NaN: unknown)
    cluster_cpu_requested: float = math.nan
    recent_peak_cpu_requested: float = math.nan

    def __post_init__(self) -> None:
        n = len(self.names)
        for name in ("cluster_cpu_requested", "recent_peak_cpu_requested"):
            value = getattr(self, name)
            if not isinstance(value, (int, float, np.floating)) or not (
                    math.isnan(value) or (math.isfinite(value) and value >= 0)):
                raise ValueError(f"{name} must be a number of millicores >= 0 or NaN, got {value!r}")
            setattr(self, name, float(value))
        for name in NODE_ARRAYS:
            value = getattr(self, name)
            if value is None:
                value = np.full(n, np.nan)
            value = np.asarray(value, dtype=np.float64)
            if value.shape != (n,):
                raise ValueError(f"node field {name} has shape {value.shape}, expected ({n},)")
            setattr(self, name, value)

    def __len__(self) -> int:
        return len(self.names)

    @classmethod
    def trusted(cls, names: list[str], cluster_cpu_requested: float = math.nan,
                recent_peak_cpu_requested: float = math.nan, **arrays: np.ndarray) -> NodeState:
        """Build from float64 arrays of the right shape without checking them (the simulator's
        hot path); missing fields are unknown."""
        state = cls.__new__(cls)
        state.names = names
        state.cluster_cpu_requested = cluster_cpu_requested
        state.recent_peak_cpu_requested = recent_peak_cpu_requested
        unknown = None
        for name in NODE_ARRAYS:
            value = arrays.get(name)
            if value is None:
                if unknown is None:
                    unknown = np.full(len(names), np.nan)
                value = unknown
            setattr(state, name, value)
        return state


def as_served(pod: PodRequest, policy: str, el_defaults: tuple[float, float] | None = None) -> PodRequest:
    """The pod as the suggestion server hands it to a policy's scorer: latency limits for EL only
    (EE and LB are trained, and measured, on pods without them). Under EL a pod without limits has
    none (a batch job sent to a far node breaks nothing), unless the operator configured defaults
    (`el_defaults`, RLSCORE_EL_DEFAULT_SOFT_MS / _HARD_MS). The simulator shows its scorers the same,
    so that a replay decides as live."""
    soft, hard = pod.latency_soft_ms, pod.latency_hard_ms
    if policy != "EL":
        soft = hard = None
    elif soft is None and hard is None and el_defaults is not None:
        soft, hard = el_defaults
    if (soft, hard) == (pod.latency_soft_ms, pod.latency_hard_ms):
        return pod
    return PodRequest(pod.cpu_millicores, pod.memory_bytes, soft, hard, pod.cpu_usage_ratio)


LATENCY_TIER_SOFT = 2
LATENCY_TIER_HARD = 1
LATENCY_TIER_NONE = 0


def latency_tiers(nodes: NodeState, pod: PodRequest) -> np.ndarray:
    """2 where the node meets the pod's soft limit, 1 where only the hard one, 0 otherwise.

    Unknown latency counts as meeting nothing; a pod without limits finds every known node in tier 2.
    """
    latency = nodes.latency_ms
    known = np.isfinite(latency)
    tiers = np.zeros(len(nodes), dtype=np.int8)
    tiers[known & (latency <= pod.hard_limit)] = LATENCY_TIER_HARD
    tiers[known & (latency <= pod.soft_limit)] = LATENCY_TIER_SOFT
    return tiers
