"""`rlscore-latency-probe`: runs on every node (a DaemonSet) and measures the round-trip time from
the node to the configured user endpoints every few seconds.

TCP connect time by default (works unprivileged, through most firewalls); ICMP echo with
`--method icmp` where the kernel allows unprivileged ping sockets (net.ipv4.ping_group_range).
Serves GET /latency (JSON) and GET /metrics with the gauge rlscore_node_user_latency_ms{node,target}, from
the standard library's HTTP server: the probe runs on every node, and its image carries nothing but
Python, prometheus_client and the metrics contract.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import socket
import struct
import sys
import time

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Gauge, generate_latest

from rlscore.core.node_metrics import LATENCY_METRIC

log = logging.getLogger("rlscore.probe")


def parse_target(text: str, default_port: int = 443) -> tuple[str, int]:
    """host, host:port or [ipv6]:port."""
    text = text.strip()
    try:
        if text.startswith("["):
            host, _, rest = text[1:].partition("]")
            port = int(rest.lstrip(":")) if rest.strip(":") else default_port
        elif text.count(":") == 1:
            host, port_text = text.split(":")
            port = int(port_text)
        else:
            host, port = text, default_port
    except ValueError:
        host, port = "", 0
    if not host or not 0 < port < 65536:
        raise ValueError(f"bad target {text!r}: expected host[:port] with a port in 1..65535")
    return host, port


async def tcp_rtt_ms(host: str, port: int, timeout_s: float) -> float | None:
    start = time.perf_counter()
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
    except (OSError, asyncio.TimeoutError):
        return None
    elapsed = (time.perf_counter() - start) * 1000.0
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return elapsed


def _icmp_checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF


def icmp_rtt_ms_blocking(host: str, timeout_s: float) -> float | None:
    """One echo over an unprivileged ICMP datagram socket (IPv4)."""
    try:
        address = socket.gethostbyname(host)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP) as sock:
            sock.settimeout(timeout_s)
            header = struct.pack("!BBHHH", 8, 0, 0, 0, 1)
            payload = b"rlscore-probe"
            packet = struct.pack("!BBHHH", 8, 0, _icmp_checksum(header + payload), 0, 1) + payload
            start = time.perf_counter()
            sock.sendto(packet, (address, 0))
            sock.recvfrom(1024)
            return (time.perf_counter() - start) * 1000.0
    except (OSError, socket.timeout):
        return None


class Prober:
    def __init__(self, node: str, targets: list[str], method: str, interval_s: float, timeout_s: float):
        self.node, self.method = node, method
        self.targets = {t: parse_target(t) for t in targets}
        self.interval_s, self.timeout_s = interval_s, timeout_s
        self.results: dict[str, float | None] = {t: None for t in targets}
        self.measured_at: float | None = None
        self.registry = CollectorRegistry()
        self.gauge = Gauge(LATENCY_METRIC, "Round-trip time from this node to a user endpoint (ms).",
                           ["node", "target"], registry=self.registry)

    async def measure_once(self) -> None:
        async def one(target: str) -> float | None:
            host, port = self.targets[target]
            if self.method == "icmp":
                return await asyncio.to_thread(icmp_rtt_ms_blocking, host, self.timeout_s)
            return await tcp_rtt_ms(host, port, self.timeout_s)

        values = await asyncio.gather(*(one(t) for t in self.targets))
        for target, value in zip(self.targets, values):
            self.results[target] = value
            if value is None:
                with contextlib.suppress(KeyError):
                    self.gauge.remove(self.node, target)  # unreachable: no sample rather than a stale one
            else:
                self.gauge.labels(self.node, target).set(value)
        self.measured_at = time.time()

    async def run(self) -> None:
        while True:
            try:
                await self.measure_once()
            except Exception:
                log.exception("measurement failed")
            await asyncio.sleep(self.interval_s)

    def summary(self) -> dict:
        reachable = [v for v in self.results.values() if v is not None]
        return {"node": self.node, "method": self.method, "measured_at": self.measured_at,
                # the mean over reachable user endpoints; null when none answered
                "latency_ms": sum(reachable) / len(reachable) if reachable else None,
                "targets": dict(self.results)}


def handler_for(prober: Prober) -> type[BaseHTTPRequestHandler]:
    """GET /latency, /metrics and /healthz; anything else 404, a slow client cut off after 10 s."""

    class Handler(BaseHTTPRequestHandler):
        timeout = 10
        server_version = "rlscore-latency-probe"

        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                body, kind = generate_latest(prober.registry), CONTENT_TYPE_LATEST
            elif path in ("/latency", "/healthz"):
                payload = prober.summary() if path == "/latency" else {"status": "ok"}
                body, kind = json.dumps(payload).encode(), "application/json"
            else:
                body, kind = b'{"detail": "not found"}', "application/json"
                self.send_response(404)
                self._finish(body, kind)
                return
            self.send_response(200)
            self._finish(body, kind)

        def _finish(self, body: bytes, kind: str) -> None:
            self.send_header("content-type", kind)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rlscore-latency-probe", description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default=os.environ.get("RLSCORE_PROBE_TARGETS", ""),
                        help="comma-separated host[:port] user endpoints (env RLSCORE_PROBE_TARGETS)")
    parser.add_argument("--node-name", default=os.environ.get("NODE_NAME", socket.gethostname()))
    parser.add_argument("--method", choices=("tcp", "icmp"), default=os.environ.get("RLSCORE_PROBE_METHOD", "tcp"))
    parser.add_argument("--interval", type=float, default=float(os.environ.get("RLSCORE_PROBE_INTERVAL_S", "5")))
    parser.add_argument("--timeout", type=float, default=float(os.environ.get("RLSCORE_PROBE_TIMEOUT_S", "1")))
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=int(os.environ.get("RLSCORE_PROBE_PORT", "9102")))
    args = parser.parse_args(argv)
    targets = [t for t in args.targets.split(",") if t.strip()]
    if not targets:
        parser.error("no targets: give --targets host[:port],... or RLSCORE_PROBE_TARGETS")
    try:
        for t in targets:
            parse_target(t)
    except ValueError as exc:
        parser.error(str(exc))
    if args.interval <= 0 or args.timeout <= 0:
        parser.error("--interval and --timeout must be > 0")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    prober = Prober(args.node_name, targets, args.method, args.interval, args.timeout)
    server = ThreadingHTTPServer((args.host, args.port), handler_for(prober))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    log.info("probing %d target(s) every %g s; serving on %s:%d", len(targets), args.interval, args.host, args.port)
    try:
        asyncio.run(prober.run())
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
