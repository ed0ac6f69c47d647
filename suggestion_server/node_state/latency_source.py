"""Node-to-user latency straight from each node's probe (GET /latency), all nodes concurrently."""

from __future__ import annotations

import asyncio
import math

import httpx


class ProbeLatencySource:
    def __init__(self, port: int, timeout_s: float, max_concurrency: int = 256):
        self.port = port
        self.timeout_s = timeout_s
        self._client = httpx.AsyncClient(timeout=timeout_s)
        self._limit = asyncio.Semaphore(max_concurrency)

    async def _one(self, ip: str) -> float | None:
        host = f"[{ip}]" if ":" in ip else ip
        async with self._limit:
            try:
                resp = await self._client.get(f"http://{host}:{self.port}/latency")
                resp.raise_for_status()
                value = float(resp.json()["latency_ms"])
            except (httpx.HTTPError, KeyError, TypeError, ValueError):
                return None
        return value if math.isfinite(value) and value >= 0 else None

    async def collect(self, node_ips: dict[str, str]) -> tuple[dict[str, float], list[str]]:
        names = list(node_ips)
        results = await asyncio.gather(*(self._one(node_ips[n]) for n in names))
        latencies = {n: v for n, v in zip(names, results) if v is not None}
        missing = len(names) - len(latencies)
        problems = [f"latency probe: no answer from {missing} of {len(names)} nodes"] if missing else []
        return latencies, problems

    async def close(self) -> None:
        await self._client.aclose()
