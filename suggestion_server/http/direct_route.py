"""The scoring endpoints without FastAPI's per-request machinery.

For a request that scores 100 nodes, FastAPI's router (~90 us to match a path in 0.165), its
middlewares, its JSON decoding with the standard library and its dependency solving cost as much as
the scoring itself (profiled with py-spy and cProfile). `DirectRoute` is an APIRoute whose handler
validates a pydantic body straight from the bytes (`model_validate_json`: JSON parsed in
pydantic-core) or hands a `Request` parameter the request; the endpoint's signature still documents
it in OpenAPI. `DirectDispatch`, a middleware inside authentication and the body limit, sends
requests for those routes to the same handlers before the router sees them. Validation errors are
located under "body" as FastAPI's are, and answered by the app's own formatter. An endpoint marked
`decoded_by(decoder)` gets what the decoder makes of the bytes instead of the model (the model still
documents the body); the decoder raises pydantic's ValidationError as the model would.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import get_type_hints

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.responses import Response
from pydantic import BaseModel, ValidationError


def decoded_by(decoder: Callable[[bytes], object]):
    def mark(endpoint):
        endpoint.direct_decoder = decoder
        return endpoint
    return mark


class DirectRoute(APIRoute):
    def get_route_handler(self):
        endpoint = self.endpoint
        hints = {name: hint for name, hint in get_type_hints(endpoint).items() if name != "return"}
        if len(hints) != 1:
            raise TypeError(f"{endpoint.__name__}: a DirectRoute endpoint takes one parameter (a Request or a "
                            f"pydantic body), not {sorted(hints)}")
        (kind,) = hints.values()
        if kind is Request:
            return endpoint
        if not (isinstance(kind, type) and issubclass(kind, BaseModel)):
            raise TypeError(f"{endpoint.__name__}: {kind!r} is neither a Request nor a pydantic model")

        decode = getattr(endpoint, "direct_decoder", kind.model_validate_json)

        async def handle(request: Request):
            try:
                body = decode(await request.body())
            except ValidationError as exc:
                raise RequestValidationError([{**error, "loc": ("body", *error["loc"])}
                                              for error in exc.errors(include_url=False)]) from None
            except RecursionError:  # a decoder that recurses per level of nesting
                raise RequestValidationError([{"loc": ("body",), "type": "json_invalid",
                                               "msg": "the body is nested too deep"}]) from None
            return await endpoint(body)

        return handle


class DirectDispatch:
    def __init__(self, app, routes: list, invalid: Callable[[RequestValidationError], Response]):
        self.app = app
        self.handlers = {(method, route.path): route.get_route_handler()
                         for route in routes if isinstance(route, DirectRoute) for method in route.methods}
        self.invalid = invalid

    async def __call__(self, scope, receive, send):
        handler = self.handlers.get((scope.get("method"), scope.get("path"))) if scope["type"] == "http" else None
        if handler is None:
            return await self.app(scope, receive, send)
        request = Request(scope, receive, send)
        try:
            response = await handler(request)
        except RequestValidationError as exc:
            response = self.invalid(exc)
        await response(scope, receive, send)
