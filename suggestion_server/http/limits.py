"""ASGI middleware that bounds what a request may send: its body's size (a 413 before anything parses
it)."""

from __future__ import annotations

from suggestion_server.http.errors import error


class BodyLimit:
    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "POST":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            return await error(413, ["body"], f"body of {int(declared)} bytes is over the "
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
            await error(413, ["body"], f"body is over the {self.max_bytes}-byte limit")(scope, receive, send)


class _BodyTooLarge(Exception):
    pass
