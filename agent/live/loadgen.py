"""`rlscore-loadgen`: replay the simulator's arrival scenarios against a live cluster.

Each arriving pod becomes a single-replica Deployment made from examples/nginx-deployment.yaml (the
thesis's test pod, with its requests, policy and latency annotations); departures delete it;
`latency-shift` swaps the nodes' `rlscore.io/latency-ms` annotations. Time runs `--speed` times
faster than the scenario's (the thesis waited 3 s between deployments).
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from agent.live.pod_timeline import PodTimeline
from agent.sim.families import family
from agent.sim.scenarios import Event, events
from agent.sim.world import GIB, Hardware, NodeSpec
from rlscore.core.state import normalize_policy

TEMPLATE = Path(__file__).resolve().parents[2] / "examples" / "nginx-deployment.yaml"
RUN_LABEL = "rlscore.io/loadgen-run"
DEPLOYMENT_LABEL = "rlscore.io/deployment"  # on each pod: the Deployment it belongs to
# the simulator's families a live cluster can replay: their arrivals do not depend on node types
SCENARIOS = ("test1", "test2", "poisson", "latency-shift")
LATENCY_ANNOTATION = "rlscore.io/latency-ms"
USAGE_ANNOTATION = "rlscore.io/usage-cpu"  # the cpu a KWOK pod uses (local-cluster/metrics.yaml)


@dataclass
class Placement:
    deployment: str
    node: str | None
    latency_ms: float | None


@dataclass
class RunResult:
    run: str
    scheduler: str
    policy: str | None
    placements: list[Placement] = field(default_factory=list)
    active_nodes: list[int] = field(default_factory=list)  # after each arrival
    shifts: list[int] = field(default_factory=list)
    # pod name -> (first seen, deleted or None), from a pod watch (replay(..., watch_pods=True))
    pod_times: dict[str, tuple[float, float | None]] = field(default_factory=dict)

    @property
    def chosen_latency(self) -> list[float]:
        """Latency of each pod's node when it was placed (NaN while pending or unknown)."""
        return [p.latency_ms if p.latency_ms is not None else float("nan") for p in self.placements]


