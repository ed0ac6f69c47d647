"""kube-scheduler's weighted score sum for the resource plugins, as kube-scheduler 1.35 computes it.

A `ScoreConfig` is the part of a KubeSchedulerConfiguration profile that tuning changes: the
NodeResourcesFit scoring strategy (LeastAllocated, MostAllocated or RequestedToCapacityRatio with its
shape) and per-resource weights, NodeResourcesBalancedAllocation, RLScore, and each plugin's weight.
`node_scores` is the scheduler's total for those plugins, integer arithmetic and all, so a simulated
placement is the one the real scheduler would make (plugin-go's TestTunedProfileScoresMatchPython
checks it against the real framework). The other default score plugins (TaintToleration,
NodeAffinity, PodTopologySpread, ImageLocality, InterPodAffinity) give every node the same score for
unconstrained pods and are left as they are.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from rlscore.core.rules import DEFAULT_MEMORY_REQUEST, DEFAULT_MILLI_CPU_REQUEST, MAX_NODE_SCORE
from rlscore.core.state import NodeState, PodRequest

STRATEGIES = ("LeastAllocated", "MostAllocated", "RequestedToCapacityRatio")
MAX_SHAPE_SCORE = 10  # a shape point's score is 0..10, scaled x10 by the plugin
MAX_RESOURCE_WEIGHT = 100  # NodeResourcesFit's validation: resource weights in (0, 100]
MAX_PLUGIN_WEIGHT = 100  # what we allow a plugin weight to be (the scheduler caps the total, not each)


@dataclass(frozen=True)
class ScoreConfig:
    """Weights and strategy of kube-scheduler's resource scoring. `balanced_weight` or
    `rlscore_weight` 0 means the plugin is disabled in the profile."""

    strategy: str = "LeastAllocated"
    cpu_weight: int = 1
    memory_weight: int = 1
    shape: tuple[tuple[int, int], ...] = ()  # (utilization %, score 0..10); RequestedToCapacityRatio only
    fit_weight: int = 1
    balanced_weight: int = 1
    rlscore_weight: int = 0
    rlscore_policy: str | None = None

    def __post_init__(self) -> None:
        problems = []
        if self.strategy not in STRATEGIES:
            problems.append(f"strategy {self.strategy!r} is not one of {', '.join(STRATEGIES)}")
        for name in ("cpu_weight", "memory_weight"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or not 1 <= value <= MAX_RESOURCE_WEIGHT:
                problems.append(f"{name} must be an integer in 1..{MAX_RESOURCE_WEIGHT}, got {value!r}")
        for name, low in (("fit_weight", 1), ("balanced_weight", 0), ("rlscore_weight", 0)):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or not low <= value <= MAX_PLUGIN_WEIGHT:
                problems.append(f"{name} must be an integer in {low}..{MAX_PLUGIN_WEIGHT}, got {value!r}")
        if self.strategy == "RequestedToCapacityRatio":
            if not self.shape:
                problems.append("RequestedToCapacityRatio needs at least one shape point")
            utils = [u for u, _ in self.shape]
            if any(not 0 <= u <= 100 for u in utils) or any(a >= b for a, b in zip(utils, utils[1:])):
                problems.append(f"shape utilizations must increase within 0..100, got {utils}")
            if any(not 0 <= s <= MAX_SHAPE_SCORE for _, s in self.shape):
                problems.append(f"shape scores must be within 0..{MAX_SHAPE_SCORE}, got {[s for _, s in self.shape]}")
        elif self.shape:
            problems.append(f"a shape only applies to RequestedToCapacityRatio, not {self.strategy}")
        if self.rlscore_weight and self.rlscore_policy not in ("EE", "LB", "EL"):
            problems.append("rlscore_weight > 0 needs rlscore_policy EE, LB or EL")
        if problems:
            raise ValueError("invalid score configuration: " + "; ".join(problems))

    @property
    def label(self) -> str:
        """A short human-readable form, e.g. MostAllocated(cpu 3, mem 1) x2 + Balanced x1."""
        parts = [f"cpu {self.cpu_weight}, mem {self.memory_weight}"]
        if self.shape:
            parts.append("shape " + " ".join(f"{u}:{s}" for u, s in self.shape))
        text = f"{self.strategy}({'; '.join(parts)}) x{self.fit_weight}"
        if self.balanced_weight:
            text += f" + Balanced x{self.balanced_weight}"
        if self.rlscore_weight:
            text += f" + RLScore[{self.rlscore_policy}] x{self.rlscore_weight}"
        return text

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["shape"] = [list(p) for p in self.shape]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScoreConfig:
        known = {f for f in cls.__dataclass_fields__}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown score configuration fields: {', '.join(sorted(unknown))}")
        data = dict(data)
        data["shape"] = tuple(tuple(int(v) for v in p) for p in data.get("shape", ()))
        return cls(**data)


# kube-scheduler's default profile: LeastAllocated (cpu 1, memory 1) x1 + BalancedAllocation x1.
DEFAULT = ScoreConfig()


def _requested(nodes: NodeState, pod: PodRequest, non_zero: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """What the node would have requested with the pod on it, as int64. NodeResourcesFit counts a
    pod without requests at the non-zero defaults (100m, 200Mi), BalancedAllocation at what it asks."""
    cpu = pod.cpu_millicores or (DEFAULT_MILLI_CPU_REQUEST if non_zero else 0.0)
    mem = pod.memory_bytes or (DEFAULT_MEMORY_REQUEST if non_zero else 0.0)
    return (np.rint(nodes.cpu_requested + cpu).astype(np.int64),
            np.rint(nodes.memory_requested + mem).astype(np.int64))


def _least(requested: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    safe = np.maximum(capacity, 1)
    return np.where((capacity == 0) | (requested > capacity), 0, (capacity - requested) * MAX_NODE_SCORE // safe)


def _most(requested: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    safe = np.maximum(capacity, 1)
    return np.where(capacity == 0, 0, np.minimum(requested, capacity) * MAX_NODE_SCORE // safe)


def _go_div(a: np.ndarray, b: int) -> np.ndarray:
    """Go's integer division, which truncates towards zero (numpy's // floors)."""
    return np.sign(a) * (np.abs(a) // b)


def _broken_linear(shape: tuple[tuple[int, int], ...], p: np.ndarray) -> np.ndarray:
    """helper.BuildBrokenLinearFunction with the plugin's x10 score scaling."""
    points = [(u, s * (MAX_NODE_SCORE // MAX_SHAPE_SCORE)) for u, s in shape]
    out = np.full(p.shape, points[-1][1], dtype=np.int64)
    done = np.zeros(p.shape, dtype=bool)
    for i, (u, s) in enumerate(points):
        hit = ~done & (p <= u)
        if i == 0:
            out[hit] = s
        else:
            u0, s0 = points[i - 1]
            out[hit] = s0 + _go_div((s - s0) * (p[hit] - u0), u - u0)
        done |= hit
    return out


def _ratio(shape, requested: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    safe = np.maximum(capacity, 1)
    over = (capacity == 0) | (requested > capacity)
    return _broken_linear(shape, np.where(over, 100, requested * 100 // safe))


def fit_score(config: ScoreConfig, nodes: NodeState, pod: PodRequest) -> np.ndarray:
    """NodeResourcesFit's score (0..100) with the configured strategy and resource weights."""
    cpu, mem = _requested(nodes, pod)
    cpu_cap = np.rint(nodes.cpu_capacity).astype(np.int64)
    mem_cap = np.rint(nodes.memory_capacity).astype(np.int64)
    weights = ((config.cpu_weight, cpu, cpu_cap), (config.memory_weight, mem, mem_cap))
    total = np.zeros(len(nodes), dtype=np.int64)
    weight_sum = np.zeros(len(nodes), dtype=np.int64)
    for weight, requested, capacity in weights:
        if config.strategy == "LeastAllocated":
            score = _least(requested, capacity)
            counted = capacity != 0
        elif config.strategy == "MostAllocated":
            score = _most(requested, capacity)
            counted = capacity != 0
        else:  # RequestedToCapacityRatio counts a resource only when it scores above 0
            score = _ratio(config.shape, requested, capacity)
            counted = (capacity != 0) & (score > 0)
        total += np.where(counted, score * weight, 0)
        weight_sum += np.where(counted, weight, 0)
    safe = np.maximum(weight_sum, 1)
    if config.strategy == "RequestedToCapacityRatio":
        mean = np.floor(total / safe + 0.5).astype(np.int64)  # math.Round: halves away from zero, all >= 0
    else:
        mean = total // safe
    return np.where(weight_sum == 0, 0, mean)


def balanced_score(nodes: NodeState, pod: PodRequest) -> np.ndarray:
    """NodeResourcesBalancedAllocation (cpu and memory): (1 - |cpu share - memory share| / 2) x 100."""
    cpu, mem = _requested(nodes, pod, non_zero=False)
    with np.errstate(divide="ignore", invalid="ignore"):
        cpu_frac = np.minimum(cpu / nodes.cpu_capacity, 1.0)
        mem_frac = np.minimum(mem / nodes.memory_capacity, 1.0)
    both = (nodes.cpu_capacity > 0) & (nodes.memory_capacity > 0)
    std = np.where(both, np.abs(cpu_frac - mem_frac) / 2, 0.0)
    return np.trunc((1.0 - std) * MAX_NODE_SCORE).astype(np.int64)


def node_scores(config: ScoreConfig, nodes: NodeState, pod: PodRequest,
                rlscore: np.ndarray | None = None) -> np.ndarray:
    """The scheduler's total of the configured plugins per node (higher wins). `rlscore` are
    RLScore's 0..100 scores for these nodes when the profile weighs RLScore in."""
    total = config.fit_weight * fit_score(config, nodes, pod)
    if config.balanced_weight:
        total = total + config.balanced_weight * balanced_score(nodes, pod)
    if config.rlscore_weight:
        if rlscore is None or len(rlscore) != len(nodes):
            raise ValueError("the profile weighs RLScore in: pass RLScore's scores for every node")
        total = total + config.rlscore_weight * np.asarray(rlscore, dtype=np.int64)
    return total


@dataclass
class KubeScorer:
    """A scorer (rlscore.core.scoring.Scorer) that places pods as a kube-scheduler profile would; with an
    RLScore weight it needs the policy's model."""

    config: ScoreConfig
    name: str = "kube-profile"
    model: Any = field(default=None, repr=False)  # LoadedModel when config.rlscore_weight > 0

    def __post_init__(self) -> None:
        if self.config.rlscore_weight and self.model is None:
            raise ValueError("a profile with RLScore needs the policy's model to simulate it")

    def values(self, nodes: NodeState, pod: PodRequest) -> np.ndarray:
        rl = None
        if self.config.rlscore_weight:
            from rlscore.core.scoring import to_node_scores  # rlscore.core.scoring imports the model loader
            rl = to_node_scores(self.model.q_values(nodes, pod))
        return node_scores(self.config, nodes, pod, rl).astype(np.float64)
