"""A live cluster's recent history, read from the Kubernetes API and Prometheus range queries.

Nodes (sizes, power curves, instance types) come from the API as they are now; everything that
happened over the window comes from Prometheus, because the API forgets a pod once it is deleted:
kube-state-metrics' series give each pod's creation time, requests, app label and latency
annotations, and how long it existed; cAdvisor's give what it used; the latency gauge and Kepler's
series give each node's latency and power curve. What a series cannot tell is reported in
`History.notes` and never guessed silently.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone

import numpy as np
from kubernetes.utils.quantity import parse_quantity

from agent.live.loadgen import LATENCY_ANNOTATION
from rlscore.core import node_metrics

POWER_IDLE_KEYS = ("rlscore.io/power-idle-watts", "metrics.rlscore.io/power-idle-watts")
POWER_MAX_KEYS = ("rlscore.io/power-max-watts", "metrics.rlscore.io/power-max-watts")
DEFAULT_USAGE = 0.6  # share of its request a pod without usage samples is taken to use (KWOK's default)
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
MAX_POINTS = 10_000  # Prometheus refuses range queries of more than 11,000 points per series

# The series calibration reads, by what they give; names as kube-state-metrics, cAdvisor, Kepler and
# rlscore's latency probe export them. Each can be replaced (rlscore-calibrate --query NAME=PROMQL).
QUERIES = {
    "pod_created": "max by (namespace, pod) (kube_pod_created)",
    # per container first (max: a series scraped twice, e.g. while a target is rediscovered, counts
    # once), then summed over the pod's containers
    "pod_cpu_request": ('sum by (namespace, pod) (max by (namespace, pod, container) '
                        '(kube_pod_container_resource_requests{resource="cpu"}))'),
    "pod_memory_request": ('sum by (namespace, pod) (max by (namespace, pod, container) '
                           '(kube_pod_container_resource_requests{resource="memory"}))'),
    "pod_cpu_seconds": ('sum by (namespace, pod) (max by (namespace, pod, container) '
                        '(container_cpu_usage_seconds_total{container!=""}))'),
    "pod_app": "max by (namespace, pod, label_app) (kube_pod_labels)",
    "pod_owner": "max by (namespace, pod, owner_kind, owner_name) (kube_pod_owner)",
    "pod_latency_limits": ("max by (namespace, pod, annotation_rlscore_io_latency_soft_ms, "
                           "annotation_rlscore_io_latency_hard_ms) (kube_pod_annotations)"),
    "node_latency": node_metrics.LATENCY_QUERY,
    # each node's busy cpu fraction, as the suggestion server reads it (RLSCORE_CPU_QUERY; by `node`
    # label), and the cores its pods use: what is left is what the node uses besides its pods
    "node_cpu_busy": node_metrics.CPU_QUERY,
    "node_pod_cpu": ('sum by (node) (irate(container_cpu_usage_seconds_total{container!=""}[1m]) '
                     '* on (namespace, pod) group_left (node) max by (namespace, pod, node) (kube_pod_info{node!=""}))'),
    "node_power_idle": node_metrics.POWER_IDLE_QUERY,
    "node_power_active": node_metrics.POWER_ACTIVE_QUERY,
    "node_power_usage": node_metrics.POWER_USAGE_QUERY,
}


@dataclass
class NodeRecord:
    name: str
    cpu_millicores: float
    memory_bytes: float
    max_pods: int
    instance_type: str | None = None
    power_idle_watts: float | None = None
    power_max_watts: float | None = None
    power_source: str | None = None  # labels | kepler | None (unknown)
    latency_ms: float | None = None  # mean over the window
    latency_std_ms: float | None = None
    background_cpu: float | None = None  # share of its cpu used besides its pods (median over the window)


@dataclass
class PodRecord:
    namespace: str
    name: str
    workload: str
    created: float  # unix seconds (kube_pod_created's whole second, plus half a second)
    last_seen: float  # the last sample of its kube-state-metrics series
    alive: bool  # still there at the end of the window: its lifetime is not known yet
    cpu_millicores: float
    memory_bytes: float
    usage: float | None = None  # mean cpu used / cpu requested over its life
    latency_limits_ms: tuple[float, float] | None = None
    step_s: float = 0.0  # the sampling step its times were read at
    scrape_s: float = 0.0  # how often Prometheus scraped its series (0: not known)
    usage_onset_s: float | None = None  # from its creation until its cpu counter first rose in a scrape
    usage_linger_s: float | None = None  # from when it went until its cpu counter's series ended
    went: float | None = None  # when it went, where a pod watch saw it (agent.live.pod_timeline)

    @property
    def ended(self) -> float:
        """When it went: its series ends at the first scrape without it (half a step after its last
        sample), and it went at some moment between that scrape and the one before."""
        if self.went is not None:
            return self.went
        if self.alive:
            return float("inf")
        return max(self.last_seen + self.step_s / 2 - self.scrape_s / 2, self.created)

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name


@dataclass
class History:
    start: float
    end: float
    step_s: float
    nodes: list[NodeRecord]
    pods: list[PodRecord]
    notes: list[str] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return self.end - self.start

    def arrived(self, pod: PodRecord) -> bool:
        """Created within the window. Creation timestamps are whole seconds: a pod created in the
        second the window starts in carries a time up to half a second before it."""
        return pod.created + 0.5 > self.start


class HistoryError(RuntimeError):
    """The history cannot be read (Prometheus unreachable, no pods at all); the message says why."""


_HASH = re.compile(r"-[0-9a-f]{6,10}$")  # a ReplicaSet's pod-template-hash suffix
_POD_SUFFIX = re.compile(r"(-[0-9a-f]{6,10})?-[a-z0-9]{5}$")  # ReplicaSet hash + random suffix


def workload_name(pod: str, app: str | None, owner_kind: str | None, owner_name: str | None) -> str:
    """Pods of one workload share a name: the app label, else the controller (a ReplicaSet's
    Deployment), else the pod name without the suffixes its controller added."""
    if app:
        return app
    if owner_name and owner_kind not in (None, "", "<none>"):
        return _HASH.sub("", owner_name) if owner_kind == "ReplicaSet" else owner_name
    return controller_name(pod)


def controller_name(pod: str) -> str:
    """The pod's name without the suffixes its controller added (a Deployment's pods: its name)."""
    return _POD_SUFFIX.sub("", pod) or pod


def _float(text, default=None):
    try:
        value = float(text)
    except (TypeError, ValueError):
        return default
    return value if math.isfinite(value) else default


def node_records(core) -> list[NodeRecord]:
    """The nodes as the API has them now; power curves from labels or annotations where set."""
    out = []
    for node in sorted(core.list_node().items, key=lambda n: n.metadata.name):
        alloc = node.status.allocatable or {}
        meta = {**(node.metadata.annotations or {}), **(node.metadata.labels or {})}
        try:
            cpu = float(parse_quantity(alloc.get("cpu", "0"))) * 1000.0
            memory = float(parse_quantity(alloc.get("memory", "0")))
            pods = int(parse_quantity(alloc.get("pods", "110")))
        except ValueError as exc:
            raise HistoryError(f"node {node.metadata.name}: unreadable allocatable resources: {exc}") from None
        if cpu <= 0 or memory <= 0:
            continue  # nothing can be scheduled there
        idle = next((v for k in POWER_IDLE_KEYS if (v := _float(meta.get(k))) is not None), None)
        peak = next((v for k in POWER_MAX_KEYS if (v := _float(meta.get(k))) is not None), None)
        record = NodeRecord(node.metadata.name, cpu, memory, max(pods, 1), meta.get(INSTANCE_TYPE_LABEL))
        if idle is not None and peak is not None and 0 <= idle <= peak:
            record.power_idle_watts, record.power_max_watts, record.power_source = idle, peak, "labels"
        record.latency_ms = _float((node.metadata.annotations or {}).get(LATENCY_ANNOTATION))
        out.append(record)
    return out


class RangeReader:
    """Range queries over the window, split so that no query asks for more than MAX_POINTS steps."""

    def __init__(self, prometheus, start: float, end: float, step_s: float, timeout_s: float = 30.0):
        self.prometheus, self.start, self.end, self.step_s, self.timeout_s = prometheus, start, end, step_s, timeout_s

    def series(self, query: str) -> list[tuple[dict, np.ndarray, np.ndarray]]:
        """(labels, times, values) per series; NaN and infinite samples dropped."""
        merged: dict[tuple, tuple[dict, list, list]] = {}
        chunk = self.step_s * MAX_POINTS
        t = self.start
        while t < self.end:
            stop = min(t + chunk, self.end)
            result = self.prometheus.custom_query_range(
                query, start_time=datetime.fromtimestamp(t, timezone.utc),
                end_time=datetime.fromtimestamp(stop, timezone.utc), step=f"{int(round(self.step_s * 1000))}ms",
                params={"timeout": f"{int(self.timeout_s * 1000)}ms"})
            for series in result:
                labels = series.get("metric", {})
                key = tuple(sorted(labels.items()))
                entry = merged.setdefault(key, (labels, [], []))
                for when, value in series.get("values", []):
                    v = _float(value)
                    if v is not None and (not entry[1] or float(when) > entry[1][-1]):
                        entry[1].append(float(when))
                        entry[2].append(v)
            t = stop + self.step_s
        return [(labels, np.array(times), np.array(values)) for labels, times, values in merged.values() if times]


def read_history(core, prometheus, start: float, end: float, step_s: float = 5.0,
                 queries: dict[str, str] | None = None) -> History:
    """The nodes now and the pods that lived between `start` and `end` (unix seconds)."""
    if not end > start:
        raise HistoryError(f"the window is empty: start {start} is not before end {end}")
    queries = {**QUERIES, **(queries or {})}
    reader = RangeReader(prometheus, start, end, step_s)
    notes: list[str] = []

    def read(name: str) -> list[tuple[dict, np.ndarray, np.ndarray]]:
        try:
            return reader.series(queries[name])
        except Exception as exc:  # connection refused, timeout, PromQL error
            if name == "pod_created":
                raise HistoryError(f"prometheus: {name} ({queries[name]}): {type(exc).__name__}: "
                                   f"{str(exc)[:300]}") from None
            notes.append(f"{name}: the query failed ({type(exc).__name__}: {str(exc)[:120]}); left out")
            return []

    nodes = node_records(core)
    by_name = {n.name: n for n in nodes}
    # the one query that must answer, first: a Prometheus that is down is reported before the optional
    # queries each spend the client's retries on it
    created = {(lab.get("namespace", ""), lab.get("pod", "")): (times, values)
               for lab, times, values in read("pod_created") if lab.get("pod")}
    if not created:
        raise HistoryError("prometheus has no kube_pod_created series in the window: is kube-state-metrics "
                           "scraped? (rlscore-calibrate reads pod history from it)")
    for labels, _, values in read("node_latency"):
        if (node := by_name.get(labels.get("node", ""))) is not None:
            node.latency_ms, node.latency_std_ms = float(values.mean()), float(values.std())
    _kepler_power(read, by_name)
    _background_cpu(read, by_name, notes)

    def per_pod(name: str) -> dict[tuple[str, str], tuple[dict, np.ndarray, np.ndarray]]:
        return {(lab.get("namespace", ""), lab.get("pod", "")): (lab, t, v) for lab, t, v in read(name)}

    cpu, memory, usage = per_pod("pod_cpu_request"), per_pod("pod_memory_request"), per_pod("pod_cpu_seconds")
    apps, owners, limits = per_pod("pod_app"), per_pod("pod_owner"), per_pod("pod_latency_limits")
    scrape = scrape_interval([(t, v) for _, t, v in usage.values()])
    pods, no_request = [], 0
    for key, (times, values) in created.items():
        # requests do not change over a pod's life: the median sample is the request
        if key not in cpu or float(np.median(cpu[key][2])) <= 0:
            no_request += 1
            continue
        cpu_m = round(float(np.median(cpu[key][2])) * 1000.0, 1)
        mem = float(np.median(memory[key][2])) if key in memory else 0.0
        owner = owners.get(key, ({}, None, None))[0]
        workload = workload_name(key[1], apps.get(key, ({}, None, None))[0].get("label_app"),
                                 owner.get("owner_kind"), owner.get("owner_name"))
        born = float(values[-1]) + 0.5  # creation timestamps are whole seconds: the middle of that one
        used = onset = None
        if key in usage and (cores := cpu_seconds_rate(usage[key][1], usage[key][2])) is not None:
            used = cores * 1000.0 / cpu_m
            onset = usage_onset(born, usage[key][1], usage[key][2], start, step_s)
        pair = None
        if key in limits:
            lab = limits[key][0]
            soft = _float(lab.get("annotation_rlscore_io_latency_soft_ms"))
            hard = _float(lab.get("annotation_rlscore_io_latency_hard_ms"))
            if soft is not None and hard is not None and 0 <= soft <= hard:
                pair = (soft, hard)
        last = float(times[-1])
        record = PodRecord(key[0], key[1], workload, created=born, last_seen=last, alive=last >= end - 2 * step_s,
                           cpu_millicores=cpu_m, memory_bytes=mem, usage=used, usage_onset_s=onset,
                           latency_limits_ms=pair, step_s=step_s, scrape_s=scrape)
        if used is not None and not record.alive:
            counter_end = float(usage[key][1][-1]) + step_s / 2  # its counter's series ended here
            if counter_end < end - 2 * step_s:
                record.usage_linger_s = max(counter_end - record.ended, 0.0)
        pods.append(record)
    if no_request:
        notes.append(f"{no_request} pod(s) without a cpu request (kube_pod_container_resource_requests) left out")
    if not pods:
        raise HistoryError("no pod with a cpu request in the window: nothing to calibrate the workload from")
    if not usage:
        notes.append("no per-pod cpu usage (container_cpu_usage_seconds_total): usage factors unknown")
    return History(start, end, step_s, nodes, sorted(pods, key=lambda p: p.created), notes)


def arrival_order(history: History) -> list[PodRecord]:
    """The window's pods in the order they arrive in a replay: pod i is the simulator's pod id i."""
    return sorted(history.pods, key=lambda p: (p.created, p.name))


def trace_events(history: History) -> list:
    """The window's pods as the simulator's events, in time order: each arrives when it was created
    (pods created before the window arrive at its start) and leaves when its series ended."""
    from agent.sim.scenarios import Event
    from agent.sim.world import SimPod

    events, seq = [], 0
    for i, pod in enumerate(arrival_order(history)):
        soft, hard = pod.latency_limits_ms or (None, None)
        arrive = max(pod.created, history.start) - history.start
        leave = min(pod.ended, history.end) - history.start
        sim_pod = SimPod(i, pod.cpu_millicores, max(pod.memory_bytes, 1.0), soft, hard,
                         pod.usage if pod.usage is not None else DEFAULT_USAGE, pod.workload, depart_at=leave)
        events.append(Event(arrive, seq, "arrive", pod=sim_pod))
        seq += 1
        if pod.ended <= history.end:
            events.append(Event(leave, seq, "depart", pod_id=i))
            seq += 1
    return sorted(events)


def scrapes(times: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A counter's samples where its value changed: read at a step below the scrape interval, each
    scrape's value repeats, and only the first sample of each run is a scrape."""
    fresh = np.concatenate(([True], np.diff(values) != 0))
    return times[fresh], values[fresh]


