"""Rewards, in three named variants. `outcome` (the default) measures each policy's objective over
time; `stepwise` and `thesis` (the original) score a placement by the heuristic they spell out, and are
kept to compare against.

outcome (default)
    The reward of decision k is minus the policy's cost accumulated from decision k to decision k+1,
    read from the simulator's ledger (agent.sim.outcomes.OutcomeReward, beside the objectives, so
    that evaluation reads the same reward without importing training), in units that do not depend
    on cluster size: one reference node at full power for one mean interarrival time.
    - EE: the power the cluster draws (per node: idle + (max - idle) x cpu utilization while it runs
      pods, 0 when empty, since an empty node can be scaled down), plus one reference node for a
      pod's mean lifetime for every pod that finds no node. Energy, not "active nodes": it sees
      which hardware is efficient, and it charges fragmentation through the pods it strands.
    - LB: 10 x the share of nodes above 85% *measured* cpu, plus the coefficient of variation of
      cpu requests over the nodes, both integrated over time. Hot nodes are what hurts; requests are
      what the scheduler can balance when nothing runs hot.
    - EL: 10 per hard-limit violation and 3 per soft-limit violation of every pod placed, at the
      moment it is placed (the real latency, not the last probe's), plus 0.1 x EE's energy. A
      violation a strict pod suffers because a loose pod took the last near node earlier is charged
      when it happens; the return carries it back to the decision that caused it.
    Why: a placement's cost arrives over the pod's lifetime and through the pods that come after it;
    a per-step heuristic reward can only teach the heuristic. The horizon comes from the discount
    (0.99 by default: ~100 decisions) and the trainers' n-step / GAE returns.
    Shaping (on by default): gamma Phi(s') - Phi(s) is added, which leaves the optimal policy
    unchanged for any Phi (Ng, Harada, Russell 1999) and decides how fast it is learned. For energy,
    Phi is minus the energy the cluster is already committed to: every node's idle draw until its
    last current pod leaves, every pod's dynamic draw until it leaves (departure times are known to
    the simulator only; the policy never sees them). A placement's shaped reward is then the energy
    it commits the cluster to: a pod on an inefficient node, or one that keeps a node on for an hour
    longer, pays for that now, not over the next thousand decisions. For hot nodes and imbalance Phi
    is minus the current rate / (1 - gamma), as if the cluster stayed as it is. Without shaping the
    policies learned MostAllocated and no more (measured with an earlier PPO trainer: `git show
    e8d7425^:docs/rewards.md`).

stepwise (a per-decision heuristic score)
    EE: -1 x switch-on cost (lower for bigger nodes) + 0.5 x allocated share after placement.
    LB: +1 for the least loaded candidate, graded down to -1 for the most loaded.
    EL: latency tier (1 / 0.5 / 0) with -1 when a better tier was free, + EE's terms x 0.3 / 0.15.
    These taught EE "MostAllocated, largest first", LB "LeastAllocated on requests", EL "best tier,
    then pack" -- and nothing else.

thesis (the original prototype's)
    EE: 10 x unused nodes / (nodes - 1), episode end when the most loaded node is not chosen.
    LB: +10 for the least loaded node, -1 and episode end for the most loaded, 0 otherwise.
    EL: (nodes - on) / nodes + pods per used node / 50 + 1 / 0.5 / 0 by latency tier, episode end
    on a hard violation. Load is the number of pods, as in the thesis.
"""

from __future__ import annotations

import numpy as np

from rlscore.core.state import LATENCY_TIER_HARD, LATENCY_TIER_SOFT, NodeState, PodRequest, latency_tiers

REWARD_VARIANTS = ("outcome", "stepwise", "thesis")
INVALID_ACTION_REWARD = -2.0

# --- stepwise --------------------------------------------------------------------------------------
EE_SWITCH_ON_PENALTY = 1.0
SWITCH_ON_SIZE_DISCOUNT = 0.5
EE_FILL_WEIGHT = 0.5
LATENCY_TIER_REWARD = {LATENCY_TIER_SOFT: 1.0, LATENCY_TIER_HARD: 0.5, 0: 0.0}
EL_WORSE_TIER_PENALTY = 1.0
EL_SWITCH_ON_PENALTY = 0.3
EL_FILL_WEIGHT = 0.15
LB_TIE_TOLERANCE = 1e-6  # loads closer than this count as equally low


def allocated_share_after(nodes: NodeState, pod: PodRequest) -> np.ndarray:
    """Mean of cpu and memory requested shares after placing the pod, capped at 1."""
    with np.errstate(divide="ignore", invalid="ignore"):
        cpu = (nodes.cpu_requested + pod.cpu_millicores) / nodes.cpu_capacity
        mem = (nodes.memory_requested + pod.memory_bytes) / nodes.memory_capacity
    return np.clip(np.nan_to_num((cpu + mem) / 2, nan=1.0), 0.0, 1.0)


def switch_on_cost(nodes: NodeState, action: int) -> float:
    """0 when the node already runs pods; else 1 - 0.5 x its cpu capacity relative to the largest."""
    if nodes.pods[action] > 0:
        return 0.0
    relative = nodes.cpu_capacity[action] / max(nodes.cpu_capacity.max(), 1e-9)
    return float(1.0 - SWITCH_ON_SIZE_DISCOUNT * relative)


def energy_reward(nodes: NodeState, pod: PodRequest, action: int) -> float:
    fill = allocated_share_after(nodes, pod)[action]
    return float(-EE_SWITCH_ON_PENALTY * switch_on_cost(nodes, action) + EE_FILL_WEIGHT * fill)


def load_balance_reward(nodes: NodeState, pod: PodRequest, action: int) -> float:
    load = allocated_share_after(nodes, pod)
    low, high = load.min(), load.max()
    if load[action] - low < LB_TIE_TOLERANCE:
        return 1.0
    return float(-(load[action] - low) / (high - low))


def energy_latency_reward(nodes: NodeState, pod: PodRequest, action: int) -> float:
    tiers = latency_tiers(nodes, pod)
    tier = int(tiers[action])
    reward = LATENCY_TIER_REWARD[tier]
    if tier < tiers.max():
        reward -= EL_WORSE_TIER_PENALTY
    reward += (-EL_SWITCH_ON_PENALTY * switch_on_cost(nodes, action)
               + EL_FILL_WEIGHT * allocated_share_after(nodes, pod)[action])
    return float(reward)


STEPWISE = {"EE": energy_reward, "LB": load_balance_reward, "EL": energy_latency_reward}


# --- thesis ---------------------------------------------------------------------------------------
def thesis_reward(policy: str, nodes: NodeState, pod: PodRequest, action: int) -> tuple[float, bool]:
    """(reward, episode ends) as the thesis computed them, on the candidate nodes' pod counts."""
    n = len(nodes)
    after = nodes.pods.copy()
    after[action] += 1
    if policy == "EE":
        unused = int(np.sum(after < 1))
        wrong = nodes.pods[action] < nodes.pods.max()
        return (0.0 if wrong else float(int(unused / max(n - 1, 1) * 10))), bool(wrong)
    if policy == "LB":
        load = nodes.pods
        if load[action] <= load.min():
            return 10.0, False
        if load[action] >= load.max():
            return -1.0, True
        return 0.0, False
    on = int(np.sum(after > 0))
    r1 = (n - on) / n
    r2 = (after.sum() / on) / 50.0 if on else 0.0
    tier = int(latency_tiers(nodes, pod)[action]) if pod.has_latency_limits else LATENCY_TIER_SOFT
    r3 = LATENCY_TIER_REWARD[tier]
    return float(r1 + r2 + r3), tier == 0


