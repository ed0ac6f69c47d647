"""Scheduling throughput on the local cluster (`make bench`): the default profile, rl-scheduler
(RLScore alone, scoring in process), rl-scheduler-weighted (RLScore beside the default score
plugins, in process) and rl-scheduler-http (RLScore alone, one request to the server per pod), in
the same run, at each node count. Printed, never asserted.

What is timed is scheduling, not pod creation: kube-scheduler is paused (SIGSTOP) while the pods of
one profile are created, resumed (SIGCONT), and the clock runs from the resume until the last pod is
bound. Each profile starts on a settled machine (as idle over 2 s as before any pods, at most 70%,
so none pays for the deletions of the one before). The local cluster lifts the scheduler's client limit
(qps/burst 2000), so binding does not wait on it either. On a 2-core machine shared with the API
server, etcd, KWOK and Prometheus, pods/s also depends on what those do meanwhile, so the cpu time
the scheduler and the suggestion server spent per pod is printed beside it.

RLScore's share of the per-pod time comes from the scheduler's own metrics: the PreScore extension
point of the profile (`scheduler_framework_extension_point_duration_seconds`, observed for every
pod; RLScore does its work there, the default PreScore plugins add under 0.1 ms) over the
scheduling algorithm's time (`scheduler_scheduling_algorithm_duration_seconds`: filter + score,
without binding, which runs asynchronously and waits on the API server).
`scheduler_plugin_execution_duration_seconds` for RLScore is printed beside it; the scheduler samples
that metric in a tenth of the cycles, so it is noisier.

    .venv/bin/python bench/cluster_bench.py --nodes 100,1000 --pods 1000
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from kubernetes import client, config, watch
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent
CLUSTER_SH = ROOT / "local-cluster" / "cluster.sh"
PROFILES = ("default-scheduler", "rl-scheduler", "rl-scheduler-weighted", "rl-scheduler-http")
NAMESPACE = "bench"


def pod(name: str, scheduler: str, policy: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"bench": scheduler}, "annotations": {"rlscore.io/policy": policy}},
            "spec": {"schedulerName": scheduler, "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists"}],
                     "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                     "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}


def scheduler_metrics(url: str) -> dict[tuple, float]:
    """(metric sample name, frozen labels) -> value, for the series the benchmark reads."""
    text = httpx.get(url, verify=False, timeout=10).text
    wanted = ("scheduler_plugin_execution_duration_seconds", "scheduler_scheduling_algorithm_duration_seconds",
              "scheduler_framework_extension_point_duration_seconds")
    out = {}
    for family in text_string_to_metric_families(text):
        if family.name in wanted:
            for s in family.samples:
                if s.name.endswith(("_sum", "_count")):
                    out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def _total(metrics: dict, name: str, **labels) -> float:
    return sum(v for (n, ls), v in metrics.items() if n == name and all((k, v2) in ls for k, v2 in labels.items()))


def per_pod_ms(before: dict, after: dict, profile: str) -> dict[str, float]:
    """Per pod, in ms: the scheduling algorithm, the profile's PreScore and Score extension points,
    and RLScore's PreScore from the plugin metric (sampled)."""
    def mean(name: str, **labels) -> float:
        s = _total(after, name + "_sum", **labels) - _total(before, name + "_sum", **labels)
        c = _total(after, name + "_count", **labels) - _total(before, name + "_count", **labels)
        return 1000.0 * s / c if c else float("nan")
    rlscore = mean("scheduler_plugin_execution_duration_seconds", plugin="RLScore", extension_point="PreScore") \
        if profile != "default-scheduler" else 0.0
    return {"algorithm_ms": mean("scheduler_scheduling_algorithm_duration_seconds"),
            "prescore_ms": mean("scheduler_framework_extension_point_duration_seconds", profile=profile,
                                extension_point="PreScore"),
            "score_ms": mean("scheduler_framework_extension_point_duration_seconds", profile=profile,
                             extension_point="Score"),
            "rlscore_sampled_ms": rlscore}


def scheduler_pid(cluster_dir: Path) -> int:
    return int((cluster_dir / "pids" / "kube-scheduler.pid").read_text().strip())


