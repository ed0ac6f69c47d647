"""A discrete-event cluster simulator: nodes with power curves, pods with requests, real usage and
lifetimes, usage that shows some seconds after a pod is bound, measured metrics that arrive with a
delay, drifting node-to-user latency, and nodes that leave and join.

`Simulation` advances a world's event stream to the next pod that needs a node, offers the feasible
nodes as a `NodeState` (what the scheduler's filters would pass to our score plugin, with metrics as
the last scrape saw them), applies the chosen placement, and keeps the outcome ledger: energy drawn,
hot-node time, imbalance, pods that found no node, latency violations.
"""

from __future__ import annotations

import heapq
from typing import Iterable, Iterator

import numpy as np

from agent.sim import scenarios
from agent.sim.families import LATENCY_RANGE_MS, family
from agent.sim.outcomes import Ledger, Units, avoidable_violation, rate
from rlscore.core.objectives import EL_ENERGY_WEIGHT, HOT_UTILIZATION, cv as _cv
from agent.sim.scenarios import Event
from rlscore.core.recent_peak import RecentPeak
from agent.sim.world import SimPod, World
from rlscore.core.state import NodeState, PodRequest, as_served

LATENCY_DRIFT_MS_PER_SQRT_S = 0.15
UTILIZATION_WINDOW_S = 60.0  # time constant of the utilization mean and spread (LoadVariationRiskBalancing)
MAX_EVENTS_PER_DECISION = 100_000


