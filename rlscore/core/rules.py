"""Hand-written node scorers: the baselines the policies are measured against, and the fallback
the server answers with when no valid model is loaded.

The kube-scheduler ones follow the upstream NodeResourcesFit (LeastAllocated / MostAllocated) and
NodeResourcesBalancedAllocation formulas, integer truncation included, so that ties (which the
scheduler breaks at random) come out as they do in a real cluster. The Trimaran ones follow the
formulas of scheduler-plugins' TargetLoadPacking and LoadVariationRiskBalancing; the others are the
classic packing rules (best-fit, Tetris alignment) and the rules a careful operator would write by
hand for each objective (latency-fit and its packing variant latency-fit-running, least-utilized,
efficient-first), each objective's own one-step greedy (one-step-ee / -lb / -el: the placement the
objective charges least for at once), and headroom-balance (LB's one-step greedy among the nodes whose
measured load leaves room for a burst).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from rlscore.core.objectives import placement_costs
from rlscore.core.state import LATENCY_TIER_NONE, LATENCY_TIER_SOFT, NodeState, PodRequest, latency_tiers

MAX_NODE_SCORE = 100
# kube-scheduler scores a pod without requests as if it asked for these (non-zero defaults).
DEFAULT_MILLI_CPU_REQUEST = 100.0
DEFAULT_MEMORY_REQUEST = 200.0 * 1024 * 1024

Rule = Callable[[NodeState, PodRequest, np.random.Generator], np.ndarray]


def _requested_after(nodes: NodeState, pod: PodRequest) -> tuple[np.ndarray, np.ndarray]:
    cpu = pod.cpu_millicores or DEFAULT_MILLI_CPU_REQUEST
    mem = pod.memory_bytes or DEFAULT_MEMORY_REQUEST
    return nodes.cpu_requested + cpu, nodes.memory_requested + mem


_SCALABLE = float(np.finfo(np.float64).max) / MAX_NODE_SCORE  # the largest share numerator x MAX_NODE_SCORE holds


def _per_resource(requested: np.ndarray, capacity: np.ndarray, most: bool) -> np.ndarray:
    safe_cap = np.where(capacity > 0, capacity, 1.0)
    req = np.minimum(requested, safe_cap)
    used = req if most else safe_cap - req
    if used.max(initial=0.0) <= _SCALABLE:
        share = used * MAX_NODE_SCORE / safe_cap  # the scheduler's order (exact in its int64)
    else:  # a capacity near the float's limit, where that product overflows: divide first there
        with np.errstate(over="ignore"):
            share = np.where(used > _SCALABLE, used / safe_cap * MAX_NODE_SCORE, used * MAX_NODE_SCORE / safe_cap)
    return np.where(capacity > 0, np.floor(share), 0.0)


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


# how far apart latency-fit's tiers lie: more than anything it (or latency-fit-running) adds inside one
# (Go: latencyFitTierGap)
LATENCY_FIT_TIER_GAP = 1e6
LATENCY_FIT_FAR_MS = 1e5  # latencies beyond this count as this far (Go: latencyFitFarMs)


def latency_fit(nodes: NodeState, pod: PodRequest, rng: np.random.Generator) -> np.ndarray:
    """The best latency tier the pod can get, then the *highest* latency still inside it, so the
    near nodes stay free for the pods that need them. A pod without limits: the farthest node."""
    return latency_tiers(nodes, pod) * LATENCY_FIT_TIER_GAP + _far_term(nodes.latency_ms)


def _far_term(latency: np.ndarray) -> np.ndarray:
    """latency-fit's order inside a tier: the farthest first, unknown latency last (-1..1e5)."""
    return np.where(np.isfinite(latency), np.minimum(latency, LATENCY_FIT_FAR_MS), -1.0)


# lifts a running node over every empty one of its tier (latency-fit's far term spans -1..1e5) and
# below every node of a better tier (LATENCY_FIT_TIER_GAP)
RUNNING_BONUS = 2e5
# A node this close to the limit of the pod's tier is taken only when no other node of the tier is free:
# the probe's latency is seconds old and latency drifts, so the farthest node inside a limit is often
# over it by the time the pod runs (docs/training.md, "A rule that packs inside the tier").
LATENCY_EDGE_MS = 1.0
# puts an edge node below every other node of its tier, running or not, and above every node of a
# worse tier
EDGE_OFFSET = 4e5


