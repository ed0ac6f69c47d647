"""Mixed worlds: clusters in which every difficulty of the scenario families can occur at once.

Each single-difficulty family (agent.sim.families) isolates one situation, and the rule that wins it
is known. Real clusters mix them: a few small edge nodes near the users, mid nodes, big far nodes of
two hardware generations; pods with strict, medium or no latency needs, batch pods that use a third
of their request beside hogs that use three times theirs, memory-heavy pods and occasional large
ones, bursts of arrivals. A mixed world draws every such trait independently, so no rule was written
for the combination it makes, and a policy has to read the situation from the state.

Traits and how they are drawn (`MixRanges`; `TRAINING` for training, `WIDER` for evaluation beyond
it, with larger clusters and more extreme mixes):
- node groups (1..4): each a machine size, a latency tier (edge, mid, far), a power curve (idle and
  dynamic watts per core, big machines no more efficient by rule), and whether its power is known;
- pod classes (2..5): each a latency need (none, medium, strict), a usage factor (idle, normal, hog),
  a cpu/memory shape (cpu-heavy, balanced, memory-heavy), a size (small, medium, large), a weight and
  a lifetime scale;
- arrivals: steady, in bursts of one class (a Deployment scaled up), or following the day;
- lifetimes, node churn, load, how late metrics arrive and how long a new pod's usage takes to show.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from agent.sim.world import GIB, Hardware, NodeSpec, PodClass, World

MIXED, MIXED_WIDE = "mixed", "mixed-wide"

# Per policy, the rules that lead some mixed worlds on training seeds (the first leads most): what a mixed
# world's teacher is picked from (agent.learn.dqn) and what the rollout bound branches on
# (agent.evaluate.rollout_bound). LB's headroom-informed, which reads what each pod's workload uses, taught 41
# of the 48 mixed worlds of `rlscore-train --policy LB` (its sidecar's demonstrations.teachers).
LEADING_RULES = {
    "EE": ("efficient-first", "best-fit", "most-allocated", "one-step-ee"),
    "LB": ("headroom-informed", "headroom-balance", "load-variation-risk-balancing", "target-load-packing",
           "one-step-lb"),
    "EL": ("latency-fit", "latency-pack", "one-step-el"),
}


@dataclass(frozen=True)
class MixRanges:
    """Where each trait of a mixed world is drawn from. Tuples of two numbers are uniform ranges;
    `*_kinds` map a kind to (probability, its own range or choices)."""

    nodes: tuple[int, int] = (4, 48)
    groups: tuple[int, int] = (1, 4)
    cores: tuple[int, ...] = (2, 4, 8, 16, 32)
    memory_per_core_gib: tuple[float, ...] = (2.0, 4.0, 8.0)
    latency_tiers: dict = field(default_factory=lambda: {
        "edge": (0.3, (2.0, 8.0)), "mid": (0.35, (10.0, 25.0)), "far": (0.35, (30.0, 80.0))})
    idle_watts_per_core: tuple[float, float] = (2.5, 13.0)
    dynamic_watts_per_core: tuple[float, float] = (8.0, 22.0)
    power_unknown: float = 0.2  # chance that a group's power curve is not told to the scorer
    classes: tuple[int, int] = (2, 5)
    latency_kinds: dict = field(default_factory=lambda: {
        "none": (0.4, None), "medium": (0.35, ((20.0, 40.0), (10.0, 20.0))),
        "strict": (0.25, ((5.0, 10.0), (3.0, 6.0)))})  # (soft range, gap to hard range)
    usage_kinds: dict = field(default_factory=lambda: {
        "idle": (0.3, (0.1, 0.35)), "normal": (0.5, (0.4, 0.9)), "hog": (0.2, (2.0, 3.5))})
    shape_kinds: dict = field(default_factory=lambda: {
        "cpu-heavy": (0.25, (0.25, 1.0)), "balanced": (0.5, (1.0, 4.0)), "memory-heavy": (0.25, (4.0, 12.0))})
    size_kinds: dict = field(default_factory=lambda: {
        "small": (0.4, (100.0, 250.0)), "medium": (0.45, (250.0, 500.0, 1000.0)), "large": (0.15, (2000.0, 4000.0))})
    lifetime_scale: tuple[float, float] = (0.5, 3.0)
    load: tuple[float, float] = (0.3, 0.85)
    arrival_kinds: dict = field(default_factory=lambda: {
        "steady": (0.4, None), "bursts": (0.35, (2.0, 10.0)), "diurnal": (0.25, None)})
    mean_lifetime_s: tuple[float, float] = (60.0, 300.0)
    churn: float = 0.15
    metrics_interval_s: tuple[float, float] = (0.0, 15.0)
    usage_onset_s: tuple[float, float] = (0.0, 20.0)


TRAINING = MixRanges()
# Beyond training: clusters up to three times larger, more groups and classes, hungrier hogs, fuller
# clusters, bigger bursts.
WIDER = MixRanges(
    nodes=(48, 150), groups=(2, 6), cores=(2, 4, 8, 16, 32, 64), classes=(3, 7),
    usage_kinds={"idle": (0.3, (0.05, 0.3)), "normal": (0.45, (0.4, 1.0)), "hog": (0.25, (2.5, 4.5))},
    load=(0.5, 0.95), arrival_kinds={"steady": (0.3, None), "bursts": (0.45, (5.0, 25.0)), "diurnal": (0.25, None)},
    churn=0.25)


def _kind(rng: np.random.Generator, kinds: dict) -> tuple[str, object]:
    names = list(kinds)
    p = np.array([kinds[k][0] for k in names], dtype=float)
    name = names[int(rng.choice(len(names), p=p / p.sum()))]
    return name, kinds[name][1]


def _uniform(rng: np.random.Generator, low_high: tuple[float, float]) -> float:
    return float(rng.uniform(*low_high))


def _group_sizes(rng: np.random.Generator, nodes: int, groups: int) -> list[int]:
    """`nodes` split into `groups` groups of at least one node each."""
    groups = max(1, min(groups, nodes))
    shares = rng.dirichlet(np.ones(groups))
    sizes = np.ones(groups, dtype=int) + np.floor(shares * (nodes - groups)).astype(int)
    sizes[int(np.argmax(shares))] += nodes - int(sizes.sum())
    return [int(s) for s in sizes]


def _pod_class(rng: np.random.Generator, r: MixRanges, index: int) -> PodClass:
    need, limits = _kind(rng, r.latency_kinds)
    usage_name, usage = _kind(rng, r.usage_kinds)
    shape_name, shape = _kind(rng, r.shape_kinds)
    size_name, sizes = _kind(rng, r.size_kinds)
    if len(sizes) == 2:  # a range: two sizes within it
        cpu = tuple(sorted({float(round(rng.uniform(*sizes) / 50.0) * 50.0) for _ in range(2)}))
    else:
        cpu = tuple(float(c) for c in sizes)
    latency = ()
    if limits is not None:
        soft_range, gap_range = limits
        soft = round(_uniform(rng, soft_range), 1)
        latency = ((soft, round(soft + _uniform(rng, gap_range), 1)),)
    low, high = shape
    memory = (float(rng.uniform(low, (low + high) / 2)), float(high))
    return PodClass(f"{index}-{size_name}-{shape_name}-{usage_name}-{need}", float(rng.uniform(0.2, 1.0)), cpu, memory,
                    (float(usage[0]), float(usage[1])), latency, _uniform(rng, r.lifetime_scale))


def mixed_world(rng: np.random.Generator, nodes: int | None = None, ranges: MixRanges = TRAINING,
                name: str = MIXED) -> World:
    """One mixed world; `nodes` fixes its size (else drawn from `ranges.nodes`)."""
    r = ranges
    n = int(nodes) if nodes is not None else int(rng.integers(r.nodes[0], r.nodes[1] + 1))
    specs: list[NodeSpec] = []
    hidden: list[bool] = []
    for g, size in enumerate(_group_sizes(rng, n, int(rng.integers(r.groups[0], r.groups[1] + 1)))):
        cores = int(rng.choice(r.cores))
        idle = _uniform(rng, r.idle_watts_per_core) * cores
        dynamic = _uniform(rng, r.dynamic_watts_per_core) * cores
        hardware = Hardware(f"group-{g}-{cores}c", cores * 1000.0, cores * float(rng.choice(r.memory_per_core_gib)) * GIB,
                            110, round(idle, 1), round(idle + dynamic, 1), cores * 12.5 * GIB)
        _, latency = _kind(rng, r.latency_tiers)
        unknown = bool(rng.random() < r.power_unknown)
        specs += [NodeSpec(hardware, _uniform(rng, latency)) for _ in range(size)]
        hidden += [unknown] * size
    order = rng.permutation(n)
    specs, hidden = [specs[i] for i in order], [hidden[i] for i in order]
    classes = tuple(_pod_class(rng, r, k) for k in range(int(rng.integers(r.classes[0], r.classes[1] + 1))))
    arrival, burst = _kind(rng, r.arrival_kinds)
    hourly = ()
    if arrival == "diurnal":  # a day's curve: a trough at night, a peak in the afternoon
        peak_hour, depth = float(rng.uniform(12, 18)), float(rng.uniform(0.3, 0.8))
        curve = 1.0 - depth * (0.5 + 0.5 * np.cos(2 * np.pi * (np.arange(24) - peak_hour) / 24.0))
        hourly = tuple(float(v) for v in curve / curve.mean())
    lifetime = _uniform(rng, r.mean_lifetime_s)
    world = World(name, tuple(specs), classes, load=_uniform(rng, r.load),
                  mean_lifetime_s=lifetime, churn=bool(rng.random() < r.churn),
                  churn_interval_s=float(rng.uniform(200.0, 600.0)) / max(1.0, n / 8),
                  metrics_interval_s=_uniform(rng, r.metrics_interval_s), power_hidden=tuple(hidden),
                  hourly_rate=hourly, start_hour=float(rng.uniform(0, 24)) if hourly else 0.0,
                  # a day in ~15 mean lifetimes, so that one evaluation run sees the curve go round
                  day_seconds=15.0 * lifetime if hourly else 86400.0,
                  burst_size=_uniform(rng, burst) if arrival == "bursts" else 1.0,
                  usage_onset_s=_uniform(rng, r.usage_onset_s),
                  tags={"arrivals": arrival, "groups": len(set(s.hardware.name for s in specs))})
    return world