class LiveCluster:
    """The few Kubernetes operations the scenarios need, through the official client."""

    def __init__(self, kubeconfig: str | None = None, namespace: str = "rlscore-loadgen"):
        api = config.new_client_from_config(config_file=kubeconfig)
        self.core, self.apps = client.CoreV1Api(api), client.AppsV1Api(api)
        self.namespace = namespace
        self.template = yaml.safe_load(TEMPLATE.read_text())

    def ensure_namespace(self) -> None:
        try:
            self.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=self.namespace)))
        except ApiException as exc:
            if exc.status != 409:
                raise

    def node_latencies(self) -> dict[str, float]:
        out = {}
        for node in self.core.list_node().items:
            value = (node.metadata.annotations or {}).get(LATENCY_ANNOTATION)
            try:
                out[node.metadata.name] = float(value) if value is not None else float("nan")
            except ValueError:
                out[node.metadata.name] = float("nan")
        return out

    def total_cpu_millicores(self) -> float:
        """Allocatable cpu of all nodes (sizes the poisson scenario's arrival rate)."""
        from kubernetes.utils.quantity import parse_quantity

        return sum(float(parse_quantity((n.status.allocatable or {}).get("cpu", "0"))) * 1000.0
                   for n in self.core.list_node().items)

    def set_node_latency(self, node: str, latency_ms: float) -> None:
        self.core.patch_node(node, {"metadata": {"annotations": {LATENCY_ANNOTATION: f"{latency_ms:g}"}}})

    def create_deployment(self, name: str, run: str, scheduler: str, policy: str | None, cpu_millicores: float,
                          memory_bytes: float, soft_ms: float | None, hard_ms: float | None,
                          usage: float | None = None) -> None:
        """A single-replica Deployment; `usage` (share of its cpu request) is what KWOK makes it use."""
        body = copy.deepcopy(self.template)
        body["metadata"] = {"name": name, "labels": {"app": "nginx", RUN_LABEL: run}}
        selector = {"app": "nginx", DEPLOYMENT_LABEL: name}
        body["spec"]["selector"] = {"matchLabels": selector}
        pod = body["spec"]["template"]
        pod["metadata"]["labels"] = {**selector, RUN_LABEL: run}
        annotations = {}
        if policy:
            annotations["rlscore.io/policy"] = policy
        if soft_ms is not None:
            annotations["rlscore.io/latency-soft-ms"] = f"{soft_ms:g}"
        if hard_ms is not None:
            annotations["rlscore.io/latency-hard-ms"] = f"{hard_ms:g}"
        if usage is not None:
            annotations[USAGE_ANNOTATION] = f"{max(1, int(round(cpu_millicores * usage)))}m"
        pod["metadata"]["annotations"] = annotations
        pod["spec"]["schedulerName"] = scheduler
        pod["spec"]["containers"][0]["resources"]["requests"] = {
            "cpu": f"{int(cpu_millicores)}m", "memory": str(int(memory_bytes))}
        self.apps.create_namespaced_deployment(self.namespace, body)

    def delete_deployment(self, name: str) -> None:
        try:
            self.apps.delete_namespaced_deployment(name, self.namespace, propagation_policy="Background")
        except ApiException as exc:
            if exc.status != 404:
                raise

    def pods(self, run: str) -> dict[str, str | None]:
        """deployment name -> node of its (non-terminating) pod, None while pending."""
        out: dict[str, str | None] = {}
        for pod in self.core.list_namespaced_pod(self.namespace, label_selector=f"{RUN_LABEL}={run}").items:
            if pod.metadata.deletion_timestamp is not None:
                continue
            out[_deployment_of(pod)] = pod.spec.node_name
        return out

    def wait_gone(self, run: str, names: set[str], timeout_s: float = 60.0) -> set[str]:
        """Wait until no pod (terminating or not) of the deployments `names` is left; returns those
        still there after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while True:
            pods = self.core.list_namespaced_pod(self.namespace, label_selector=f"{RUN_LABEL}={run}").items
            left = {_deployment_of(pod) for pod in pods} & names
            if not left or time.monotonic() >= deadline:
                return left
            time.sleep(0.1)

    def wait_scheduled(self, run: str, names: set[str], timeout_s: float = 120.0) -> dict[str, str | None]:
        deadline = time.monotonic() + timeout_s
        placed: dict[str, str | None] = {}
        while time.monotonic() < deadline:
            placed = self.pods(run)
            if names <= {n for n, node in placed.items() if node}:
                return placed
            time.sleep(0.2)
        return placed

    def cleanup(self, run: str | None = None, timeout_s: float = 120.0) -> None:
        """Delete one run's deployments, or without `run` every deployment and pod of the namespace
        (an interrupted run's too), and wait until their pods are gone."""
        selector = f"{RUN_LABEL}={run}" if run else None
        self.apps.delete_collection_namespaced_deployment(self.namespace, label_selector=selector,
                                                          propagation_policy="Background")
        if run is None:
            self.core.delete_collection_namespaced_pod(self.namespace, grace_period_seconds=0)  # bare pods too
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.core.list_namespaced_pod(self.namespace, label_selector=selector).items:
                return
            time.sleep(0.3)


def _deployment_of(pod) -> str:
    return pod.metadata.labels.get(DEPLOYMENT_LABEL, pod.metadata.name)


def live_events(scenario: str, rng: np.random.Generator, total_cpu_millicores: float, nodes: int) -> Iterator[Event]:
    """The scenario's event stream (pods with the thesis's 20/30 ms latency limits), sized for the live
    cluster: poisson's arrival rate follows the live cluster's allocatable cpu, not a drawn one."""
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}: expected one of {', '.join(SCENARIOS)}")
    if nodes < 1 or not total_cpu_millicores > 0:
        raise ValueError(f"the cluster has no schedulable cpu ({nodes} node(s), {total_cpu_millicores:g}m)")
    world = family(scenario).world(rng, nodes=nodes, limits=True)
    live = Hardware("live", total_cpu_millicores / nodes, 0.0 * GIB, 110, 0.0, 0.0)
    return events(replace(world, nodes=tuple(NodeSpec(live, 0.0) for _ in range(nodes))), rng)