def latency_fit_running(nodes: NodeState, pod: PodRequest, rng: np.random.Generator) -> np.ndarray:
    """latency-fit with the running nodes of the pod's best tier first: the pod joins the farthest
    node that is already on before an empty one is switched on. It trades a few of the near nodes
    latency-fit keeps free (more hard limits broken later) for fewer nodes on. Nodes within
    LATENCY_EDGE_MS of the tier's limit come last in their tier, nearest first."""
    latency = nodes.latency_ms
    tiers = latency_tiers(nodes, pod)
    limit = np.where(tiers == LATENCY_TIER_SOFT, pod.soft_limit, pod.hard_limit)
    edge = (tiers > LATENCY_TIER_NONE) & (latency > limit - LATENCY_EDGE_MS)
    far = np.where(edge, -EDGE_OFFSET - np.minimum(latency, LATENCY_FIT_FAR_MS), _far_term(latency))
    return tiers * LATENCY_FIT_TIER_GAP + far + np.where(nodes.pods > 0, RUNNING_BONUS, 0.0)


def _measured_cpu(nodes: NodeState, recent_usage: float = 1.0) -> np.ndarray:
    """Measured cpu utilization plus the requests bound since it was measured (x `recent_usage`),
    which the metrics cannot show yet (Trimaran's "missing utilization"); the request share stands
    in where no utilization is known."""
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.nan_to_num(nodes.cpu_requested / nodes.cpu_capacity, nan=1.0)
        recent = np.nan_to_num(nodes.cpu_requested_since_metrics / nodes.cpu_capacity, nan=0.0)
    return np.where(np.isfinite(nodes.cpu_utilization), nodes.cpu_utilization + recent_usage * recent, share)


def least_utilized(nodes: NodeState, pod: PodRequest, rng: np.random.Generator) -> np.ndarray:
    """The lowest *measured* cpu utilization wins (Trimaran's idea: what runs, not what is asked),
    counting the pods bound since the last measurement at their request."""
    return -_measured_cpu(nodes)


TARGET_UTILIZATION = 40.0  # TargetLoadPacking's default target, percent
REQUESTS_MULTIPLIER = 1.5  # its prediction of a burstable pod's usage from its request
RISK_MARGIN = 1.0  # LoadVariationRiskBalancing's safeVarianceMargin
RISK_SENSITIVITY = 1.0  # its safeVarianceSensitivity


def target_load_packing(nodes: NodeState, pod: PodRequest, rng: np.random.Generator) -> np.ndarray:
    """Trimaran TargetLoadPacking: pack towards a target utilization, then spread beyond it.
    Predicted utilization = measured + (the pod's request + those bound since the measurement) x 1.5."""
    with np.errstate(divide="ignore", invalid="ignore"):
        predicted = 100.0 * (_measured_cpu(nodes, REQUESTS_MULTIPLIER)
                             + pod.cpu_millicores * REQUESTS_MULTIPLIER / nodes.cpu_capacity)
    target = TARGET_UTILIZATION
    below = np.round((100.0 - target) * predicted / target + target)
    above = np.round(target * (100.0 - predicted) / (100.0 - target))
    return np.where(predicted > 100.0, 0.0, np.where(predicted > target, above, below))


def load_variation_risk_balancing(nodes: NodeState, pod: PodRequest, rng: np.random.Generator) -> np.ndarray:
    """Trimaran LoadVariationRiskBalancing: risk = (mean + margin x stddev^(1/sensitivity)) / 2 of
    the utilization over time, with the pod's request added to the mean; score = 1 - worst risk of
    cpu and memory."""
    with np.errstate(divide="ignore", invalid="ignore"):
        cpu_mean = _measured_cpu(nodes) + pod.cpu_millicores / nodes.cpu_capacity
        mem_share = np.nan_to_num(nodes.memory_requested / nodes.memory_capacity, nan=1.0)
        mem_mean = np.where(np.isfinite(nodes.memory_utilization), nodes.memory_utilization, mem_share) \
            + pod.memory_bytes / nodes.memory_capacity
    std = np.nan_to_num(nodes.cpu_utilization_stddev, nan=0.0)
    cpu_risk = np.clip((cpu_mean + RISK_MARGIN * std ** (1.0 / RISK_SENSITIVITY)) / 2, 0.0, 1.0)
    mem_risk = np.clip(mem_mean / 2, 0.0, 1.0)
    return np.floor(MAX_NODE_SCORE * (1.0 - np.maximum(cpu_risk, mem_risk)))


def best_fit(nodes: NodeState, pod: PodRequest, rng: np.random.Generator) -> np.ndarray:
    """The node left with the least free capacity after placement (absolute, not as a share), so big
    free nodes stay whole for big pods."""
    cpu_scale = max(float(nodes.cpu_capacity.max()), 1.0)
    mem_scale = max(float(nodes.memory_capacity.max()), 1.0)
    free_cpu = (nodes.cpu_capacity - nodes.cpu_requested - pod.cpu_millicores) / cpu_scale
    free_mem = (nodes.memory_capacity - nodes.memory_requested - pod.memory_bytes) / mem_scale
    return -(free_cpu + free_mem)


