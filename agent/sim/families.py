"""Scenario families: randomized generators of worlds (domain randomization).

Each family stands for a situation in which the consequence of a placement shows up later, and draws
a new cluster and workload per seed: node count (2..64 unless fixed), sizes, latencies, load, pod
mix, metrics delay. A policy trained across a family's draws has to learn the situation, not one
cluster. The thesis's patterns (test1, test2) and the steady streams poisson and latency-shift are
families too, so one mechanism serves training and evaluation.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from agent.parallel import carry_to_workers
from agent.sim import mixed
from agent.sim.world import GEN_NEW, GEN_OLD, LARGE, MEDIUM, SIZES, SMALL, Hardware, NodeSpec, PodClass, World
from rlscore.core.state import DEFAULT_LATENCY_HARD_MS, DEFAULT_LATENCY_SOFT_MS

TRAIN_NODES = (2, 64)
LATENCY_RANGE_MS = (3.0, 60.0)  # with the 20/30 ms limits: ~30% soft, ~18% between, ~52% over
METRICS_INTERVAL_S = (0.0, 10.0)  # scrape + refresh delay of measured utilization
THESIS_LIMITS = ((DEFAULT_LATENCY_SOFT_MS, DEFAULT_LATENCY_HARD_MS),)
# Training draws limits around the thesis's, so EL learns to read them rather than one pair.
JITTERED_LIMITS = tuple((soft, soft + gap) for soft in (10.0, 15.0, 20.0, 25.0, 30.0) for gap in (5.0, 10.0, 20.0))
# Training only (evaluation worlds stay as drawn): many real clusters are one node pool of identical
# machines, where only requests and load tell nodes apart; with sizes drawn per node, four identical
# nodes are rare, and a clone of LeastAllocated learned to tell equal nodes apart by their latency.
POOL_SHARE = 0.3
# ... and a power model is often known for some nodes only (Kepler estimates full-load watts while a
# node is busy; annotations on one node pool): the policy must still place sensibly.
PARTIAL_POWER_SHARE = 0.25
POISSON_CPU = (100.0, 250.0, 500.0, 1000.0, 2000.0)
POISSON_WEIGHTS = (0.25, 0.3, 0.25, 0.15, 0.05)


@dataclass(frozen=True)
class Family:
    name: str
    policies: tuple[str, ...]  # the policies whose goals are judged on this family
    summary: str
    draw: Callable[[np.random.Generator, int, bool, bool], World]
    eval_nodes: tuple[int, ...] | None = None  # fixed sizes for evaluation; None: drawn per seed
    evaluation_only: bool = False  # judged on, never trained or tuned on (families_for leaves it out)
    node_range: tuple[int, int] | None = None  # sizes drawn when none is given (default TRAIN_NODES)

    def world(self, rng: np.random.Generator, nodes: int | None = None, limits: bool = False,
              training: bool = False) -> World:
        """A world of this family; `nodes` fixes the cluster size, `limits` gives the pods latency
        limits (EL), `training` widens the draws (jittered limits)."""
        low, high = self.node_range or TRAIN_NODES
        n = int(nodes) if nodes is not None else int(rng.integers(low, high + 1))
        if n < 1:
            raise ValueError(f"a cluster needs at least one node, got {n}")
        world = self.draw(rng, n, limits, training)
        if training and world.power_visible and not world.power_hidden and rng.random() < PARTIAL_POWER_SHARE:
            hidden = rng.random(n) < rng.uniform(0.2, 0.8)
            world = replace(world, power_hidden=tuple(bool(h) for h in hidden))
        return world


NODE_DRAWS = ("uniform", "log-uniform")


def check_node_draw(draw: str) -> str:
    if draw not in NODE_DRAWS:
        raise ValueError(f"unknown node draw {draw!r}: expected one of {', '.join(NODE_DRAWS)}")
    return draw


def draw_node_count(rng: np.random.Generator, low: int, high: int, draw: str = "uniform") -> int:
    """A cluster size in low..high: uniform, or log-uniform (about as many 2..8-node clusters as
    9..32-node ones: small clusters, where every placement counts, are not drowned out by big ones)."""
    if check_node_draw(draw) == "uniform":
        return int(rng.integers(low, high + 1))
    return int(min(high, np.floor(np.exp(rng.uniform(np.log(low), np.log(high + 1))))))


def _metrics_interval(rng: np.random.Generator) -> float:
    return float(rng.uniform(*METRICS_INTERVAL_S))


def _random_nodes(rng: np.random.Generator, n: int, kinds: tuple[Hardware, ...] = SIZES,
                  training: bool = False) -> tuple[NodeSpec, ...]:
    if training and rng.random() < POOL_SHARE:
        kinds = (kinds[int(rng.integers(len(kinds)))],)
    return tuple(NodeSpec(kinds[int(rng.integers(len(kinds)))], float(rng.uniform(*LATENCY_RANGE_MS)))
                 for _ in range(n))


def _limits(limits: bool, training: bool) -> tuple[tuple[float, float], ...]:
    if not limits:
        return ()
    return JITTERED_LIMITS if training else THESIS_LIMITS


def _nginx(limits: tuple) -> tuple[PodClass, ...]:
    """The thesis's test pod: nginx requesting 250m cpu and 64Mi memory."""
    return (PodClass("nginx", 1.0, (250.0,), (0.25, 0.25), (0.2, 0.9), limits),)


