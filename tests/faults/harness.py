"""What the fault suite (tests/faults) and its benchmark (bench/fault_bench.py) inject faults with: a
suggestion server started as a real process, a real Prometheus scraping an exporter of Kepler-shaped
series, and in front of that Prometheus a proxy that misbehaves on command (trickles, floods, nests,
invents node names)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import MetricsHandler

from tests.helpers.processes import PrometheusServer, free_port, wait_for

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "fault-suite-token"


class KeplerExporter:
    """Kepler (>= 0.10) series for a few nodes, the way a two-socket machine reports them: per socket
    (`path`) the zones package (which holds core and uncore), core, uncore and dram. `truth` is what
    a node's power model must come out as: package + dram over both sockets."""

    def __init__(self, nodes: dict[str, tuple[float, float]], busy: float = 0.5):
        self.nodes, self.busy = nodes, busy  # node -> (idle, full-load) watts of package + dram, both sockets
        registry = CollectorRegistry()
        registry.register(self)
        self.port = free_port()
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), MetricsHandler.factory(registry))
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def collect(self):
        idle = GaugeMetricFamily("kepler_node_cpu_idle_watts", "idle", labels=["node_name", "zone", "path"])
        active = GaugeMetricFamily("kepler_node_cpu_active_watts", "active", labels=["node_name", "zone", "path"])
        usage = GaugeMetricFamily("kepler_node_cpu_usage_ratio", "usage", labels=["node_name"])
        for node, (node_idle, node_max) in self.nodes.items():
            for socket_index in (0, 1):
                path = f"/sys/class/powercap/intel-rapl:{socket_index}"
                # per socket: package 80% of the node's watts (core 60%, uncore 20% of it), dram 20%
                for family, watts in ((idle, node_idle / 2), (active, (node_max - node_idle) * self.busy / 2)):
                    package, dram = 0.8 * watts, 0.2 * watts
                    family.add_metric([node, "package", path], package)
                    family.add_metric([node, "core", path], 0.75 * package)
                    family.add_metric([node, "uncore", path], 0.25 * package)
                    family.add_metric([node, "dram", path], dram)
            usage.add_metric([node], self.busy)
        yield from (idle, active, usage)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class FaultyPrometheus:
    """Prometheus's query API as a proxy to a real one, which misbehaves when `mode` says so:
    - "pass": answers as the real one does;
    - "trickle": sends its answer one byte per second;
    - "huge": an answer of `huge_series` series (~100 bytes each);
    - "deep": an answer nested thousands of levels deep;
    - "invent": the real answer plus `invent` series of node names no cluster has, new ones each time."""

    def __init__(self, upstream: str):
        self.upstream, self.mode = upstream, "pass"
        self.huge_series, self.invent = 400_000, 5000
        self._counter, self._huge = 0, None
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                proxy.handle(self)

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def _huge_body(self) -> bytes:
        """Built once: the answer is the fault, not the proxy's time making it."""
        if self._huge is None:
            series = b",".join(b'{"metric":{"node":"flood-%08d"},"value":[1,"0.5"]}' % i
                               for i in range(self.huge_series))
            self._huge = b'{"status":"success","data":{"resultType":"vector","result":[' + series + b"]}}"
        return self._huge

    def _with_ghosts(self, body: bytes) -> bytes:
        """The answer plus `invent` series of new node names, spliced into Prometheus's compact JSON as
        bytes: this proxy shares its process (and GIL) with the benchmark's client, whose timings a
        json round trip per answer would disturb."""
        stripped = body.rstrip()
        if stripped.startswith(b'{"status":"success","data":{"resultType":"vector","result":[') and \
                stripped.endswith(b"]}}"):
            start, self._counter = self._counter, self._counter + self.invent
            now = time.time()
            ghosts = b",".join(b'{"metric":{"node":"ghost-%d"},"value":[%.3f,"0.5"]}' % (i, now)
                               for i in range(start, start + self.invent))
            return stripped[:-3] + (b"" if stripped.endswith(b"[]}}") else b",") + ghosts + b"]}}"
        return body  # an error or another result type: passed on as it is

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        mode = self.mode
        try:
            if mode == "trickle":
                body = b'{"status":"success","data":{"resultType":"vector","result":[]}}'
                request.send_response(200)
                request.send_header("content-type", "application/json")
                request.send_header("content-length", str(len(body)))
                request.end_headers()
                for byte in body:
                    request.wfile.write(bytes([byte]))
                    request.wfile.flush()
                    time.sleep(1.0)
                return
            if mode == "huge":
                body = self._huge_body()
            elif mode == "deep":
                body = b'{"status":"success","data":{"resultType":"vector","result":' + b"[" * 5000 + b"]" * 5000 + b"}}"
            else:
                answer = httpx.get(f"{self.upstream}{request.path}", timeout=10)
                body = answer.content
                if mode == "invent":
                    body = self._with_ghosts(body)
            request.send_response(200)
            request.send_header("content-type", "application/json")
            request.send_header("content-length", str(len(body)))
            request.end_headers()
            request.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):  # the server gave up on us: what it should do
            pass

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


