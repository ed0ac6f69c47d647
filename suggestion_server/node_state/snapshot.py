"""Node metrics refreshed in the background into the node table; requests only read the table.

`assemble` turns a request's nodes (names, or objects with some fields) into the NodeState the
scorer needs: fields the request gives win, then the Kubernetes API's (live), then the metrics', then
guesses; and it says what it had to guess.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass, field

import numpy as np

from rlscore.core.kernels import COMPILED, compiled
from rlscore.core.state import NodeState
from suggestion_server.node_state.kube_state import KubeState
from suggestion_server.node_state.latency_source import ProbeLatencySource
from suggestion_server.node_state.node_table import COLUMNS, MAX_LATENCY_MS, MAX_QUANTITY, MAX_WATTS, NodeTable
from suggestion_server.node_state.prometheus_source import PrometheusSource

log = logging.getLogger("rlscore.snapshot")

# Used only when neither the request, the Kubernetes API nor Prometheus knows a node's size.
FALLBACK_CPU_MILLICORES = 4000.0
FALLBACK_MEMORY_BYTES = 8.0 * 1024**3
FALLBACK_MAX_PODS = 110.0

# A node's state fields: their names in /suggest's node objects and the NodeState arrays they fill.
FIELDS = (("cpu_capacity_millicores", "cpu_capacity"), ("memory_capacity_bytes", "memory_capacity"),
          ("max_pods", "max_pods"), ("cpu_requested_millicores", "cpu_requested"),
          ("memory_requested_bytes", "memory_requested"), ("pods", "pods"),
          ("cpu_utilization", "cpu_utilization"), ("memory_utilization", "memory_utilization"),
          ("latency_ms", "latency_ms"), ("power_idle_watts", "power_idle_watts"),
          ("power_max_watts", "power_max_watts"), ("network_receive_bytes_per_s", "network_receive_bytes_per_s"),
          ("tcp_established", "tcp_established"), ("disk_utilization", "disk_utilization"),
          ("cpu_utilization_stddev", "cpu_utilization_stddev"))
# the fields that are fractions 0..1 (a request's are validated, Prometheus's clamped); the others are >= 0
FRACTION_FIELDS = ("cpu_utilization", "memory_utilization", "disk_utilization", "cpu_utilization_stddev")
KEPLER_MIN_USAGE = 0.05  # below this the active watts say too little about full load
KEPLER_SMOOTHING = 0.2  # weight of a new estimate of a node's full-load watts


@dataclass
class Snapshot:
    """When the metrics were last read, for how many nodes, and what went wrong."""

    taken_at: float = 0.0  # time.monotonic(); 0 = never
    nodes: int = 0
    problems: list[str] = field(default_factory=list)

    def age(self) -> float:
        return float("inf") if not self.taken_at else time.monotonic() - self.taken_at


class StateCollector:
    def __init__(self, table: NodeTable, kube: KubeState | None, prometheus: PrometheusSource | None,
                 probes: ProbeLatencySource | None, refresh_interval_s: float, stale_after_s: float,
                 history_interval_s: float = 300.0):
        self.table, self.kube, self.prometheus, self.probes = table, kube, prometheus, probes
        self.refresh_interval_s, self.stale_after_s = refresh_interval_s, stale_after_s
        self.history_interval_s = history_interval_s
        self._history_read_at = -float("inf")  # time.monotonic() of the last history read
        self._history_problems: list[str] = []
        self.snapshot = Snapshot()
        self.attempted = asyncio.Event()
        self._lock = asyncio.Lock()
        self._pending: asyncio.Task | None = None
        self._power_max: dict[str, float] = {}  # smoothed full-load watts estimated from Kepler

    async def refresh(self) -> Snapshot:
        """Metrics and latency for all nodes; sizes and requests come from the API's watch."""
        async with self._lock:
            nodes: dict[str, dict[str, float]] = {}
            problems: list[str] = []
            ips: dict[str, str] = {}
            if self.kube is not None:
                if self.kube.error:
                    problems.append(self.kube.error)
                ips = self.kube.ip_map()
            if self.prometheus is not None:
                if time.monotonic() - self._history_read_at >= self.history_interval_s:
                    await self._read_power_history(ips)
                metrics, prom_problems = await self.prometheus.collect(ips)
                problems += prom_problems
                for name, values in metrics.items():
                    nodes[name] = self._record(name, values)
            if self.probes is not None and ips:
                latencies, probe_problems = await self.probes.collect({name: ip for ip, name in ips.items()})
                problems += probe_problems
                for name, latency in latencies.items():
                    nodes.setdefault(name, {})["latency_ms"] = latency
            if problems != self.snapshot.problems:  # say it when it changes, not every refresh
                if problems:
                    log.warning("node state incomplete: %s", "; ".join(problems))
                elif self.snapshot.taken_at:
                    log.info("node state complete again")
            # with the Kubernetes API, it says which nodes exist; metrics of other names are dropped
            self.table.replace_metrics(nodes, new_rows=self.kube is None)
            if len(self._power_max) > len(self.table):  # estimates of nodes the table forgot
                known = self.table.index
                self._power_max = {name: w for name, w in self._power_max.items() if name in known}
            self.snapshot = Snapshot(time.monotonic(), len(nodes), problems)
            self.attempted.set()
            return self.snapshot

    async def _read_power_history(self, ips: dict[str, str]) -> None:
        """Full-load watts of nodes not estimated since this server started, from Prometheus's past:
        without it a restarted server would know the power model only of the nodes busy right now,
        and which nodes those are changes from one pod to the next."""
        self._history_read_at = time.monotonic()
        if not self.prometheus.history_queries:
            return
        history, problems = await self.prometheus.collect_history(ips)
        if problems != self._history_problems:  # a missing history costs nothing but the estimate
            if problems:
                log.warning("power history unavailable: %s", "; ".join(problems))
            self._history_problems = problems
        for name, values in history.items():
            watts = values.get("power_max_watts")
            if watts is not None and watts > 0 and name not in self._power_max:
                self._power_max[name] = watts

    def _record(self, name: str, values: dict[str, float]) -> dict[str, float]:
        """One node's query results as table columns, clamped to their ranges."""
        record: dict[str, float] = {}
        for key in FRACTION_FIELDS:
            if key in values:
                record[key] = min(max(values[key], 0.0), 1.0)
        for key, top in (("latency_ms", MAX_LATENCY_MS), ("network_receive_bytes_per_s", MAX_QUANTITY),
                         ("tcp_established", MAX_QUANTITY)):
            if key in values:
                record[key] = min(max(values[key], 0.0), top)
        # sizes from node_exporter, used only where the Kubernetes API has none; beyond int64: unknown
        if 0 <= values.get("cpu_count", -1) * 1000.0 <= MAX_QUANTITY:
            record["cpu_capacity_metrics"] = values["cpu_count"] * 1000.0
        if 0 <= values.get("memory_total", -1) <= MAX_QUANTITY:
            record["memory_capacity_metrics"] = values["memory_total"]
        self._kepler_power(name, values, record)
        return record

    def _kepler_power(self, name: str, values: dict[str, float], record: dict[str, float]) -> None:
        """Kepler splits a node's watts into idle and active at the current cpu usage; the power
        model is idle, and idle + active / usage at full load (smoothed over refreshes)."""
        idle = values.get("power_idle_watts")
        if idle is None or not 0 <= idle <= MAX_WATTS:
            return
        record["power_idle_metrics"] = idle
        active, usage = values.get("power_active_watts"), values.get("power_usage_ratio")
        if active is not None and usage is not None and usage >= KEPLER_MIN_USAGE and active >= 0:
            # active watts are the dynamic draw at `usage`: divided by that same usage, even above 1
            # (a ratio over 1 with the active watts it gave was read as watts at full load before)
            estimate = idle + active / usage
            previous = self._power_max.get(name)
            self._power_max[name] = estimate if previous is None else (
                previous + KEPLER_SMOOTHING * (estimate - previous))
        if self._power_max.get(name, math.inf) <= MAX_WATTS:  # beyond it: a broken estimate, unknown
            record["power_max_metrics"] = max(self._power_max[name], idle)

    async def current(self) -> Snapshot:
        """The snapshot as it is, never waiting on a source: a stale one starts a refresh in the
        background (the answer is flagged stale meanwhile), so a slow Prometheus cannot hold a
        scheduling decision."""
        if self.snapshot.age() > self.stale_after_s and not self._lock.locked() and self._pending is None:
            self._pending = asyncio.create_task(self._refresh_in_background())
        return self.snapshot

    async def _refresh_in_background(self) -> None:
        try:
            await self.refresh()
        except Exception as exc:  # logged; the next refresh tries again
            log.exception("on-demand refresh failed: %s", exc)
        finally:
            self._pending = None

    async def run(self) -> None:
        while True:
            try:
                await self.refresh()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.exception("background refresh failed: %s", exc)
                self.attempted.set()
            await asyncio.sleep(self.refresh_interval_s)


