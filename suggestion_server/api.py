"""The HTTP API: POST /suggest, health, readiness, metrics, policies and model reload."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import inspect
import json
import logging
import sys
import time
from dataclasses import dataclass

import numpy as np
import orjson
from threadpoolctl import threadpool_limits
from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from rlscore.core.features import FEATURE_SPEC_VERSION, node_features
from rlscore.core.rules import MAX_NODE_SCORE
from rlscore.core.kernels import node_scores
from rlscore.core.state import POLICIES, PodRequest, normalize_policy
from suggestion_server import compact, metrics, suggest_body, tls
from suggestion_server.auth import BearerAuth
from suggestion_server.config import Settings
from suggestion_server.direct_route import DirectDispatch, DirectRoute, decoded_by
from suggestion_server.drift import DriftMonitor
from suggestion_server.kube_state import KubeState
from suggestion_server.latency_source import ProbeLatencySource
from suggestion_server.node_table import NodeTable
from suggestion_server.pods import RequestFieldError, pod_request, resolve_policy
from suggestion_server.prometheus_source import PrometheusSource, certificate_check
from suggestion_server.registry import ModelRegistry
from suggestion_server.rollout import RolloutError, RolloutManager
from suggestion_server.schemas import PATTERN_MESSAGES, PodIn, SuggestRequest, SuggestResponse
from suggestion_server.scoring import score_nodes
from suggestion_server.snapshot import FIELDS, Snapshot, StateCollector, assemble, export_metrics

log = logging.getLogger("rlscore.server")
decisions = logging.getLogger("rlscore.decisions")
SWITCH_INTERVAL_S = 0.0005
# Newer FastAPI looks up OpenTelemetry providers on every request (three environment reads, ~10% of a
# 100-node request); the server reports through Prometheus, so that is switched off where it exists.
NO_OPENTELEMETRY = ({"telemetry": {"tracing": False, "metrics": False, "logs": False}}
                    if "telemetry" in inspect.signature(FastAPI).parameters else {})


def _finite_or_none(value: float) -> float | None:
    return value if np.isfinite(value) else None


def _error(status: int, loc: list, message: str) -> JSONResponse:
    metrics.INVALID.labels(str(status)).inc()
    return JSONResponse({"detail": [{"loc": loc, "msg": message, "type": "value_error"}]}, status_code=status)


def warm_up(settings: Settings) -> None:
    """Compile (or load from numba's cache) the hot path's loops before the first request: compiling
    takes seconds, and readiness waits for this."""
    table = NodeTable()
    table.set_node("warm-up", cpu_capacity=1000.0, memory_capacity=1.0, max_pods=1.0)
    given = np.full((len(FIELDS), 2), np.nan)
    given[0, 0] = 1000.0
    nodes, _, _ = assemble(["warm-up", "unknown"], given, table, Snapshot(), settings.stale_after_s, need_latency=True,
                           need_power=True)
    features, _ = node_features(nodes, PodRequest(1.0, 1.0))
    node_scores(features[:, 0].astype(np.float64), MAX_NODE_SCORE)  # the forward pass compiled in load_all's probe


def invalid_request(exc: RequestValidationError) -> JSONResponse:
    """A 422 naming each field; the input itself is never echoed back."""
    metrics.INVALID.labels("422").inc()
    errors = [{"loc": list(e.get("loc", [])), "type": e.get("type", ""),
               "msg": PATTERN_MESSAGES.get((e.get("ctx") or {}).get("pattern"), e.get("msg", ""))}
              for e in exc.errors()]
    return JSONResponse({"detail": errors}, status_code=422)


class BodyLimit:
    """ASGI middleware: a body over the limit is a 413 before anything parses it."""

    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "POST":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            return await _error(413, ["body"], f"body of {int(declared)} bytes is over the "
                                               f"{self.max_bytes}-byte limit")(scope, receive, send)
        received = 0

        async def limited_receive():
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise _BodyTooLarge()
            return message

        try:
            await self.app(scope, limited_receive, send)
        except _BodyTooLarge:
            await _error(413, ["body"], f"body is over the {self.max_bytes}-byte limit")(scope, receive, send)


class _BodyTooLarge(Exception):
    pass


@dataclass
class Decision:
    policy: str
    version: str | None
    source: str
    degraded: bool
    reasons: list[str]
    names: list[str]
    scores: np.ndarray  # integers 0..100, one per name


def create_app(settings: Settings | None = None, *, background: bool = True) -> FastAPI:
    """The app; `background=False` skips the refresh and watch loops (tests drive them)."""
    settings = settings or Settings()
    registry = ModelRegistry(settings.model_dir)
    rollout = RolloutManager(registry, settings.model_dir, settings.candidate_dir, settings.canary_share,
                             settings.rollout_auto, settings.shadow_decisions, settings.canary_decisions,
                             settings.rollout_tolerance)
    table = NodeTable(usage_onset_s=settings.usage_onset_s, usage_linger_s=settings.usage_linger_s)
    kube = KubeState.from_settings(settings.kubernetes, settings.kubeconfig, table)
    drift = DriftMonitor(registry, table, settings.drift_profile, settings.drift_window, settings.drift_confirmations,
                         settings.drift_retrain_command, settings.drift_retrain_cooldown_s,
                         settings.drift_retrain_cronjob, kube.api if kube is not None else None)
    prometheus = None
    if settings.prometheus_url:
        queries = {"cpu_utilization": settings.cpu_query, "memory_utilization": settings.memory_query,
                   "cpu_count": settings.cpu_count_query, "memory_total": settings.memory_total_query,
                   "network_receive_bytes_per_s": settings.network_query, "tcp_established": settings.tcp_query,
                   "disk_utilization": settings.disk_query, "power_idle_watts": settings.power_idle_query,
                   "power_active_watts": settings.power_active_query,
                   "power_usage_ratio": settings.power_usage_query}
        if settings.cpu_stddev_query:
            queries["cpu_utilization_stddev"] = settings.cpu_stddev_query
        if settings.latency_source == "prometheus":
            queries["latency_ms"] = settings.latency_query
        history = {"power_max_watts": settings.power_max_history_query} if settings.power_idle_query else {}
        verify = certificate_check(settings.prometheus_ca_file, settings.prometheus_insecure_skip_verify)
        prometheus = PrometheusSource(settings.prometheus_url, settings.prometheus_timeout_s, queries, history, verify)
    probes = (ProbeLatencySource(settings.probe_port, settings.probe_timeout_s)
              if settings.latency_source == "probe" else None)
    collector = StateCollector(table, kube, prometheus, probes, settings.refresh_interval_s, settings.stale_after_s,
                               settings.power_max_history_interval_s)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        await asyncio.to_thread(registry.load_all)
        await asyncio.to_thread(warm_up, settings)
        # only now: the compiled forward pass's np.dot loads scipy's OpenBLAS at its first call, and a
        # limit set before that never reached it (two threads at 500 nodes, not yet at 200; while the
        # other core was busy each request waited for a scheduler tick: 8 ms instead of 0.7)
        threadpool_limits(1)
        rollout.restore()
        rollout.watch()
        # pydantic and FastAPI leave millions of long-lived objects behind; freezing them
        # keeps full garbage collections from scanning them in the middle of a request.
        gc.collect()
        gc.freeze()
        # The watch and metrics threads share the GIL with the request loop; Python's default 5 ms
        # switch interval let a request wait that long behind them under a burst of bindings.
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        tasks = []
        if kube is not None:
            kube.start()
        if background:
            tasks.append(asyncio.create_task(collector.run(), name="snapshot-refresh"))
            if settings.model_watch_interval_s > 0:
                tasks.append(asyncio.create_task(_watch_models(), name="model-watch"))
            tasks.append(asyncio.create_task(_watch_drift(), name="drift-check"))
            if tls.ACTIVE is not None:
                tasks.append(asyncio.create_task(tls.ACTIVE.watch(settings.tls_reload_interval_s), name="tls-reload"))
        yield
        for task in tasks:
            task.cancel()
        if kube is not None:
            kube.stop()
        if probes is not None:
            await probes.close()
        if prometheus is not None:
            await prometheus.close()

    async def _watch_models():
        while True:
            await asyncio.sleep(settings.model_watch_interval_s)
            try:
                await asyncio.to_thread(registry.reload_changed)
                rollout.watch()
            except Exception:
                log.exception("model watch failed")

    async def _watch_drift():
        while True:
            await asyncio.sleep(settings.drift_interval_s)
            try:  # a Job or a command may be started: never on the request loop
                await asyncio.to_thread(drift.check)
            except Exception:
                log.exception("drift check failed")

    app = FastAPI(title="rlscore suggestion server", version="0.1.0", lifespan=lifespan, **NO_OPENTELEMETRY,
                  description="Scores feasible nodes for a pod with learned EE / LB / EL policies.")
    # innermost first: the scoring endpoints' dispatch runs after authentication and the body limit
    # (middlewares are built at the first request, when the router below holds its routes)
    scoring = APIRouter(route_class=DirectRoute)
    app.add_middleware(DirectDispatch, routes=scoring.routes, invalid=invalid_request)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(BearerAuth, token=settings.api_token, open_read_endpoints=settings.open_read_endpoints,
                       on_reject=lambda: metrics.INVALID.labels("401").inc())
    app.state.settings, app.state.registry, app.state.collector = settings, registry, collector
    app.state.rollout, app.state.drift = rollout, drift
    app.state.table = table
    rng = np.random.default_rng()

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        return invalid_request(exc)

    async def decide(pod_in: PodIn, requested_policy: str | None, names: list[str],
                     given: np.ndarray | None) -> Decision | JSONResponse:
        """Scores for the nodes, shared by /suggest and /v1/scores; a JSONResponse is an error."""
        start = time.perf_counter()
        if len(names) > settings.max_nodes:
            return _error(413, ["body", "nodes"], f"{len(names)} nodes is over the limit of {settings.max_nodes}")
        try:
            policy = resolve_policy(requested_policy, pod_in, settings.default_policy)
            pod = pod_request(pod_in, policy, (settings.el_default_soft_ms, settings.el_default_hard_ms))
        except (RequestFieldError, ValueError) as exc:
            loc = list(getattr(exc, "loc", ["body", "pod"]))
            return _error(422, loc, str(exc))

        drift.observe(pod.cpu_millicores)
        snapshot = await collector.current()  # never waits: a stale one refreshes in the background
        nodes, reasons, notes = assemble(names, given, table, snapshot, settings.stale_after_s,
                                         need_latency=policy == "EL", need_power=policy != "LB")
        scores, source, version, fallback, rule = score_nodes(policy, nodes, pod, registry, rng)
        staged = None
        if rollout.active(policy):
            staged = rollout.consider(policy, nodes, pod, (pod_in.namespace, pod_in.name), scores, version)
            scores, version = staged.scores, staged.version
            source = "candidate" if staged.scored_by == "candidate" else source
            rule = None if staged.scored_by == "candidate" else rule  # the log names the serving model's rule
            if staged.reason:
                fallback.append(staged.reason)
        for code in {code for code, _ in reasons}:
            metrics.DEGRADED.labels(code).inc()
        decision = Decision(policy, version, source, bool(reasons), [m for _, m in reasons + notes] + fallback,
                            nodes.names, scores)
        elapsed = time.perf_counter() - start
        answered, latency = metrics.answered(policy, source)
        answered.inc()
        latency.observe(elapsed)
        if decisions.isEnabledFor(logging.INFO):
            entry = {"pod": f"{pod_in.namespace}/{pod_in.name}", "policy": policy, "model_version": version,
                     "source": source, "degraded": decision.degraded, "top_node": nodes.names[int(np.argmax(scores))],
                     "nodes": len(nodes.names), "ms": round(elapsed * 1000, 3)}
            if rule is not None:
                entry["rule"] = rule
            if staged is not None:
                entry["rollout"] = {"stage": staged.stage, "scored_by": staged.scored_by, "agreed": staged.agreed}
            decisions.info(json.dumps(entry))
        return decision

    @scoring.post("/suggest", response_model=SuggestResponse,
              responses={401: {"description": "missing or wrong bearer token"},
                         413: {"description": "body or node count over the limit"},
                         422: {"description": "invalid request; the message names the field"}})
    @decoded_by(suggest_body.decode)  # documented as SuggestRequest, arrives as a SuggestBody
    async def suggest(body: SuggestRequest) -> Response:
        decision = await decide(body.pod, body.policy, body.names, body.given)
        if isinstance(decision, JSONResponse):
            return decision
        payload = {"policy": decision.policy, "model_version": decision.version, "source": decision.source,
                   "degraded": decision.degraded, "reasons": decision.reasons,
                   "scores": dict(zip(decision.names, decision.scores.tolist()))}
        return Response(orjson.dumps(payload), media_type="application/json")

    @scoring.post("/v1/scores", response_class=Response,
              summary="Scores in the compact format (the scheduler plugin's hot path)",
              description=compact.__doc__,
              openapi_extra={"requestBody": {"required": True, "content": {compact.CONTENT_TYPE: {
                  "schema": {"type": "string"},
                  "example": '{"pod":{"name":"web-1","namespace":"default","cpu_request_millicores":250}}'
                             '\nnode-a\nnode-b'}}}},
              responses={200: {"description": "one byte per node: its score 0..100, in request order",
                               "content": {compact.SCORES_CONTENT_TYPE: {}}},
                         401: {"description": "missing or wrong bearer token"},
                         413: {"description": "body or node count over the limit"},
                         422: {"description": "invalid request; the message names the field"}})
    async def compact_scores(request: Request) -> Response:
        try:
            header, names = compact.parse(await request.body())
        except compact.CompactError as exc:
            return _error(422, exc.loc, exc.message)
        decision = await decide(header.pod, header.policy, names, None)
        if isinstance(decision, JSONResponse):
            return decision
        return Response(decision.scores.astype(np.uint8).tobytes(), media_type=compact.SCORES_CONTENT_TYPE,
                        headers=compact.headers(decision.policy, decision.version, decision.source,
                                                decision.degraded, decision.reasons))

    app.include_router(scoring)

    @app.get("/state")
    async def node_state(node: list[str] = Query(default=[], max_length=1000,
                                                 description="node names (repeat the parameter)")) -> JSONResponse:
        """What the server would score these nodes with, and what it had to guess: the same state
        /suggest assembles for names only."""
        if not node:
            return _error(422, ["query", "node"], "name at least one node: /state?node=a&node=b")
        if len(set(node)) != len(node) or any(not name or len(name) > 253 for name in node):
            return _error(422, ["query", "node"], "node names must be unique, 1..253 characters")
        snapshot = await collector.current()
        nodes, reasons, notes = assemble(node, None, table, snapshot, settings.stale_after_s, need_latency=True,
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

    @app.get("/v1/node-metrics", summary="The measured node state and serving models, for in-process scoring")
    async def node_metrics() -> Response:
        """What the scheduler plugin's in-process scorer needs from the server, refreshed every few
        seconds off the scheduling path: every known node's measured columns (null: unknown), the
        model version serving each policy (null: the heuristic, which only the server runs), each
        policy's rollout stage (a policy in shadow or canary is scored here, where the candidate
        is), the settings that shape a pod's request, and the cluster's cpu requests now and at
        their recent peak (null: unknown)."""
        snapshot = collector.snapshot
        names, columns = await asyncio.to_thread(export_metrics, table)
        requested, peak = table.cluster_cpu_requested()
        payload = {"feature_spec_version": FEATURE_SPEC_VERSION, "default_policy": settings.default_policy,
                   "el_default_latency_ms": {"soft": settings.el_default_soft_ms, "hard": settings.el_default_hard_ms},
                   "stale_after_s": settings.stale_after_s,
                   "snapshot_age_s": snapshot.age() if snapshot.taken_at else None,
                   "model_versions": {p: (m.version if (m := registry.get(p)) and m.heuristic is None else None)
                                      for p in POLICIES},
                   "rollout_stages": rollout.stages(),
                   "cluster_cpu_requested_millicores": _finite_or_none(requested),
                   "recent_peak_cpu_requested_millicores": _finite_or_none(peak),
                   "nodes": {"names": names, **columns}}
        return Response(orjson.dumps(payload), media_type="application/json")

    @app.get("/v1/models/{policy}", summary="A serving model's weights as plain JSON",
             responses={404: {"description": "the policy is served by its heuristic (no valid model)"},
                        422: {"description": "unknown policy"}})
    async def model_weights(policy: str) -> Response:
        try:
            name = normalize_policy(policy)
        except ValueError as exc:
            return _error(422, ["path", "policy"], str(exc))
        model = registry.get(name)
        if model is None:
            return _error(404, ["path", "policy"], f"no valid {name} model is loaded; the heuristic serves it")
        if model.heuristic is not None:
            return _error(404, ["path", "policy"], f"{name} is served by the heuristic {model.heuristic} "
                                                   f"({model.version}), which has no weights")
        return Response(orjson.dumps(model.export()), media_type="application/json")

    @app.get("/healthz")
    async def healthz() -> dict:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        """Ready once every model had a load attempt, a metrics snapshot was attempted, and the
        Kubernetes watch cache (when there is one) has listed nodes and pods."""
        kube_synced = kube is None or kube.synced
        ready = registry.ready() and collector.attempted.is_set() and kube_synced
        return JSONResponse({"ready": ready, "models_loaded": registry.ready(),
                             "snapshot_attempted": collector.attempted.is_set(), "kubernetes_synced": kube_synced},
                            status_code=200 if ready else 503)

    @app.get("/metrics")
    async def prometheus_metrics() -> Response:
        snap = collector.snapshot
        metrics.SNAPSHOT_AGE.set(snap.age() if snap.taken_at else -1)
        metrics.SNAPSHOT_NODES.set(snap.nodes)
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/policies")
    async def policies() -> dict:
        snap = collector.snapshot
        return {"default_policy": settings.default_policy, "policies": registry.status(),
                "rollout": rollout.status(), "drift": drift.status(),
                "snapshot": {"age_s": snap.age() if snap.taken_at else None, "nodes": snap.nodes,
                             "problems": snap.problems}}

    @app.get("/v1/rollout", summary="Each policy's rollout: stage, candidate, agreement, placement costs, history")
    async def rollout_status() -> dict:
        return rollout.status()

    async def rollout_step(policy: str, step) -> JSONResponse:
        if not settings.api_token:
            return _error(403, ["header", "authorization"],
                          "the rollout API changes what serves: set RLSCORE_API_TOKEN to enable it")
        try:
            name = normalize_policy(policy)
        except ValueError as exc:
            return _error(422, ["path", "policy"], str(exc))
        try:
            return JSONResponse(step(name))
        except RolloutError as exc:
            return _error(409, ["path", "policy"], str(exc))

    rollout_responses = {401: {"description": "missing or wrong bearer token"},
                         403: {"description": "no API token configured: the rollout API is off"},
                         409: {"description": "the step cannot be taken now; the message says why"}}

    @app.post("/v1/rollout/{policy}/candidate", responses=rollout_responses,
              summary="Stage the candidate file now (shadow), if its gate verdict passes")
    async def rollout_candidate(policy: str) -> JSONResponse:
        return await rollout_step(policy, lambda p: rollout.stage_candidate(p, "api"))

    @app.post("/v1/rollout/{policy}/promote", responses=rollout_responses,
              summary="Advance one stage: shadow -> canary -> serving")
    async def rollout_promote(policy: str) -> JSONResponse:
        return await rollout_step(policy, lambda p: rollout.promote(p, "api"))

    @app.post("/v1/rollout/{policy}/rollback", responses=rollout_responses,
              summary="Drop the candidate; without one, put the previous serving model back")
    async def rollout_rollback(policy: str) -> JSONResponse:
        return await rollout_step(policy, lambda p: rollout.rollback(p, "api"))

    @app.post("/models/reload")
    async def reload_models() -> dict:
        await asyncio.to_thread(registry.load_all)
        rollout.watch()
        return {"policies": registry.status()}

    return app