class ServerProcess:
    """`rlscore-server` as operators run it, with the given RLSCORE_* settings."""

    def __init__(self, workdir: Path, model_dir: Path, **settings: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("RLSCORE_")}
        env.update({"RLSCORE_KUBERNETES": "off", "RLSCORE_MODEL_DIR": str(model_dir),
                    "NUMBA_CACHE_DIR": str(workdir / "numba"), **{f"RLSCORE_{k.upper()}": str(v)
                                                                  for k, v in settings.items()}})
        self.log_path = workdir / f"server-{self.port}.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([str(ROOT / ".venv" / "bin" / "rlscore-server"), "--host", "127.0.0.1",
                                      "--port", str(self.port), "--log-level", "warning"],
                                     env=env, cwd=workdir, stdout=self._log, stderr=subprocess.STDOUT)
        wait_for(lambda: self.alive() and httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200, 120,
                 f"the suggestion server (log {self.log_path})")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def rss_mb(self) -> float:
        return rss_mb(self.proc.pid)

    def headers(self) -> dict:
        return {"authorization": f"Bearer {TOKEN}"}

    def get(self, path: str, **kw) -> httpx.Response:
        return httpx.get(f"{self.url}{path}", headers=self.headers(), timeout=10, **kw)

    def post(self, path: str, **kw) -> httpx.Response:
        return httpx.post(f"{self.url}{path}", headers={**self.headers(), **kw.pop("headers", {})}, timeout=10, **kw)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self._log.close()


NODES = [{"name": "kepler-a", "cpu_capacity_millicores": 16000, "cpu_requested_millicores": 4000, "pods": 3,
          "latency_ms": 8.0},
         {"name": "kepler-b", "cpu_capacity_millicores": 16000, "cpu_requested_millicores": 1000, "pods": 1,
          "latency_ms": 30.0},
         {"name": "plain", "cpu_capacity_millicores": 8000, "latency_ms": 50.0}]


def suggest_body(policy: str, nodes=None) -> dict:
    return {"pod": {"name": "p", "namespace": "default", "cpu_request_millicores": 250,
                    "memory_request_bytes": 64 * 2**20}, "nodes": nodes or NODES, "policy": policy}


def timed_suggests(server: ServerProcess, count: int, policy: str = "EE") -> list[float]:
    """Latencies (ms) of `count` valid /suggest requests over one kept-alive connection."""
    out = []
    with httpx.Client(base_url=server.url, headers=server.headers(), timeout=10) as client:
        for _ in range(count):
            start = time.perf_counter()
            r = client.post("/suggest", json=suggest_body(policy))
            out.append((time.perf_counter() - start) * 1000)
            assert r.status_code == 200, r.text
    return out


def copy_models(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("ee", "lb", "el"):
        for suffix in (".safetensors", ".json"):
            shutil.copy(ROOT / "models" / f"{name}{suffix}", directory / f"{name}{suffix}")
    return directory


def raw_request(port: int, data: bytes, wait_s: float = 5.0) -> bytes:
    """Send raw bytes, read what comes back until the server closes or `wait_s` passes."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait_s) as s:
        try:
            s.sendall(data)
        except (ConnectionResetError, BrokenPipeError):  # the server closed while we were still sending
            pass
        chunks = []
        try:
            while chunk := s.recv(65536):
                chunks.append(chunk)
        except (TimeoutError, ConnectionResetError, BrokenPipeError):
            pass
        return b"".join(chunks)


class Stack:
    """Kepler exporter -> real Prometheus -> FaultyPrometheus -> rlscore-server."""

    def __init__(self, workdir: Path, **settings: str):
        self.exporter = KeplerExporter({"kepler-a": (48.0, 192.0), "kepler-b": (96.0, 672.0)})
        self.prometheus = PrometheusServer(workdir, [f"127.0.0.1:{self.exporter.port}"])
        self.faulty = FaultyPrometheus(self.prometheus.url)
        self.model_dir = copy_models(workdir / "models")
        self.server = ServerProcess(workdir, self.model_dir, prometheus_url=self.faulty.url, api_token=TOKEN,
                                    refresh_interval_s=1, stale_after_s=30, model_watch_interval_s=1,
                                    prometheus_timeout_s=1.5, node_forget_after_s=4, max_known_nodes=20000,
                                    header_timeout_s=2, power_max_history_interval_s=1, **settings)

    def close(self) -> None:
        self.server.stop()
        self.faulty.close()
        self.prometheus.stop()
        self.exporter.close()