def cpu_seconds_rate(times: np.ndarray, values: np.ndarray) -> float | None:
    """Cores used on average between the first and the last scrape of a cpu-seconds counter; a drop
    is a restart, after which the counter counts from 0. A range query with a step below the scrape
    interval repeats each scrape's value: only the first sample of each run is a scrape. None when
    fewer than two scrapes are left."""
    times, values = scrapes(times, values)
    if len(times) < 2:
        return None
    steps = np.diff(values)
    return float(np.where(steps >= 0, steps, values[1:]).sum() / (times[-1] - times[0]))


def scrape_interval(counters: list[tuple[np.ndarray, np.ndarray]]) -> float:
    """How often Prometheus scrapes the pods' series: the median time between two changes of a cpu
    counter (a step shorter than the scrape interval repeats each scrape's value; a longer one reads
    as the step). 0 when no counter changed twice."""
    gaps = []
    for times, values in counters:
        fresh, _ = scrapes(times, values)
        gaps.extend(np.diff(fresh[1:]))  # the first sample may come from a scrape before the window
    return float(np.median(gaps)) if gaps else 0.0


def usage_onset(created: float, times: np.ndarray, values: np.ndarray, start: float, step_s: float) -> float | None:
    """Seconds from a pod's creation until its cpu counter first rose from one scrape to the next:
    from then on a rate over the counter (what node cpu queries read) shows the pod's use. The first
    sample after that scrape is up to a step later. None for a pod created before the window
    (`start`) or whose counter never rose."""
    if created < start:
        return None
    times, values = scrapes(times, values)
    rose = times[1:][np.diff(values) > 0]
    return max(float(rose[0]) - step_s / 2 - created, 0.0) if len(rose) else None


