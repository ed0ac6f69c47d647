"""Per-node features: the one function that both training and serving turn cluster state into.

Every feature is a ratio (shares of capacity, latency over the pod's limit, capacity, power and
traffic relative to the candidate set), so the same network serves a 2-node kind cluster and a
5000-node fleet. Unknown values (no metrics, no power model, no latency) are a known state: the
value is neutral and a `*_known` column says so. Anything that changes the meaning or order of a
column must bump FEATURE_SPEC_VERSION: the model loader refuses models trained on another version.

Version 2 (wave 2) adds measured-utilization knowledge, free capacity after placement and Tetris
alignment (2-D packing and fragmentation), the latency rank (how rare a node's latency is), the
power model (idle power, efficiency at full load and per dynamic watt), and the thesis's further
node metrics (network receive rate, established TCP connections, disk usage).

Version 3 adds `recent_peak_to_come`: the part of the cluster's recent peak of cpu requests not
bound now, over each node's size. Which node to open decides EE's energy, and the right one
depends on the load still to come, which the nodes do not show; a cluster that carried more load
minutes ago shows it in its recent past.

Version 4 adds each node's standing under the hand-written rules (`RULE_FEATURES`): 1 minus the share
of the other candidates that the rule ranks strictly above it (1 for the rule's best nodes, ties
included). The network can then represent any rule exactly (its greedy choice is the argmax of one
column) and learn where to depart from it, instead of approximating the rule from raw state.
"""

from __future__ import annotations

import numpy as np

from rlscore.core.state import LATENCY_TIER_HARD, LATENCY_TIER_SOFT, NodeState, PodRequest, latency_tiers

FEATURE_SPEC_VERSION = 5

STATE_FEATURES = (
    "cpu_share",  # requested / allocatable, before placing the pod
    "memory_share",
    "pods_share",  # bound pods / max pods
    "cpu_share_after",  # as above, after placing the pod here
    "memory_share_after",
    "pod_cpu_share",  # the pod's own request / allocatable
    "pod_memory_share",
    "cpu_utilization",  # measured; the request share stands in when unknown
    "memory_utilization",
    "utilization_known",
    "recent_cpu_share",  # requests bound since the utilization was measured / allocatable
    "active",  # 1 when the node already runs a pod
    "relative_cpu_capacity",  # allocatable / largest allocatable in the set
    "relative_memory_capacity",
    "free_cpu_after",  # allocatable left after placing the pod / largest allocatable in the set
    "free_memory_after",
    "alignment",  # Tetris: pod demand . free capacity, both as shares of the node
    "latency_known",
    "latency_over_hard",  # latency / the pod's hard limit (latency / 100 ms without limits)
    "meets_soft",
    "meets_hard",
    "latency_gap_to_best",  # (latency - best latency in the set) / hard limit
    "latency_rank",  # share of candidates with a lower latency (0 = the nearest)
    "power_known",
    "idle_power_relative",  # idle watts / largest idle watts in the set
    "efficiency",  # lowest full-load watts per core in the set / this node's
    "dynamic_efficiency",  # the same for (max - idle) watts per core
    "network_receive_relative",  # / largest in the set
    "tcp_established_relative",
    "disk_utilization",
    "extra_metrics_known",
    # max(the cluster's recent peak of cpu requests - its requests now, the pod's) / allocatable
    "recent_peak_to_come",
)
# The rules whose standing is a column: every objective's rules that lead some situation (the
# families' and the mixed worlds' best, measured on training seeds), and kube-scheduler's own two.
RULE_FEATURES = (
    "most-allocated", "least-allocated", "best-fit", "efficient-first", "one-step-ee",
    "one-step-lb", "least-utilized", "headroom-balance", "target-load-packing", "load-variation-risk-balancing",
    "latency-fit", "latency-pack", "one-step-el", "headroom-informed",
)
NODE_FEATURES = STATE_FEATURES + tuple(f"rule:{name}" for name in RULE_FEATURES)
NUM_STATE_FEATURES = len(STATE_FEATURES)
# node columns per feature spec version: a model of an earlier version is read with zero weight on
# the columns added since (rlscore.core.model.upgrade_weights), so it decides as it did
NODE_FEATURES_OF_VERSION = {2: 31, 3: 32, 4: 45, 5: len(NODE_FEATURES)}
POD_FEATURES = (
    "has_latency_limits",
    "share_meeting_hard",  # share of candidates within the pod's hard limit (1 without limits)
    "share_meeting_soft",
)