def _mixed_sizes(limits: tuple) -> tuple[PodClass, ...]:
    return tuple(PodClass(f"cpu-{int(c)}m", w, (c,), (0.5, 4.0), (0.2, 0.9), limits)
                 for c, w in zip(POISSON_CPU, POISSON_WEIGHTS))


def _thesis(arrivals: str, shifts: tuple[float, ...] = ()):
    def draw(rng, n, limits, training):
        return World(arrivals, _random_nodes(rng, n, training=training), _nginx(_limits(limits, training)), arrivals=arrivals,
                     latency_shifts_s=shifts, metrics_interval_s=_metrics_interval(rng))
    return draw


def _poisson(rng, n, limits, training):
    return World("poisson", _random_nodes(rng, n, training=training), _mixed_sizes(_limits(limits, training)),
                 load=float(rng.uniform(0.3, 0.7)), metrics_interval_s=_metrics_interval(rng))


def _one_pool(rng, n, limits, training):
    """One node pool: identical machines (one size per seed), Poisson arrivals of mixed sizes, and the
    power model known for some nodes only, as while Kepler has seen only the busy ones. Only requests,
    load and latency tell the nodes apart."""
    kind = SIZES[int(rng.integers(len(SIZES)))]
    nodes = tuple(NodeSpec(kind, float(rng.uniform(*LATENCY_RANGE_MS))) for _ in range(n))
    hidden = rng.random(n) < rng.uniform(0.0, 0.8)
    return World("one-pool", nodes, _mixed_sizes(_limits(limits, training)), load=float(rng.uniform(0.3, 0.7)),
                 metrics_interval_s=_metrics_interval(rng), power_hidden=tuple(bool(h) for h in hidden))


def _churn(rng, n, limits, training):
    # nodes leave every few minutes, the more often the bigger the cluster
    return replace(_poisson(rng, n, limits, training), family="churn", churn=True,
                   churn_interval_s=float(rng.uniform(200.0, 600.0)) / max(1.0, n / 8))


