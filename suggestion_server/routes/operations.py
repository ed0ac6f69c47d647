"""Operations: health and readiness for the kubelet, Prometheus metrics, what the server knows of
nodes (GET /state), and the node metrics the plugin's in-process scorer fetches (GET /v1/node-metrics)."""

from __future__ import annotations

import asyncio

import numpy as np
import orjson
from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from rlscore.core.features import FEATURE_SPEC_VERSION
from rlscore.core.state import POLICIES
from suggestion_server import metrics
from suggestion_server.http.errors import error
from suggestion_server.node_state.snapshot import FIELDS, assemble, export_metrics
from suggestion_server.services import Services


def _finite_or_none(value: float) -> float | None:
    return value if np.isfinite(value) else None


def router(services: Services) -> APIRouter:
    s = services
    settings = s.settings
    operations = APIRouter()

    @operations.get("/healthz")
    async def healthz() -> dict:
        return {"status": "ok"}

    @operations.get("/readyz", responses={503: {"description": "not ready; the body says what is missing"}})
    async def readyz() -> JSONResponse:
        """Ready once every model had a load attempt, a metrics snapshot was attempted and the Kubernetes
        watch cache (when there is one) has listed nodes and pods. `degraded` names the policies served
        by their fallback rule because their model was refused or is missing; with
        RLSCORE_READY_REQUIRES_MODELS those make the server unready too."""
        kube_synced = s.kube is None or s.kube.synced
        degraded = s.registry.degraded()
        ready = (s.registry.ready() and s.collector.attempted.is_set() and kube_synced
                 and not (settings.ready_requires_models and degraded))
        return JSONResponse({"ready": ready, "models_loaded": s.registry.ready(),
                             "snapshot_attempted": s.collector.attempted.is_set(), "kubernetes_synced": kube_synced,
                             "degraded_policies": degraded, "refused_models": s.registry.refused()},
                            status_code=200 if ready else 503)

    @operations.get("/metrics")
    async def prometheus_metrics() -> Response:
        snap = s.collector.snapshot
        metrics.SNAPSHOT_AGE.set(snap.age() if snap.taken_at else -1)
        metrics.SNAPSHOT_NODES.set(snap.nodes)
        metrics.KNOWN_NODES.set(len(s.table))
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    @operations.get("/state")
    async def node_state(node: list[str] = Query(default=[], max_length=1000,
                                                 description="node names (repeat the parameter)")) -> JSONResponse:
        """What the server would score these nodes with, and what it had to guess: the same state
        /suggest assembles for names only."""
        if not node:
            return error(422, ["query", "node"], "name at least one node: /state?node=a&node=b")
        if len(set(node)) != len(node) or any(not name or len(name) > 253 for name in node):
            return error(422, ["query", "node"], "node names must be unique, 1..253 characters")
        snapshot = await s.collector.current()
        nodes, reasons, notes = assemble(node, None, s.table, snapshot, settings.stale_after_s, need_latency=True,
                                         need_power=True)
        rows = []
        for i, name in enumerate(nodes.names):
            row = {"name": name}
            for field, attr in (*FIELDS, ("cpu_requested_since_metrics", "cpu_requested_since_metrics")):
                row[field] = _finite_or_none(float(getattr(nodes, attr)[i]))
            rows.append(row)
        return JSONResponse({"nodes": rows, "reasons": [m for _, m in reasons + notes],
                             "snapshot_age_s": snapshot.age() if snapshot.taken_at else None,
                             "cluster_cpu_requested_millicores": _finite_or_none(nodes.cluster_cpu_requested),
                             "recent_peak_cpu_requested_millicores": _finite_or_none(nodes.recent_peak_cpu_requested)})

    @operations.get("/v1/node-metrics", summary="The measured node state and serving models, for in-process scoring")
    async def node_metrics() -> Response:
        """What the scheduler plugin's in-process scorer needs from the server, refreshed every few
        seconds off the scheduling path: every known node's measured columns (null: unknown), the
        model version serving each policy (null: the heuristic, which only the server runs), each
        policy's rollout stage (a policy in shadow or canary is scored here, where the candidate
        is), the settings that shape a pod's request, and the cluster's cpu requests now and at
        their recent peak (null: unknown)."""
        snapshot = s.collector.snapshot
        names, columns = await asyncio.to_thread(export_metrics, s.table)
        requested, peak = s.table.cluster_cpu_requested()
        el = settings.el_defaults
        payload = {"feature_spec_version": FEATURE_SPEC_VERSION, "default_policy": settings.default_policy,
                   "el_default_latency_ms": {"soft": el[0], "hard": el[1]} if el else None,
                   "stale_after_s": settings.stale_after_s,
                   "snapshot_age_s": snapshot.age() if snapshot.taken_at else None,
                   "model_versions": {p: (m.version if (m := s.registry.get(p)) and m.heuristic is None else None)
                                      for p in POLICIES},
                   "rollout_stages": s.rollout.stages(),
                   "cluster_cpu_requested_millicores": _finite_or_none(requested),
                   "recent_peak_cpu_requested_millicores": _finite_or_none(peak),
                   "nodes": {"names": names, **columns}}
        return Response(orjson.dumps(payload), media_type="application/json")

    return operations
