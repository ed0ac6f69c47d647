"""`rlscore-calibrate`: write a cluster profile of a live cluster from its recent history.

The profile (docs/cluster-profile.md) is what the simulator replays: node types and counts with
their power curves and latencies, the arrival rate and its shape over the day, and per workload and
request size a pod class with its memory, usage-to-request factors, latency limits and lifetimes.
`rlscore-train --profile`, `rlscore-eval --profile` and `rlscore-tune --profile` then work on the
cluster the scheduler really serves. Every assumption made for something the history could not tell
is printed and kept in the profile's notes.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from agent.live.history import (DEFAULT_USAGE, QUERIES, History, HistoryError, NodeRecord, PodRecord,
                                 read_history)
from rlscore.core.profile import ClusterProfile, Dynamics, MAX_BACKGROUND_CPU, NodeGroup, NodeType, PodClassProfile, Workload, save_profile
from agent.sim.cluster_profile import profile_world
from rlscore.core.objectives import UNKNOWN_IDLE_W_PER_CORE, UNKNOWN_MAX_W_PER_CORE
from agent.sim.world import DEFAULT_BACKGROUND_CPU, GIB

LATENCY_DRIFT_MS = 2.0  # a node whose latency wandered more than this (std) counts as drifting
MAX_LOAD = 2.0  # the profile schema's bound on the poisson load


def _name(text: str) -> str:
    """A profile name: lower-case letters, digits and dashes, at most 63 characters."""
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:63] or "x"


def node_types(nodes: list[NodeRecord], notes: list[str]) -> tuple[list[NodeType], list[NodeGroup], bool]:
    """Machine types (nodes that share size and power curve) and the nodes in name order; and
    whether every power curve was known."""
    types: dict[tuple, NodeType] = {}
    groups: list[NodeGroup] = []
    unknown_power = [n.name for n in nodes if n.power_source is None]
    if unknown_power:
        notes.append(f"{len(unknown_power)} node(s) without a power curve (labels rlscore.io/power-idle-watts and "
                     f"-max-watts, or Kepler): given {UNKNOWN_IDLE_W_PER_CORE:.1f}/{UNKNOWN_MAX_W_PER_CORE:.1f} W "
                     f"per core idle/max and powerVisible: false; e.g. {', '.join(unknown_power[:3])}")
    no_latency = [n.name for n in nodes if n.latency_ms is None]
    if no_latency:
        notes.append(f"{len(no_latency)} node(s) without a latency (rlscore_node_user_latency_ms or the "
                     f"rlscore.io/latency-ms annotation): given 0 ms; e.g. {', '.join(no_latency[:3])}")
    for node in nodes:
        cores = node.cpu_millicores / 1000.0
        idle = node.power_idle_watts if node.power_source else round(UNKNOWN_IDLE_W_PER_CORE * cores, 1)
        peak = node.power_max_watts if node.power_source else round(UNKNOWN_MAX_W_PER_CORE * cores, 1)
        key = (node.cpu_millicores, node.memory_bytes, node.max_pods, round(idle, 1), round(peak, 1))
        if key not in types:
            base = _name(node.instance_type or f"{cores:g}cpu-{node.memory_bytes / GIB:.0f}gi")
            taken = {t.name for t in types.values()}
            name, k = base, 2
            while name in taken:
                name, k = f"{base}-{k}", k + 1
            types[key] = NodeType(name=name, cpuMillicores=node.cpu_millicores, memoryBytes=node.memory_bytes,
                                  maxPods=node.max_pods, powerIdleWatts=key[3], powerMaxWatts=key[4])
        if groups and groups[-1].type == types[key].name:  # runs of one type, in name order
            last = groups.pop()
            groups.append(NodeGroup(type=last.type, latencyMs=[*last.latency_ms, round(node.latency_ms or 0.0, 2)],
                                    names=[*last.names, node.name]))
        else:
            groups.append(NodeGroup(type=types[key].name, latencyMs=[round(node.latency_ms or 0.0, 2)],
                                    names=[node.name]))
    return list(types.values()), groups, not unknown_power


def mean_lifetime(pods: list[PodRecord], start: float, end: float) -> tuple[float, int]:
    """The exponential lifetime's maximum-likelihood mean: time observed alive within the window
    over the pods seen to end (those still alive are censored, not dropped); and that count."""
    observed = sum(max(0.0, min(p.ended, end) - max(p.created, start)) for p in pods)
    ended = sum(1 for p in pods if not p.alive)
    return observed / max(ended, 1), ended


def pod_classes(history: History, mean_life_s: float, notes: list[str]) -> list[PodClassProfile]:
    """A class per workload and cpu request, weighted by its arrivals in the window (by all its
    pods seen when none arrived)."""
    groups: dict[tuple[str, float], list[PodRecord]] = defaultdict(list)
    for pod in history.pods:
        groups[(pod.workload, pod.cpu_millicores)].append(pod)
    classes, unknown_usage = [], 0
    for (workload, cpu), pods in sorted(groups.items()):
        arrived = sum(1 for p in pods if history.arrived(p))
        ratios = [p.memory_bytes / GIB / (cpu / 1000.0) for p in pods]
        usages = [p.usage for p in pods if p.usage is not None]
        if usages:
            usage = [round(float(np.percentile(usages, 10)), 3), round(float(np.percentile(usages, 90)), 3)]
        else:
            usage, unknown_usage = [DEFAULT_USAGE, DEFAULT_USAGE], unknown_usage + 1
        limits = sorted({p.latency_limits_ms for p in pods if p.latency_limits_ms is not None})
        life, ended = mean_lifetime(pods, history.start, history.end)
        scale = life / mean_life_s if ended >= 3 else 1.0  # too few ends to tell it apart from the mean
        classes.append(PodClassProfile(
            name=_name(f"{workload}-{cpu:g}m"), weight=float(arrived or 0.5),  # none arrived: under one per window
            cpuMillicores=[cpu], memoryPerCpuGiB=[round(min(ratios), 4), round(max(ratios), 4)],
            usage=[min(max(u, 0.0), 100.0) for u in usage], latencyLimitsMs=[list(p) for p in limits],
            lifetimeScale=float(np.clip(scale, 1e-3, 1000.0))))
    if unknown_usage:
        notes.append(f"{unknown_usage} class(es) without usage samples: usage {[DEFAULT_USAGE, DEFAULT_USAGE]} assumed")
    names = [c.name for c in classes]
    if len(set(names)) != len(names):  # two workloads that only differ in characters a name drops
        classes = [c.model_copy(update={"name": f"{c.name[:58]}-{i}"}) for i, c in enumerate(classes)]
    return classes


def hourly_shape(history: History) -> tuple[list[float], float]:
    """Arrivals per hour of day (UTC) relative to the mean of the hours the window covers (hours it
    does not cover get 1); empty when the window is shorter than two hours. And the start hour."""
    start_hour = (history.start % 86400.0) / 3600.0
    if history.seconds < 2 * 3600:
        return [], round(start_hour, 3)
    covered = np.zeros(24)
    t = history.start
    while t < history.end:
        step = min(3600.0 - t % 3600.0, history.end - t)
        covered[int(t % 86400.0 // 3600)] += step / 3600.0
        t += step
    counts = np.zeros(24)
    for pod in history.pods:
        if history.arrived(pod):
            counts[int(pod.created % 86400.0 // 3600)] += 1
    seen = covered > 0.25
    rate = np.where(seen, counts / np.maximum(covered, 1e-9), 0.0)
    mean = rate[seen].mean()
    if mean <= 0:
        return [], round(start_hour, 3)
    return [round(float(r / mean), 4) if s else 1.0 for r, s in zip(rate, seen)], round(start_hour, 3)


def build_profile(history: History, name: str, metrics_interval_s: float = 5.0) -> tuple[ClusterProfile, list[str]]:
    notes = list(history.notes)
    types, groups, power_known = node_types(history.nodes, notes)
    if not groups:
        raise HistoryError("the cluster has no node with allocatable cpu and memory")
    arrived = [p for p in history.pods if history.arrived(p)]
    if not arrived:
        notes.append("no pod arrived in the window: the arrival rate is that of one pod per window")
    rate = max(len(arrived), 1) / history.seconds
    life, ended = mean_lifetime(history.pods, history.start, history.end)
    if ended == 0:
        notes.append("no pod ended in the window: the mean lifetime is a lower bound (the time observed)")
    classes = pod_classes(history, life, notes)
    weights = np.array([c.weight for c in classes])
    cpu_life = float(weights @ np.array([c.cpu_millicores[0] * c.lifetime_scale for c in classes]) / weights.sum())
    total_cpu = sum(t.cpu_millicores * len(g.latency_ms) for g in groups for t in types if t.name == g.type)
    load = rate * cpu_life * life / total_cpu  # what World.arrival_rate inverts
    if load > MAX_LOAD:
        notes.append(f"the requested load {load:.2f} is over the schema's {MAX_LOAD}: capped (pods wait unscheduled)")
        load = MAX_LOAD
    hourly, start_hour = hourly_shape(history)
    drifting = [n.name for n in history.nodes if (n.latency_std_ms or 0.0) > LATENCY_DRIFT_MS]
    profile = ClusterProfile(
        name=_name(name), family="calibrated", nodeTypes=types, nodes=groups,
        workload=Workload(arrivals="poisson", load=round(load, 6), meanLifetimeSeconds=round(life, 3),
                          podClasses=classes, hourlyRate=hourly, startHour=start_hour),
        dynamics=Dynamics(metricsIntervalSeconds=metrics_interval_s, latencyDrift=bool(drifting),
                          powerVisible=power_known, backgroundCpu=background_range(history.nodes, notes),
                          usageOnsetSeconds=usage_onset(history.pods, notes), usageLingerSeconds=usage_linger(history.pods)))
    return profile, notes


def usage_onset(pods: list[PodRecord], notes: list[str]) -> float:
    """The mean over the pods of the seconds from creation until their cpu shows in a rate (the mean:
    each pod's is read to a sampling step, and the seconds add up); 0 (at once) when no pod's was
    measured."""
    known = [p.usage_onset_s for p in pods if p.usage_onset_s is not None]
    if not known:
        notes.append("no pod's usage onset measured (no cpu counter that rose after its creation): usage shows at once")
        return 0.0
    return round(float(np.mean(known)), 3)


def usage_linger(pods: list[PodRecord]) -> float:
    """The mean over the pods that went of the seconds their cpu still showed after; 0 when none went."""
    known = [p.usage_linger_s for p in pods if p.usage_linger_s is not None]
    return round(float(np.mean(known)), 3) if known else 0.0


def background_range(nodes: list[NodeRecord], notes: list[str]) -> list[float]:
    """[lowest, highest] of the nodes' measured background cpu; the generic range when none was measured."""
    known = [n.background_cpu for n in nodes if n.background_cpu is not None]
    if not known:
        notes.append(f"no node's background cpu measured: the generic {list(DEFAULT_BACKGROUND_CPU)} assumed")
        return list(DEFAULT_BACKGROUND_CPU)
    low, high = min(min(known), MAX_BACKGROUND_CPU), min(max(known), MAX_BACKGROUND_CPU)
    if max(known) > MAX_BACKGROUND_CPU:
        notes.append(f"a node's background cpu is over {MAX_BACKGROUND_CPU}: capped")
    return [round(low, 4), round(high, 4)]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlscore-calibrate", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--prometheus", required=True, help="Prometheus base URL, e.g. http://prometheus:9090")
    parser.add_argument("--prometheus-ca-file", type=Path, default=None,
                        help="CA bundle (PEM) that signs an https Prometheus's certificate (default: the system's CAs)")
    parser.add_argument("--prometheus-insecure-skip-verify", action="store_true",
                        help="do not verify an https Prometheus's certificate")
    parser.add_argument("--kubeconfig", default=None, help="default: in-cluster, else KUBECONFIG or ~/.kube/config")
    parser.add_argument("--window", default="1h", help="how far back to read: e.g. 30m, 6h, 7d")
    parser.add_argument("--end", type=float, default=None, help="end of the window, unix seconds (default: now)")
    parser.add_argument("--step", type=float, default=None,
                        help="seconds between samples (default: window/2000, at least 5)")
    parser.add_argument("--metrics-interval", type=float, default=5.0,
                        help="how stale the scorer's node metrics are (the server's refresh period), seconds")
    parser.add_argument("--name", default="calibrated", help="the profile's name")
    parser.add_argument("--query", action="append", default=[], metavar="NAME=PROMQL",
                        help="replace one of the series queries (see agent/live/history.py QUERIES)")
    parser.add_argument("--out", default="cluster.yaml", help="where to write the profile")
    return parser


