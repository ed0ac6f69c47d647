"""Everything the routes share, built once from the settings: the model registry and its rollout, the
node table and the sources that fill it, the drift monitor; and the background loops that keep them
current (snapshot refresh, model watch, drift check, certificate reload)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

import numpy as np

from rlscore.core.features import node_features
from rlscore.core.kernels import node_scores
from rlscore.core.rules import MAX_NODE_SCORE
from rlscore.core.state import PodRequest
from suggestion_server.config import Settings
from suggestion_server.http import tls
from suggestion_server.lifecycle.drift import DriftMonitor
from suggestion_server.lifecycle.registry import ModelRegistry
from suggestion_server.lifecycle.rollout import RolloutManager
from suggestion_server.node_state.kube_state import KubeState
from suggestion_server.node_state.latency_source import ProbeLatencySource
from suggestion_server.node_state.node_table import NodeTable
from suggestion_server.node_state.prometheus_source import PrometheusSource, certificate_check
from suggestion_server.node_state.snapshot import FIELDS, Snapshot, StateCollector, assemble

log = logging.getLogger("rlscore.server")


def prometheus_source(settings: Settings) -> PrometheusSource | None:
    """The batched node queries of the metrics contract (rlscore.core.node_metrics), as configured."""
    if not settings.prometheus_url:
        return None
    queries = {"cpu_utilization": settings.cpu_query, "memory_utilization": settings.memory_query,
               "cpu_count": settings.cpu_count_query, "memory_total": settings.memory_total_query,
               "network_receive_bytes_per_s": settings.network_query, "tcp_established": settings.tcp_query,
               "disk_utilization": settings.disk_query, "power_idle_watts": settings.power_idle_query,
               "power_active_watts": settings.power_active_query, "power_usage_ratio": settings.power_usage_query}
    if settings.cpu_stddev_query:
        queries["cpu_utilization_stddev"] = settings.cpu_stddev_query
    if settings.latency_source == "prometheus":
        queries["latency_ms"] = settings.latency_query
    history = {"power_max_watts": settings.power_max_history_query} if settings.power_idle_query else {}
    verify = certificate_check(settings.prometheus_ca_file, settings.prometheus_insecure_skip_verify)
    return PrometheusSource(settings.prometheus_url, settings.prometheus_timeout_s, queries, history, verify,
                            max_answer_bytes=settings.prometheus_max_answer_bytes)


@dataclass
class Services:
    settings: Settings
    registry: ModelRegistry
    rollout: RolloutManager
    table: NodeTable
    kube: KubeState | None
    drift: DriftMonitor
    prometheus: PrometheusSource | None
    probes: ProbeLatencySource | None
    collector: StateCollector
    rng: np.random.Generator = field(default_factory=np.random.default_rng)

    @classmethod
    def build(cls, settings: Settings) -> Services:
        s = settings
        registry = ModelRegistry(s.model_dir)
        rollout = RolloutManager(registry, s.model_dir, s.candidate_dir, s.canary_share, s.rollout_auto,
                                 s.shadow_decisions, s.canary_decisions, s.rollout_tolerance)
        table = NodeTable(usage_onset_s=s.usage_onset_s, usage_linger_s=s.usage_linger_s,
                          forget_after_s=s.node_forget_after_s, max_nodes=s.max_known_nodes)
        kube = KubeState.from_settings(s.kubernetes, s.kubeconfig, table)
        drift = DriftMonitor(registry, table, s.drift_profile, s.drift_window, s.drift_confirmations,
                             s.drift_retrain_command, s.drift_retrain_cooldown_s, s.drift_retrain_cronjob,
                             kube.api if kube is not None else None)
        prometheus = prometheus_source(s)
        probes = ProbeLatencySource(s.probe_port, s.probe_timeout_s) if s.latency_source == "probe" else None
        collector = StateCollector(table, kube, prometheus, probes, s.refresh_interval_s, s.stale_after_s,
                                   s.power_max_history_interval_s)
        return cls(s, registry, rollout, table, kube, drift, prometheus, probes, collector)

    def warm_up(self) -> None:
        """Compile (or load from numba's cache) the hot path's loops before the first request:
        compiling takes seconds, and readiness waits for this."""
        table = NodeTable()
        table.set_node("warm-up", cpu_capacity=1000.0, memory_capacity=1.0, max_pods=1.0)
        given = np.full((len(FIELDS), 2), np.nan)
        given[0, 0] = 1000.0
        nodes, _, _ = assemble(["warm-up", "unknown"], given, table, Snapshot(), self.settings.stale_after_s,
                               need_latency=True, need_power=True)
        features, _ = node_features(nodes, PodRequest(1.0, 1.0))
        node_scores(features[:, 0].astype(np.float64), MAX_NODE_SCORE)  # the forward pass compiled in the loader's probe

    def background_tasks(self) -> list[asyncio.Task]:
        """The loops that keep the state and the models current, started on the running loop."""
        tasks = [asyncio.create_task(self.collector.run(), name="snapshot-refresh")]
        if self.settings.model_watch_interval_s > 0:
            tasks.append(asyncio.create_task(self._watch_models(), name="model-watch"))
        tasks.append(asyncio.create_task(self._watch_drift(), name="drift-check"))
        if tls.ACTIVE is not None:
            tasks.append(asyncio.create_task(tls.ACTIVE.watch(self.settings.tls_reload_interval_s), name="tls-reload"))
        return tasks

    async def _watch_models(self) -> None:
        while True:
            await asyncio.sleep(self.settings.model_watch_interval_s)
            try:
                await asyncio.to_thread(self.registry.reload_changed)
                self.rollout.watch()
            except Exception:
                log.exception("model watch failed")

    async def _watch_drift(self) -> None:
        while True:
            await asyncio.sleep(self.settings.drift_interval_s)
            try:  # a Job or a command may be started: never on the request loop
                await asyncio.to_thread(self.drift.check)
            except Exception:
                log.exception("drift check failed")

    async def close(self) -> None:
        if self.kube is not None:
            self.kube.stop()
        if self.probes is not None:
            await self.probes.close()
        if self.prometheus is not None:
            await self.prometheus.close()
