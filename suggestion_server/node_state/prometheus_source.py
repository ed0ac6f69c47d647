"""Node metrics from Prometheus: one query per metric for all nodes, never one per node.

The queries run on the server's event loop (httpx's async client) and their answers are decoded by
msgspec into just the labels that place a series. Read through prometheus-api-client in a thread,
ten 1 000-series answers held the GIL for ~18 ms per refresh against the requests being scored. On
the loop the work is about as much (~16 ms, most of it httpx's), but in slices between which the
loop serves the requests that arrived: the longest, decoding and placing one answer, ~0.6 ms.
"""

from __future__ import annotations

import asyncio
import math
import ssl
from pathlib import Path

import httpx
import msgspec

from suggestion_server import metrics

# answers larger than this are decoded in a worker thread; every this many series the loop yields
PARSE_INLINE_BYTES = 64 * 1024
YIELD_EVERY_SERIES = 500


class _Labels(msgspec.Struct):
    """The labels that say which node a series belongs to; the others are skipped unread."""

    node: str = ""
    node_name: str = ""  # Kepler's
    instance: str = ""


class _Series(msgspec.Struct):
    metric: _Labels
    value: tuple[float, str]


class _Data(msgspec.Struct):
    resultType: str
    result: msgspec.Raw


class _Answer(msgspec.Struct):
    status: str
    data: _Data | None = None
    errorType: str = ""
    error: str = ""


_ANSWER = msgspec.json.Decoder(_Answer)
_VECTOR = msgspec.json.Decoder(list[_Series])


class QueryError(Exception):
    """Prometheus refused or failed a query; the message is Prometheus's own."""


def series_node(labels: _Labels, ip_to_node: dict[str, str]) -> str | None:
    """The node a series belongs to: its `node` (or Kepler's `node_name`) label, else its `instance`
    host mapped through the nodes' InternalIPs (node_exporter's instance is ip:port), else the
    instance host itself."""
    if labels.node:
        return labels.node
    if labels.node_name:
        return labels.node_name
    host = labels.instance
    if not host:
        return None
    if host.startswith("["):  # [ipv6]:port
        host = host[1:].split("]", 1)[0]
    elif host.count(":") == 1:
        host = host.rsplit(":", 1)[0]
    return ip_to_node.get(host, host)


def instant_vector(status: int, body: bytes) -> list[_Series]:
    """The series of an instant query's answer; QueryError for an error or another result type."""
    try:
        answer = _ANSWER.decode(body)
    except (msgspec.DecodeError, RecursionError):
        raise QueryError(f"HTTP {status}, not a Prometheus API answer ({len(body)} bytes)") from None
    if answer.status != "success" or answer.data is None:
        raise QueryError(f"HTTP {status}: {answer.errorType or 'error'}: {answer.error}")
    if answer.data.resultType != "vector":
        raise QueryError(f"the query gives a {answer.data.resultType}, not an instant vector (one value per node)")
    try:
        return _VECTOR.decode(answer.data.result)
    except msgspec.DecodeError as exc:
        raise QueryError(f"unexpected series in the answer: {str(exc)[:120]}") from None
    except RecursionError:
        raise QueryError("unexpected series in the answer: nested too deep") from None


class AnswerTooLarge(QueryError):
    """An answer over the size limit (read no further)."""


def certificate_check(ca_file: Path | None = None, insecure: bool = False) -> ssl.SSLContext | bool:
    """How an https Prometheus's certificate is checked: against `ca_file`, not at all when
    `insecure`, else against the system's CAs. A CA file that cannot be read raises here, at start,
    with the reason (OSError, ssl.SSLError)."""
    if insecure:
        return False
    if ca_file is not None:
        return ssl.create_default_context(cafile=str(ca_file))
    return True