# NodeState's arrays as `assemble` builds them: one row each of one block
STATE = ("cpu_capacity", "memory_capacity", "max_pods", "cpu_requested", "memory_requested", "pods",
         "power_idle_watts", "power_max_watts", "cpu_utilization", "memory_utilization", "latency_ms",
         "network_receive_bytes_per_s", "tcp_established", "disk_utilization", "cpu_requested_since_metrics",
         "cpu_utilization_stddev")
_S = {name: i for i, name in enumerate(STATE)}
(_S_CPU_CAP, _S_MEM_CAP, _S_MAX_PODS, _S_CPU_REQ, _S_MEM_REQ, _S_PODS, _S_IDLE, _S_PEAK, _S_CPU_UTIL, _S_MEM_UTIL,
 _S_LATENCY, _S_NET, _S_TCP, _S_DISK, _S_SINCE, _S_CPU_STD) = range(len(STATE))
_S_GIVEN = np.array([_S[attr] for _, attr in FIELDS])  # the state row of each of a request's fields
# the node table's rows (compiled code reads plain integers)
(_T_IN_API, _T_CPU_CAP, _T_MEM_CAP, _T_MAX_PODS, _T_IDLE, _T_PEAK, _T_CPU_REQ, _T_MEM_REQ, _T_PODS, _T_CPU_UTIL,
 _T_MEM_UTIL, _T_LATENCY, _T_NET, _T_TCP, _T_DISK, _T_CPU_CAP_M, _T_MEM_CAP_M, _T_IDLE_M, _T_PEAK_M,
 _T_REQUESTED_AT, _T_CPU_STD) = map(COLUMNS.index, (
    "in_api", "cpu_capacity", "memory_capacity", "max_pods", "power_idle_watts", "power_max_watts", "cpu_requested",
    "memory_requested", "pods", "cpu_utilization", "memory_utilization", "latency_ms", "network_receive_bytes_per_s",
    "tcp_established", "disk_utilization", "cpu_capacity_metrics", "memory_capacity_metrics", "power_idle_metrics",
    "power_max_metrics", "requested_at", "cpu_utilization_stddev"))
