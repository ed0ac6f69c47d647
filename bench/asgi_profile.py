"""Profile one endpoint of the suggestion server in-process: the ASGI app called directly (no
socket, no client), so the profile shows only the server's own work per request.

    .venv/bin/python bench/asgi_profile.py --nodes 100 --requests 2000 [--names] [--path /v1/scores]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import pstats
import time

import numpy as np

from suggestion_server.app import create_app
from suggestion_server.config import Settings


def nodes_with_state(n: int, rng: np.random.Generator) -> list[dict]:
    cap = rng.choice([4000.0, 8000.0, 16000.0], n)
    req = cap * rng.uniform(0, 0.8, n)
    mib = 2**20
    return [{"name": f"node-{i:05d}", "cpu_capacity_millicores": cap[i], "memory_capacity_bytes": cap[i] * 2 * mib,
             "max_pods": 110, "cpu_requested_millicores": req[i], "memory_requested_bytes": req[i] * 2 * mib,
             "pods": int(req[i] // 250), "cpu_utilization": float(req[i] / cap[i] * 0.6),
             "memory_utilization": float(req[i] / cap[i] * 0.5), "latency_ms": float(rng.uniform(2, 60)),
             "power_idle_watts": float(cap[i] / 1000 * 12), "power_max_watts": float(cap[i] / 1000 * 30)}
            for i in range(n)]


def warm(table, nodes: list[dict]) -> None:
    """The node table as the watch and a metrics refresh leave it for a live cluster."""
    metrics = {}
    for node in nodes:
        table.set_node(node["name"], cpu_capacity=node["cpu_capacity_millicores"],
                       memory_capacity=node["memory_capacity_bytes"], max_pods=110.0,
                       power_idle_watts=node["power_idle_watts"], power_max_watts=node["power_max_watts"])
        table.add_usage(node["name"], node["cpu_requested_millicores"], node["memory_requested_bytes"],
                        float(node["pods"]))
        metrics[node["name"]] = {"cpu_utilization": node["cpu_utilization"],
                                 "memory_utilization": node["memory_utilization"], "latency_ms": node["latency_ms"],
                                 "network_receive_bytes_per_s": 1e5, "tcp_established": 20.0, "disk_utilization": 0.3}
    table.replace_metrics(metrics)


async def call(app, method: str, path: str, body: bytes, content_type: str) -> tuple[int, bytes]:
    sent = False
    out = {"status": 0, "body": b""}

    async def receive():
        nonlocal sent
        if sent:
            await asyncio.sleep(3600)
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        if message["type"] == "http.response.start":
            out["status"] = message["status"]
        elif message["type"] == "http.response.body":
            out["body"] += message.get("body", b"")

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "path": path,
             "raw_path": path.encode(), "query_string": b"", "root_path": "", "scheme": "http",
             "headers": [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode())],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 8000)}
    await app(scope, receive, send)
    return out["status"], out["body"]


async def main_async(args) -> None:
    app = create_app(Settings(kubernetes="off", model_dir=args.models, model_watch_interval_s=0), background=False)
    rng = np.random.default_rng(0)
    nodes = [f"node-{i:05d}" for i in range(args.nodes)] if args.names else nodes_with_state(args.nodes, rng)
    rng = np.random.default_rng(0)
    pod = {"name": "p", "namespace": "default", "cpu_request_millicores": 250, "memory_request_bytes": 2**26}
    if args.path == "/v1/scores":
        body = json.dumps({"pod": pod, "policy": args.policy}).encode() + b"\n" + "\n".join(nodes).encode()
        content_type = "application/x-rlscore-names"
    else:
        body = json.dumps({"pod": pod, "nodes": nodes, "policy": args.policy}).encode()
        content_type = "application/json"
    async with app.router.lifespan_context(app):
        if args.names:
            await app.state.services.collector.refresh()  # the server's own first refresh (no Prometheus here)
            warm(app.state.services.table, nodes_with_state(args.nodes, rng))
        for _ in range(50):
            status, out = await call(app, "POST", args.path, body, content_type)
            assert status == 200, out[:300]
        profiler = cProfile.Profile() if args.profile else None
        if profiler:
            profiler.enable()
        start = time.perf_counter()
        for _ in range(args.requests):
            await call(app, "POST", args.path, body, content_type)
        elapsed = time.perf_counter() - start
        if profiler:
            profiler.disable()
            pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
    print(f"{args.path} {'names' if args.names else 'state'} x {args.nodes}: {1e3 * elapsed / args.requests:.3f} ms "
          f"per request in-process{' (profiled)' if args.profile else ''}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--names", action="store_true", help="node names only (the server fills the state)")
    parser.add_argument("--policy", default="EE")
    parser.add_argument("--path", default="/suggest")
    parser.add_argument("--models", default="models")
    parser.add_argument("--profile", action="store_true")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
