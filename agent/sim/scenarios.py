"""Arrival scenarios: seeded, endless streams of timed events that drive the simulator.

A scenario never looks at placements, so every scorer evaluated on the same seed sees exactly the
same arrivals, departures, latency changes and node churn.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from agent.state import DEFAULT_LATENCY_HARD_MS, DEFAULT_LATENCY_SOFT_MS

MIB = 1024**2
GIB = 1024**3

SCENARIOS = ("test1", "test2", "poisson", "latency-shift")


@dataclass(frozen=True)
class SimPod:
    id: int
    cpu_millicores: float
    memory_bytes: float
    latency_soft_ms: float | None = None
    latency_hard_ms: float | None = None
    usage: float = 0.6  # share of its request the pod really uses


@dataclass(frozen=True, order=True)
class Event:
    time: float
    seq: int  # keeps events at the same time in the order they were made
    kind: str = field(compare=False)  # arrive | depart | shift-latency | node-down | node-up
    pod: SimPod | None = field(default=None, compare=False)
    pod_id: int = field(default=-1, compare=False)
    node: int = field(default=-1, compare=False)


class _EventMaker:
    def __init__(self) -> None:
        self._seq = itertools.count()
        self._pod_ids = itertools.count()

    def event(self, time: float, kind: str, **kw) -> Event:
        return Event(time, next(self._seq), kind, **kw)

    def pod_id(self) -> int:
        return next(self._pod_ids)


@dataclass(frozen=True)
class LatencyLimits:
    """How the pods of a scenario carry latency limits."""

    enabled: bool = False
    soft_ms: float = DEFAULT_LATENCY_SOFT_MS
    hard_ms: float = DEFAULT_LATENCY_HARD_MS
    jitter: bool = False  # draw limits per pod around the defaults (training variety)

    def draw(self, rng: np.random.Generator) -> tuple[float | None, float | None]:
        if not self.enabled:
            return None, None
        if not self.jitter:
            return self.soft_ms, self.hard_ms
        soft = float(rng.uniform(0.5, 1.5) * self.soft_ms)
        return soft, soft + float(rng.uniform(0.25, 1.0) * (self.hard_ms - self.soft_ms) * 2)


def _nginx(maker: _EventMaker, rng: np.random.Generator, limits: LatencyLimits) -> SimPod:
    """The thesis's test pod: nginx requesting 250m cpu and 64Mi memory."""
    soft, hard = limits.draw(rng)
    return SimPod(maker.pod_id(), 250.0, 64.0 * MIB, soft, hard, float(rng.uniform(0.2, 0.9)))


def test1(rng: np.random.Generator, limits: LatencyLimits, batch: int = 30) -> Iterator[Event]:
    """Thesis Alg. 1: create `batch` single-pod deployments 3 s apart, wait 20 s, delete all, wait 5 s."""
    maker, t = _EventMaker(), 0.0
    while True:
        ids = []
        for _ in range(batch):
            pod = _nginx(maker, rng, limits)
            ids.append(pod.id)
            yield maker.event(t, "arrive", pod=pod)
            t += 3.0
        t += 20.0
        for pod_id in ids:
            yield maker.event(t, "depart", pod_id=pod_id)
        t += 5.0


def test2(rng: np.random.Generator, limits: LatencyLimits, alive: int = 30,
          shifts: tuple[float, ...] = ()) -> Iterator[Event]:
    """Thesis Alg. 2: create `alive` deployments 2 s apart, then forever: delete the oldest, wait 3 s,
    create one, wait 1 s. `shifts` are the times at which node latencies change."""
    maker, t = _EventMaker(), 0.0
    pending_shifts = sorted(shifts)
    queue: list[int] = []

    def shifts_until(now: float) -> Iterator[Event]:
        while pending_shifts and pending_shifts[0] <= now:
            yield maker.event(pending_shifts.pop(0), "shift-latency")

    for _ in range(alive):
        pod = _nginx(maker, rng, limits)
        queue.append(pod.id)
        yield from shifts_until(t)
        yield maker.event(t, "arrive", pod=pod)
        t += 2.0
    while True:
        yield maker.event(t, "depart", pod_id=queue.pop(0))
        t += 3.0
        yield from shifts_until(t)
        pod = _nginx(maker, rng, limits)
        queue.append(pod.id)
        yield maker.event(t, "arrive", pod=pod)
        t += 1.0