class PrometheusSource:
    """`timeout_s` bounds the whole of each answer (a Prometheus that trickles a byte a second is cut
    off, not waited for read by read); `max_answer_bytes` its size."""

    def __init__(self, url: str, timeout_s: float, queries: dict[str, str],
                 history_queries: dict[str, str] | None = None, verify: ssl.SSLContext | bool = True,
                 max_answer_bytes: int = 16 * 1024 * 1024):
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.max_answer_bytes = max_answer_bytes
        self.verify = verify
        self.queries = {field: q for field, q in queries.items() if q}
        # run now and then rather than on every refresh: they look back hours
        self.history_queries = {field: q for field, q in (history_queries or {}).items() if q}
        self._client: httpx.AsyncClient | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None

    def _http(self) -> httpx.AsyncClient:
        """One kept-alive client per event loop (a client's connections belong to the loop they
        were made on). No retries: the background refresh retries, and a down Prometheus must
        cost one timeout per query, not several."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            self._client = httpx.AsyncClient(base_url=self.url, timeout=self.timeout_s, verify=self.verify)
            self._client_loop = loop
        return self._client

    async def close(self) -> None:
        if self._client is not None and self._client_loop is asyncio.get_running_loop():
            await self._client.aclose()
        self._client = self._client_loop = None

    async def collect(self, ip_to_node: dict[str, str]) -> tuple[dict[str, dict[str, float]], list[str]]:
        """Per node, the fields whose query answered; and a problem per query that failed."""
        return await self._run(self.queries, ip_to_node)

    async def collect_history(self, ip_to_node: dict[str, str]) -> tuple[dict[str, dict[str, float]], list[str]]:
        """As `collect`, for the history queries."""
        return await self._run(self.history_queries, ip_to_node)

    async def _run(self, queries: dict[str, str], ip_to_node: dict[str, str]
                   ) -> tuple[dict[str, dict[str, float]], list[str]]:
        values: dict[str, dict[str, float]] = {}
        problems: list[str] = []
        client = self._http()
        for field, query in queries.items():
            try:
                async with asyncio.timeout(self.timeout_s):
                    status, body = await self._get(client, query)
                if len(body) > PARSE_INLINE_BYTES:  # milliseconds of decoding: off the loop that answers /suggest
                    vector = await asyncio.to_thread(instant_vector, status, body)
                else:
                    vector = instant_vector(status, body)
            except (httpx.HTTPError, QueryError, TimeoutError) as exc:  # refused, timed out, too large, PromQL error
                reason = ("timeout" if isinstance(exc, (TimeoutError, httpx.TimeoutException)) else
                          "too_large" if isinstance(exc, AnswerTooLarge) else
                          "malformed" if isinstance(exc, QueryError) else "error")
                metrics.PROMETHEUS_ERRORS.labels(field, reason).inc()
                detail = f"no answer within {self.timeout_s:g} s" if reason == "timeout" else str(exc)[:200]
                problems.append(f"prometheus {field}: {type(exc).__name__}: {detail}")
                continue
            for k, series in enumerate(vector):
                if k and k % YIELD_EVERY_SERIES == 0:
                    await asyncio.sleep(0)  # thousands of series: let /suggest in between
                node = series_node(series.metric, ip_to_node)
                try:
                    value = float(series.value[1])
                except ValueError:
                    continue
                if node is None or not math.isfinite(value):
                    continue  # NaN from a division by zero, or a series we cannot place
                values.setdefault(node, {})[field] = value
            await asyncio.sleep(0)  # requests that arrived meanwhile go first
        return values, problems

    async def _get(self, client: httpx.AsyncClient, query: str) -> tuple[int, bytes]:
        """One instant query's status and body, read no further than `max_answer_bytes`."""
        # PromQL durations take integers: "1500ms", not "1.5s"
        params = {"query": query, "timeout": f"{int(self.timeout_s * 1000)}ms"}
        async with client.stream("GET", "/api/v1/query", params=params) as response:
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > self.max_answer_bytes:
                raise AnswerTooLarge(f"an answer of {int(declared)} bytes, over the {self.max_answer_bytes}-byte limit")
            chunks, size = [], 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > self.max_answer_bytes:
                    raise AnswerTooLarge(f"an answer over the {self.max_answer_bytes}-byte limit")
                chunks.append(chunk)
            return response.status_code, b"".join(chunks)