def tetris(nodes: NodeState, pod: PodRequest, rng: np.random.Generator) -> np.ndarray:
    """Tetris alignment: the dot product of the pod's demand and the node's free capacity, both as
    shares of the node, so a cpu-heavy pod goes where cpu is free."""
    with np.errstate(divide="ignore", invalid="ignore"):
        free_cpu = 1.0 - nodes.cpu_requested / nodes.cpu_capacity
        free_mem = 1.0 - nodes.memory_requested / nodes.memory_capacity
        score = (pod.cpu_millicores / nodes.cpu_capacity * free_cpu
                 + pod.memory_bytes / nodes.memory_capacity * free_mem)
    return np.nan_to_num(score, nan=-1.0)


def efficiency_rank(nodes: NodeState, usage: float = 1.0) -> np.ndarray:
    """efficient-first's first key: minus the full-load watts per core, nodes of unknown power last;
    all 0 where no power model is known. With `usage` below 1, the watts per core of a node whose
    cores are busy that share of the time (agent.evaluate.usage_room weighs what that is worth)."""
    cores = np.where(nodes.cpu_capacity > 0, nodes.cpu_capacity, np.inf) / 1000.0
    watts = nodes.power_max_watts if usage >= 1.0 else (
        nodes.power_idle_watts + (nodes.power_max_watts - nodes.power_idle_watts) * usage)
    with np.errstate(divide="ignore", invalid="ignore"):  # a capacity below the smallest float's 1000x: unknown
        watts_per_core = watts / cores
    known = np.isfinite(watts_per_core)
    if not known.any():
        return np.zeros(len(nodes))
    return np.where(known, -np.round(watts_per_core, 3), -1e6)


def efficient_first(nodes: NodeState, pod: PodRequest, rng: np.random.Generator) -> np.ndarray:
    """The lowest full-load watts per core first, then MostAllocated; MostAllocated alone where no
    power model is known."""
    return efficiency_rank(nodes) * 1000.0 + most_allocated(nodes, pod, rng)


def _one_step(policy: str) -> Rule:
    def score(nodes: NodeState, pod: PodRequest, rng: np.random.Generator) -> np.ndarray:
        return -placement_costs(policy, nodes, pod)

    score.__doc__ = (f"{policy}'s objective charged for this placement alone (agent.sim.outcomes."
                     "placement_costs), lowest wins: the greedy rule one writes from the objective itself.")
    return score


# The objective's one-step greedy, per policy. For LB it is the node where the pod adds least to the
# imbalance of cpu requests (their coefficient of variation) without turning it hot: on the 8
# evaluation seeds, 15-36% below every other LB baseline on churn, one-pool, poisson, two-d and
# test1 at 3 and 10 nodes (LeastAllocated and the default profile weigh memory as much as cpu and
# truncate shares to integers, so their ties fall at random), behind LoadVariationRiskBalancing on
# usage-skew. For EE and EL it is best in a few cells only (EE test2 at 3 nodes; EL hardware,
# test2 at 3 and 10, latency-shift at 100).
one_step_ee, one_step_lb, one_step_el = (_one_step(p) for p in ("EE", "LB", "EL"))


# headroom-balance: a node has room for a pod when its measured cpu (the requests bound since the
# measurement counted at TargetLoadPacking's 1.5x) plus HEADROOM_BURST x the pod's request stays below
# HEADROOM_LIMIT. 3x is the most the scenario families' pods use of their request (usage-skew's hogs:
# 2.5-3.5x), a pod's usage is not known when it is placed, and 0.8 leaves a margin below the 0.85 hot
# threshold. On 16 usage-skew worlds of a training seed range (not the evaluation ones), 3x/0.8 was the
# best of 2.5x, 3x and 3.5x at 0.8 and of 0.7, 0.75 and 0.8 at 3x; on one-pool every one of them lost to
# one-step-lb by 19-22% (the sweep: `git show ef27e6c^:docs/experiments/headroom_balance.py`).
HEADROOM_BURST = 3.0
HEADROOM_LIMIT = 0.8
# lifts every node with room above every node without: a one-step cost lies within +-81 up to 5000 nodes
# (10 for a hot node plus a CV of at most sqrt(n - 1)), TargetLoadPacking within 0..100
HEADROOM_OFFSET = 1000.0