class Cluster:
    """Mutable node arrays plus the pods bound to each node."""

    def __init__(self, world: World, rng: np.random.Generator):
        hardware = [spec.hardware for spec in world.nodes]
        n = len(hardware)
        if n < 1:
            raise ValueError("a cluster needs at least one node")
        self.names = [f"node-{i}" for i in range(n)]
        self.cpu_capacity = np.array([h.cpu_millicores for h in hardware])
        self.memory_capacity = np.array([h.memory_bytes for h in hardware])
        self.max_pods = np.array([float(h.max_pods) for h in hardware])
        self.power_idle = np.array([h.power_idle_watts for h in hardware])
        self.power_max = np.array([h.power_max_watts for h in hardware])
        self.disk_capacity = np.array([h.disk_bytes for h in hardware])
        self.latency_ms = np.array([spec.latency_ms for spec in world.nodes], dtype=np.float64)
        self.cpu_requested = np.zeros(n)
        self.memory_requested = np.zeros(n)
        self.cpu_used = np.zeros(n)  # millicores really used by the pods (request x usage)
        self.memory_used = np.zeros(n)
        self.network = np.zeros(n)  # bytes/s received by the pods
        self.connections = np.zeros(n)
        self.disk_used = rng.uniform(0.1, 0.3, n) * self.disk_capacity  # images, logs, ...
        self.pods = np.zeros(n)
        self.present = np.ones(n, dtype=bool)
        self.background_cpu = rng.uniform(*world.background_cpu, n)  # system daemons, kubelet, ...
        self.background_memory = rng.uniform(0.05, 0.15, n)
        self.placement: dict[int, tuple[int, SimPod]] = {}
        self.starting: set[int] = set()  # bound pods whose usage does not show yet (World.usage_onset_s)
        self.lingering: dict[int, tuple[int, SimPod]] = {}  # gone pods whose usage still shows (World.usage_linger_s)
        # for the committed-energy potential: per node, sum of used millicores x departure time, the
        # latest departure of its pods, and its pods' departures
        self.used_until = np.zeros(n)
        self.last_departure = np.zeros(n)
        self._departures: list[dict[int, float]] = [{} for _ in range(n)]

    def __len__(self) -> int:
        return len(self.names)

    def cpu_utilization(self) -> np.ndarray:
        """True cpu utilization; pods that use more than the node has are throttled at 1."""
        return np.minimum(self.cpu_used / self.cpu_capacity + self.background_cpu, 1.0)

    def memory_utilization(self) -> np.ndarray:
        return np.minimum(self.memory_used / self.memory_capacity + self.background_memory, 1.0)

    def active(self) -> np.ndarray:
        return self.present & (self.pods > 0)

    def power(self, utilization: np.ndarray | None = None) -> np.ndarray:
        """Watts per node: idle + (max - idle) x cpu utilization while it runs pods; an empty node is
        counted as off (it can be scaled down)."""
        util = self.cpu_utilization() if utilization is None else utilization
        return np.where(self.active(), self.power_idle + (self.power_max - self.power_idle) * util, 0.0)

    def committed_energy_j(self, now: float) -> float:
        """Joules the cluster will draw for the pods it runs now if none came or went early: each
        node's idle and background draw until its last pod leaves, plus each pod's dynamic draw
        until it leaves. Uses the pods' departure times, which only the simulator knows: it is the
        potential for reward shaping in training, never an input to a policy."""
        active = self.active()
        remaining = np.where(active, np.maximum(self.last_departure - now, 0.0), 0.0)
        slope = (self.power_max - self.power_idle) / self.cpu_capacity  # watts per used millicore
        base = self.power_idle + slope * self.background_cpu * self.cpu_capacity
        pods = np.where(active, self.used_until - now * self.cpu_used, 0.0)
        return float(np.dot(base, remaining) + np.dot(slope, np.maximum(pods, 0.0)))

    def feasible(self, pod: SimPod) -> np.ndarray:
        """Indices of present nodes that pass the NodeResourcesFit filter for `pod`."""
        fits = (
            self.present
            & (self.cpu_requested + pod.cpu_millicores <= self.cpu_capacity)
            & (self.memory_requested + pod.memory_bytes <= self.memory_capacity)
            & (self.pods + 1 <= self.max_pods)
        )
        return np.flatnonzero(fits)

    def bind(self, pod: SimPod, node: int, using: bool = True) -> None:
        """`using=False`: the pod holds its requests but its usage shows only at `start_using`."""
        self.placement[pod.id] = (node, pod)
        self._account_requests(node, pod, +1)
        if using:
            self._account_usage(node, pod, +1)
        else:
            self.starting.add(pod.id)

    def start_using(self, pod_id: int) -> None:
        """A bound pod's usage begins to show (a pod that left in the meantime is ignored)."""
        if pod_id in self.starting:
            self.starting.discard(pod_id)
            node, pod = self.placement[pod_id]
            self._account_usage(node, pod, +1)

    def unbind(self, pod_id: int, keep_usage: bool = False) -> bool:
        """`keep_usage`: its requests are freed now, its usage shows until `stop_using`."""
        entry = self.placement.pop(pod_id, None)
        if entry is None:
            return False
        self._account_requests(entry[0], entry[1], -1)
        if pod_id in self.starting:
            self.starting.discard(pod_id)
        elif keep_usage:
            self.lingering[pod_id] = entry
        else:
            self._account_usage(entry[0], entry[1], -1)
        return True

    def stop_using(self, pod_id: int) -> None:
        entry = self.lingering.pop(pod_id, None)
        if entry is not None:
            self._account_usage(entry[0], entry[1], -1)

    def _account_requests(self, node: int, pod: SimPod, sign: int) -> None:
        if np.isfinite(pod.depart_at):
            departures = self._departures[node]
            if sign > 0:
                departures[pod.id] = pod.depart_at
                self.last_departure[node] = max(self.last_departure[node], pod.depart_at)
            else:
                departures.pop(pod.id, None)
                if pod.depart_at >= self.last_departure[node]:
                    self.last_departure[node] = max(departures.values(), default=0.0)
        self.cpu_requested[node] += sign * pod.cpu_millicores
        self.memory_requested[node] += sign * pod.memory_bytes
        self.disk_used[node] += sign * pod.disk_bytes
        self.pods[node] += sign

    def _account_usage(self, node: int, pod: SimPod, sign: int) -> None:
        used = pod.cpu_millicores * pod.usage
        if np.isfinite(pod.depart_at):
            self.used_until[node] += sign * used * pod.depart_at
        self.cpu_used[node] += sign * used
        self.memory_used[node] += sign * pod.memory_bytes * min(pod.usage, 1.0)
        self.network[node] += sign * pod.network_bytes_per_s
        self.connections[node] += sign * pod.connections

    def node_down(self, node: int) -> list[SimPod]:
        """Take a node out (never the last one); returns its pods, which their controllers recreate."""
        if not self.present[node] or self.present.sum() <= 1:
            return []
        evicted = [pod for n, pod in self.placement.values() if n == node]
        for pod in evicted:
            self.unbind(pod.id)
        self.present[node] = False
        return evicted

    def node_up(self, node: int) -> None:
        self.present[node] = True

    def drift_latency(self, seconds: float, rng: np.random.Generator) -> None:
        if seconds <= 0:
            return
        step = rng.normal(0.0, LATENCY_DRIFT_MS_PER_SQRT_S * np.sqrt(seconds), len(self))
        self.latency_ms = np.clip(self.latency_ms + step, 1.0, 200.0)

    def shift_latency(self, rng: np.random.Generator) -> None:
        """A sudden change (the thesis's "latency change"): nodes swap their latencies, so the
        best node becomes another one. A single node gets a new latency instead."""
        if len(self) == 1:
            self.latency_ms = rng.uniform(*LATENCY_RANGE_MS, size=1)
            return
        order = rng.permutation(len(self))
        while np.all(order == np.arange(len(self))):
            order = rng.permutation(len(self))
        self.latency_ms = self.latency_ms[order]