def cpu_seconds(pid: int) -> float:
    """User + system cpu time of a process so far (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (float(fields[11]) + float(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_profile(core: client.CoreV1Api, pid: int, profile: str, pods: int, policy: str,
                cpu_of: dict[str, int]) -> tuple[float, int, dict[str, float]]:
    """Pods/s from the scheduler's resume to the last binding, and the cpu seconds per pod each of
    `cpu_of`'s processes spent meanwhile."""
    os.kill(pid, signal.SIGSTOP)
    try:
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda i: core.create_namespaced_pod(NAMESPACE, pod(f"{profile}-{i:05d}", profile, policy)),
                          range(pods)))
        listed = core.list_namespaced_pod(NAMESPACE, label_selector=f"bench={profile}")
        bound = {p.metadata.name for p in listed.items if p.spec.node_name}
    finally:
        cpu_before = {name: cpu_seconds(p) for name, p in cpu_of.items()}
        os.kill(pid, signal.SIGCONT)
    start = time.monotonic()
    deadline = start + 900
    version = listed.metadata.resource_version
    while len(bound) < pods and time.monotonic() < deadline:
        # A watch can end early (timeout, a closed connection, an expired version): list again
        # and follow on from there, so a broken stream never ends the measurement early.
        w = watch.Watch()
        try:
            for event in w.stream(core.list_namespaced_pod, NAMESPACE, label_selector=f"bench={profile}",
                                  resource_version=version, timeout_seconds=60):
                if event["type"] == "MODIFIED" and event["object"].spec.node_name:
                    bound.add(event["object"].metadata.name)
                    if len(bound) >= pods:
                        w.stop()
        except client.exceptions.ApiException as exc:
            print(f"   watch ended ({exc.status} {exc.reason}); listing again", file=sys.stderr)
        listed = core.list_namespaced_pod(NAMESPACE, label_selector=f"bench={profile}")
        bound |= {p.metadata.name for p in listed.items if p.spec.node_name}
        version = listed.metadata.resource_version
    elapsed = time.monotonic() - start
    cpu = {name: (cpu_seconds(p) - cpu_before[name]) / pods * 1000 for name, p in cpu_of.items()}
    final = sum(1 for p in core.list_namespaced_pod(NAMESPACE, label_selector=f"bench={profile}").items
                if p.spec.node_name)
    return final / elapsed, final, cpu