def _kepler_power(read, by_name: dict[str, NodeRecord]) -> None:
    """Power curves from Kepler where the API gave none: idle watts, and max = idle + active / usage
    at the samples with enough usage to divide by."""
    idle = {lab.get("node_name"): v for lab, _, v in read("node_power_idle")}
    if not idle:
        return
    active = {lab.get("node_name"): (t, v) for lab, t, v in read("node_power_active")}
    ratio = {lab.get("node_name"): (t, v) for lab, t, v in read("node_power_usage")}
    for name, node in by_name.items():
        if node.power_source is not None or name not in idle or name not in active or name not in ratio:
            continue
        (ta, va), (tr, vr) = active[name], ratio[name]
        common, ia, ir = np.intersect1d(ta, tr, return_indices=True)
        busy = vr[ir] > 0.05
        if not len(common) or not busy.any():
            continue
        base = float(np.median(idle[name]))
        node.power_idle_watts = base
        node.power_max_watts = base + float(np.median(va[ia][busy] / vr[ir][busy]))
        node.power_source = "kepler"


MIN_BACKGROUND_SAMPLES = 5


def _background_cpu(read, by_name: dict[str, NodeRecord], notes: list[str]) -> None:
    """Each node's busy share minus its pods' cores over its capacity, the median over the window's
    steps (a pod's first and last scrapes, where the two rates disagree, are outliers the median
    skips). A node with fewer than MIN_BACKGROUND_SAMPLES busy samples keeps None, and a note says so;
    a step without a pods' sample is one where the node ran no pod."""
    busy = {lab.get("node"): (t, v) for lab, t, v in read("node_cpu_busy") if lab.get("node") in by_name}
    pods = {lab.get("node"): (t, v) for lab, t, v in read("node_pod_cpu") if lab.get("node") in by_name}
    if busy and not pods:
        notes.append("background cpu unknown: no per-node pod cpu (node_pod_cpu: cAdvisor joined with kube_pod_info)")
        return
    unknown, no_samples = [], (np.array([]), np.array([]))
    for name, node in by_name.items():
        tb, vb = busy.get(name, no_samples)
        if len(tb) < MIN_BACKGROUND_SAMPLES:
            unknown.append(name)
            continue
        tp, vp = pods.get(name, no_samples)
        used = np.zeros(len(tb))
        _, ib, ip = np.intersect1d(tb, tp, return_indices=True)
        used[ib] = vp[ip]
        rest = vb - used * 1000.0 / node.cpu_millicores
        node.background_cpu = round(float(np.clip(np.median(rest), 0.0, 1.0)), 4)
    if unknown:
        notes.append(f"background cpu unknown for {len(unknown)} node(s) ({', '.join(unknown[:5])}"
                     f"{', ...' if len(unknown) > 5 else ''}): fewer than {MIN_BACKGROUND_SAMPLES} busy-cpu samples with "
                     "their `node` label (node_cpu_busy)")


def hot_node_share(prometheus, query: str, nodes: list[str], start: float, end: float, step_s: float = 1.0) -> float:
    """The share of node-time above HOT_UTILIZATION measured cpu between `start` and `end`: the
    simulator's hot-node share, read from a live cluster. `query` gives each node's busy cpu fraction
    (the server's RLSCORE_CPU_QUERY) with a `node` label. A node without a sample at a step counts as
    not hot at that step; steps without any sample are left out."""
    from rlscore.core.objectives import HOT_UTILIZATION

    if not end > start or not nodes:
        raise HistoryError(f"no hot-node share over {len(nodes)} node(s) from {start} to {end}")
    wanted = set(nodes)
    hot: dict[float, int] = {}
    for labels, times, values in RangeReader(prometheus, start, end, step_s).series(query):
        if labels.get("node") in wanted:
            for when, value in zip(times, values):
                hot[when] = hot.get(when, 0) + int(value > HOT_UTILIZATION)
    if not hot:
        raise HistoryError(f"no cpu samples for {', '.join(sorted(wanted))} from {start} to {end}")
    return float(np.mean(list(hot.values())) / len(wanted))
