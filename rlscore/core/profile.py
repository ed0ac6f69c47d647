"""Cluster profiles: a cluster and its workload as a YAML file (docs/cluster-profile.md).

Calibration writes one from a live cluster, tuning and training replay it in the simulator
(agent.sim.cluster_profile), and the server's drift check compares live traffic with the profile a
model was trained on. A profile holds what a simulated world holds — node types with their sizes and power curves, each node's
latency to the users, the pod classes with their request, usage and lifetime distributions, how pods
arrive and how often metrics are scraped — in a documented, validated form (docs/cluster-profile.md).
`rlscore-tune --profile` tunes a cluster described this way; without one it generates a profile from a
scenario family and writes it beside the result, so every tuning can be replayed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

# kubelet, container runtime and system daemons on a node of a generic cluster (share of its cpu)
DEFAULT_BACKGROUND_CPU = (0.02, 0.08)

API_VERSION = "rlscore.io/v1alpha1"
KIND = "ClusterProfile"
MAX_BACKGROUND_CPU = 0.9  # a node whose own daemons use more is not a node pods can be judged on


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class NodeType(_Strict):
    name: str = Field(min_length=1, max_length=63)
    cpu_millicores: float = Field(alias="cpuMillicores", gt=0, le=1e7)
    memory_bytes: float = Field(alias="memoryBytes", gt=0, le=1e15)
    max_pods: int = Field(alias="maxPods", default=110, ge=1, le=10000)
    power_idle_watts: float = Field(alias="powerIdleWatts", ge=0, le=1e5)
    power_max_watts: float = Field(alias="powerMaxWatts", ge=0, le=1e5)
    disk_bytes: float = Field(alias="diskBytes", default=100 * 1024**3, gt=0)

    @model_validator(mode="after")
    def _power_curve(self) -> NodeType:
        if self.power_max_watts < self.power_idle_watts:
            raise ValueError(f"node type {self.name}: powerMaxWatts ({self.power_max_watts}) is below "
                             f"powerIdleWatts ({self.power_idle_watts})")
        return self


class NodeGroup(_Strict):
    type: str
    latency_ms: list[float] = Field(alias="latencyMs", min_length=1, max_length=100000,
                                    description="one entry per node: its latency to the users")
    names: list[str] = Field(default=[], max_length=100000,
                             description="the nodes' names, aligned with latencyMs (calibrated profiles); "
                                         "the server's drift check compares each named node's latency")
    power_hidden: list[bool] = Field(alias="powerHidden", default=[], max_length=100000,
                                     description="aligned with latencyMs: true where the scorer is not told the "
                                                 "node's power curve (as before Kepler has seen it busy); "
                                                 "empty: told for every node (with powerVisible)")

    @model_validator(mode="after")
    def _names_aligned(self) -> NodeGroup:
        for what, values in (("names", self.names), ("powerHidden", self.power_hidden)):
            if values and len(values) != len(self.latency_ms):
                raise ValueError(f"{what} ({len(values)}) and latencyMs ({len(self.latency_ms)}) must align")
        return self

    @field_validator("latency_ms")
    @classmethod
    def _latencies(cls, values: list[float]) -> list[float]:
        bad = [v for v in values if not 0 <= v <= 1e5]
        if bad:
            raise ValueError(f"latencies must be within 0..100000 ms, got {bad[:3]}")
        return values


def _range(values: list[float], what: str, low: float, high: float) -> list[float]:
    if len(values) != 2 or not low <= values[0] <= values[1] <= high:
        raise ValueError(f"{what} must be [min, max] within {low}..{high}, got {values}")
    return values


class PodClassProfile(_Strict):
    name: str = Field(min_length=1, max_length=63)
    weight: float = Field(gt=0, le=1e6)
    cpu_millicores: list[float] = Field(alias="cpuMillicores", min_length=1, description="choices, drawn uniformly")
    memory_per_cpu_gib: list[float] = Field(alias="memoryPerCpuGiB", default=[0.5, 4.0])
    usage: list[float] = Field(default=[0.2, 0.9], description="[min, max] share of its request a pod uses")
    latency_limits_ms: list[list[float]] = Field(alias="latencyLimitsMs", default=[],
                                                 description="[soft, hard] choices; empty: no limits")
    lifetime_scale: float = Field(alias="lifetimeScale", default=1.0, gt=0, le=1000)

    @field_validator("cpu_millicores")
    @classmethod
    def _cpu(cls, values: list[float]) -> list[float]:
        if any(not 0 < v <= 1e7 for v in values):
            raise ValueError(f"cpu requests must be within (0, 1e7] millicores, got {values}")
        return values

    @field_validator("memory_per_cpu_gib")
    @classmethod
    def _memory(cls, values: list[float]) -> list[float]:
        return _range(values, "memoryPerCpuGiB", 0.0, 1e4)

    @field_validator("usage")
    @classmethod
    def _usage(cls, values: list[float]) -> list[float]:
        return _range(values, "usage", 0.0, 100.0)

    @field_validator("latency_limits_ms")
    @classmethod
    def _limits(cls, values: list[list[float]]) -> list[list[float]]:
        for pair in values:
            if len(pair) != 2 or not 0 <= pair[0] <= pair[1] <= 1e5:
                raise ValueError(f"each latency limit must be [soft, hard] with 0 <= soft <= hard, got {pair}")
        return values


class Workload(_Strict):
    arrivals: Literal["poisson", "test1", "test2"] = "poisson"
    load: float = Field(default=0.5, gt=0, le=2.0, description="poisson: mean share of the cluster's cpu requested")
    mean_lifetime_s: float = Field(alias="meanLifetimeSeconds", default=120.0, gt=0, le=1e7)
    pod_classes: list[PodClassProfile] = Field(alias="podClasses", min_length=1)
    hourly_rate: list[float] = Field(alias="hourlyRate", default=[],
                                     description="poisson: 24 multipliers of the rate by hour of day; empty: flat")
    start_hour: float = Field(alias="startHour", default=0.0, ge=0, lt=24,
                              description="the hour of day (UTC) at which a replay starts")
    burst_size: float = Field(alias="burstSize", default=1.0, ge=1, le=1000,
                              description="poisson: mean pods per arrival, all of one class (a Deployment "
                                          "scaled up); 1: pods arrive one at a time")

    @field_validator("hourly_rate")
    @classmethod
    def _hourly(cls, values: list[float]) -> list[float]:
        if values and (len(values) != 24 or any(not 0 <= v <= 1000 for v in values) or max(values) <= 0):
            raise ValueError(f"hourlyRate needs 24 multipliers within 0..1000, not all 0; got {len(values)} values")
        return values


class Dynamics(_Strict):
    metrics_interval_s: float = Field(alias="metricsIntervalSeconds", default=0.0, ge=0, le=3600)
    latency_shifts_s: list[float] = Field(alias="latencyShiftsSeconds", default=[])
    latency_drift: bool = Field(alias="latencyDrift", default=True)
    churn: bool = False
    churn_interval_s: float = Field(alias="churnIntervalSeconds", default=400.0, gt=0)
    power_visible: bool = Field(alias="powerVisible", default=True,
                                description="whether the scorer knows the nodes' power curves")
    background_cpu: list[float] = Field(alias="backgroundCpu", default=list(DEFAULT_BACKGROUND_CPU),
                                        min_length=2, max_length=2,
                                        description="[low, high] share of each node's cpu used besides its pods "
                                                    "(kubelet, daemons), drawn per node")
    usage_onset_s: float = Field(alias="usageOnsetSeconds", default=0.0, ge=0, le=3600,
                                 description="seconds from a pod's binding until its usage shows in the node's metrics")
    usage_linger_s: float = Field(alias="usageLingerSeconds", default=0.0, ge=0, le=3600,
                                  description="seconds a pod's usage still shows in the node's metrics after it went")

    @field_validator("background_cpu")
    @classmethod
    def _background_range(cls, value: list[float]) -> list[float]:
        low, high = value
        if not 0.0 <= low <= high <= MAX_BACKGROUND_CPU:
            raise ValueError(f"backgroundCpu must be [low, high] with 0 <= low <= high <= {MAX_BACKGROUND_CPU}, "
                             f"got {value}")
        return value


class ClusterProfile(_Strict):
    api_version: Literal["rlscore.io/v1alpha1"] = Field(alias="apiVersion", default=API_VERSION)
    kind: Literal["ClusterProfile"] = KIND
    name: str = Field(min_length=1, max_length=253)
    family: str = Field(default="profile", description="the scenario family it was drawn from, if any")
    node_types: list[NodeType] = Field(alias="nodeTypes", min_length=1)
    nodes: list[NodeGroup] = Field(min_length=1)
    workload: Workload
    dynamics: Dynamics = Dynamics()

    @model_validator(mode="after")
    def _types_known(self) -> ClusterProfile:
        names = [t.name for t in self.node_types]
        if len(set(names)) != len(names):
            raise ValueError(f"node type names must be unique, got {names}")
        unknown = sorted({g.type for g in self.nodes} - set(names))
        if unknown:
            raise ValueError(f"nodes refer to undefined node types: {', '.join(unknown)}")
        return self

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(by_alias=True, mode="json"), sort_keys=False, width=120)


class ProfileError(ValueError):
    """A cluster profile file that cannot be used; the message names the file and the field."""


def load_profile(path: str | Path) -> ClusterProfile:
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ProfileError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ProfileError(f"{path}: expected a mapping with kind: {KIND}, got {type(data).__name__}")
    try:
        return ClusterProfile.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in exc.errors())
        raise ProfileError(f"{path}: invalid cluster profile: {problems}") from None


def save_profile(profile: ClusterProfile, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(profile.to_yaml())
    return path