def headroom_balance(nodes: NodeState, pod: PodRequest, rng: np.random.Generator) -> np.ndarray:
    """LB's one-step rule among the nodes with room for the pod to burst on *measured* load, and
    TargetLoadPacking's order where none has room: requests stay balanced where usage allows it, and a
    pod that may turn out a hog never lands where it would make a node hot. LB's one-step rule alone
    reads only the request's share and left usage-skew's nodes hot; the load-aware rules alone leave
    the requests unbalanced."""
    return headroom_values(nodes, pod, rng, HEADROOM_BURST, HEADROOM_LIMIT)


USAGE_MARGIN = 1.5  # headroom-informed keeps room for 1.5 x what the pod's workload is known to use


def headroom_informed(nodes: NodeState, pod: PodRequest, rng: np.random.Generator) -> np.ndarray:
    """headroom-balance with room for what the pod's workload is known to use (`cpu_usage_ratio`, x
    USAGE_MARGIN) instead of a 3x burst: an idle batch pod may join a loaded node, a known hog gets
    the room it needs. Without a known ratio it is headroom-balance."""
    return headroom_values(nodes, pod, rng, informed_burst(pod), HEADROOM_LIMIT)


def informed_burst(pod: PodRequest) -> float:
    """The room headroom-informed keeps, in multiples of the pod's request."""
    return HEADROOM_BURST if pod.cpu_usage_ratio is None else USAGE_MARGIN * pod.cpu_usage_ratio


def headroom_values(nodes: NodeState, pod: PodRequest, rng: np.random.Generator, burst: float,
                    limit: float) -> np.ndarray:
    """headroom-balance with its burst factor and load limit as parameters (for sweeping them)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        load = _measured_cpu(nodes, REQUESTS_MULTIPLIER) + burst * pod.cpu_millicores / nodes.cpu_capacity
    return np.where(load < limit, HEADROOM_OFFSET + one_step_lb(nodes, pod, rng),
                    target_load_packing(nodes, pod, rng) - HEADROOM_OFFSET)


RULES: dict[str, Rule] = {
    "default-scheduler": default_scheduler,
    "least-allocated": least_allocated,
    "most-allocated": most_allocated,
    "random": random_scores,
    "latency-greedy": latency_greedy,
    "latency-pack": latency_pack,
    "balanced-allocation": balanced_allocation,
    "latency-fit": latency_fit,
    "latency-fit-running": latency_fit_running,
    "least-utilized": least_utilized,
    "target-load-packing": target_load_packing,
    "load-variation-risk-balancing": load_variation_risk_balancing,
    "best-fit": best_fit,
    "tetris": tetris,
    "efficient-first": efficient_first,
    "one-step-ee": one_step_ee,
    "one-step-lb": one_step_lb,
    "one-step-el": one_step_el,
    "headroom-balance": headroom_balance,
    "headroom-informed": headroom_informed,
}

# The fallback of the same intent for each policy.
FALLBACK_RULE = {"EE": "most-allocated", "LB": "least-allocated", "EL": "latency-pack"}


_NO_RNG = np.random.default_rng(0)  # the rules rule_values computes are deterministic


def rule_values(names: tuple[str, ...], nodes: NodeState, pod: PodRequest) -> dict[str, np.ndarray]:
    """The values of several deterministic rules on one decision, each equal to RULES[name]'s, with
    what they share (MostAllocated, the latency tiers, LB's one-step cost, TargetLoadPacking)
    computed once: the feature columns of RULE_FEATURES read all of them at every decision."""
    cache: dict[str, np.ndarray] = {}

    def value(name: str) -> np.ndarray:
        if name not in cache:
            if name == "efficient-first":
                cache[name] = efficiency_rank(nodes) * 1000.0 + value("most-allocated")
            elif name == "latency-pack":
                cache[name] = latency_tiers(nodes, pod) * 1000.0 + value("most-allocated")
            elif name in ("headroom-balance", "headroom-informed"):
                burst = informed_burst(pod) if name == "headroom-informed" else HEADROOM_BURST
                with np.errstate(divide="ignore", invalid="ignore"):
                    load = _measured_cpu(nodes, REQUESTS_MULTIPLIER) + burst * pod.cpu_millicores / nodes.cpu_capacity
                cache[name] = np.where(load < HEADROOM_LIMIT, HEADROOM_OFFSET + value("one-step-lb"),
                                       value("target-load-packing") - HEADROOM_OFFSET)
            else:
                cache[name] = np.asarray(RULES[name](nodes, pod, _NO_RNG), dtype=np.float64)
        return cache[name]

    return {name: value(name) for name in names}
