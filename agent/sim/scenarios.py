"""Arrival processes: seeded, endless streams of timed events that drive the simulator.

A stream never looks at placements, so every scorer evaluated on the same seed sees exactly the
same arrivals, departures, latency changes and node churn.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field, replace
from typing import Iterator

import numpy as np

from agent.sim.world import GIB, MIB, PodClass, SimPod, World

ARRIVALS = ("test1", "test2", "poisson")


@dataclass(frozen=True, order=True)
class Event:
    time: float
    seq: int  # keeps events at the same time in the order they were made
    kind: str = field(compare=False)  # arrive | depart | shift-latency | node-down | node-up
    pod: SimPod | None = field(default=None, compare=False)
    pod_id: int = field(default=-1, compare=False)
    node: int = field(default=-1, compare=False)


class _EventMaker:
    def __init__(self, first_pod_id: int = 0) -> None:
        self._seq = itertools.count()
        self._pod_ids = itertools.count(first_pod_id)

    def event(self, time: float, kind: str, **kw) -> Event:
        return Event(time, next(self._seq), kind, **kw)

    def pod_id(self) -> int:
        return next(self._pod_ids)


class PodSampler:
    """Draws pods from a world's weighted pod classes."""

    def __init__(self, classes: tuple[PodClass, ...], rng: np.random.Generator):
        self.classes, self.rng = classes, rng
        weights = np.array([c.weight for c in classes], dtype=float)
        self.cumulative = np.cumsum(weights / weights.sum())

    def pick_class(self) -> int:
        if len(self.classes) == 1:
            return 0
        return min(int(np.searchsorted(self.cumulative, self.rng.random(), side="right")), len(self.classes) - 1)

    def draw(self, pod_id: int, depart_at: float = float("inf"), klass: int | None = None) -> tuple[SimPod, float]:
        """A pod (of class number `klass`, or one drawn by weight) and its lifetime scale."""
        rng = self.rng
        c = self.classes[self.pick_class() if klass is None else klass]
        cpu = float(c.cpu_millicores[int(rng.integers(len(c.cpu_millicores)))])
        memory = float(np.round(cpu / 1000.0 * rng.uniform(*c.memory_per_cpu_gib) * GIB / MIB) * MIB)
        usage = float(rng.uniform(*c.usage))
        soft = hard = None
        if c.latency_limits:
            soft, hard = c.latency_limits[int(rng.integers(len(c.latency_limits)))]
        # what a pod's traffic looks like to node_exporter: proportional to the work it really does
        used_cores = cpu / 1000.0 * usage
        pod = SimPod(pod_id, cpu, max(memory, 16.0 * MIB), soft, hard, usage, c.name,
                     network_bytes_per_s=used_cores * float(rng.uniform(0.5, 2.0)) * 1e6,
                     connections=float(rng.integers(1, 20)) * (1.0 + 4.0 * used_cores),
                     disk_bytes=float(rng.uniform(50, 500)) * MIB, depart_at=depart_at,
                     expected_usage=0.5 * (c.usage[0] + c.usage[1]))
        return pod, c.lifetime_scale


def test1(maker: _EventMaker, pods: PodSampler, batch: int = 30) -> Iterator[Event]:
    """Thesis Alg. 1: create `batch` single-pod deployments 3 s apart, wait 20 s, delete all, wait 5 s."""
    t = 0.0
    while True:
        ids = []
        leave = t + batch * 3.0 + 20.0
        for _ in range(batch):
            pod, _ = pods.draw(maker.pod_id(), leave)
            ids.append(pod.id)
            yield maker.event(t, "arrive", pod=pod)
            t += 3.0
        t += 20.0
        for pod_id in ids:
            yield maker.event(t, "depart", pod_id=pod_id)
        t += 5.0


def test2(maker: _EventMaker, pods: PodSampler, alive: int = 30) -> Iterator[Event]:
    """Thesis Alg. 2: create `alive` deployments 2 s apart, then forever: delete the oldest, wait 3 s,
    create one, wait 1 s."""
    t = 0.0
    queue: list[int] = []
    for k in range(alive):
        pod, _ = pods.draw(maker.pod_id(), 2.0 * alive + 4.0 * k)  # the k-th goes in the k-th cycle
        queue.append(pod.id)
        yield maker.event(t, "arrive", pod=pod)
        t += 2.0
    while True:
        yield maker.event(t, "depart", pod_id=queue.pop(0))
        t += 3.0
        pod, _ = pods.draw(maker.pod_id(), t - 3.0 + 4.0 * alive)
        queue.append(pod.id)
        yield maker.event(t, "arrive", pod=pod)
        t += 1.0


BURST_GAP_S = 0.05  # between the pods of one burst (a Deployment's replicas created together)