def with_min_lifetime(stream: Iterator[Event], arrivals: int, min_lifetime: float) -> list[Event]:
    """The stream's first `arrivals` arrivals with what happens between them, each pod living at least
    `min_lifetime` (the stream's seconds): its departure moves later when it came sooner. Prometheus
    records a pod only when a scrape sees it, and its usage only after two scrapes of its cpu counter:
    a shorter pod is load the live cluster carries and a replay of the recording never sees."""
    kept: list[Event] = []
    arrived: dict[int, float] = {}
    for event in stream:
        if event.kind == "arrive":
            if len(arrived) == arrivals:
                break
            arrived[event.pod.id] = event.time
        elif event.kind == "depart" and event.pod_id in arrived:
            event = replace(event, time=max(event.time, arrived[event.pod_id] + min_lifetime))
        kept.append(event)
    return sorted(kept)


def drive(cluster: LiveCluster, stream: Iterable[Event], run: str, scheduler: str, policy: str | None, limit: int,
          speed: float, settle_s: float, on_other=None, usage_scale: float = 1.0, await_departures: bool = False,
          ) -> Iterator[tuple[Event, str, dict[str, str | None], set[str]]]:
    """Play an event stream against the cluster, `speed` times faster than its clock: each arrival
    becomes a Deployment (using its simulated share of its request, x `usage_scale`) and waits until
    its pod is placed (or `settle_s` passes), each departure deletes it; other events go to
    `on_other`. Yields per arrival (event, deployment, the run's placements, the deployments alive);
    stops at the first event after `limit` arrivals.

    A deleted Deployment's pod leaves the scheduler's view a while later (garbage collection, then
    the kubelet's termination): at 40x a second is 40 scenario seconds, so an arrival can find a
    departed pod still holding its node. `await_departures` waits, before each arrival, until the
    departed pods are gone (or `settle_s` passes), so every pod meets the state the simulator's
    timeline has: what a placement-for-placement comparison with the simulator needs."""
    cluster.ensure_namespace()
    names: dict[int, str] = {}
    departed: set[str] = set()
    t0, created = time.monotonic(), 0
    for event in stream:
        if created >= limit:
            break
        delay = t0 + event.time / speed - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        if event.kind == "arrive":
            if departed:
                if left := cluster.wait_gone(run, departed, settle_s):
                    print(f"  departed pods still there after {settle_s:g} s: {', '.join(sorted(left))}", file=sys.stderr)
                departed.clear()
            name = f"{run}-{created:03d}"
            names[event.pod.id] = name
            cluster.create_deployment(name, run, scheduler, policy, event.pod.cpu_millicores,
                                      event.pod.memory_bytes, event.pod.latency_soft_ms, event.pod.latency_hard_ms,
                                      event.pod.usage * usage_scale)
            created += 1
            yield event, name, cluster.wait_scheduled(run, {name}, settle_s), set(names.values())
        elif event.kind == "depart" and event.pod_id in names:
            cluster.delete_deployment(name := names.pop(event.pod_id))
            if await_departures:
                departed.add(name)
        elif on_other is not None:
            on_other(event)


