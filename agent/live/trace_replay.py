"""Replay a live cluster's recorded pods in the calibrated simulator: the sim-to-real check.

The calibrated profile gives the nodes (sizes, power, latency), the history gives the exact pods
that came and went (sizes, usage, limits, times); the same scorer places them in the simulator, and
what it measures (active nodes, hot-node time, latency violations) is compared with what the live
run measured. Agreement says the simulator the policies are trained and gated in stands for the
cluster they serve.
"""

from __future__ import annotations

from agent.evaluate.compare import RunResult, Trace, measure
from agent.live.history import History, trace_events
from agent.scoring import Scorer
from agent.sim.cluster_profile import ClusterProfile
from agent.sim.simulator import Simulation


def replay_history(profile: ClusterProfile, history: History, scorer: Scorer, policy: str,
                   seed: int = 0) -> tuple[RunResult, Trace]:
    """Every recorded arrival placed by `scorer` on the profile's nodes, measured from the first."""
    events = trace_events(history)
    arrivals = sum(e.kind == "arrive" for e in events)
    if not arrivals:
        raise ValueError("the history holds no pod to replay")
    sim = Simulation(profile.world(), seed, events=events)
    return measure(scorer, sim, seed, policy, arrivals, keep_trace=True, burn_in=0)