def _scarce_near(rng, n, limits, training):
    """A few small nodes near the users, the rest big and far. Strict pods can only meet their limit on
    the near nodes; loose pods meet theirs anywhere. Whoever fills the near nodes with loose pods
    breaks the strict pods that come later."""
    near_count = int(min(max(1, n // 2), rng.integers(1, 4)))
    far_count = max(n - near_count, 1)
    near = tuple(NodeSpec(SMALL, float(rng.uniform(2.0, 8.0))) for _ in range(near_count))
    far = tuple(NodeSpec(LARGE if rng.random() < 0.8 else MEDIUM, float(rng.uniform(25.0, 60.0)))
                for _ in range(far_count))
    hard = float(rng.uniform(10.0, 20.0)) if training else 15.0
    strict_limits = ((round(0.7 * hard, 1), hard),)
    loose_limits = ((100.0, 150.0),)
    strict_cpu, loose_cpu = (250.0, 500.0), (250.0, 500.0, 1000.0)
    near_cap = near_count * SMALL.cpu_millicores
    far_cap = sum(node.hardware.cpu_millicores for node in far)
    # demand: strict pods alone would fill the near nodes to 50-90%; loose pods 20-50% of the far ones
    strict_rate = float(rng.uniform(0.5, 0.9)) * near_cap / np.mean(strict_cpu)
    loose_rate = float(rng.uniform(0.2, 0.5)) * far_cap / np.mean(loose_cpu)
    classes = (PodClass("strict", strict_rate, strict_cpu, (0.5, 2.0), (0.3, 0.9), strict_limits),
               PodClass("loose", loose_rate, loose_cpu, (0.5, 2.0), (0.3, 0.9), loose_limits))
    mix_cpu = (strict_rate * np.mean(strict_cpu) + loose_rate * np.mean(loose_cpu)) / (strict_rate + loose_rate)
    total_cap = near_cap + far_cap
    load = (strict_rate + loose_rate) * mix_cpu / total_cap
    order = rng.permutation(near_count + far_count)
    nodes = tuple((near + far)[i] for i in order)
    return World("scarce-near", nodes, classes, load=float(load), metrics_interval_s=_metrics_interval(rng),
                 latency_drift=False)


def _usage_skew(rng, n, limits, training):
    """Some workloads use ~3x their request (hogs), most ~0.3x (idlers), on a busy cluster: requests
    say little about how hot a node runs, and balancing them leaves the nodes with the hogs hot."""
    hogs = float(rng.uniform(0.15, 0.3))
    cpu = (250.0, 500.0, 1000.0)
    lim = _limits(limits, training)
    classes = (PodClass("hog", hogs, cpu, (0.5, 2.0), (2.5, 3.5), lim),
               PodClass("idler", 1.0 - hogs, cpu, (0.5, 2.0), (0.2, 0.4), lim))
    return World("usage-skew", _random_nodes(rng, n, (MEDIUM, LARGE), training), classes, load=float(rng.uniform(0.6, 0.85)),
                 metrics_interval_s=_metrics_interval(rng))


def _two_d(rng, n, limits, training):
    """cpu-heavy and memory-heavy pods on balanced nodes: packing in two dimensions."""
    lim = _limits(limits, training)
    classes = (PodClass("cpu-heavy", 0.5, (1000.0, 2000.0), (0.25, 0.5), (0.3, 0.9), lim),
               PodClass("memory-heavy", 0.5, (100.0, 250.0), (8.0, 16.0), (0.3, 0.9), lim))
    return World("two-d", _random_nodes(rng, n, training=training), classes, load=float(rng.uniform(0.4, 0.7)),
                 metrics_interval_s=_metrics_interval(rng))


def _fragmentation(rng, n, limits, training):
    """Mostly small pods, now and then a large one that needs most of a node, on a busy cluster: a
    scorer that scatters the small ones leaves no node with room for the large."""
    large_share = float(rng.uniform(0.03, 0.08))
    lim = _limits(limits, training)
    classes = (PodClass("small", 1.0 - large_share, (100.0, 250.0, 500.0), (0.5, 2.0), (0.3, 0.9), lim),
               PodClass("large", large_share, (6000.0, 7000.0), (0.5, 1.0), (0.3, 0.9), lim))
    return World("fragmentation", _random_nodes(rng, n, (MEDIUM, LARGE), training), classes,
                 load=float(rng.uniform(0.7, 0.9)), metrics_interval_s=_metrics_interval(rng))


def _hardware(visible: bool):
    def draw(rng, n, limits, training):
        """Two hardware generations of equal capacity, 200/400 W vs 60/220 W at idle/full load."""
        new_share = float(rng.uniform(0.3, 0.7))
        nodes = tuple(NodeSpec(GEN_NEW if rng.random() < new_share else GEN_OLD, float(rng.uniform(*LATENCY_RANGE_MS)))
                      for _ in range(n))
        return World("hardware" if visible else "hardware-unknown", nodes, _mixed_sizes(_limits(limits, training)),
                     load=float(rng.uniform(0.2, 0.6)), metrics_interval_s=_metrics_interval(rng),
                     power_visible=visible)
    return draw


FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("test1", ("EE", "LB", "EL"), "thesis Alg. 1: 30 nginx pods 3 s apart, deleted together",
           _thesis("test1"), eval_nodes=(3, 10, 100)),
    Family("test2", ("EE", "LB", "EL"), "thesis Alg. 2: ~30 nginx pods alive, the oldest replaced every 4 s",
           _thesis("test2"), eval_nodes=(3, 10, 100)),
    Family("poisson", ("EE", "LB"), "Poisson arrivals, exponential lifetimes, mixed sizes, 30-70% cpu requested",
           _poisson, eval_nodes=(3, 10, 100)),
    Family("latency-shift", ("EL",), "test2 with the nodes' latencies swapped at 300 s and 600 s",
           _thesis("test2", (300.0, 600.0)), eval_nodes=(3, 10, 100)),
    Family("scarce-near", ("EL",), "few small near nodes, many big far ones; strict and loose pods mixed",
           _scarce_near),
    Family("usage-skew", ("LB",), "hogs use ~3x their request, idlers ~0.3x", _usage_skew),
    Family("two-d", ("EE", "LB"), "cpu-heavy and memory-heavy pods on balanced nodes", _two_d),
    Family("fragmentation", ("EE",), "small pods and now and then one that needs most of a node", _fragmentation),
    Family("hardware", ("EE", "EL"), "two generations, equal capacity, 200/400 W vs 60/220 W", _hardware(True)),
    Family("hardware-unknown", ("EE",), "as hardware, but no power model is known", _hardware(False)),
    Family("churn", ("EE", "LB", "EL"), "poisson arrivals while nodes leave and come back", _churn),
    Family(mixed.MIXED, ("EE", "LB", "EL"), "every difficulty at once, each trait drawn independently (agent/sim/mixed.py)",
           lambda rng, n, limits, training: mixed.mixed_world(rng, n, mixed.TRAINING), node_range=mixed.TRAINING.nodes),
    Family(mixed.MIXED_WIDE, ("EE", "LB", "EL"), "mixed worlds beyond the training ranges: larger, more extreme mixes",
           lambda rng, n, limits, training: mixed.mixed_world(rng, n, mixed.WIDER, mixed.MIXED_WIDE),
           evaluation_only=True, node_range=mixed.WIDER.nodes),
    # Training already draws one-pool clusters (POOL_SHARE, PARTIAL_POWER_SHARE); this family judges them.
    Family("one-pool", ("EE", "LB", "EL"), "identical machines, mixed pods, power known for some nodes only",
           _one_pool, evaluation_only=True),
)}


# Cluster profiles made families at run time (agent.sim.cluster_profile.register_profile), kept
# apart so that FAMILIES stays the built-in set every policy is judged on.
PROFILE_FAMILIES: dict[str, Family] = {}


def _restore_profile_families(families: dict[str, Family]) -> None:
    PROFILE_FAMILIES.update(families)


# a profile registered in the driver is a family in Ray's workers too
carry_to_workers(lambda: dict(PROFILE_FAMILIES), _restore_profile_families)


def family(name: str) -> Family:
    if name in FAMILIES:
        return FAMILIES[name]
    if name in PROFILE_FAMILIES:
        return PROFILE_FAMILIES[name]
    raise ValueError(f"unknown scenario family {name!r}: expected one of {', '.join(FAMILIES)}")


def families_for(policy: str) -> tuple[str, ...]:
    """The families a policy trains (and is tuned) on."""
    return tuple(name for name, f in FAMILIES.items() if policy in f.policies and not f.evaluation_only)


def evaluation_families_for(policy: str) -> tuple[str, ...]:
    """The families a policy is judged on: its training families and the evaluation-only ones."""
    return tuple(name for name, f in FAMILIES.items() if policy in f.policies)
