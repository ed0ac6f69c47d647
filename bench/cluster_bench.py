"""Cluster benchmark (`make bench`): time from `cluster.sh up` to ready, and scheduling throughput
(pods/s from creation to bound) of rl-scheduler with RLScore vs the default profile, in one run.

Printed, never asserted. Uses its own cluster (CLUSTER_NAME=rlscore-bench) and deletes it after.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from kubernetes import client, config

ROOT = Path(__file__).resolve().parent.parent
CLUSTER_SH = ROOT / "local-cluster" / "cluster.sh"


def pod(name: str, scheduler: str, policy: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"bench": scheduler},
                         "annotations": {"rlscore.io/policy": policy}},
            "spec": {"schedulerName": scheduler,
                     "containers": [{"name": "c", "image": "nginx:1.27",
                                     "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}}]}}


def throughput(core: client.CoreV1Api, namespace: str, scheduler: str, pods: int, policy: str) -> tuple[float, int]:
    start = time.monotonic()
    for i in range(pods):
        core.create_namespaced_pod(namespace, pod(f"{scheduler}-{i:04d}", scheduler, policy))
    while True:
        items = core.list_namespaced_pod(namespace, label_selector=f"bench={scheduler}").items
        bound = sum(1 for p in items if p.spec.node_name)
        if bound == pods or time.monotonic() - start > 600:
            return pods / (time.monotonic() - start), bound
        time.sleep(0.5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/cluster_bench.py", description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--policy", default="LB")
    args = parser.parse_args(argv)
    env = {**os.environ, "CLUSTER_NAME": "rlscore-bench", "NODES": str(args.nodes)}
    subprocess.run([str(CLUSTER_SH), "down"], env=env, stdout=subprocess.DEVNULL, check=False)
    start = time.monotonic()
    subprocess.run([str(CLUSTER_SH), "up"], env=env, stdout=subprocess.DEVNULL, check=True)
    up_s = time.monotonic() - start
    try:
        exported = subprocess.run([str(CLUSTER_SH), "env"], env=env, check=True, capture_output=True,
                                  text=True).stdout
        kubeconfig = next(line.split("=", 1)[1] for line in exported.splitlines() if "KUBECONFIG=" in line)
        core = client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="bench")))
        results = {}
        for scheduler in ("rl-scheduler", "default-scheduler"):
            rate, bound = throughput(core, "bench", scheduler, args.pods, args.policy)
            results[scheduler] = rate
            print(f"  {scheduler}: {bound}/{args.pods} bound, {rate:.1f} pods/s", file=sys.stderr)
            core.delete_collection_namespaced_pod("bench", label_selector=f"bench={scheduler}",
                                                  grace_period_seconds=0)
    finally:
        subprocess.run([str(CLUSTER_SH), "down"], env=env, stdout=subprocess.DEVNULL, check=False)
    print(f"\n## Local cluster ({args.nodes} KWOK nodes, {args.pods} pods each, policy {args.policy})\n")
    print("| measure | value |\n|---|---|")
    print(f"| cluster.sh up to ready (binaries built) | {up_s:.1f} s |")
    for scheduler, rate in results.items():
        print(f"| {scheduler} throughput | {rate:.1f} pods/s |")
    print(f"| rl-scheduler / default | {results['rl-scheduler'] / results['default-scheduler']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