def poisson(maker: _EventMaker, pods: PodSampler, rng: np.random.Generator, rate: float,
            mean_lifetime_s: float, hourly: tuple[float, ...] = (), start_hour: float = 0.0,
            burst_size: float = 1.0, day_seconds: float = 86400.0, start: float = 0.0) -> Iterator[Event]:
    """Poisson arrivals with exponential lifetimes (scaled per pod class). With `hourly` (24
    multipliers by hour of day) the rate follows the day, drawn by thinning a process at the peak rate.
    With `burst_size` > 1, pods come in bursts of 1 + Poisson(burst_size - 1) pods of one class (a
    Deployment scaled up), the bursts at rate / burst_size, so the mean rate of pods stays `rate`.
    `start`: the time of the stream's origin (a future drawn afresh from the middle of a world's day)."""
    t = start
    departures: list[tuple[float, int]] = []
    peak = max(hourly) if hourly else 1.0
    burst_rate = rate / burst_size
    while True:
        t += float(rng.exponential(1.0 / (burst_rate * peak)))
        if hourly and rng.random() * peak >= hourly[int((start_hour + t / (day_seconds / 24.0)) % 24.0)]:
            continue
        count = 1 if burst_size <= 1.0 else 1 + int(rng.poisson(burst_size - 1.0))
        klass = pods.pick_class() if count > 1 else None
        for k in range(count):
            when = t + k * BURST_GAP_S
            while departures and departures[0][0] <= when:
                gone, pod_id = heapq.heappop(departures)
                yield maker.event(gone, "depart", pod_id=pod_id)
            lifetime = float(rng.exponential(mean_lifetime_s))
            pod, scale = pods.draw(maker.pod_id(), klass=klass)
            pod = replace(pod, depart_at=when + lifetime * scale)
            heapq.heappush(departures, (pod.depart_at, pod.id))
            yield maker.event(when, "arrive", pod=pod)
        t += (count - 1) * BURST_GAP_S


def node_churn(rng: np.random.Generator, nodes: int, mean_interval_s: float) -> Iterator[Event]:
    """Nodes leave (drained or failed) and come back 1-3 minutes later."""
    maker, t = _EventMaker(), 0.0
    while True:
        t += float(rng.exponential(mean_interval_s))
        node = int(rng.integers(nodes))
        yield maker.event(t, "node-down", node=node)
        yield maker.event(t + float(rng.uniform(60.0, 180.0)), "node-up", node=node)


def latency_shifts(times: tuple[float, ...]) -> Iterator[Event]:
    maker = _EventMaker()
    for t in sorted(times):
        yield maker.event(t, "shift-latency")


def can_draw_afresh(world: World) -> bool:
    """Whether `arrivals` can draw another future of this world: only an arrival process (Poisson) has
    one; the scripted test worlds have a single sequence."""
    return world.arrivals == "poisson"


def arrivals(world: World, rng: np.random.Generator, start: float, first_pod_id: int) -> Iterator[Event]:
    """A fresh draw of a Poisson world's arrivals (and their departures) from time `start` on, the pods
    numbered from `first_pod_id`: another future of the same world from that moment."""
    if not can_draw_afresh(world):
        raise ValueError(f"only a Poisson world's arrivals can be drawn afresh from a moment on, not {world.arrivals!r}")
    return poisson(_EventMaker(first_pod_id), PodSampler(world.pod_classes, rng), rng, world.arrival_rate,
                   world.mean_lifetime_s, world.hourly_rate, world.start_hour, world.burst_size, world.day_seconds,
                   start=start)


def events(world: World, rng: np.random.Generator) -> Iterator[Event]:
    """The world's whole event stream, in time order."""
    maker = _EventMaker()
    pods = PodSampler(world.pod_classes, rng)
    if world.arrivals == "test1":
        stream = test1(maker, pods)
    elif world.arrivals == "test2":
        stream = test2(maker, pods)
    elif world.arrivals == "poisson":
        stream = poisson(maker, pods, rng, world.arrival_rate, world.mean_lifetime_s, world.hourly_rate,
                         world.start_hour, world.burst_size, world.day_seconds)
    else:
        raise ValueError(f"unknown arrival process {world.arrivals!r}: expected one of {', '.join(ARRIVALS)}")
    streams = [stream]
    if world.latency_shifts_s:
        streams.append(latency_shifts(world.latency_shifts_s))
    if world.churn:
        churn_rng = np.random.default_rng(rng.integers(2**63))
        # node-up may be scheduled before a later node-down: sort that stream first.
        streams.append(_sorted(node_churn(churn_rng, world.size, world.churn_interval_s)))
    return heapq.merge(*streams) if len(streams) > 1 else stream


def _sorted(stream: Iterator[Event], horizon: int = 64) -> Iterator[Event]:
    """Sort a stream whose events are out of order by at most `horizon` positions."""
    heap: list[Event] = []
    for event in stream:
        heapq.heappush(heap, event)
        if len(heap) > horizon:
            yield heapq.heappop(heap)