@compiled
def _resolve(data, rows, state):  # pragma: no cover (compiled)
    """Each node's state from its table row: the API's sizes and power model, else the metrics';
    requests only where the API has the node (NaN: unknown); requests bound since the metrics were
    read. Returns (the API knows some node, some node has measured utilization)."""
    in_api_any, measured_any = False, False
    for k in range(rows.shape[0]):
        r = rows[k]
        in_api = data[_T_IN_API, r] == 1.0
        for s_row, api_row, metrics_row in ((_S_CPU_CAP, _T_CPU_CAP, _T_CPU_CAP_M), (_S_MEM_CAP, _T_MEM_CAP, _T_MEM_CAP_M),
                                            (_S_IDLE, _T_IDLE, _T_IDLE_M), (_S_PEAK, _T_PEAK, _T_PEAK_M)):
            value = data[api_row, r]
            state[s_row, k] = data[metrics_row, r] if np.isnan(value) else value
        state[_S_MAX_PODS, k] = data[_T_MAX_PODS, r]
        for s_row, t_row in ((_S_CPU_REQ, _T_CPU_REQ), (_S_MEM_REQ, _T_MEM_REQ), (_S_PODS, _T_PODS)):
            state[s_row, k] = data[t_row, r] if in_api else np.nan
        for s_row, t_row in ((_S_CPU_UTIL, _T_CPU_UTIL), (_S_MEM_UTIL, _T_MEM_UTIL), (_S_LATENCY, _T_LATENCY),
                             (_S_NET, _T_NET), (_S_TCP, _T_TCP), (_S_DISK, _T_DISK), (_S_CPU_STD, _T_CPU_STD)):
            state[s_row, k] = data[t_row, r]
        since = state[_S_CPU_REQ, k] - data[_T_REQUESTED_AT, r]
        state[_S_SINCE, k] = since if (since >= 0.0 or np.isnan(since)) else 0.0  # as np.maximum(since, 0)
        in_api_any = in_api_any or in_api
        measured_any = measured_any or not np.isnan(data[_T_CPU_UTIL, r])
    return in_api_any, measured_any