NUM_NODE_FEATURES = len(NODE_FEATURES)
NUM_POD_FEATURES = len(POD_FEATURES)
FEATURE_CLIP = 4.0  # every feature lies in [0, FEATURE_CLIP]
RECENT_PEAK_WINDOW_S = 600.0  # how far back NodeState.recent_peak_cpu_requested looks
NO_LIMIT_LATENCY_SCALE_MS = 100.0

# Named groups of inputs a policy can be trained blind to (`rlscore-train --blind-to`): an input
# neither its objective nor any of its teachers reads only lets the network tell apart states its
# teachers treat alike (the LB clone told identical nodes apart by latency and by which nodes'
# power is known, and spread worse than the rule it copies).
INPUT_GROUPS = {
    "latency": ("latency_known", "latency_over_hard", "meets_soft", "meets_hard", "latency_gap_to_best",
                "latency_rank", "has_latency_limits", "share_meeting_hard", "share_meeting_soft"),
    "power": ("power_known", "idle_power_relative", "efficiency", "dynamic_efficiency"),
    "extra-metrics": ("network_receive_relative", "tcp_established_relative", "disk_utilization",
                      "extra_metrics_known"),
    "history": ("recent_peak_to_come",),
    "rules": tuple(f"rule:{name}" for name in RULE_FEATURES),
}


def input_columns(names: tuple[str, ...] | list[str]) -> list[int]:
    """Columns of the network's input (node features, then pod features) for feature or group names."""
    inputs = NODE_FEATURES + POD_FEATURES
    columns: set[int] = set()
    for name in names:
        members = INPUT_GROUPS.get(name, (name,))
        unknown = [m for m in members if m not in inputs]
        if unknown:
            raise ValueError(f"unknown input {name!r}: expected a group ({', '.join(INPUT_GROUPS)}) "
                             "or a feature name of rlscore.core.features")
        columns.update(inputs.index(m) for m in members)
    return sorted(columns)


# What a node scorer ranks (its model file's `candidates`): every candidate; "best-latency-tier", only those in
# the best latency tier the pod can get (within its soft limit, else within its hard limit; every candidate
# for a pod without limits); "running-first", only the nodes already running a pod when one of them is a
# candidate (every candidate otherwise); "best-latency-tier-running-first", the running nodes of that tier
# while one of them is a candidate. EL's networks rank inside the tier: a node outside it breaks a limit
# that a node inside keeps, a mistake none of EL's rules makes and one that TD's noisy returns otherwise
# teach (docs/training.md). "running-first" takes away the departure TD's returns teach EE's networks most,
# switching a node on where a running one has room; EE's rules lose nothing by it.
CANDIDATE_SETS = ("all", "best-latency-tier", "running-first", "best-latency-tier-running-first")
_MEETS_SOFT, _MEETS_HARD = STATE_FEATURES.index("meets_soft"), STATE_FEATURES.index("meets_hard")
_ACTIVE = STATE_FEATURES.index("active")


def latency_tier_of(features: np.ndarray) -> np.ndarray:
    """Each node's latency tier read back from its features ([..., nodes, F] -> [..., nodes]): 2 within the
    pod's soft limit, 1 within its hard limit, 0 otherwise, and 0 everywhere for a pod without limits."""
    return features[..., _MEETS_SOFT] + features[..., _MEETS_HARD]


def candidate_level(features: np.ndarray, candidates: str) -> np.ndarray:
    """[..., nodes, F] -> [..., nodes]: each node's level in a candidate set; the network ranks the nodes at
    the highest level among the candidates, and every other node below them, the higher level first."""
    if candidates == "best-latency-tier":
        return latency_tier_of(features)
    if candidates == "running-first":
        return features[..., _ACTIVE]
    if candidates == "best-latency-tier-running-first":  # the tier first, then running
        return 2.0 * latency_tier_of(features) + features[..., _ACTIVE]
    return np.zeros(features.shape[:-1])


def ranked_candidates(features: np.ndarray, candidates: str) -> np.ndarray:
    """[nodes, F] -> [nodes] bool: the candidates the network ranks (at the highest level among them)."""
    level = candidate_level(features, candidates)
    return level >= level.max() if len(level) else np.zeros(0, dtype=bool)


def rank_outside_set_below(values: np.ndarray, features: np.ndarray, candidates: str) -> np.ndarray:
    """A scorer's values with every node its candidate set leaves out ranked below the ranked ones."""
    if candidates in ("", "all"):
        return values
    level = candidate_level(features, candidates)
    return rank_outside_below(values, level >= level.max(), level) if len(level) else values


