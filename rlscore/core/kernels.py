"""Compiled loops (numba) for what every scheduling decision runs: the features, the network's
equivariant layers and the integer scores; and their vectorized numpy forms, used where numba is not
installed (the serving install, `rlscore[serve]`, leaves numba and its 170 MB LLVM out: there the
rule standings, numpy either way, cost as much as the features' loops save).

Features: the numpy reference makes ~100 array calls per decision; at 100 nodes their per-call overhead was
0.3-0.5 ms, more than the network's forward pass and more than a scheduler can spend per pod. This
loop computes the same float64 values in the same order of operations, so the features are equal
bit for bit (tests/test_features.py checks it on random states with NaN, inf, zero and negative
values). Anything changed here must change in `reference_node_features` too, and in the plugin's
Go port (plugin-go/pkg/rlscore/features.go).

Forward pass: per layer, numpy's ReLU, max and mean over the nodes and the small pooled products
were ~10 array calls; `equivariant_layer` does them in two compiled passes around the one large
product (numpy's BLAS). Its sums run in another order than numpy's, so the
Q-values match the torch reference to ~1e-14 rather than bit for bit (tests/server/test_exactness.py).
"""

from __future__ import annotations

import numpy as np

try:
    import numba
except ImportError:  # rlscore[serve]: the numpy forms below
    numba = None

from rlscore.core.features import FEATURE_CLIP, NO_LIMIT_LATENCY_SCALE_MS, NUM_NODE_FEATURES, NUM_POD_FEATURES, \
    NUM_STATE_FEATURES
from rlscore.core.state import NodeState, PodRequest

CLIP = FEATURE_CLIP


COMPILED = numba is not None


def compiled(function):
    """Compiled on first use and cached on disk where numba finds a writable place (next to this
    file, NUMBA_CACHE_DIR or the user's cache); a read-only image compiles once per process.
    Division by zero gives inf/NaN as in numpy (numba's default raises, as Python does). Without
    numba the function is left as it is: callers use the numpy form instead (COMPILED)."""
    if numba is None:
        return function
    options = {"nogil": True, "error_model": "numpy"}
    try:
        return numba.njit(cache=True, **options)(function)
    except RuntimeError:  # numba: "cannot cache function ...: no locator available"
        return numba.njit(**options)(function)