POISSON_CPU_MILLICORES = np.array([100.0, 250.0, 500.0, 1000.0, 2000.0])
POISSON_CPU_WEIGHTS = np.array([0.25, 0.3, 0.25, 0.15, 0.05])


def poisson(rng: np.random.Generator, limits: LatencyLimits, total_cpu_millicores: float,
            load: float | None = None, mean_lifetime_s: float = 120.0) -> Iterator[Event]:
    """Poisson arrivals with exponential lifetimes and mixed request sizes, sized so that on average
    `load` (drawn in 0.3..0.7 when not given) of the cluster's cpu is requested."""
    maker, t = _EventMaker(), 0.0
    load = float(rng.uniform(0.3, 0.7)) if load is None else load
    mean_cpu = float(POISSON_CPU_MILLICORES @ POISSON_CPU_WEIGHTS)
    rate = load * total_cpu_millicores / (mean_cpu * mean_lifetime_s)
    departures: list[tuple[float, int]] = []
    while True:
        t += float(rng.exponential(1.0 / rate))
        while departures and departures[0][0] <= t:
            when, pod_id = heapq.heappop(departures)
            yield maker.event(when, "depart", pod_id=pod_id)
        cpu = float(rng.choice(POISSON_CPU_MILLICORES, p=POISSON_CPU_WEIGHTS))
        memory = float(np.round(cpu / 1000.0 * rng.uniform(0.5, 4.0) * GIB / MIB) * MIB)
        soft, hard = limits.draw(rng)
        pod = SimPod(maker.pod_id(), cpu, memory, soft, hard, float(rng.uniform(0.2, 0.9)))
        heapq.heappush(departures, (t + float(rng.exponential(mean_lifetime_s)), pod.id))
        yield maker.event(t, "arrive", pod=pod)


LATENCY_SHIFT_TIMES = (300.0, 600.0)


def node_churn(rng: np.random.Generator, nodes: int, mean_interval_s: float = 400.0) -> Iterator[Event]:
    """Nodes leave (drained or failed) and come back 1-3 minutes later."""
    maker, t = _EventMaker(), 0.0
    while True:
        t += float(rng.exponential(mean_interval_s))
        node = int(rng.integers(nodes))
        yield maker.event(t, "node-down", node=node)
        yield maker.event(t + float(rng.uniform(60.0, 180.0)), "node-up", node=node)


def make_scenario(name: str, rng: np.random.Generator, limits: LatencyLimits,
                  total_cpu_millicores: float, nodes: int, churn: bool = False) -> Iterator[Event]:
    if name == "test1":
        events = test1(rng, limits)
    elif name == "test2":
        events = test2(rng, limits)
    elif name == "poisson":
        events = poisson(rng, limits, total_cpu_millicores)
    elif name == "latency-shift":
        events = test2(rng, limits, shifts=LATENCY_SHIFT_TIMES)
    else:
        raise ValueError(f"unknown scenario {name!r}: expected one of {', '.join(SCENARIOS)}")
    if not churn:
        return events
    churn_rng = np.random.default_rng(rng.integers(2**63))
    # node-up may be scheduled before a later node-down: merge two sorted streams by time.
    return heapq.merge(events, _sorted(node_churn(churn_rng, nodes)))


def _sorted(events: Iterator[Event], horizon: int = 64) -> Iterator[Event]:
    """Sort a stream whose events are out of order by at most `horizon` positions."""
    heap: list[Event] = []
    for event in events:
        heapq.heappush(heap, event)
        if len(heap) > horizon:
            yield heapq.heappop(heap)
