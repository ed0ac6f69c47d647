"""Each policy's objective as the scorer sees it at one decision: the weights of the objectives, what
counts as a hot node, and the one-step placement costs (the one-step rules' scores and the rollout's
yardstick). The simulator's ledger (agent.sim.outcomes) integrates the same objectives over time."""

from __future__ import annotations

import numpy as np

from rlscore.core.state import NodeState, PodRequest

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


def cv(values: np.ndarray) -> float:
    """Coefficient of variation (population std / mean); 0 for an empty or all-zero set."""
    n = values.size
    if n == 0:
        return 0.0
    total = float(values.sum())
    if total <= 0:
        return 0.0
    mean = total / n
    if mean == 0:  # shares so small that their mean underflows (NaN goes on, as in the Go port)
        return 0.0
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
