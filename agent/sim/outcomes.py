"""What placements lead to, counted over time: the ledger the simulator keeps, and each policy's
objective computed from it.

The ledger integrates rates (power, hot nodes, imbalance) between events and counts events
(placements, pods that found no node, latency violations). Rewards are differences of a policy's
objective between two decisions, and evaluation reports the objective of a whole run, so training
and evaluation measure the same thing.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from agent.state import NodeState, PodRequest

HOT_UTILIZATION = 0.85  # measured cpu above this counts as a hot node
# Objective weights. EE: a pod that finds no node costs one reference node at full power for a pod's
# mean lifetime (as if a machine had to be started for it). LB: hot-node share dominates imbalance.
# EL: a hard violation outweighs a soft one, both outweigh energy.
LB_HOT_WEIGHT = 10.0
# A node whose power curve is unknown counts as drawing this much per core (the "large" machine's).
UNKNOWN_IDLE_W_PER_CORE = 110.0 / 16
UNKNOWN_MAX_W_PER_CORE = 380.0 / 16
EL_HARD_WEIGHT = 10.0
EL_SOFT_WEIGHT = 3.0
EL_ENERGY_WEIGHT = 0.1


@dataclass
class Ledger:
    """Running totals of one simulation. Integrals are in seconds (x watts for energy)."""

    time_s: float = 0.0
    energy_j: float = 0.0
    present_node_s: float = 0.0
    active_node_s: float = 0.0
    hot_node_s: float = 0.0
    hot_share_s: float = 0.0  # integral of the share of present nodes that are hot
    request_cv_s: float = 0.0  # integral of the coefficient of variation of cpu request shares
    utilization_cv_s: float = 0.0  # the same for the (true) cpu utilization
    arrivals: int = 0
    placed: int = 0
    unschedulable: int = 0
    unschedulable_large: int = 0  # pods of kind "large" (fragmentation family)
    limited: int = 0  # placed pods with a latency limit
    hard_violations: int = 0
    soft_violations: int = 0
    avoidable_hard_violations: int = 0  # chosen over the seen hard limit while a feasible node was seen within it

    def copy(self) -> Ledger:
        return Ledger(**{f.name: getattr(self, f.name) for f in fields(self)})

    def minus(self, other: Ledger) -> Ledger:
        return Ledger(**{f.name: getattr(self, f.name) - getattr(other, f.name) for f in fields(self)})


@dataclass(frozen=True)
class Units:
    """A world's scales, so that one unit of reward means the same on 2 nodes and on 64."""

    reference_power_watts: float  # mean full-load power of a node
    interarrival_s: float  # mean seconds between arrivals
    pod_lifetime_s: float  # mean lifetime of a pod


def cost(policy: str, delta: Ledger, units: Units) -> float:
    """The policy's objective accumulated in `delta`, in units of "one reference node at full power
    for one mean interarrival time" (EE, EL) or "imbalance per interarrival time" (LB)."""
    if policy == "EE":
        return energy_cost(delta, units)
    if policy == "LB":
        return balance_cost(delta, units)
    return latency_cost(delta) + EL_ENERGY_WEIGHT * energy_cost(delta, units)


def energy_cost(delta: Ledger, units: Units) -> float:
    unit = units.reference_power_watts * units.interarrival_s
    pending = delta.unschedulable * units.pod_lifetime_s / units.interarrival_s
    return delta.energy_j / unit + pending


def balance_cost(delta: Ledger, units: Units) -> float:
    return (LB_HOT_WEIGHT * delta.hot_share_s + delta.request_cv_s) / units.interarrival_s


def latency_cost(delta: Ledger) -> float:
    return EL_HARD_WEIGHT * delta.hard_violations + EL_SOFT_WEIGHT * delta.soft_violations


def rate(policy: str, power_watts: float, hot_nodes: int, present_nodes: int, request_cv: float,
         units: Units) -> float:
    """Cost per interarrival time if the cluster stayed as it is: the potential used for shaping."""
    energy = power_watts / units.reference_power_watts
    if policy == "EE":
        return energy
    if policy == "LB":
        return LB_HOT_WEIGHT * hot_nodes / max(present_nodes, 1) + request_cv
    return EL_ENERGY_WEIGHT * energy


def cv(values: np.ndarray) -> float:
    """Coefficient of variation (population std / mean); 0 for an empty or all-zero set."""
    n = values.size
    if n == 0:
        return 0.0
    total = float(values.sum())
    if total <= 0:
        return 0.0
    mean = total / n
    variance = max(float(np.dot(values, values)) / n - mean * mean, 0.0)
    return variance**0.5 / mean


def placement_costs(policy: str, nodes: NodeState, pod: PodRequest) -> np.ndarray:
    """What the policy's objective charges at once for placing `pod` on each candidate: for EE the
    extra power (a node's idle draw when it was empty, plus its share of the dynamic range) in units
    of the candidates' mean full-load power; for LB whether the node turns hot (measured use plus
    the request) over the node count, plus the change in the request shares' CV; for EL the pod's
    latency violations, then EE's energy. The consequences that show later are not in it: it is
    the common yardstick the server judges two models' live choices by (lower is better), and the
    one-step rules' score."""
    capacity = np.maximum(nodes.cpu_capacity, 1e-9)
    cores = nodes.cpu_capacity / 1000.0
    idle = np.where(np.isfinite(nodes.power_idle_watts), nodes.power_idle_watts, UNKNOWN_IDLE_W_PER_CORE * cores)
    peak = np.where(np.isfinite(nodes.power_max_watts), nodes.power_max_watts, UNKNOWN_MAX_W_PER_CORE * cores)
    share = pod.cpu_millicores / capacity
    used = np.where(np.isfinite(nodes.cpu_utilization), nodes.cpu_utilization, nodes.cpu_requested / capacity)
    if policy == "LB":
        # the CV of the request shares after placing on each node, from their sum and sum of squares
        before = nodes.cpu_requested / capacity
        n = before.size
        total = before.sum() + share
        squares = float(np.dot(before, before)) + 2.0 * before * share + share * share
        mean = total / n
        spread = np.sqrt(np.maximum(squares / n - mean * mean, 0.0))
        after_cv = np.divide(spread, mean, out=np.zeros(n), where=mean > 0)  # 0 for all-zero shares, as cv()
        hot = (used + share > HOT_UTILIZATION).astype(np.float64)
        return LB_HOT_WEIGHT * hot / n + after_cv - cv(before)
    energy = (np.where(nodes.pods == 0, idle, 0.0)
              + (peak - idle) * np.maximum(0.0, np.minimum(share, 1.0 - used))) / max(float(peak.mean()), 1e-9)
    if policy == "EE":
        return energy
    violations = np.zeros(len(nodes))
    if pod.has_latency_limits:
        latency = nodes.latency_ms
        known = np.isfinite(latency)
        violations = np.where(known, EL_HARD_WEIGHT * (latency > pod.hard_limit)
                              + EL_SOFT_WEIGHT * (latency > pod.soft_limit), 0.0)
    return violations + EL_ENERGY_WEIGHT * energy
