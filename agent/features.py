"""Per-node features: the one function that both training and serving turn cluster state into.

Every feature is a ratio (shares of capacity, latency over the pod's limit, capacity relative to
the largest node in the set), so the same network serves a 2-node kind cluster and a 5000-node
fleet. Anything that changes the meaning or order of a column must bump FEATURE_SPEC_VERSION: the
model loader refuses models trained on another version.
"""

from __future__ import annotations

import numpy as np

from agent.state import NodeState, PodRequest

FEATURE_SPEC_VERSION = 1

NODE_FEATURES = (
    "cpu_share",  # requested / allocatable, before placing the pod
    "memory_share",
    "pods_share",  # bound pods / max pods
    "cpu_share_after",  # as above, after placing the pod here
    "memory_share_after",
    "pod_cpu_share",  # the pod's own request / allocatable
    "pod_memory_share",
    "cpu_utilization",  # measured; the request share stands in when unknown
    "memory_utilization",
    "active",  # 1 when the node already runs a pod
    "relative_cpu_capacity",  # allocatable / largest allocatable in the set
    "relative_memory_capacity",
    "latency_known",
    "latency_over_hard",  # latency / the pod's hard limit (latency / 100 ms without limits)
    "meets_soft",
    "meets_hard",
    "latency_gap_to_best",  # (latency - best latency in the set) / hard limit
)
POD_FEATURES = ("has_latency_limits",)

NUM_NODE_FEATURES = len(NODE_FEATURES)
NUM_POD_FEATURES = len(POD_FEATURES)
FEATURE_CLIP = 4.0  # every feature lies in [0, FEATURE_CLIP]
NO_LIMIT_LATENCY_SCALE_MS = 100.0

LATENCY_TIER_SOFT = 2
LATENCY_TIER_HARD = 1
LATENCY_TIER_NONE = 0


def latency_tiers(nodes: NodeState, pod: PodRequest) -> np.ndarray:
    """2 where the node meets the pod's soft limit, 1 where only the hard one, 0 otherwise.

    Unknown latency counts as meeting nothing; a pod without limits finds every known node in tier 2.
    """
    latency = nodes.latency_ms
    known = np.isfinite(latency)
    tiers = np.zeros(len(nodes), dtype=np.int8)
    tiers[known & (latency <= pod.hard_limit)] = LATENCY_TIER_HARD
    tiers[known & (latency <= pod.soft_limit)] = LATENCY_TIER_SOFT
    return tiers


def _share(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        share = numerator / denominator
    return np.where(denominator > 0, share, FEATURE_CLIP)


def node_features(nodes: NodeState, pod: PodRequest) -> tuple[np.ndarray, np.ndarray]:
    """Return (node matrix [N, NUM_NODE_FEATURES], pod vector [NUM_POD_FEATURES]), float32.

    `nodes` must be exactly the candidate set (the feasible nodes at serving time): set-level
    features are computed over it.
    """
    n = len(nodes)
    out = np.empty((n, NUM_NODE_FEATURES), dtype=np.float64)
    cpu_share = _share(nodes.cpu_requested, nodes.cpu_capacity)
    mem_share = _share(nodes.memory_requested, nodes.memory_capacity)
    pod_cpu = _share(np.full(n, pod.cpu_millicores), nodes.cpu_capacity)
    pod_mem = _share(np.full(n, pod.memory_bytes), nodes.memory_capacity)
    out[:, 0] = cpu_share
    out[:, 1] = mem_share
    out[:, 2] = _share(nodes.pods, nodes.max_pods)
    out[:, 3] = cpu_share + pod_cpu
    out[:, 4] = mem_share + pod_mem
    out[:, 5] = pod_cpu
    out[:, 6] = pod_mem
    out[:, 7] = np.where(np.isfinite(nodes.cpu_utilization), nodes.cpu_utilization, cpu_share)
    out[:, 8] = np.where(np.isfinite(nodes.memory_utilization), nodes.memory_utilization, mem_share)
    out[:, 9] = nodes.pods > 0
    if n:
        out[:, 10] = _share(nodes.cpu_capacity, np.full(n, max(nodes.cpu_capacity.max(), 0.0)))
        out[:, 11] = _share(nodes.memory_capacity, np.full(n, max(nodes.memory_capacity.max(), 0.0)))

    latency = nodes.latency_ms
    known = np.isfinite(latency)
    scale = pod.hard_limit if np.isfinite(pod.hard_limit) else NO_LIMIT_LATENCY_SCALE_MS
    tiers = latency_tiers(nodes, pod)
    out[:, 12] = known
    out[:, 13] = np.where(known, latency / scale, FEATURE_CLIP)
    out[:, 14] = (tiers >= LATENCY_TIER_SOFT) & pod.has_latency_limits
    out[:, 15] = (tiers >= LATENCY_TIER_HARD) & pod.has_latency_limits
    best = latency[known].min() if known.any() else 0.0
    out[:, 16] = np.where(known, (latency - best) / scale, FEATURE_CLIP)

    np.clip(np.nan_to_num(out, nan=FEATURE_CLIP, posinf=FEATURE_CLIP, neginf=0.0), 0.0,
            FEATURE_CLIP, out=out)
    pod_vec = np.array([float(pod.has_latency_limits)], dtype=np.float32)
    return out.astype(np.float32), pod_vec
