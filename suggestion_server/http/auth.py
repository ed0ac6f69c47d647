"""Bearer-token authentication for every endpoint, as an ASGI middleware in front of the app.

With a token configured, a request without the right `Authorization: Bearer <token>` gets a 401
before anything reads its body, whatever the path: endpoints that change state (POST
/models/reload, the rollout API) and the scoring ones, including the model weights and node state
the in-process scorer fetches (/v1/models/*, /v1/node-metrics), always need it. Kubelet's probes
(/healthz, /readyz) never do. The read-only endpoints (GET /policies, /state, /metrics, the API docs)
need it too unless `open_read_endpoints` lets them through, e.g. for a Prometheus without a token.
"""

from __future__ import annotations

import hmac

from starlette.responses import JSONResponse

PROBES = frozenset({"/healthz", "/readyz"})
READ_ONLY = frozenset({"/policies", "/state", "/metrics", "/v1/rollout", "/docs", "/docs/oauth2-redirect", "/openapi.json",
                       "/redoc"})


class BearerAuth:
    def __init__(self, app, token: str | None, open_read_endpoints: bool = False, on_reject=None):
        self.app = app
        self.expected = f"Bearer {token}".encode() if token else None
        self.open_read = open_read_endpoints
        self.on_reject = on_reject

    def exempt(self, method: str, path: str) -> bool:
        if path in PROBES:
            return True
        return self.open_read and method in ("GET", "HEAD") and path in READ_ONLY

    async def __call__(self, scope, receive, send):
        if self.expected is None or scope["type"] != "http" or self.exempt(scope["method"], scope["path"]):
            return await self.app(scope, receive, send)
        header = b""
        for name, value in scope.get("headers") or ():
            if name == b"authorization":
                header = value
                break
        if hmac.compare_digest(header, self.expected):  # constant time: no timing oracle on the token
            return await self.app(scope, receive, send)
        if self.on_reject is not None:
            self.on_reject()
        response = JSONResponse({"detail": [{"loc": ["header", "authorization"], "msg": "missing or wrong bearer token",
                                             "type": "unauthorized"}]}, status_code=401,
                                headers={"WWW-Authenticate": "Bearer"})
        await response(scope, receive, send)