class EventsExhausted(RuntimeError):
    """A recorded event stream ended before another pod could be placed."""


def pod_request(pod: SimPod) -> PodRequest:
    return PodRequest(pod.cpu_millicores, pod.memory_bytes, pod.latency_soft_ms, pod.latency_hard_ms,
                      pod.expected_usage)


class Simulation:
    """A world driven by its event stream, stopping at each pod that needs a scheduling decision.

    Exogenous randomness (arrivals, background load, latency drift, measurement noise) comes from
    streams spawned from `seed`, none of which the decisions touch: every scorer sees the same world.
    """

    def __init__(self, world: World, seed: int, events: Iterable[Event] | None = None, scrape_phase: float = 0.0,
                 pods_wait: bool = False):
        """`events` replaces the world's own arrival process (a recorded trace, in time order);
        `scrape_phase` (a fraction of the metrics interval) moves the second scrape earlier: where a
        recorded trace fixes every arrival, it is which arrivals the scrapes fall between.
        `pods_wait`: a pod that fits no node waits, as in Kubernetes, and is tried again after each
        departure (until its own), instead of counting as unschedulable and being dropped: what a
        replay of a live cluster's pods needs, where a pending pod is placed once room frees."""
        if not 0.0 <= scrape_phase < 1.0:
            raise ValueError(f"scrape_phase must be within [0, 1), not {scrape_phase}")
        scenario_rng, cluster_rng, self._drift_rng, self._noise_rng = (
            np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(4))
        self.world = world
        self.cluster = Cluster(world, cluster_rng)
        self.units = Units(world.reference_power_watts, world.mean_interarrival_s, world.mean_pod_lifetime_s)
        self.ledger = Ledger()
        self._events: Iterator[Event] = iter(events) if events is not None else scenarios.events(world, scenario_rng)
        self._requeued: list[SimPod] = []
        self.pods_wait = pods_wait
        self.waiting: list[SimPod] = []  # (pods_wait) arrived, fit no node yet
        self._retry: list[SimPod] = []  # waiting pods to try again
        self.time = 0.0
        self.decisions = 0
        self.latency_shifts: list[int] = []  # decision index at which each shift happened
        self.pod: SimPod | None = None
        self.candidates = np.zeros(0, dtype=np.int64)
        self._metrics: dict[str, np.ndarray] | None = None
        self._util_mean = self._util_var = None
        self._last_scrape = 0.0
        # (time, pod id, whether it begins to show): pending changes of what the metrics show
        self._usage_changes: list[tuple[float, int, bool]] = []
        self._request_peak = RecentPeak()
        self._scrape()
        self._next_scrape = world.metrics_interval_s * (1.0 - scrape_phase)

    @classmethod
    def of_family(cls, name: str, seed: int, nodes: int | None = None, limits: bool = False,
                  training: bool = False) -> Simulation:
        """A world drawn from a scenario family with `seed` (world and dynamics from separate streams)."""
        world_seed, dynamics_seed = np.random.SeedSequence(seed).spawn(2)
        world = family(name).world(np.random.default_rng(world_seed), nodes, limits, training)
        return cls(world, int(dynamics_seed.generate_state(1)[0]))

    @property
    def scenario(self) -> str:
        return self.world.family

    @property
    def unschedulable(self) -> int:
        return self.ledger.unschedulable

    # --- time -------------------------------------------------------------------------------------

    def _advance(self, until: float) -> None:
        """Integrate the ledger's rates up to `until` (state is constant between events), taking
        metric scrapes and pods' usage beginning and ceasing to show on the way."""
        interval, onsets = self.world.metrics_interval_s, self._usage_changes
        while True:
            scrape = self._next_scrape if interval > 0 else float("inf")
            onset = onsets[0][0] if onsets else float("inf")
            if min(scrape, onset) > until:
                break
            if onset <= scrape:
                self._integrate(onset)
                _, pod_id, showing = heapq.heappop(onsets)
                (self.cluster.start_using if showing else self.cluster.stop_using)(pod_id)
            else:
                self._integrate(scrape)
                self._scrape()
                self._next_scrape += interval
        self._integrate(until)

    def _integrate(self, until: float) -> None:
        dt = until - self.time
        if dt <= 0:
            return
        c, ledger = self.cluster, self.ledger
        util = c.cpu_utilization()
        active = c.active()
        present = c.present
        n_present = int(present.sum())
        ledger.energy_j += float(c.power(util).sum()) * dt
        ledger.present_node_s += n_present * dt
        ledger.active_node_s += int(active.sum()) * dt
        hot = int(np.count_nonzero(active & (util > HOT_UTILIZATION)))
        ledger.hot_node_s += hot * dt
        ledger.hot_share_s += hot / max(n_present, 1) * dt
        ledger.request_cv_s += _cv(c.cpu_requested[present] / c.cpu_capacity[present]) * dt
        ledger.utilization_cv_s += _cv(util[present]) * dt
        ledger.time_s += dt
        if self.world.latency_drift:
            c.drift_latency(dt, self._drift_rng)
        self.time = until

    def _scrape(self) -> None:
        """What Prometheus and the probes report: true values plus measurement noise."""
        c, noise = self.cluster, self._noise_rng
        n = len(c)
        cpu = np.clip(c.cpu_utilization() + noise.normal(0.0, 0.01, n), 0.0, 1.0)
        # exponentially weighted mean and variance of what was scraped, as a range query would see
        if self._util_mean is None:
            self._util_mean, self._util_var = cpu.copy(), np.zeros(n)
        else:
            alpha = 1.0 - np.exp(-(self.time - self._last_scrape) / UTILIZATION_WINDOW_S)
            diff = cpu - self._util_mean
            self._util_mean = self._util_mean + alpha * diff
            self._util_var = (1.0 - alpha) * (self._util_var + alpha * diff * diff)
        self._last_scrape = self.time
        self._requested_at_scrape = c.cpu_requested.copy()
        self._metrics = {
            "cpu_utilization": cpu,
            "cpu_utilization_stddev": np.sqrt(self._util_var),
            "memory_utilization": np.clip(c.memory_utilization() + noise.normal(0.0, 0.005, n), 0.0, 1.0),
            "latency_ms": c.latency_ms.copy(),
            "network_receive_bytes_per_s": c.network + 2e4,  # plus the node's own traffic
            "tcp_established": c.connections + 10.0,
            "disk_utilization": np.minimum(c.disk_used / c.disk_capacity, 1.0),
        }

    # --- decisions --------------------------------------------------------------------------------

    def next_decision(self) -> None:
        """Process events until a pod arrives that fits at least one node."""
        for _ in range(MAX_EVENTS_PER_DECISION):
            if self._retry:  # waiting pods first: they came before anything still to arrive
                pod = self._retry.pop(0)
            else:
                pod = self._requeued.pop(0) if self._requeued else self._next_arrival()
                if pod is None:
                    continue
                self.ledger.arrivals += 1
            candidates = self.cluster.feasible(pod)
            if candidates.size:
                self.pod, self.candidates = pod, candidates
                return
            if self.pods_wait:
                self.waiting.append(pod)
                continue
            self.ledger.unschedulable += 1
            self.ledger.unschedulable_large += pod.kind == "large"
        raise RuntimeError(f"no schedulable pod within {MAX_EVENTS_PER_DECISION} events "
                           f"(family {self.world.family}, {len(self.cluster)} nodes)")

    def _next_arrival(self) -> SimPod | None:
        event = next(self._events, None)
        if event is None:
            raise EventsExhausted(f"the event stream ended with {len(self.waiting)} pod(s) waiting")
        self._advance(max(self.time, event.time))
        if event.kind == "arrive":
            return event.pod
        if event.kind == "depart":
            linger = self.world.usage_linger_s
            if self.cluster.unbind(event.pod_id, keep_usage=linger > 0) and linger > 0:
                heapq.heappush(self._usage_changes, (self.time + linger, event.pod_id, False))
            if self.waiting:  # room freed (or a waiting pod itself went): the rest try again
                self._retry = [p for p in self.waiting if p.id != event.pod_id]
                self.waiting = []
        elif event.kind == "shift-latency":
            self.cluster.shift_latency(self._drift_rng)
            self.latency_shifts.append(self.decisions)
        elif event.kind == "node-down":
            self._requeued.extend(self.cluster.node_down(event.node))
        elif event.kind == "node-up":
            self.cluster.node_up(event.node)
        return None

    def candidate_state(self, policy: str | None = None) -> tuple[NodeState, PodRequest]:
        """The feasible nodes and the pod, as the scorer sees them at serving time: sizes and
        requests live (the server's watch cache), metrics as of the last scrape; with `policy`, the
        pod as the server hands it to that policy's scorer (rlscore.core.state.as_served)."""
        assert self.pod is not None, "call next_decision() first"
        if self.world.metrics_interval_s <= 0:
            self._scrape()
        c, idx, m = self.cluster, self.candidates, self._metrics
        power = {}
        if self.world.power_visible:
            power = {"power_idle_watts": c.power_idle[idx], "power_max_watts": c.power_max[idx]}
            if self.world.power_hidden:
                hidden = np.asarray(self.world.power_hidden)[idx]
                power = {k: np.where(hidden, np.nan, v) for k, v in power.items()}
        requested, cluster = c.cpu_requested[idx], float(c.cpu_requested.sum())
        state = NodeState.trusted(
            [c.names[i] for i in idx], cluster, self._request_peak.peak(self.time, cluster),
            cpu_capacity=c.cpu_capacity[idx], memory_capacity=c.memory_capacity[idx],
            max_pods=c.max_pods[idx], cpu_requested=requested, memory_requested=c.memory_requested[idx],
            pods=c.pods[idx], cpu_requested_since_metrics=np.maximum(requested - self._requested_at_scrape[idx], 0.0),
            **{k: v[idx] for k, v in m.items()}, **power)
        pod = pod_request(self.pod)
        return state, (as_served(pod, policy) if policy is not None else pod)

    # --- what a branch of this simulation needs (agent/sim/futures.py) -------------------------------

    @property
    def events(self) -> Iterator[Event]:
        """The stream of events still to come."""
        return self._events

    def replace_events(self, events: Iterator[Event]) -> None:
        """Go on with `events` in place of the stream still to come."""
        self._events = events

    def pods_to_leave(self) -> set[int]:
        """The pods whose departures are still to come: bound, waiting, evicted to be recreated, and
        the pod of the current decision."""
        pods = set(self.cluster.placement)
        pods.update(p.id for p in (*self.waiting, *self._retry, *self._requeued))
        if self.pod is not None:
            pods.add(self.pod.id)
        return pods

    def first_unused_pod_id(self) -> int:
        """A pod id past every pod the simulation still tracks (there, or its usage still showing or
        still to show); a gone pod's id may come again."""
        tracked = self.pods_to_leave() | set(self.cluster.lingering)
        tracked.update(pod_id for _, pod_id, _ in self._usage_changes)
        return 1 + max(tracked, default=-1)

    def recent_peak_cpu_requested(self) -> float:
        """The largest sum of cpu requests over the cluster within the last RECENT_PEAK_WINDOW_S."""
        return self._request_peak.peak(self.time, float(self.cluster.cpu_requested.sum()))

    def place(self, candidate: int) -> int:
        """Bind the current pod to candidate number `candidate`; returns the node index."""
        assert self.pod is not None, "call next_decision() first"
        pod, c, ledger = self.pod, self.cluster, self.ledger
        node = int(self.candidates[candidate])
        if pod.latency_soft_ms is not None or pod.latency_hard_ms is not None:
            request = pod_request(pod)
            latency = c.latency_ms[node]  # the real one at this moment, not the last scrape's
            ledger.limited += 1
            if latency > request.hard_limit:
                ledger.hard_violations += 1
            seen = self._metrics["latency_ms"]
            within = seen <= request.hard_limit
            candidate_within = bool(np.any(within[self.candidates]))
            if avoidable_violation(seen[self.candidates], candidate, request.hard_limit):
                ledger.avoidable_hard_violations += 1
            if latency > request.hard_limit and not candidate_within:
                if np.any(within & c.present):
                    ledger.crowded_hard_violations += 1
                else:
                    ledger.unreachable_hard_violations += 1
            ledger.soft_violations += int(latency > request.soft_limit)
        onset = self.world.usage_onset_s
        c.bind(pod, node, using=onset <= 0)
        self._request_peak.record(self.time, float(c.cpu_requested.sum()))
        if onset > 0:
            heapq.heappush(self._usage_changes, (self.time + onset, pod.id, True))
        ledger.placed += 1
        self.decisions += 1
        self.pod = None
        return node

    def skip(self) -> None:
        """The pod is left pending (an invalid choice): counted as unschedulable."""
        assert self.pod is not None, "call next_decision() first"
        self.ledger.unschedulable += 1
        self.decisions += 1
        self.pod = None

    def potential(self, policy: str, gamma: float, energy_potential: str = "committed") -> float:
        """Shaping potential Phi(s) of the policy: minus the cost the current state commits to. The
        energy part is the committed energy (Cluster.committed_energy_j) in reward units; hot
        nodes and imbalance, which new pods change as much as old ones, count as if they lasted
        (rate / (1 - gamma)). With `energy_potential` "rate", energy counts as if it lasted too: the draw
        now / (1 - gamma), which the candidates' features show, not the departures that they do not."""
        if energy_potential == "rate":
            return -self.cost_rate(policy) / (1.0 - gamma)
        energy = self.cluster.committed_energy_j(self.time) / (
            self.units.reference_power_watts * self.units.interarrival_s)
        if policy == "EE":
            return -energy
        if policy == "EL":
            return -EL_ENERGY_WEIGHT * energy
        return -self.cost_rate(policy) / (1.0 - gamma)

    def cost_rate(self, policy: str) -> float:
        """The policy's cost per interarrival time if the cluster stayed as it is now."""
        c = self.cluster
        util = c.cpu_utilization()
        active = c.active()
        present = c.present
        hot = int(np.count_nonzero(active & (util > HOT_UTILIZATION)))
        return rate(policy, float(c.power(util).sum()), hot, int(present.sum()),
                    _cv(c.cpu_requested[present] / c.cpu_capacity[present]), self.units)