def _cpu_times() -> tuple[float, float]:
    """(idle, total) jiffies of the whole machine, from /proc/stat."""
    fields = [float(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return fields[3] + fields[4], sum(fields)


def idle_share(window_s: float = 2.0) -> float:
    """Share of the machine's cpu time that was idle over the next `window_s` seconds."""
    idle0, total0 = _cpu_times()
    time.sleep(window_s)
    idle1, total1 = _cpu_times()
    return (idle1 - idle0) / (total1 - total0) if total1 > total0 else 1.0


def wait_quiet(target: float, limit_s: float = 90.0) -> float:
    """Wait until the machine is as idle as it was before any pods (the previous profile's
    deletions, KWOK's status updates and the watch caches have caught up), so no profile pays for
    the one before; returns the seconds waited."""
    start = time.monotonic()
    while time.monotonic() - start < limit_s and idle_share() < target:
        pass
    return time.monotonic() - start


def wait_gone(core: client.CoreV1Api, profile: str) -> None:
    core.delete_collection_namespaced_pod(NAMESPACE, label_selector=f"bench={profile}", grace_period_seconds=0)
    deadline = time.monotonic() + 300
    while core.list_namespaced_pod(NAMESPACE, label_selector=f"bench={profile}", limit=1).items:
        if time.monotonic() > deadline:
            raise RuntimeError(f"pods of {profile} still present after 300 s")
        time.sleep(1)


def bench_nodes(nodes: int, pods: int, policy: str, rounds: int) -> list[dict]:
    env = {**os.environ, "CLUSTER_NAME": "rlscore-bench", "NODES": str(nodes)}
    subprocess.run([str(CLUSTER_SH), "down"], env=env, stdout=subprocess.DEVNULL, check=False)
    print(f"== {nodes} nodes: cluster up", file=sys.stderr)
    subprocess.run([str(CLUSTER_SH), "up"], env=env, stdout=subprocess.DEVNULL, check=True)
    try:
        exported = subprocess.run([str(CLUSTER_SH), "env"], env=env, check=True, capture_output=True, text=True).stdout
        values = dict(line.removeprefix("export ").split("=", 1) for line in exported.splitlines() if "=" in line)
        core = client.CoreV1Api(config.new_client_from_config(config_file=values["KUBECONFIG"]))
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
        pid = scheduler_pid(Path(values["RLSCORE_LOCAL_CLUSTER_DIR"]))
        cpu_of = {"scheduler": pid, "server": int((Path(values["RLSCORE_LOCAL_DIR"]) / "server.pid").read_text())}
        metrics_url = values["RLSCORE_LOCAL_SCHEDULER_METRICS_URL"]
        time.sleep(10)  # one metrics refresh of the server with every node in it
        # what "settled" means here: at 1 000 nodes KWOK and Prometheus keep a share of the cpu busy
        target = min(0.7, 0.9 * idle_share(5.0))
        if target < 0.7:
            print(f"   idle before any pods: {target / 0.9:.0%} of the cpu", file=sys.stderr)
        rows = []
        for r in range(rounds):
            order = PROFILES if r % 2 == 0 else tuple(reversed(PROFILES))  # no profile always goes first
            for profile in order:
                quiet = wait_quiet(target)
                if quiet > 60:
                    print(f"   (the machine did not settle within {quiet:.0f} s; measuring anyway)", file=sys.stderr)
                before = scheduler_metrics(metrics_url)
                rate, bound, cpu = run_profile(core, pid, profile, pods, policy, cpu_of)
                after = scheduler_metrics(metrics_url)
                row = {"nodes": nodes, "round": r, "profile": profile, "pods_per_s": rate, "bound": bound,
                       "scheduler_cpu_ms": cpu["scheduler"], "server_cpu_ms": cpu["server"],
                       **per_pod_ms(before, after, profile)}
                rows.append(row)
                print(f"   {profile}: {bound}/{pods} bound, {rate:.1f} pods/s, algorithm {row['algorithm_ms']:.2f} ms, "
                      f"PreScore {row['prescore_ms']:.2f} ms, Score {row['score_ms']:.2f} ms per pod; cpu per pod: scheduler "
                      f"{row['scheduler_cpu_ms']:.2f} ms, server {row['server_cpu_ms']:.2f} ms", file=sys.stderr)
                wait_gone(core, profile)
        return rows
    finally:
        subprocess.run([str(CLUSTER_SH), "down"], env=env, stdout=subprocess.DEVNULL, check=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/cluster_bench.py", description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="100,1000,5000", help="comma-separated node counts")
    parser.add_argument("--pods", type=int, default=1000, help="pods per profile and round")
    parser.add_argument("--rounds", type=int, default=4,
                        help="rounds of all profiles per node count (two left the ratios 0.6-1.0 apart run to run)")
    parser.add_argument("--policy", default="LB")
    args = parser.parse_args(argv)
    import urllib3
    urllib3.disable_warnings()
    rows = []
    for nodes in (int(x) for x in args.nodes.split(",")):
        rows += bench_nodes(nodes, args.pods, args.policy, args.rounds)
    print(f"\n## Scheduling throughput ({args.pods} pods per profile, {args.rounds} rounds, policy {args.policy}, "
          "scheduler paused while pods are created)\n")
    print("| nodes | profile | pods/s | x default (each round) | algorithm ms/pod | PreScore ms/pod | Score ms/pod "
          "| RLScore share | RLScore PreScore (sampled) ms | scheduler cpu ms/pod | server cpu ms/pod |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    def ratio(nodes: int, rnd: int, profile: str) -> float:
        rate = {r["profile"]: r["pods_per_s"] for r in rows if r["nodes"] == nodes and r["round"] == rnd}
        return rate[profile] / rate["default-scheduler"]

    for nodes in sorted({r["nodes"] for r in rows}):
        def mean(profile: str, key: str) -> float:
            values = [r[key] for r in rows if r["nodes"] == nodes and r["profile"] == profile]
            return sum(values) / len(values)
        default = mean("default-scheduler", "pods_per_s")
        for profile in PROFILES:
            rate, algorithm = mean(profile, "pods_per_s"), mean(profile, "algorithm_ms")
            prescore, score = mean(profile, "prescore_ms"), mean(profile, "score_ms")
            rounds = sorted({r["round"] for r in rows if r["nodes"] == nodes})
            each = ", ".join(f"{ratio(nodes, r, profile):.2f}" for r in rounds)
            share = prescore / algorithm if profile != "default-scheduler" and algorithm > 0 else 0.0
            print(f"| {nodes} | {profile} | {rate:.1f} | {rate / default:.2f} ({each}) | {algorithm:.2f} | {prescore:.2f} | "
                  f"{score:.2f} | {share:.0%} | {mean(profile, 'rlscore_sampled_ms'):.2f} | "
                  f"{mean(profile, 'scheduler_cpu_ms'):.2f} | {mean(profile, 'server_cpu_ms'):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