@compiled
def _merge_given(state, given, rows):  # pragma: no cover (compiled)
    """The request's values over the table's, where it gives one; a given utilization is "now", so
    nothing was requested since it was measured."""
    for k in range(given.shape[1]):
        for j in range(given.shape[0]):
            value = given[j, k]
            if not np.isnan(value):
                state[rows[j], k] = value
                if rows[j] == _S_CPU_UTIL:
                    state[_S_SINCE, k] = np.nan


@compiled
def _check(state, need_latency, need_power):  # pragma: no cover (compiled)
    """A half-known power model (idle only, or max below idle from mixed sources) becomes unknown.
    Returns whether anything `_fill_missing` guesses or reports is missing (usually nothing: then
    the request skips it)."""
    missing = False
    for k in range(state.shape[1]):
        idle, peak = state[_S_IDLE, k], state[_S_PEAK, k]
        if np.isnan(idle) or np.isnan(peak) or peak < idle:
            state[_S_IDLE, k] = state[_S_PEAK, k] = np.nan
            missing = missing or need_power
        for s_row in (_S_CPU_CAP, _S_MEM_CAP, _S_MAX_PODS, _S_CPU_REQ, _S_MEM_REQ, _S_PODS, _S_CPU_UTIL, _S_MEM_UTIL,
                      _S_NET, _S_TCP, _S_DISK):
            missing = missing or np.isnan(state[s_row, k])
        missing = missing or (need_latency and np.isnan(state[_S_LATENCY, k]))
    return missing


# The same three passes vectorized, where numba is not installed (the serving install); equal to the
# compiled ones (tests/server/test_node_table.py).
_CAPACITY = ((_S_CPU_CAP, _T_CPU_CAP, _T_CPU_CAP_M), (_S_MEM_CAP, _T_MEM_CAP, _T_MEM_CAP_M),
             (_S_IDLE, _T_IDLE, _T_IDLE_M), (_S_PEAK, _T_PEAK, _T_PEAK_M))
_REQUESTS = ((_S_CPU_REQ, _T_CPU_REQ), (_S_MEM_REQ, _T_MEM_REQ), (_S_PODS, _T_PODS))
_MEASURED = ((_S_CPU_UTIL, _T_CPU_UTIL), (_S_MEM_UTIL, _T_MEM_UTIL), (_S_LATENCY, _T_LATENCY), (_S_NET, _T_NET),
             (_S_TCP, _T_TCP), (_S_DISK, _T_DISK), (_S_CPU_STD, _T_CPU_STD))