def replay(cluster: LiveCluster, scenario: str, pods: int, scheduler: str, policy: str | None, speed: float = 10.0,
           seed: int = 0, run: str | None = None, progress: bool = True, settle_s: float = 60.0,
           usage_scale: float = 1.0, min_lifetime_s: float = 0.0, watch_pods: bool = False) -> RunResult:
    """Replay `pods` arrivals of `scenario`; wait for each pod to be scheduled before the next arrives.
    `usage_scale` multiplies the cpu every pod uses (3: a workload that uses 3x what it did);
    `min_lifetime_s` (real seconds) keeps every pod alive at least that long (`with_min_lifetime`);
    `watch_pods` records when each pod appeared and went (`RunResult.pod_times`)."""
    run = run or f"{scenario}-{(policy or 'default').lower()}-{int(time.time())}"
    result = RunResult(run, scheduler, policy)
    rng = np.random.default_rng(seed)
    nodes = sorted(cluster.node_latencies())
    stream = live_events(scenario, rng, cluster.total_cpu_millicores(), len(nodes))
    if min_lifetime_s > 0:
        stream = with_min_lifetime(stream, pods, min_lifetime_s * speed)

    def other(event: Event) -> None:
        if event.kind == "shift-latency":
            shift_latencies(cluster, rng)
            result.shifts.append(len(result.placements))

    timeline = PodTimeline(cluster.core, cluster.namespace, f"{RUN_LABEL}={run}").start() if watch_pods else None
    try:
        for _, name, placed, alive in drive(cluster, stream, run, scheduler, policy, pods, speed, settle_s, other,
                                            usage_scale):
            latencies = cluster.node_latencies()
            node = placed.get(name)
            result.placements.append(Placement(name, node, latencies.get(node) if node else None))
            result.active_nodes.append(len({placed.get(n) for n in alive if placed.get(n)}))
            if progress:
                print(f"  {name} -> {node or 'PENDING'}", file=sys.stderr)
    finally:
        if timeline is not None:
            result.pod_times = timeline.stop()
    return result


def shift_latencies(cluster: LiveCluster, rng: np.random.Generator) -> dict[str, float]:
    """Nodes swap their latencies (the thesis's "latency change")."""
    current = cluster.node_latencies()
    names = sorted(current)
    order = rng.permutation(len(names))
    while len(names) > 1 and np.all(order == np.arange(len(names))):
        order = rng.permutation(len(names))
    new = {names[i]: current[names[j]] for i, j in enumerate(order)}
    for node, latency in new.items():
        cluster.set_node_latency(node, latency)
    return new


def summarize(result: RunResult) -> str:
    counts: dict[str, int] = {}
    for p in result.placements:
        counts[p.node or "PENDING"] = counts.get(p.node or "PENDING", 0) + 1
    label = f"{result.scheduler}" + (f" ({result.policy})" if result.policy else "")
    spread = ", ".join(f"{node}: {n}" for node, n in sorted(counts.items()))
    finite = [x for x in result.chosen_latency if np.isfinite(x)]
    return (f"{label}: {spread}; mean active nodes {np.mean(result.active_nodes):.2f}; "
            f"mean chosen latency {np.mean(finite) if finite else float('nan'):.1f} ms")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rlscore-loadgen", description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", choices=SCENARIOS, default="test1")
    parser.add_argument("--policy", type=str.upper, choices=("EE", "LB", "EL"), default=None,
                        help="rlscore.io/policy of the pods (omit to leave it to the server's default)")
    parser.add_argument("--scheduler", default="rl-scheduler", help="spec.schedulerName of the pods")
    parser.add_argument("--pods", type=int, default=30, help="arrivals to replay")
    parser.add_argument("--speed", type=float, default=10.0, help="scenario seconds per real second")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--usage-scale", type=float, default=1.0,
                        help="x the cpu each pod uses (KWOK): e.g. 3 for a workload that starts using 3x its requests")
    parser.add_argument("--namespace", default="rlscore-loadgen")
    parser.add_argument("--kubeconfig", default=None)
    parser.add_argument("--keep", action="store_true", help="leave the deployments in place")
    args = parser.parse_args(argv)
    if args.pods < 1 or args.speed <= 0 or not 0 < args.usage_scale <= 100:
        parser.error("--pods must be >= 1, --speed > 0 and --usage-scale within (0, 100]")
    if args.policy:
        normalize_policy(args.policy)
    try:
        cluster = LiveCluster(args.kubeconfig, args.namespace)
    except (config.ConfigException, OSError) as exc:
        print(f"rlscore-loadgen: no cluster to talk to: {exc}", file=sys.stderr)
        return 2
    result = replay(cluster, args.scenario, args.pods, args.scheduler, args.policy, args.speed, args.seed,
                    usage_scale=args.usage_scale)
    print(summarize(result))
    if not args.keep:
        cluster.cleanup(result.run)
    return 0 if all(p.node for p in result.placements) else 1


if __name__ == "__main__":
    sys.exit(main())