@compiled
def _share(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator > 0 else CLIP


@compiled
def _power_per_core(idle, peak, cpu_cap):  # pragma: no cover (compiled)
    """(the power model is known, full-load watts per core, dynamic watts per core)."""
    if not (np.isfinite(idle) and np.isfinite(peak) and peak >= idle and cpu_cap > 0):
        return False, 0.0, 0.0
    cores = cpu_cap / 1000.0
    return True, peak / cores, (peak - idle) / cores


@compiled
def _fill(cpu_cap, mem_cap, max_pods, cpu_req, mem_req, pods, cpu_util, mem_util, since, latency, idle, peak, net, tcp,
          disk, pod_cpu, pod_mem, soft, hard, limited, cluster_now, recent_peak, out, pod_vec):  # pragma: no cover
    n = cpu_cap.shape[0]
    inf = np.inf
    if not np.isfinite(cluster_now):
        cluster_now = 0.0
        for i in range(n):
            cluster_now += cpu_req[i]
    to_come = pod_cpu
    if np.isfinite(recent_peak) and recent_peak - cluster_now > to_come:
        to_come = recent_peak - cluster_now
    # set-level values first: largest sizes (NaN anywhere: as numpy's max, no largest), nearest
    # latency, the known latencies in order, the power model's and the extra metrics' extremes
    top_cpu, top_mem, cpu_nan, mem_nan = -inf, -inf, False, False
    best, known_latencies = inf, 0
    top_idle, low_full, low_dynamic, top_net, top_tcp = -inf, inf, inf, -inf, -inf
    for i in range(n):
        if np.isnan(cpu_cap[i]):
            cpu_nan = True
        elif cpu_cap[i] > top_cpu:
            top_cpu = cpu_cap[i]
        if np.isnan(mem_cap[i]):
            mem_nan = True
        elif mem_cap[i] > top_mem:
            top_mem = mem_cap[i]
        if np.isfinite(latency[i]):
            known_latencies += 1
            best = min(best, latency[i])
        power_known, full, dynamic = _power_per_core(idle[i], peak[i], cpu_cap[i])
        if power_known:
            top_idle = max(top_idle, idle[i])
            if full > 0:
                low_full = min(low_full, full)
            if dynamic > 0:
                low_dynamic = min(low_dynamic, dynamic)
        if np.isfinite(net[i]):
            top_net = max(top_net, net[i])
        if np.isfinite(tcp[i]):
            top_tcp = max(top_tcp, tcp[i])
    top_cpu = top_cpu if (top_cpu > 0 and not cpu_nan) else inf
    top_mem = top_mem if (top_mem > 0 and not mem_nan) else inf
    ordered = np.empty(known_latencies)
    k = 0
    for i in range(n):
        if np.isfinite(latency[i]):
            ordered[k] = latency[i]
            k += 1
    ordered.sort()
    scale = hard if np.isfinite(hard) else NO_LIMIT_LATENCY_SCALE_MS

    meeting_hard, meeting_soft = 0, 0
    row = np.empty(NUM_STATE_FEATURES)
    for i in range(n):
        cpu_share, mem_share = _share(cpu_req[i], cpu_cap[i]), _share(mem_req[i], mem_cap[i])
        pod_cpu_share, pod_mem_share = _share(pod_cpu, cpu_cap[i]), _share(pod_mem, mem_cap[i])
        util_known = np.isfinite(cpu_util[i])
        row[0], row[1], row[2] = cpu_share, mem_share, _share(pods[i], max_pods[i])
        row[3], row[4] = cpu_share + pod_cpu_share, mem_share + pod_mem_share
        row[5], row[6] = pod_cpu_share, pod_mem_share
        row[7] = cpu_util[i] if util_known else cpu_share
        row[8] = mem_util[i] if np.isfinite(mem_util[i]) else mem_share
        row[9] = 1.0 if util_known else 0.0
        recent = _share(since[i], cpu_cap[i])
        row[10] = (0.0 if np.isnan(recent) else recent) if util_known else 0.0
        row[11] = 1.0 if pods[i] > 0 else 0.0
        row[12], row[13] = cpu_cap[i] / top_cpu, mem_cap[i] / top_mem
        row[14] = (cpu_cap[i] - cpu_req[i] - pod_cpu) / top_cpu
        row[15] = (mem_cap[i] - mem_req[i] - pod_mem) / top_mem
        row[16] = pod_cpu_share * (1.0 - cpu_share) + pod_mem_share * (1.0 - mem_share)

        lat = latency[i]
        known = np.isfinite(lat)
        meets_hard, meets_soft = known and lat <= hard, known and lat <= soft
        meeting_hard += meets_hard
        meeting_soft += meets_soft
        row[17] = 1.0 if known else 0.0
        row[18] = lat / scale if known else CLIP
        row[19] = 1.0 if (meets_soft and limited) else 0.0
        row[20] = 1.0 if (meets_hard and limited) else 0.0
        row[21] = (lat - best) / scale if known else CLIP
        row[22] = np.searchsorted(ordered, lat) / n if known else 1.0

        power_known, full, dynamic = _power_per_core(idle[i], peak[i], cpu_cap[i])
        if power_known:
            row[23] = 1.0
            row[24] = idle[i] / top_idle if top_idle > 0 else 0.0
            row[25] = low_full / full if full > 0 else 0.0
            row[26] = low_dynamic / dynamic if dynamic > 0 else 0.0
        else:
            row[23] = row[24] = row[25] = row[26] = 0.0
        net_known, tcp_known, disk_known = np.isfinite(net[i]), np.isfinite(tcp[i]), np.isfinite(disk[i])
        row[27] = net[i] / top_net if (net_known and top_net > 0) else 0.0
        row[28] = tcp[i] / top_tcp if (tcp_known and top_tcp > 0) else 0.0
        row[29] = disk[i] if disk_known else 0.0
        row[30] = 1.0 if (net_known and tcp_known and disk_known) else 0.0
        row[31] = _share(to_come, cpu_cap[i])
        for j in range(NUM_STATE_FEATURES):  # NaN -> the clip value, then into [0, clip], then float32
            value = row[j]
            out[i, j] = CLIP if np.isnan(value) else min(max(value, 0.0), CLIP)
    if limited and n:
        pod_vec[0], pod_vec[1], pod_vec[2] = 1.0, meeting_hard / n, meeting_soft / n
    else:
        pod_vec[0], pod_vec[1], pod_vec[2] = 0.0, 1.0, 1.0


def compiled_node_features(nodes: NodeState, pod: PodRequest) -> tuple[np.ndarray, np.ndarray]:
    features = np.empty((len(nodes), NUM_NODE_FEATURES), dtype=np.float32)
    pod_vec = np.empty(NUM_POD_FEATURES, dtype=np.float32)
    # one compiled specialization: contiguous float64 (a no-op for the arrays NodeState holds)
    columns = [_as_float64(getattr(nodes, name)) for name in _INPUTS]
    _fill(*columns, float(pod.cpu_millicores), float(pod.memory_bytes), float(pod.soft_limit), float(pod.hard_limit),
          pod.has_latency_limits, float(nodes.cluster_cpu_requested), float(nodes.recent_peak_cpu_requested),
          features, pod_vec)
    return features, pod_vec


_INPUTS = ("cpu_capacity", "memory_capacity", "max_pods", "cpu_requested", "memory_requested", "pods",
           "cpu_utilization", "memory_utilization", "cpu_requested_since_metrics", "latency_ms", "power_idle_watts",
           "power_max_watts", "network_receive_bytes_per_s", "tcp_established", "disk_utilization")


def _as_float64(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values, dtype=np.float64)


@compiled
def relu_column_max_mean(x, relu):  # pragma: no cover (compiled)
    """Per column of x [N, M] (N >= 1): (max, mean), after an in-place ReLU when `relu`. NaN
    propagates into the max as numpy's does; ReLU keeps NaN and -0.0 as np.maximum(x, 0) does."""
    n, m = x.shape
    top = np.full(m, -np.inf)
    total = np.zeros(m)
    for i in range(n):
        for j in range(m):
            value = x[i, j]
            if relu and value < 0.0:
                value = 0.0
                x[i, j] = value
            if not np.isnan(top[j]) and not value <= top[j]:
                top[j] = value
            total[j] += value
    return top, total / n


@compiled
def _pooled(top, mean, extra, lam, bias, gam, delta):  # pragma: no cover (compiled)
    """The part of a layer's output that every row shares: bias - max(u) @ gam - mean(u) @ delta, with
    the extra inputs (the same for every row) also through lam."""
    m = top.shape[0]
    out_width = lam.shape[1]
    pooled = bias.copy()
    for i in range(m):
        for j in range(out_width):
            pooled[j] -= top[i] * gam[i, j] + mean[i] * delta[i, j]
    for e in range(extra.shape[0]):
        for j in range(out_width):
            pooled[j] += extra[e] * lam[m + e, j] - extra[e] * gam[m + e, j] - extra[e] * delta[m + e, j]
    return pooled


def _relu_column_max_mean_numpy(x, relu):
    """relu_column_max_mean in numpy (the mean sums in another order: equal to ~1e-15)."""
    if relu:
        np.maximum(x, 0.0, out=x)
    return x.max(axis=0), x.mean(axis=0)


def _pooled_numpy(top, mean, extra, lam, bias, gam, delta):
    m = top.shape[0]
    pooled = bias - top @ gam[:m] - mean @ delta[:m]
    if extra.shape[0]:
        pooled = pooled + extra @ (lam[m:] - gam[m:] - delta[m:])
    return pooled


if not COMPILED:
    relu_column_max_mean, _pooled = _relu_column_max_mean_numpy, _pooled_numpy


def equivariant_layer(x, extra, lam, bias, gam, delta, relu_input):
    """One DeepSets layer of the served forward pass, with its input u = [x, extra] per row (extra:
    the pod's features, the same for every node; may be empty): u @ lam + bias - max(u) @ gam -
    mean(u) @ delta, pooled over the rows; x goes through a ReLU first when `relu_input`.
    x [N >= 1, M] float64 (changed in place by the ReLU) -> [N, lam.shape[1]]. The one large product
    runs in numpy's BLAS (numba's np.dot would need SciPy, which serving does not install)."""
    top, mean = relu_column_max_mean(x, relu_input)
    y = x @ lam[: x.shape[1]]
    y += _pooled(top, mean, extra, lam, bias, gam, delta)
    return y


TIE = 1e-9  # values this close to the best are a tie (rlscore.core.scoring.choose; the plugin's scoreTie)


@compiled
def node_scores(values, top_score):  # pragma: no cover (compiled)
    """(integer scores 0..top_score, every value finite): top_score for the best value and those tied
    with it (within TIE), worst 0, linear between (rounded half to even as np.rint) but at most
    top_score - 1 for every other node, so the scheduler picks among exactly the nodes
    rlscore.core.scoring.choose picks among; non-finite 0. The same operations in the same order as
    rlscore.core.scoring's numpy form."""
    low, high, finite = np.inf, -np.inf, 0
    for v in values:
        if np.isfinite(v):
            finite += 1
            low, high = min(low, v), max(high, v)
    scores = np.zeros(values.shape[0], dtype=np.int64)
    if finite:
        for i in range(values.shape[0]):
            v = values[i]
            if not np.isfinite(v):
                continue
            if v >= high - TIE:
                scores[i] = top_score
            else:
                scores[i] = min(np.int64(np.rint((v - low) / (high - low) * top_score)), top_score - 1)
    return scores, finite == values.shape[0]


def node_scores_numpy(values, top_score):
    """node_scores in numpy: the same operations, so the same integers."""
    finite = np.isfinite(values)
    scores = np.zeros(values.shape[0], dtype=np.int64)
    if finite.any():
        low, high = values[finite].min(), values[finite].max()
        best = finite & (values >= high - TIE)
        with np.errstate(divide="ignore", invalid="ignore"):
            scaled = np.rint((values - low) / (high - low) * top_score)
        others = finite & ~best
        scores[others] = np.minimum(scaled[others], top_score - 1).astype(np.int64)
        scores[best] = top_score
    return scores, bool(finite.all())


if not COMPILED:
    node_scores = node_scores_numpy
