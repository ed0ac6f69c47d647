"""What a simulated world is made of: node hardware (sizes and power curves), classes of pods, and
how they arrive. A `World` is drawn from a scenario family (agent.sim.families) and run by the
simulator; everything in it is fixed before the first decision, so every scorer meets the same world.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rlscore.core.profile import DEFAULT_BACKGROUND_CPU

MIB = 1024**2
GIB = 1024**3


@dataclass(frozen=True)
class Hardware:
    """A machine type: allocatable resources and a linear power curve (watts at idle, at full cpu)."""

    name: str
    cpu_millicores: float
    memory_bytes: float
    max_pods: int
    power_idle_watts: float
    power_max_watts: float
    disk_bytes: float = 100.0 * GIB


# The families' machine sizes (4/8/16 cpus), with power curves of current servers: bigger machines draw more
# but less per core.
SMALL = Hardware("small", 4000.0, 8.0 * GIB, 110, 45.0, 130.0, 50.0 * GIB)
MEDIUM = Hardware("medium", 8000.0, 16.0 * GIB, 110, 70.0, 220.0, 100.0 * GIB)
LARGE = Hardware("large", 16000.0, 32.0 * GIB, 110, 110.0, 380.0, 200.0 * GIB)
SIZES = (SMALL, MEDIUM, LARGE)
# Two generations of equal capacity and different efficiency.
GEN_OLD = Hardware("gen-old", 16000.0, 64.0 * GIB, 110, 200.0, 400.0, 200.0 * GIB)
GEN_NEW = Hardware("gen-new", 16000.0, 64.0 * GIB, 110, 60.0, 220.0, 200.0 * GIB)


@dataclass(frozen=True)
class NodeSpec:
    hardware: Hardware
    latency_ms: float


@dataclass(frozen=True)
class PodClass:
    """A kind of pod in a workload mix. Ranges are drawn uniformly per pod."""

    name: str
    weight: float
    cpu_millicores: tuple[float, ...]  # choices
    memory_per_cpu_gib: tuple[float, float] = (0.5, 4.0)  # memory request = cpu cores x this
    usage: tuple[float, float] = (0.2, 0.9)  # share of the request the pod really uses
    latency_limits: tuple[tuple[float, float], ...] = ()  # (soft ms, hard ms) choices; () = none
    lifetime_scale: float = 1.0  # x the world's mean lifetime


@dataclass(frozen=True)
class SimPod:
    id: int
    cpu_millicores: float
    memory_bytes: float
    latency_soft_ms: float | None = None
    latency_hard_ms: float | None = None
    usage: float = 0.6  # share of its request the pod really uses
    kind: str = "pod"
    # what its workload's history tells of its usage (its class's mean); None: unknown
    expected_usage: float | None = None
    network_bytes_per_s: float = 0.0
    connections: float = 0.0
    disk_bytes: float = 0.0
    depart_at: float = float("inf")  # when its controller deletes it; only the training potential reads it




@dataclass(frozen=True)
class World:
    """One concrete cluster and workload. `arrivals` is the arrival process: `poisson` (exponential
    gaps and lifetimes, sized by `load`), or the thesis's patterns `test1` and `test2`."""

    family: str
    nodes: tuple[NodeSpec, ...]
    pod_classes: tuple[PodClass, ...]
    arrivals: str = "poisson"
    load: float = 0.5  # poisson: mean share of the cluster's cpu requested
    mean_lifetime_s: float = 120.0
    latency_shifts_s: tuple[float, ...] = ()
    churn: bool = False
    churn_interval_s: float = 400.0
    metrics_interval_s: float = 0.0  # 0: metrics are live; else a snapshot every so many seconds
    power_visible: bool = True
    power_hidden: tuple[bool, ...] = ()  # with power_visible: nodes whose power model the scorer is not told
    latency_drift: bool = True
    hourly_rate: tuple[float, ...] = ()  # poisson: 24 multipliers of the arrival rate by hour of day (mean 1)
    start_hour: float = 0.0  # the hour of day at simulated time 0
    day_seconds: float = 86400.0  # simulated seconds per day of `hourly_rate` (shorter: a compressed day)
    burst_size: float = 1.0  # poisson: mean pods per arrival (a burst of one class); 1: single arrivals
    background_cpu: tuple[float, float] = DEFAULT_BACKGROUND_CPU  # share of each node's cpu its own daemons use, drawn per node
    # seconds from a pod's binding until its usage shows in the node's metrics (container start, and
    # a rate needs two scrapes); 0: at once
    usage_onset_s: float = 0.0
    usage_linger_s: float = 0.0  # seconds a pod's usage still shows after it went (until the next scrape)
    tags: dict = field(default_factory=dict, compare=False)

    @property
    def size(self) -> int:
        return len(self.nodes)

    @property
    def total_cpu_millicores(self) -> float:
        return float(sum(n.hardware.cpu_millicores for n in self.nodes))

    @property
    def mean_pod_cpu_lifetime(self) -> float:
        """Mean of cpu request x lifetime scale over the pod mix (sizes the poisson arrival rate)."""
        weights = np.array([c.weight for c in self.pod_classes], dtype=float)
        means = np.array([np.mean(c.cpu_millicores) * c.lifetime_scale for c in self.pod_classes])
        return float(weights @ means / weights.sum())

    @property
    def mean_interarrival_s(self) -> float:
        """Seconds between arrivals on average: the time unit of the rewards."""
        if self.arrivals == "test1":
            return (30 * 3.0 + 25.0) / 30
        if self.arrivals == "test2":
            return 4.0
        return 1.0 / self.arrival_rate

    @property
    def arrival_rate(self) -> float:
        return self.load * self.total_cpu_millicores / (self.mean_pod_cpu_lifetime * self.mean_lifetime_s)

    @property
    def mean_pod_lifetime_s(self) -> float:
        if self.arrivals == "test1":
            return 30 * 3.0 / 2 + 20.0
        if self.arrivals == "test2":
            return 120.0
        return self.mean_lifetime_s

    @property
    def pods_alive(self) -> float:
        """Pods the world holds once it is full (steady state): how long "one fill" takes."""
        if self.arrivals in ("test1", "test2"):
            return 30.0
        return self.arrival_rate * self.mean_lifetime_s * float(
            np.average([c.lifetime_scale for c in self.pod_classes], weights=[c.weight for c in self.pod_classes]))

    @property
    def reference_power_watts(self) -> float:
        """Mean full-load power of a node: the unit energy is counted in."""
        return float(np.mean([n.hardware.power_max_watts for n in self.nodes]))
