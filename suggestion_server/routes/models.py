"""Models and rollout: what serves each policy (GET /policies), the served weights for the plugin's
in-process scorer (GET /v1/models/{policy}), reloading (POST /models/reload), and the staged rollout
of retrained candidates (/v1/rollout). The routes that change what serves need the API token, or an
explicit RLSCORE_ALLOW_UNAUTHENTICATED_CHANGES; their bodies, if any, must be JSON."""

from __future__ import annotations

import asyncio

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from rlscore.core.state import normalize_policy
from suggestion_server.http.errors import error
from suggestion_server.lifecycle.rollout import RolloutError
from suggestion_server.services import Services

CHANGE_RESPONSES = {401: {"description": "missing or wrong bearer token"},
                    403: {"description": "no API token configured: changes are closed"},
                    409: {"description": "the step cannot be taken now; the message says why"},
                    415: {"description": "a body that is not application/json"}}


def changes_closed(services: Services, request: Request) -> JSONResponse | None:
    """Why a state-changing request is refused before it runs, or None: without a token such routes
    are closed unless the operator opened them, and a body must be JSON (a cross-site form or
    text/plain POST is not)."""
    settings = services.settings
    if not settings.api_token and not settings.allow_unauthenticated_changes:
        return error(403, ["header", "authorization"], "this route changes what serves: set RLSCORE_API_TOKEN "
                     "(or RLSCORE_ALLOW_UNAUTHENTICATED_CHANGES=true on a trusted network) to enable it")
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type and content_type != "application/json":
        return error(415, ["header", "content-type"], f"a body of type {content_type[:60]!r}: send application/json "
                                                      "or no body")
    return None


def router(services: Services) -> APIRouter:
    s = services
    models = APIRouter()

    @models.get("/policies", summary="Each policy's serving model, errors, rollout, drift and snapshot state")
    async def policies() -> dict:
        snap = s.collector.snapshot
        return {"default_policy": s.settings.default_policy, "policies": s.registry.status(),
                "rollout": s.rollout.status(), "drift": s.drift.status(),
                "snapshot": {"age_s": snap.age() if snap.taken_at else None, "nodes": snap.nodes,
                             "problems": snap.problems, "known_nodes": len(s.table)}}

    @models.get("/v1/models/{policy}", summary="A serving model's weights as plain JSON",
                responses={404: {"description": "the policy is served by its heuristic (no valid model)"},
                           422: {"description": "unknown policy"}})
    async def model_weights(policy: str) -> Response:
        try:
            name = normalize_policy(policy)
        except ValueError as exc:
            return error(422, ["path", "policy"], str(exc))
        model = s.registry.get(name)
        if model is None:
            return error(404, ["path", "policy"], f"no valid {name} model is loaded; the heuristic serves it")
        if model.heuristic is not None:
            return error(404, ["path", "policy"], f"{name} is served by the heuristic {model.heuristic} "
                                                  f"({model.version}), which has no weights")
        return Response(orjson.dumps(model.export()), media_type="application/json")

    @models.post("/models/reload", responses=CHANGE_RESPONSES,
                 summary="Load the model files that changed (or every one, with force=true)")
    async def reload_models(request: Request, force: bool = False) -> JSONResponse:
        if (refused := changes_closed(s, request)) is not None:
            return refused
        reloaded = await asyncio.to_thread(s.registry.reload_changed, force)
        s.rollout.watch()
        return JSONResponse({"reloaded": reloaded, "policies": s.registry.status()})

    @models.get("/v1/rollout", summary="Each policy's rollout: stage, candidate, agreement, placement costs, history")
    async def rollout_status() -> dict:
        return s.rollout.status()

    async def rollout_step(request: Request, policy: str, step) -> JSONResponse:
        if (refused := changes_closed(s, request)) is not None:
            return refused
        try:
            name = normalize_policy(policy)
        except ValueError as exc:
            return error(422, ["path", "policy"], str(exc))
        try:
            return JSONResponse(step(name))
        except RolloutError as exc:
            return error(409, ["path", "policy"], str(exc))

    @models.post("/v1/rollout/{policy}/candidate", responses=CHANGE_RESPONSES,
                 summary="Stage the candidate file now (shadow), if its gate verdict passes")
    async def rollout_candidate(request: Request, policy: str) -> JSONResponse:
        return await rollout_step(request, policy, lambda p: s.rollout.stage_candidate(p, "api"))

    @models.post("/v1/rollout/{policy}/promote", responses=CHANGE_RESPONSES,
                 summary="Advance one stage: shadow -> canary -> serving")
    async def rollout_promote(request: Request, policy: str) -> JSONResponse:
        return await rollout_step(request, policy, lambda p: s.rollout.promote(p, "api"))

    @models.post("/v1/rollout/{policy}/rollback", responses=CHANGE_RESPONSES,
                 summary="Drop the candidate; without one, put the previous serving model back")
    async def rollout_rollback(request: Request, policy: str) -> JSONResponse:
        return await rollout_step(request, policy, lambda p: s.rollout.rollback(p, "api"))

    return models