def rank_outside_below(values: np.ndarray, inside: np.ndarray, tier: np.ndarray) -> np.ndarray:
    """Values that rank every node outside `inside` below every node inside it, the higher level (`tier`)
    first, and keep the values inside as they are: the gap per level is the spread inside (1 where it is 0), so a
    score plugin sharing the scheduler's sum keeps the inside nodes apart. Whatever the values outside
    were (-inf, NaN, finite) does not matter."""
    values, tier = np.asarray(values, dtype=np.float64), np.asarray(tier, dtype=np.float64)
    if inside.all() or not inside.any():
        return values
    kept = values[inside]
    low = float(kept.min())
    gap = float(kept.max()) - low
    gap = gap if gap > 0 else 1.0
    best = float(tier[inside].max())
    return np.where(inside, values, low - gap * (best - tier))


def _share(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """numerator / denominator, FEATURE_CLIP where the denominator is not positive (call inside
    np.errstate(all="ignore"))."""
    return np.where(denominator > 0, numerator / denominator, FEATURE_CLIP)


def _relative_to_max(values: np.ndarray, known: np.ndarray) -> np.ndarray:
    """values / the largest known value (0 where unknown or when all are 0)."""
    top = values[known].max() if known.any() else 0.0
    return np.where(known, values / top, 0.0) if top > 0 else np.zeros(len(values))


def _min_over(values: np.ndarray, known: np.ndarray) -> np.ndarray:
    """lowest known value / values (1 for the lowest, 0 where unknown)."""
    ok = known & (values > 0)
    if not ok.any():
        return np.zeros(len(values))
    return np.where(ok, values[ok].min() / values, 0.0)


def node_features(nodes: NodeState, pod: PodRequest) -> tuple[np.ndarray, np.ndarray]:
    """Return (node matrix [N, NUM_NODE_FEATURES], pod vector [NUM_POD_FEATURES]), float32.

    `nodes` must be exactly the candidate set (the feasible nodes at serving time): set-level
    features are computed over it. Training and serving use the compiled loop
    (rlscore/core/kernels.py), equal bit for bit to `reference_node_features`.
    """
    from rlscore.core.kernels import COMPILED, compiled_node_features  # it reads this module's constants

    if not COMPILED:
        return reference_node_features(nodes, pod)
    features, pod_vec = compiled_node_features(nodes, pod)
    features[:, NUM_STATE_FEATURES:] = rule_standings(nodes, pod)
    return features, pod_vec


def reference_node_features(nodes: NodeState, pod: PodRequest) -> tuple[np.ndarray, np.ndarray]:
    """The features as numpy expressions: the specification the compiled loop and the plugin's Go
    port are tested against."""
    with np.errstate(all="ignore"):
        state, pod_vec = _node_features(nodes, pod)
    return np.concatenate([state, rule_standings(nodes, pod).astype(np.float32)], axis=1), pod_vec


def standing(values: np.ndarray) -> np.ndarray:
    """1 - the share of the other candidates whose value is higher by more than TIE (NaN counts as
    the lowest): 1 for the best and those tied with it, 0 for the worst of distinct values."""
    from rlscore.core.kernels import TIE

    v = np.where(np.isnan(values), -np.inf, np.asarray(values, dtype=np.float64))
    n = v.size
    if n == 0:
        return np.zeros(0)
    higher = n - np.searchsorted(np.sort(v), v + TIE, side="right")
    return 1.0 - higher / max(n - 1, 1)


def rule_standings(nodes: NodeState, pod: PodRequest) -> np.ndarray:
    """[N, len(RULE_FEATURES)] float32: each node's standing under each rule of RULE_FEATURES."""
    from rlscore.core.rules import rule_values

    out = np.empty((len(nodes), len(RULE_FEATURES)), dtype=np.float32)
    if len(nodes) == 0:
        return out
    with np.errstate(all="ignore"):  # the rules' own NaN and infinities become the lowest standing
        values = rule_values(RULE_FEATURES, nodes, pod)
    for k, name in enumerate(RULE_FEATURES):
        out[:, k] = standing(values[name])
    return out


def _to_come(nodes: NodeState, pod: PodRequest) -> float:
    """The recent peak's part not bound now (the candidates' requests, summed in order, when the
    cluster's are unknown), and at least the pod: without a peak, the pod alone."""
    now = nodes.cluster_cpu_requested
    if not np.isfinite(now):
        now = np.cumsum(nodes.cpu_requested)[-1] if len(nodes) else 0.0
    peak, load = nodes.recent_peak_cpu_requested, pod.cpu_millicores
    if np.isfinite(peak) and peak - now > load:
        load = peak - now
    return load


def _node_features(nodes: NodeState, pod: PodRequest) -> tuple[np.ndarray, np.ndarray]:
    n = len(nodes)
    out = np.empty((NUM_STATE_FEATURES, n), dtype=np.float64)
    cpu_cap, mem_cap = nodes.cpu_capacity, nodes.memory_capacity
    cpu_share = _share(nodes.cpu_requested, cpu_cap)
    mem_share = _share(nodes.memory_requested, mem_cap)
    pod_cpu = _share(pod.cpu_millicores, cpu_cap)
    pod_mem = _share(pod.memory_bytes, mem_cap)
    out[0] = cpu_share
    out[1] = mem_share
    out[2] = _share(nodes.pods, nodes.max_pods)
    out[3] = cpu_share + pod_cpu
    out[4] = mem_share + pod_mem
    out[5] = pod_cpu
    out[6] = pod_mem
    cpu_util, mem_util = nodes.cpu_utilization, nodes.memory_utilization
    util_known = np.isfinite(cpu_util)
    out[7] = np.where(util_known, cpu_util, cpu_share)
    out[8] = np.where(np.isfinite(mem_util), mem_util, mem_share)
    out[9] = util_known
    out[10] = np.where(util_known, np.nan_to_num(_share(nodes.cpu_requested_since_metrics, cpu_cap), nan=0.0), 0.0)
    out[11] = nodes.pods > 0
    if n:
        top_cpu, top_mem = cpu_cap.max(), mem_cap.max()
        top_cpu, top_mem = (top_cpu if top_cpu > 0 else np.inf), (top_mem if top_mem > 0 else np.inf)
        out[12] = cpu_cap / top_cpu
        out[13] = mem_cap / top_mem
        out[14] = (cpu_cap - nodes.cpu_requested - pod.cpu_millicores) / top_cpu
        out[15] = (mem_cap - nodes.memory_requested - pod.memory_bytes) / top_mem
    else:
        out[12:16] = 0.0
    out[16] = pod_cpu * (1.0 - cpu_share) + pod_mem * (1.0 - mem_share)

    latency = nodes.latency_ms
    known = np.isfinite(latency)
    scale = pod.hard_limit if np.isfinite(pod.hard_limit) else NO_LIMIT_LATENCY_SCALE_MS
    tiers = latency_tiers(nodes, pod)
    limited = pod.has_latency_limits
    out[17] = known
    out[18] = np.where(known, latency / scale, FEATURE_CLIP)
    out[_MEETS_SOFT] = (tiers >= LATENCY_TIER_SOFT) & limited
    out[_MEETS_HARD] = (tiers >= LATENCY_TIER_HARD) & limited
    best = latency[known].min() if known.any() else 0.0
    out[21] = np.where(known, (latency - best) / scale, FEATURE_CLIP)
    if n and known.any():
        ordered = np.sort(latency[known])
        below = np.searchsorted(ordered, np.where(known, latency, np.inf), side="left")
        out[22] = np.where(known, below / n, 1.0)
    else:
        out[22] = 1.0

    idle, peak = nodes.power_idle_watts, nodes.power_max_watts
    power_known = np.isfinite(idle) & np.isfinite(peak) & (peak >= idle) & (cpu_cap > 0)
    cores = np.where(cpu_cap > 0, cpu_cap, 1.0) / 1000.0
    out[23] = power_known
    out[24] = _relative_to_max(np.where(power_known, idle, 0.0), power_known)
    out[25] = _min_over(np.where(power_known, peak / cores, 0.0), power_known)
    out[26] = _min_over(np.where(power_known, (peak - idle) / cores, 0.0), power_known)

    net, tcp, disk = nodes.network_receive_bytes_per_s, nodes.tcp_established, nodes.disk_utilization
    out[27] = _relative_to_max(np.where(np.isfinite(net), net, 0.0), np.isfinite(net))
    out[28] = _relative_to_max(np.where(np.isfinite(tcp), tcp, 0.0), np.isfinite(tcp))
    out[29] = np.where(np.isfinite(disk), disk, 0.0)
    out[30] = np.isfinite(net) & np.isfinite(tcp) & np.isfinite(disk)
    out[31] = _share(_to_come(nodes, pod), cpu_cap)

    out[np.isnan(out)] = FEATURE_CLIP
    features = np.clip(out.T, 0.0, FEATURE_CLIP)  # +inf -> FEATURE_CLIP, -inf -> 0
    if limited and n:
        pod_vec = np.array([1.0, (tiers >= LATENCY_TIER_HARD).mean(), (tiers >= LATENCY_TIER_SOFT).mean()],
                           dtype=np.float32)
    else:
        pod_vec = np.array([0.0, 1.0, 1.0], dtype=np.float32)
    return features.astype(np.float32), pod_vec
