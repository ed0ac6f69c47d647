"""Real processes for tests: free ports, a Prometheus server, a fake node_exporter, waiting."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path

import httpx
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import MetricsHandler

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(check, timeout_s: float, what: str, interval_s: float = 0.2):
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        try:
            result = check()
            if result:
                return result
        except Exception as exc:  # not up yet
            last = exc
        time.sleep(interval_s)
    raise TimeoutError(f"{what} not within {timeout_s} s (last error: {last})")


OFFSET_S = 1000.0  # the fake nodes' uptime when the exporter starts


class FakeNodeExporter:
    """Serves node_exporter's series (cpu, memory, network, TCP connections, root filesystem) for
    several fake nodes on one endpoint, and Kepler's node power series for the nodes given a power
    curve; each series carries its node's `instance` (Kepler: `node_name`) label (scraped with
    honor_labels). Counters grow with wall-clock time at each node's busy fraction, so rate() sees
    exactly that fraction; a fraction changed in `busy` counts from the next scrape on."""

    def __init__(self, busy: dict[str, float], cpus: int = 4, memory_bytes: float = 8 * 2**30,
                 power: dict[str, tuple[float, float]] | None = None):
        self.busy, self.cpus, self.memory_bytes = dict(busy), cpus, memory_bytes
        self.power = dict(power or {})
        self.start = self._last = time.time()
        self._busy_seconds = {node: OFFSET_S * fraction for node, fraction in self.busy.items()}
        self.port = free_port()
        registry = CollectorRegistry()
        registry.register(self)
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), MetricsHandler.factory(registry))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def collect(self):
        # counters carry the time they were computed at, so rate() is exact however late the scrape
        # that reads them is stamped (under load that jitter made irate() wrong by 20%)
        now = time.time()
        elapsed = now - self.start + OFFSET_S
        step, self._last = now - self._last, now
        cpu = CounterMetricFamily("node_cpu_seconds_total", "cpu time", labels=["instance", "cpu", "mode"])
        avail = GaugeMetricFamily("node_memory_MemAvailable_bytes", "available", labels=["instance"])
        total = GaugeMetricFamily("node_memory_MemTotal_bytes", "total", labels=["instance"])
        network = CounterMetricFamily("node_network_receive_bytes_total", "rx", labels=["instance", "device"])
        tcp = GaugeMetricFamily("node_netstat_Tcp_CurrEstab", "tcp", labels=["instance"])
        fs_size = GaugeMetricFamily("node_filesystem_size_bytes", "size", labels=["instance", "mountpoint"])
        fs_avail = GaugeMetricFamily("node_filesystem_avail_bytes", "avail", labels=["instance", "mountpoint"])
        idle_w = GaugeMetricFamily("kepler_node_cpu_idle_watts", "idle", labels=["node_name", "zone"])
        active_w = GaugeMetricFamily("kepler_node_cpu_active_watts", "active", labels=["node_name", "zone"])
        usage = GaugeMetricFamily("kepler_node_cpu_usage_ratio", "usage", labels=["node_name"])
        for node, busy in self.busy.items():
            instance = f"{node}:9100"
            busy_s = self._busy_seconds[node] = self._busy_seconds.get(node, (elapsed - step) * busy) + step * busy
            for c in range(self.cpus):
                cpu.add_metric([instance, str(c), "idle"], elapsed - busy_s, timestamp=now)
                cpu.add_metric([instance, str(c), "user"], busy_s, timestamp=now)
            avail.add_metric([instance], self.memory_bytes * (1.0 - busy))
            total.add_metric([instance], self.memory_bytes)
            network.add_metric([instance, "eth0"], busy_s * 1e6, timestamp=now)
            network.add_metric([instance, "lo"], elapsed * 5e7, timestamp=now)  # loopback is not traffic
            tcp.add_metric([instance], 10.0 + 100.0 * busy)
            fs_size.add_metric([instance, "/"], 100.0 * 2**30)
            fs_avail.add_metric([instance, "/"], 100.0 * 2**30 * (1.0 - busy / 2))
            if node in self.power:
                idle, peak = self.power[node]
                idle_w.add_metric([node, "package"], idle)
                active_w.add_metric([node, "package"], (peak - idle) * busy)
                usage.add_metric([node], busy)
        yield from (cpu, avail, total, network, tcp, fs_size, fs_avail, idle_w, active_w, usage)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class PrometheusServer:
    def __init__(self, workdir: Path, targets: list[str], scrape_interval: str = "1s",
                 tls: tuple[Path, Path, Path] | None = None):
        """`tls`: (certificate, key, CA that signed it) to serve https."""
        if not Path(PROMETHEUS).exists():
            raise RuntimeError("prometheus is not installed: run `make deps` (Debian package 'prometheus')")
        self.port = free_port()
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        config = workdir / "prometheus.yml"
        config.write_text(
            f"global:\n  scrape_interval: {scrape_interval}\n  evaluation_interval: {scrape_interval}\n"
            "scrape_configs:\n  - job_name: nodes\n    honor_labels: true\n"
            f"    static_configs:\n      - targets: {targets!r}\n")
        web = []
        if tls:
            (workdir / "web.yml").write_text(f"tls_server_config:\n  cert_file: {tls[0]}\n  key_file: {tls[1]}\n")
            web = [f"--web.config.file={workdir / 'web.yml'}"]
        self.log = open(workdir / "prometheus.log", "wb")
        self.proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", *web], stdout=self.log, stderr=subprocess.STDOUT)
        verify = ssl.create_default_context(cafile=str(tls[2])) if tls else True
        wait_for(lambda: httpx.get(f"{self.url}/-/ready", timeout=1, verify=verify).status_code == 200, 30,
                 "prometheus ready")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()