_MUST_KNOW = [_S_CPU_CAP, _S_MEM_CAP, _S_MAX_PODS, _S_CPU_REQ, _S_MEM_REQ, _S_PODS, _S_CPU_UTIL, _S_MEM_UTIL,
              _S_NET, _S_TCP, _S_DISK]


def _resolve_numpy(data, rows, state):
    sub = data[:, rows]
    in_api = sub[_T_IN_API] == 1.0
    for s_row, api_row, metrics_row in _CAPACITY:
        state[s_row] = np.where(np.isnan(sub[api_row]), sub[metrics_row], sub[api_row])
    state[_S_MAX_PODS] = sub[_T_MAX_PODS]
    for s_row, t_row in _REQUESTS:
        state[s_row] = np.where(in_api, sub[t_row], np.nan)
    for s_row, t_row in _MEASURED:
        state[s_row] = sub[t_row]
    since = state[_S_CPU_REQ] - sub[_T_REQUESTED_AT]
    with np.errstate(invalid="ignore"):
        state[_S_SINCE] = np.where((since >= 0.0) | np.isnan(since), since, 0.0)
    return bool(in_api.any()), bool((~np.isnan(sub[_T_CPU_UTIL])).any())


def _merge_given_numpy(state, given, rows):
    for j in range(given.shape[0]):
        present = ~np.isnan(given[j])
        state[rows[j], present] = given[j, present]
        if rows[j] == _S_CPU_UTIL:
            state[_S_SINCE, present] = np.nan


def _check_numpy(state, need_latency, need_power):
    idle, peak = state[_S_IDLE], state[_S_PEAK]
    with np.errstate(invalid="ignore"):
        half = np.isnan(idle) | np.isnan(peak) | (peak < idle)
    state[_S_IDLE, half] = state[_S_PEAK, half] = np.nan
    missing = bool(need_power and half.any()) or bool(np.isnan(state[_MUST_KNOW]).any())
    return missing or bool(need_latency and np.isnan(state[_S_LATENCY]).any())


if not COMPILED:
    _resolve, _merge_given, _check = _resolve_numpy, _merge_given_numpy, _check_numpy


def assemble(names: list[str], given: np.ndarray | None, table: NodeTable, snapshot: Snapshot, stale_after_s: float,
             need_latency: bool, need_power: bool = False
             ) -> tuple[NodeState, list[tuple[str, str]], list[tuple[str, str]]]:
    """NodeState for the requested nodes, and what was missing, as (code, message): `reasons`
    degrade the answer (sizes, requests, utilization, EL's latency, staleness); `notes` do not
    (power model, the extra metrics: the features encode them as unknown). `given` holds what the
    request says of each node, one row per FIELDS entry (NaN: not given; None: names only)."""
    state = np.empty((len(STATE), len(names)))
    with table.reading() as data:
        in_api_any, measured_any = _resolve(data, table.rows(names), state)
    used_table = in_api_any or measured_any
    if given is not None:
        # fields given in the request win; where it gives the utilization, that is "now"
        _merge_given(state, given, _S_GIVEN)
        used_table = used_table and bool(np.isnan(given).any())
    columns = {name: state[i] for i, name in enumerate(STATE)}
    reasons = _fill_missing(columns, names, need_latency, need_power) if _check(state, need_latency, need_power) else []
    notes = [reason for reason in reasons if reason[0] in ("power", "metrics")]
    reasons = [reason for reason in reasons if reason[0] not in ("power", "metrics")]
    if used_table and snapshot.age() > stale_after_s and snapshot.taken_at:
        reasons.append(("stale", f"node metrics are {snapshot.age():.0f} s old"))
    if used_table or reasons:
        reasons += [("source", problem) for problem in snapshot.problems]
    return NodeState.trusted(names, *table.cluster_cpu_requested(), **columns), reasons, notes


def unknown_for(mask: np.ndarray, names: list[str], what: str) -> str:
    """"<what> unknown for N node(s) (the first three names and N - 3 more)" for the nodes in `mask`."""
    count = int(mask.sum())
    shown = [names[k] for k in np.flatnonzero(mask)[:3]]
    more = f" and {count - 3} more" if count > 3 else ""
    return f"{what} unknown for {count} node(s) ({', '.join(shown)}{more})"


