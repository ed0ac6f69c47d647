"""uvicorn's HTTP protocol with TCP_NODELAY on every connection, and bounds on what a client may hold.

TCP_NODELAY: with --workers > 1 uvicorn binds the listening socket itself as socket(AF_INET,
SOCK_STREAM), whose `proto` is 0; asyncio only disables Nagle's algorithm for sockets whose proto is
IPPROTO_TCP, so every worker connection kept Nagle on and, against the client's delayed ACK, each
response waited ~40 ms (measured: 48 ms p50 with 2 workers vs 2.7 ms with 1).

Bounds: uvicorn times out idle keep-alive connections but not a client that sends its headers or body
a byte at a time, and its httptools parser takes headers of any size. Here a request's headers must
arrive within `header_timeout_s` of its first byte and be at most `max_header_bytes`, and its body
must arrive within `header_timeout_s` of its headers; otherwise the connection is answered (431) or
closed. The limits come from RLSCORE_HEADER_TIMEOUT_S and RLSCORE_MAX_HEADER_BYTES (every worker
process reads them from the environment, as it reads the rest of its settings).
"""

from __future__ import annotations

import contextlib
import os
import socket

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as _Base
except ImportError:  # httptools is optional
    from uvicorn.protocols.http.h11_impl import H11Protocol as _Base

_END_OF_HEADERS = b"\r\n\r\n"


def _env(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


class BoundedHTTPProtocol(_Base):
    header_timeout_s = _env("RLSCORE_HEADER_TIMEOUT_S", 10.0)
    max_header_bytes = int(_env("RLSCORE_MAX_HEADER_BYTES", 64 * 1024))

    def connection_made(self, transport) -> None:
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._in_body = False  # between a request's headers and its end
        self._header_bytes = 0
        self._tail = b""  # the last bytes of the previous chunk, where a header end may begin
        self._deadline = None
        super().connection_made(transport)

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.header_timeout_s, self._too_slow)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _too_slow(self) -> None:
        self._deadline = None
        if self.transport is not None and not self.transport.is_closing():
            self.logger.info("closing a connection whose request did not arrive within %g s", self.header_timeout_s)
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if not self._in_body:
            if self._deadline is None:  # the first byte of a request
                self._arm()
            seen = self._tail + data
            end = seen.find(_END_OF_HEADERS)
            self._header_bytes += (len(data) if end < 0 else max(end + 4 - len(self._tail), 0))
            self._tail = seen[-3:] if end < 0 else b""
            if self._header_bytes > self.max_header_bytes:
                self._refuse_headers()
                return
        super().data_received(data)

    def _refuse_headers(self) -> None:
        self._disarm()
        message = f"request headers over {self.max_header_bytes} bytes".encode()
        self.transport.write(b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain\r\n"
                             b"content-length: " + str(len(message)).encode() + b"\r\nconnection: close\r\n\r\n"
                             + message)
        self.transport.close()

    def on_headers_complete(self) -> None:
        self._in_body, self._header_bytes, self._tail = True, 0, b""
        self._arm()  # the body has as long again
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._in_body = False
        self._disarm()
        super().on_message_complete()

    def connection_lost(self, exc) -> None:
        self._disarm()
        super().connection_lost(exc)
