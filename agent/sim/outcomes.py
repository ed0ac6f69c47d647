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

from rlscore.core.objectives import EL_ENERGY_WEIGHT, EL_HARD_WEIGHT, EL_SOFT_WEIGHT, LB_HOT_WEIGHT


def avoidable_violation(seen_ms: np.ndarray, chosen: int, hard_limit: float) -> bool:
    """Whether candidate `chosen` is over the hard limit on the latency the scorer sees (`seen_ms`,
    one per candidate) while another candidate is seen within it: a violation the scorer could have
    kept, where one on a limit crossed since the last probe is not its mistake."""
    return bool(seen_ms[chosen] > hard_limit and np.any(seen_ms <= hard_limit))


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
    # hard violations no scorer could have kept: no node of the cluster is seen within the limit
    unreachable_hard_violations: int = 0
    # ... or nodes are seen within it, but none of them has room for the pod
    crowded_hard_violations: int = 0

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


@dataclass
class OutcomeReward:
    """The reward training gives a decision: minus the policy's cost until the next decision, with
    optional potential-based shaping r + gamma Phi(s') - Phi(s) (Phi from Simulation.potential). It
    lives beside `cost` so that evaluation can read the reward of a decision without importing
    training."""

    policy: str
    gamma: float = 0.99
    shaping: bool = True
    # the factor on Phi(s') (None: gamma, which leaves the optimal discounted policy unchanged). With 1 and
    # energy's Phi, a decision's reward is minus exactly the energy it adds to the cluster's commitment: the
    # undiscounted total the evaluation measures, without the (1 - gamma) x committed-energy term that
    # gamma adds to every step whatever the placement
    shaping_gamma: float | None = None

    def __call__(self, delta: Ledger, units: Units, potential_before: float, potential_after: float) -> float:
        r = -cost(self.policy, delta, units)
        if self.shaping:
            factor = self.gamma if self.shaping_gamma is None else self.shaping_gamma
            r += factor * potential_after - potential_before
        return float(r)
