"""`make bench`: /suggest latency and throughput over loopback against a real `rlscore-server`.

Figures are printed, never asserted. Latency: one kept-alive connection, p50/p99 over `--requests`
calls after a warm-up; throughput: httpx clients in threads. In the names section Prometheus and the
fake node_exporter of 1 000 nodes, which in a cluster run on other machines, share the two cores with
the server and the client; they run at `--infrastructure-nice` (19) so that their scrapes and query
evaluations do not take the server's core (at 0, requests that met them waited for a scheduler tick).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np

from tests.helpers.processes import FakeNodeExporter, PrometheusServer, free_port, wait_for

BIN = Path(sys.executable).parent
MIB = 2**20


def nodes_with_state(n: int, rng: np.random.Generator) -> list[dict]:
    cap = rng.choice([4000.0, 8000.0, 16000.0], n)
    req = cap * rng.uniform(0, 0.8, n)
    return [{"name": f"node-{i:05d}", "cpu_capacity_millicores": cap[i], "memory_capacity_bytes": cap[i] * 2 * MIB,
             "max_pods": 110, "cpu_requested_millicores": req[i], "memory_requested_bytes": req[i] * 2 * MIB,
             "pods": int(req[i] // 250), "cpu_utilization": float(req[i] / cap[i] * 0.6),
             "memory_utilization": float(req[i] / cap[i] * 0.5), "latency_ms": float(rng.uniform(2, 60))}
            for i in range(n)]


def body(policy: str, nodes: list) -> bytes:
    return json.dumps({"pod": {"name": "bench", "namespace": "default", "cpu_request_millicores": 250,
                               "memory_request_bytes": 64 * MIB,
                               "annotations": {"rlscore.io/latency-soft-ms": "20", "rlscore.io/latency-hard-ms": "30"}},
                       "nodes": nodes, "policy": policy}).encode()


class Server:
    def __init__(self, workers: int, env: dict[str, str] | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        full_env = {**os.environ, "RLSCORE_KUBERNETES": "off", "RLSCORE_LOG_LEVEL": "warning", **(env or {})}
        self.proc = subprocess.Popen([str(BIN / "rlscore-server"), "--host", "127.0.0.1", "--port", str(self.port),
                                      "--workers", str(workers), "--log-level", "warning"],
                                     env=full_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200, 90, "server ready")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(15)


def compact_body(policy: str, names: list[str]) -> bytes:
    header = json.dumps({"pod": {"name": "bench", "namespace": "default", "cpu_request_millicores": 250,
                                 "memory_request_bytes": 64 * MIB}, "policy": policy})
    return "\n".join([header, *names]).encode()


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


class KeepAliveClient:
    """HTTP/1.1 over one kept-alive socket, the request bytes built once: the figures measure the
    server, not a client library (httpx spent ~0.3 ms of its own per request here)."""

    def __init__(self, url: str):
        host, port = url.removeprefix("http://").split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def post(self, path: str, payload: bytes, content_type: str) -> tuple[int, bytes]:
        self.sock.sendall(f"POST {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: {content_type}\r\n"
                          f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
        data = b""
        while b"\r\n\r\n" not in data:
            data += self._recv()
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        length = next(int(line.split(b":", 1)[1]) for line in lines if line.lower().startswith(b"content-length:"))
        while len(rest) < length:
            rest += self._recv()
        return int(lines[0].split()[1]), rest

    def _recv(self) -> bytes:
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        return chunk

    def close(self) -> None:
        self.sock.close()


def latencies(url: str, payload: bytes, requests: int, warmup: int = 50, path: str = "/suggest",
              content_type: str = "application/json") -> np.ndarray:
    out = []
    client = KeepAliveClient(url)
    try:
        for i in range(warmup + requests):
            t0 = time.perf_counter()
            status, answer = client.post(path, payload, content_type)
            elapsed = time.perf_counter() - t0
            if status != 200:
                raise RuntimeError(f"{path} answered {status}: {answer[:200]!r}")
            if i >= warmup:
                out.append(elapsed)
    finally:
        client.close()
    return np.array(out) * 1000.0


def throughput(url: str, payload: bytes, clients: int, seconds: float) -> float:
    done = [0] * clients
    stop = time.monotonic() + seconds

    def worker(k: int) -> None:
        with httpx.Client(base_url=url, timeout=30, headers={"content-type": "application/json"}) as client:
            while time.monotonic() < stop:
                client.post("/suggest", content=payload)
                done[k] += 1

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done) / seconds


def _serve_exporter(busy: dict[str, float], ports) -> None:
    exporter = FakeNodeExporter(busy)
    ports.put(exporter.port)
    threading.Event().wait()


def exporter_process(busy: dict[str, float]) -> tuple[multiprocessing.Process, int]:
    """The fake node_exporter in a process of its own: rendering a thousand nodes' series in the
    benchmark's process would hold its GIL during Prometheus's scrapes and show up as latency."""
    ports = multiprocessing.Queue()
    proc = multiprocessing.Process(target=_serve_exporter, args=(busy, ports), daemon=True)
    proc.start()
    return proc, ports.get(timeout=30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/server_bench.py", description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5000, help="per latency figure (a fifth at 5000 nodes)")
    parser.add_argument("--seconds", type=float, default=5.0, help="per throughput run")
    parser.add_argument("--sections", default="state,names,throughput",
                        help="comma-separated: state (state in the request), names (warm snapshot, memory), throughput")
    parser.add_argument("--refresh-interval", type=float, default=2.0,
                        help="the server's snapshot refresh in the names section, seconds")
    parser.add_argument("--infrastructure-nice", type=int, default=19,
                        help="nice value of Prometheus and the fake exporter in the names section (0: as the server)")
    parser.add_argument("--memory-requests", type=int, default=100_000,
                        help="compact requests between the two memory readings (0: skip)")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    sections = {x.strip() for x in args.sections.split(",")}

    if "state" in sections:
        print("\n## /suggest latency, state in the request (1 worker, 1 keep-alive connection)\n")
        print("| nodes | policy | p50 ms | p99 ms |\n|---|---|---|---|")
        server = Server(workers=1)
        try:
            for n in (100, 1000, 5000):
                payload_nodes = nodes_with_state(n, rng)
                for policy in ("EE", "LB", "EL"):
                    ms = latencies(server.url, body(policy, payload_nodes), args.requests if n < 5000 else args.requests // 5)
                    print(f"| {n} | {policy} | {np.percentile(ms, 50):.2f} | {np.percentile(ms, 99):.2f} |")
        finally:
            server.stop()

    if "names" in sections:
        print(f"\n## Node names only, warm snapshot from a real Prometheus of 1000 nodes, refreshed every "
              f"{args.refresh_interval:g} s (1 worker, 1 keep-alive connection; Prometheus and the exporter "
              f"at nice {args.infrastructure_nice})\n")
        print("/suggest takes JSON; /v1/scores is the plugin's compact format (names one per line, one byte per score).\n")
        sizes = (100, 500, 1000)
        names = [f"node-{i:05d}" for i in range(max(sizes))]
        exporter, exporter_port = exporter_process({name: float(rng.uniform(0.05, 0.9)) for name in names})
        with tempfile.TemporaryDirectory() as tmp:
            prometheus = PrometheusServer(Path(tmp), [f"127.0.0.1:{exporter_port}"])
            for pid in (prometheus.proc.pid, exporter.pid):
                os.setpriority(os.PRIO_PROCESS, pid, args.infrastructure_nice)
            server = Server(workers=1, env={"RLSCORE_PROMETHEUS_URL": prometheus.url,
                                            "RLSCORE_REFRESH_INTERVAL_S": str(args.refresh_interval)})
            try:
                wait_for(lambda: httpx.get(f"{server.url}/policies").json()["snapshot"]["nodes"] == len(names), 90,
                         "warm snapshot")
                time.sleep(3)  # rate() needs two scrapes
                print("| nodes | policy | /suggest p50 / p99 ms | /v1/scores p50 / p99 ms |\n|---|---|---|---|")
                for n in sizes:
                    for policy in ("EE", "LB"):
                        json_ms = latencies(server.url, body(policy, names[:n]), args.requests)
                        compact_ms = latencies(server.url, compact_body(policy, names[:n]), args.requests, path="/v1/scores",
                                               content_type="application/x-rlscore-names")
                        print(f"| {n} | {policy} | {np.percentile(json_ms, 50):.2f} / {np.percentile(json_ms, 99):.2f} | "
                              f"{np.percentile(compact_ms, 50):.2f} / {np.percentile(compact_ms, 99):.2f} |", flush=True)
                if args.memory_requests:
                    payload = compact_body("LB", names[:100])
                    latencies(server.url, payload, 1000, path="/v1/scores", content_type="application/x-rlscore-names")
                    before = rss_mib(server.proc.pid)
                    latencies(server.url, payload, args.memory_requests, warmup=0, path="/v1/scores",
                              content_type="application/x-rlscore-names")
                    after = rss_mib(server.proc.pid)
                    print(f"\nserver memory over {args.memory_requests} /v1/scores requests (100 names): "
                          f"{before:.1f} MiB after warm-up, {after:.1f} MiB after ({after - before:+.1f} MiB)")
            finally:
                server.stop()
                prometheus.stop()
                exporter.terminate()

    if "throughput" in sections:
        print("\n## Throughput at 100 nodes, state in the request (4 client threads)\n")
        print("| server workers | requests/s |\n|---|---|")
        payload = body("EE", nodes_with_state(100, rng))
        for workers in (1, 2):
            server = Server(workers=workers)
            try:
                latencies(server.url, payload, 20)
                print(f"| {workers} | {throughput(server.url, payload, 4, args.seconds):.0f} |")
            finally:
                server.stop()
    print("\n(The load generator runs on the same 2 cores as the server.)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
