"""Error answers: a 4xx whose message names the field, never the input itself, counted by status."""

from __future__ import annotations

from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from suggestion_server import metrics
from suggestion_server.http.schemas import PATTERN_MESSAGES


def error(status: int, loc: list, message: str) -> JSONResponse:
    metrics.INVALID.labels(str(status)).inc()
    return JSONResponse({"detail": [{"loc": loc, "msg": message, "type": "value_error"}]}, status_code=status)


def invalid_request(exc: RequestValidationError) -> JSONResponse:
    """A 422 naming each field; the input itself is never echoed back."""
    metrics.INVALID.labels("422").inc()
    errors = [{"loc": list(e.get("loc", [])), "type": e.get("type", ""),
               "msg": PATTERN_MESSAGES.get((e.get("ctx") or {}).get("pattern"), e.get("msg", ""))}
              for e in exc.errors()]
    return JSONResponse({"detail": errors}, status_code=422)