def _fill_missing(state: dict[str, np.ndarray], names: list[str], need_latency: bool,
                  need_power: bool) -> list[tuple[str, str]]:
    """Guesses for unknown sizes and requests, in place; what was missing, as (code, message)."""
    reasons: list[tuple[str, str]] = []

    def note(mask: np.ndarray, code: str, what: str) -> None:
        if mask.any():
            reasons.append((code, unknown_for(mask, names, what)))

    cpu_cap, mem_cap, max_pods = state["cpu_capacity"], state["memory_capacity"], state["max_pods"]
    cpu_req, mem_req, pods = state["cpu_requested"], state["memory_requested"], state["pods"]
    cpu_util, mem_util = state["cpu_utilization"], state["memory_utilization"]
    for cap, fallback, label in ((cpu_cap, FALLBACK_CPU_MILLICORES, "cpu capacity"),
                                 (mem_cap, FALLBACK_MEMORY_BYTES, "memory capacity")):
        unknown = np.isnan(cap)
        if unknown.any():
            note(unknown, "capacity", label)
            known = cap[~unknown]
            cap[unknown] = np.median(known) if known.size else fallback
    max_pods[np.isnan(max_pods)] = FALLBACK_MAX_PODS
    # Requests unknown (no Kubernetes API): estimate them from measured utilization.
    for req, util, cap, label in ((cpu_req, cpu_util, cpu_cap, "cpu requests"),
                                  (mem_req, mem_util, mem_cap, "memory requests")):
        unknown = np.isnan(req)
        if unknown.any():
            note(unknown, "requests", label + " (estimated from utilization)")
            req[unknown] = np.nan_to_num(util[unknown], nan=0.0) * cap[unknown]
    unknown = np.isnan(pods)
    pods[unknown] = (cpu_req[unknown] > 0).astype(float)
    note(np.isnan(cpu_util) | np.isnan(mem_util), "utilization", "utilization")
    if need_latency:
        note(np.isnan(state["latency_ms"]), "latency", "latency")
    # Optional state: the model knows what "unknown" means here, so the answer is not degraded.
    if need_power:
        note(np.isnan(state["power_idle_watts"]) | np.isnan(state["power_max_watts"]), "power", "power model")
    note(np.isnan(state["network_receive_bytes_per_s"]) | np.isnan(state["tcp_established"])
         | np.isnan(state["disk_utilization"]), "metrics", "network/tcp/disk metrics")
    return reasons


# What an in-process scorer needs beside the Kubernetes objects it already has (sizes and requests
# come from the scheduler's own cache there): the measured columns, and the power model as the
# server resolves it (annotation first, Kepler otherwise, a half-known model unknown).
EXPORTED_METRICS = ("cpu_utilization", "memory_utilization", "latency_ms", "network_receive_bytes_per_s",
                    "tcp_established", "disk_utilization", "requested_at", "power_idle_watts", "power_max_watts",
                    "cpu_utilization_stddev")


def export_metrics(table: NodeTable) -> tuple[list[str], dict[str, list[float | None]]]:
    """Every known node's measured state, as columns with None for unknown."""
    names, col = table.snapshot((*EXPORTED_METRICS, "power_idle_metrics", "power_max_metrics"))
    idle = np.where(np.isnan(col["power_idle_watts"]), col["power_idle_metrics"], col["power_idle_watts"])
    peak = np.where(np.isnan(col["power_max_watts"]), col["power_max_metrics"], col["power_max_watts"])
    broken = np.isnan(idle) | np.isnan(peak) | (peak < idle)
    idle[broken] = peak[broken] = np.nan
    col["power_idle_watts"], col["power_max_watts"] = idle, peak
    return names, {key: [None if np.isnan(v) else float(v) for v in col[key].tolist()] for key in EXPORTED_METRICS}