def parse_duration(text: str) -> float:
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd])\s*", text)
    if not match:
        raise ValueError(f"a duration is a number and a unit (s, m, h, d), e.g. 30m; got {text!r}")
    seconds = float(match.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]
    if seconds <= 0:
        raise ValueError(f"the duration must be positive, got {text!r}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        window = parse_duration(args.window)
        overrides = dict(q.split("=", 1) for q in args.query if "=" in q)
        bad = [q for q in args.query if "=" not in q] + [k for k in overrides if k not in QUERIES]
        if bad:
            raise ValueError(f"--query takes NAME=PROMQL with NAME one of {', '.join(QUERIES)}; got {bad}")
        if not 0.0 <= args.metrics_interval <= 3600.0:  # NaN fails too
            raise ValueError(f"--metrics-interval must be 0..3600 seconds, got {args.metrics_interval}")
        if args.step is not None and not args.step > 0:
            raise ValueError(f"--step must be a positive number of seconds, got {args.step}")
        if args.prometheus_ca_file is not None:
            if args.prometheus_insecure_skip_verify:
                raise ValueError("--prometheus-ca-file or --prometheus-insecure-skip-verify, not both")
            if not args.prometheus_ca_file.is_file():
                raise ValueError(f"--prometheus-ca-file {args.prometheus_ca_file}: no such file")
    except ValueError as exc:
        print(f"rlscore-calibrate: {exc}", file=sys.stderr)
        return 2
    end = args.end if args.end is not None else time.time()
    step = args.step if args.step is not None else max(5.0, window / 2000)
    from kubernetes import client, config
    import requests
    from prometheus_api_client import PrometheusConnect
    try:
        try:
            config.load_incluster_config() if args.kubeconfig is None and _in_cluster() else \
                config.load_kube_config(config_file=args.kubeconfig)
        except Exception as exc:
            raise HistoryError(f"no Kubernetes credentials: {exc}") from None
        session = requests.Session()
        session.verify = (False if args.prometheus_insecure_skip_verify else
                          str(args.prometheus_ca_file) if args.prometheus_ca_file else True)
        prometheus = PrometheusConnect(url=args.prometheus, session=session)
        print(f"reading {args.window} of history (step {step:g} s) from {args.prometheus} and the API ...",
              file=sys.stderr)
        history = read_history(client.CoreV1Api(), prometheus, end - window, end, step, overrides)
        profile, notes = build_profile(history, args.name, args.metrics_interval)
    except HistoryError as exc:
        print(f"rlscore-calibrate: {exc}", file=sys.stderr)
        return 1
    path = save_profile(profile, args.out)
    world = profile_world(profile)
    print(f"{len(history.nodes)} nodes in {len(profile.node_types)} type(s); {len(history.pods)} pods in the window, "
          f"{sum(1 for p in history.pods if history.arrived(p))} arrived; "
          f"{len(profile.workload.pod_classes)} pod class(es); {world.arrival_rate * 60:.2f} arrivals/min, "
          f"mean lifetime {profile.workload.mean_lifetime_s:.0f} s, load {profile.workload.load:.2f}")
    for note in notes:
        print(f"note: {note}")
    print(f"wrote {path}")
    return 0


def _in_cluster() -> bool:
    import os
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


if __name__ == "__main__":
    sys.exit(main())
