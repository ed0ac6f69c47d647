"""Replay a live cluster's recorded pods in the calibrated simulator: the sim-to-real check.

The calibrated profile gives the nodes (sizes, power, latency), the history gives the exact pods
that came and went (sizes, usage, limits, times); the same scorer places them in the simulator, and
what it measures (active nodes, hot-node time, latency violations) is compared with what the live
run measured. Agreement says the simulator the policies are trained and gated in stands for the
cluster they serve.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from agent.evaluate.compare import RunResult, Trace, measure
from agent.live.history import History, arrival_order, controller_name, trace_events
from rlscore.core.kernels import TIE
from rlscore.core.scoring import Scorer, choose
from rlscore.core.profile import ClusterProfile
from agent.sim.cluster_profile import profile_world
from agent.sim.simulator import EventsExhausted, Simulation


def replay_history(profile: ClusterProfile, history: History, scorer: Scorer, policy: str,
                   seed: int = 0, scrape_phase: float = 0.0) -> tuple[RunResult, Trace]:
    """Every recorded arrival placed by `scorer` on the profile's nodes, measured from the first."""
    events = trace_events(history)
    arrivals = sum(e.kind == "arrive" for e in events)
    if not arrivals:
        raise ValueError("the history holds no pod to replay")
    # a pod that fits no node waits for room, as the live one did (kube-scheduler retries it)
    sim = Simulation(profile_world(profile), seed, events=events, scrape_phase=scrape_phase, pods_wait=True)
    return measure(scorer, sim, seed, policy, arrivals, keep_trace=True, burn_in=0)


def follow_live(profile: ClusterProfile, history: History, scorer: Scorer, policy: str,
                live_latency: dict[str, float]) -> tuple[int, int]:
    """The history replayed with every pod placed on the node it went to live (nodes told apart by
    their latency; `live_latency` by Deployment): of those decisions, how many the scorer would
    have made too, given the simulator's state at that moment: the live node's value within
    NEAR_BEST of the value range of the best, since the simulator's utilization and recent peak
    differ from the live ones by a little (before the served scores gave 100 to the best alone, that
    was the scores' own rounding).

    A free replay (`replay_history`) carries one parted decision into every later one, so its count
    of pods on their live node can fall by several for one tie broken the other way; here each
    decision is judged on the live cluster's own past. Returns (decisions judged, agreeing)."""
    events = trace_events(history)
    pods = arrival_order(history)
    sim = Simulation(profile_world(profile), 0, events=events, pods_wait=True)
    tie_rng = np.random.default_rng(0)
    judged = agreed = 0
    while True:
        try:
            sim.next_decision()
        except EventsExhausted:
            break
        state, pod = sim.candidate_state(policy)
        values = scorer.values(state, pod)
        latency = live_latency.get(controller_name(pods[sim.pod.id].name))
        on_live = np.flatnonzero(state.latency_ms == latency) if latency is not None else np.arange(0)
        # judged unless where it went is unknown or nodes are alike in latency; a live node with no
        # room for it in the simulator (none matches) is a decision that parted
        judged += latency is not None and len(on_live) <= 1
        if len(on_live) == 1:
            agreed += bool(near_best(values)[on_live[0]])
            sim.place(int(on_live[0]))
        else:
            sim.place(choose(values, tie_rng))
    return judged, agreed


NEAR_BEST = 0.005  # half a point of kube-scheduler's 0..100 scale


def near_best(values: np.ndarray) -> np.ndarray:
    """The nodes whose value is within NEAR_BEST of the finite values' range of the best (or tied)."""
    finite = np.isfinite(values)
    if not finite.any():
        return finite
    low, high = values[finite].min(), values[finite].max()
    return finite & (values >= high - max(NEAR_BEST * (high - low), TIE))


def replay_spread(profile: ClusterProfile, history: History, scorer: Scorer, policy: str,
                  replays: int) -> list[tuple[RunResult, Trace]]:
    """The history replayed `replays` times, each with its pods' times drawn within what the record
    can tell (`jittered`) and its own seed and scrape phase.

    A record read from Prometheus knows a pod's creation to the whole second and its end to a scrape
    (2 s on the local cluster), while a pod arrives or goes every second or two: which of an arrival
    and a departure came first decides whether the arrival finds room on a packed node. One replay
    picks one order and lands anywhere in a spread of +-12% of hard violations (a local-cluster run:
    0.154 .. 0.195 over these 12 draws, live 0.171); the mean over the draws is the prediction a live
    run is compared with, and the spread is how sharp the record lets it be."""
    if replays < 1:
        raise ValueError(f"replays must be >= 1, not {replays}")
    return [replay_history(profile, jittered(history, np.random.default_rng(k)), scorer, policy,
                           seed=k, scrape_phase=k / replays) for k in range(replays)]


def jittered(history: History, rng: np.random.Generator) -> History:
    """The history with each pod's creation moved within its whole second and its end within the
    scrape interval it was read at: one draw of the times the record is consistent with."""
    pods = []
    for pod in history.pods:
        created = pod.created + rng.uniform(-0.5, 0.5) if pod.created > history.start else pod.created
        last_seen = pod.last_seen
        if not pod.alive and pod.scrape_s > 0:
            last_seen += rng.uniform(-pod.scrape_s / 2, pod.scrape_s / 2)
        pods.append(replace(pod, created=created, last_seen=last_seen))
    return replace(history, pods=pods)


def with_watched_times(history: History, times: dict[str, tuple[float, float | None]]) -> History:
    """The history with each watched pod's creation and end replaced by when a pod watch saw it
    appear and go (agent.live.pod_timeline); pods the watch missed keep the record's times."""
    pods = []
    for pod in history.pods:
        if pod.name in times:
            seen, gone = times[pod.name]
            pod = replace(pod, created=seen, went=gone, alive=pod.alive and gone is None)
        pods.append(pod)
    return replace(history, pods=pods)
