"""The suggestion server's app: services built once from the settings, a router per concern, and the
middlewares that bound and authenticate every request (`rlscore-server` serves `create_app`)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import inspect
import sys

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from threadpoolctl import threadpool_limits

from suggestion_server import metrics
from suggestion_server.config import Settings
from suggestion_server.http.auth import BearerAuth
from suggestion_server.http.direct_route import DirectDispatch
from suggestion_server.http.errors import invalid_request
from suggestion_server.http.limits import BodyLimit
from suggestion_server.routes import models, operations, scoring
from suggestion_server.services import Services

# The watch and metrics threads share the GIL with the request loop; Python's default 5 ms switch
# interval let a request wait that long behind them under a burst of bindings.
SWITCH_INTERVAL_S = 0.0005
# Newer FastAPI looks up OpenTelemetry providers on every request (three environment reads, ~10% of a
# 100-node request); the server reports through Prometheus, so that is switched off where it exists.
NO_OPENTELEMETRY = ({"telemetry": {"tracing": False, "metrics": False, "logs": False}}
                    if "telemetry" in inspect.signature(FastAPI).parameters else {})


def create_app(settings: Settings | None = None, *, background: bool = True) -> FastAPI:
    """The app; `background=False` skips the refresh and watch loops (tests drive them)."""
    services = Services.build(settings or Settings())

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        await asyncio.to_thread(services.registry.load_all)
        await asyncio.to_thread(services.warm_up)
        # only now: numpy's BLAS is loaded by the first forward pass, and a limit set before that never
        # reached it (one request's product is small: a second thread only waits for a core)
        threadpool_limits(1)
        services.rollout.restore()
        services.rollout.watch()
        # pydantic and FastAPI leave millions of long-lived objects behind; freezing them keeps full
        # garbage collections from scanning them in the middle of a request
        gc.collect()
        gc.freeze()
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        if services.kube is not None:
            services.kube.start()
        tasks = services.background_tasks() if background else []
        yield
        for task in tasks:
            task.cancel()
        await services.close()

    app = FastAPI(title="rlscore suggestion server", version="0.1.0", lifespan=lifespan, **NO_OPENTELEMETRY,
                  description="Scores feasible nodes for a pod with learned EE / LB / EL policies.")
    scoring_routes = scoring.router(services)
    # innermost first: the scoring endpoints' dispatch runs after authentication and the body limit
    app.add_middleware(DirectDispatch, routes=scoring_routes.routes, invalid=invalid_request)
    app.add_middleware(BodyLimit, max_bytes=services.settings.max_body_bytes)
    app.add_middleware(BearerAuth, token=services.settings.api_token,
                       open_read_endpoints=services.settings.open_read_endpoints,
                       on_reject=lambda: metrics.INVALID.labels("401").inc())
    app.state.services = services

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        return invalid_request(exc)

    app.include_router(scoring_routes)
    app.include_router(models.router(services))
    app.include_router(operations.router(services))
    return app
