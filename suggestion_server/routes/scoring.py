"""Scoring: POST /suggest (the contract every caller relies on) and POST /v1/scores (the plugin's
compact hot path). Both run through `decide`: the policy, the pod as the policy sees it, the node state
assembled from the request and the snapshot, the model's scores (or the fallback rule's), the
rollout's say, and one decision log line and metric per answer."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass

import numpy as np
import orjson
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from suggestion_server import metrics
from suggestion_server.http import compact, suggest_body
from suggestion_server.http.direct_route import DirectRoute, decoded_by
from suggestion_server.http.errors import error
from suggestion_server.http.schemas import PodIn, SuggestRequest, SuggestResponse
from suggestion_server.node_state.snapshot import assemble
from suggestion_server.pods import RequestFieldError, pod_request, resolve_policy
from suggestion_server.scoring import score_nodes
from suggestion_server.services import Services

decisions = logging.getLogger("rlscore.decisions")


@dataclass
class Decision:
    policy: str
    version: str | None
    source: str
    degraded: bool
    reasons: list[str]
    names: list[str]
    scores: np.ndarray  # integers 0..100, one per name


def router(services: Services) -> APIRouter:
    """The scoring endpoints, dispatched without FastAPI's per-request machinery (DirectRoute)."""
    s = services
    settings = s.settings
    scoring = APIRouter(route_class=DirectRoute)

    async def decide(pod_in: PodIn, requested_policy: str | None, names: list[str],
                     given: np.ndarray | None) -> Decision | JSONResponse:
        """Scores for the nodes, shared by /suggest and /v1/scores; a JSONResponse is an error."""
        start = time.perf_counter()
        if len(names) > settings.max_nodes:
            return error(413, ["body", "nodes"], f"{len(names)} nodes is over the limit of {settings.max_nodes}")
        try:
            policy = resolve_policy(requested_policy, pod_in, settings.default_policy)
            pod = pod_request(pod_in, policy, settings.el_defaults)
        except (RequestFieldError, ValueError) as exc:
            return error(422, list(getattr(exc, "loc", ["body", "pod"])), str(exc))

        s.drift.observe(pod.cpu_millicores)
        snapshot = await s.collector.current()  # never waits: a stale one refreshes in the background
        nodes, reasons, notes = assemble(names, given, s.table, snapshot, settings.stale_after_s,
                                         need_latency=policy == "EL", need_power=policy != "LB")
        scores, source, version, fallback, rule = score_nodes(policy, nodes, pod, s.registry, s.rng)
        staged = None
        if s.rollout.active(policy):
            staged = s.rollout.consider(policy, nodes, pod, (pod_in.namespace, pod_in.name), scores, version)
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
                             415: {"description": "the body is not application/json"},
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
            return error(422, exc.loc, exc.message)
        decision = await decide(header.pod, header.policy, names, None)
        if isinstance(decision, JSONResponse):
            return decision
        return Response(decision.scores.astype(np.uint8).tobytes(), media_type=compact.SCORES_CONTENT_TYPE,
                        headers=compact.headers(decision.policy, decision.version, decision.source,
                                                decision.degraded, decision.reasons))

    return scoring
