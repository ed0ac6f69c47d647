"""One snapshot of every node's state, refreshed in the background; requests only read it.

`assemble` turns a request's nodes (names, or objects with some fields) into the NodeState the
scorer needs, filling what the request left out from the snapshot, and saying what it had to guess.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

import numpy as np

from agent.state import NodeState
from suggestion_server.kube_state import KubeState
from suggestion_server.latency_source import ProbeLatencySource
from suggestion_server.prometheus_source import PrometheusSource
from suggestion_server.schemas import NodeIn

log = logging.getLogger("rlscore.snapshot")

# Used only when neither the request, the Kubernetes API nor Prometheus knows a node's size.
FALLBACK_CPU_MILLICORES = 4000.0
FALLBACK_MEMORY_BYTES = 8.0 * 1024**3
FALLBACK_MAX_PODS = 110.0

FIELDS = ("cpu_capacity_millicores", "memory_capacity_bytes", "max_pods", "cpu_requested_millicores",
          "memory_requested_bytes", "pods", "cpu_utilization", "memory_utilization", "latency_ms",
          "power_idle_watts", "power_max_watts", "network_receive_bytes_per_s", "tcp_established",
          "disk_utilization")
KEPLER_MIN_USAGE = 0.05  # below this the active watts say too little about full load
KEPLER_SMOOTHING = 0.2  # weight of a new estimate of a node's full-load watts


@dataclass
class Snapshot:
    taken_at: float = 0.0  # time.monotonic(); 0 = never
    nodes: dict[str, dict[str, float]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def age(self) -> float:
        return float("inf") if not self.taken_at else time.monotonic() - self.taken_at


class StateCollector:
    def __init__(self, kube: KubeState | None, prometheus: PrometheusSource | None,
                 probes: ProbeLatencySource | None, refresh_interval_s: float, stale_after_s: float):
        self.kube, self.prometheus, self.probes = kube, prometheus, probes
        self.refresh_interval_s, self.stale_after_s = refresh_interval_s, stale_after_s
        self.snapshot = Snapshot()
        self.attempted = asyncio.Event()
        self._lock = asyncio.Lock()
        self._pending: asyncio.Task | None = None
        self._power_max: dict[str, float] = {}  # smoothed full-load watts estimated from Kepler

    async def refresh(self) -> Snapshot:
        """Metrics and latency for all nodes; node sizes and requests are read live (assemble)."""
        async with self._lock:
            nodes: dict[str, dict[str, float]] = {}
            problems: list[str] = []
            ips: dict[str, str] = {}
            if self.kube is not None:
                if self.kube.error:
                    problems.append(self.kube.error)
                ips = self.kube.ip_map()
            if self.prometheus is not None:
                metrics, prom_problems = await asyncio.to_thread(self.prometheus.collect, ips)
                problems += prom_problems
                for name, values in metrics.items():
                    record = nodes.setdefault(name, {})
                    for key in ("cpu_utilization", "memory_utilization"):
                        if key in values:
                            record[key] = min(max(values[key], 0.0), 1.0)
                    if "latency_ms" in values:
                        record["latency_ms"] = max(values["latency_ms"], 0.0)
                    for key in ("network_receive_bytes_per_s", "tcp_established"):
                        if key in values:
                            record[key] = max(values[key], 0.0)
                    if "disk_utilization" in values:
                        record["disk_utilization"] = min(max(values["disk_utilization"], 0.0), 1.0)
                    self._kepler_power(name, values, record)
                    # sizes from node_exporter, used only where the Kubernetes API has none
                    if "cpu_count" in values:
                        record["cpu_capacity_millicores"] = values["cpu_count"] * 1000.0
                    if "memory_total" in values:
                        record["memory_capacity_bytes"] = values["memory_total"]
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
            self.snapshot = Snapshot(time.monotonic(), nodes, problems)
            self.attempted.set()
            return self.snapshot

    def _kepler_power(self, name: str, values: dict[str, float], record: dict[str, float]) -> None:
        """Kepler splits a node's watts into idle and active at the current cpu usage; the power
        model is idle, and idle + active / usage at full load (smoothed over refreshes)."""
        idle = values.get("power_idle_watts")
        if idle is None or idle < 0:
            return
        record["power_idle_watts"] = idle
        active, usage = values.get("power_active_watts"), values.get("power_usage_ratio")
        if active is not None and usage is not None and usage >= KEPLER_MIN_USAGE and active >= 0:
            estimate = idle + active / min(usage, 1.0)
            previous = self._power_max.get(name)
            self._power_max[name] = estimate if previous is None else (
                previous + KEPLER_SMOOTHING * (estimate - previous))
        if name in self._power_max:
            record["power_max_watts"] = max(self._power_max[name], idle)

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


def assemble(request_nodes: list[str | NodeIn], snapshot: Snapshot, stale_after_s: float,
             need_latency: bool, kube: KubeState | None = None, need_power: bool = False
             ) -> tuple[NodeState, list[tuple[str, str]], list[tuple[str, str]]]:
    """NodeState for the requested nodes: request fields first, then the Kubernetes watch cache
    (live), then the metrics snapshot, then guesses. Also what was missing, as (code, message):
    `reasons` degrade the answer (sizes, requests, utilization, EL's latency, staleness); `notes`
    do not (power model, the extra metrics: the features encode them as unknown)."""
    n = len(request_nodes)
    names = [node if isinstance(node, str) else node.name for node in request_nodes]
    given = [None if isinstance(node, str) else node for node in request_nodes]
    known: list[dict | None] = [snapshot.nodes.get(name) for name in names] if snapshot.nodes else [None] * n
    if kube is not None:
        # the API's sizes and requests win over node_exporter's; metrics fill the rest
        known = [(m or {}) | k if k is not None else m for k, m in zip(kube.records(names), known)]
    table = np.empty((len(FIELDS), n))
    used_snapshot = False
    for i, key in enumerate(FIELDS):
        column = [getattr(g, key) if g is not None else None for g in given]
        if None in column and any(k is not None for k in known):
            filled = [v if v is not None or k is None else k.get(key) for v, k in zip(column, known)]
            used_snapshot = used_snapshot or filled != column
            column = filled
        table[i] = np.array(column, dtype=np.float64)  # None becomes NaN
    (cpu_cap, mem_cap, max_pods, cpu_req, mem_req, pods, cpu_util, mem_util, latency, power_idle, power_max,
     network, tcp, disk) = table
    # a half-known power model (idle only, or max below idle from mixed sources) counts as unknown
    broken = np.isnan(power_idle) | np.isnan(power_max) | (power_max < power_idle)
    power_idle[broken] = power_max[broken] = np.nan

    reasons: list[tuple[str, str]] = []

    def note(mask: np.ndarray, code: str, what: str) -> None:
        if mask.any():
            missing = [names[k] for k in np.flatnonzero(mask)[:3]]
            more = f" and {int(mask.sum()) - 3} more" if mask.sum() > 3 else ""
            reasons.append((code, f"{what} unknown for {int(mask.sum())} node(s) ({', '.join(missing)}{more})"))

    for cap, fallback, code, label in ((cpu_cap, FALLBACK_CPU_MILLICORES, "capacity", "cpu capacity"),
                                       (mem_cap, FALLBACK_MEMORY_BYTES, "capacity", "memory capacity")):
        missing = np.isnan(cap)
        note(missing, code, label)
        known = cap[~missing]
        cap[missing] = np.median(known) if known.size else fallback
    missing = np.isnan(max_pods)
    max_pods[missing] = FALLBACK_MAX_PODS
    # Requests unknown (no Kubernetes API): estimate them from measured utilization.
    for req, util, cap, label in ((cpu_req, cpu_util, cpu_cap, "cpu requests"),
                                  (mem_req, mem_util, mem_cap, "memory requests")):
        missing = np.isnan(req)
        if missing.any():
            note(missing, "requests", label + " (estimated from utilization)")
            req[missing] = np.nan_to_num(util[missing], nan=0.0) * cap[missing]
    missing = np.isnan(pods)
    pods[missing] = (cpu_req[missing] > 0).astype(float)
    note(np.isnan(cpu_util) | np.isnan(mem_util), "utilization", "utilization")
    if need_latency:
        note(np.isnan(latency), "latency", "latency")
    degrading = len(reasons)
    # Optional state: the model knows what "unknown" means here, so the answer is not degraded.
    if need_power:
        note(np.isnan(power_idle) | np.isnan(power_max), "power", "power model")
    note(np.isnan(network) | np.isnan(tcp) | np.isnan(disk), "metrics", "network/tcp/disk metrics")
    notes, reasons = reasons[degrading:], reasons[:degrading]
    if used_snapshot and snapshot.age() > stale_after_s:
        reasons.append(("stale", f"node snapshot is {snapshot.age():.0f} s old"))
    if used_snapshot or reasons:
        reasons += [("source", problem) for problem in snapshot.problems]

    state = NodeState(names=names, cpu_capacity=cpu_cap, memory_capacity=mem_cap, max_pods=max_pods,
                      cpu_requested=cpu_req, memory_requested=mem_req, pods=pods, cpu_utilization=cpu_util,
                      memory_utilization=mem_util, latency_ms=latency, power_idle_watts=power_idle,
                      power_max_watts=power_max, network_receive_bytes_per_s=network, tcp_established=tcp,
                      disk_utilization=disk)
    return state, reasons, notes
