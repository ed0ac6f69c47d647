"""What knowing which latency limits a world's pods have is worth to EL, and where its hard violations
come from.

latency-fit-running saves power over latency-fit by sending a pod to a node that is already on, and breaks
more hard limits for it: a pod that joins a running node near the users takes room a stricter pod may need
later. A scheduler could know which limits a cluster's pods ask for (the annotations of the pods it has
seen). Before that becomes an input, this measures what it could be worth with scorers that read the limits
of the world's pod classes, which the simulator knows, against latency-fit-running and latency-fit on the
same worlds (paired by seed):

- `unlimited-far`: latency-fit-running, but a pod without limits goes where latency-fit sends it (the
  farthest node, on or off); it knows nothing more than the rules and is the reference for the next two;
- `unlimited-beyond-limits`: a pod without limits joins a running node only beyond every class's hard limit;
- `beyond-stricter-limits`: and a pod with limits joins a running node only beyond the hard limit of every
  class stricter than its own;
- `reserve`: a pod whose soft limit is looser than the strictest class's takes a soft violation (a node
  of its hard tier) before a node within that class's hard limit.

Each line also splits the hard violations: `unreachable`, no node of the cluster seen within the pod's
limit; `crowded`, nodes seen within it and none with room; the rest, a node seen within the limit that
was over it when the pod was placed (latency drifts) or chosen over it (avoidable).

    python -m agent.evaluate.limits_room --seeds 128
"""

from __future__ import annotations

import sys

import numpy as np

from agent.evaluate import room
from agent.sim.simulator import Simulation
from rlscore.core.rules import LATENCY_FIT_TIER_GAP, RUNNING_BONUS, latency_fit, latency_fit_running
from rlscore.core.state import LATENCY_TIER_HARD, LATENCY_TIER_SOFT, NodeState, PodRequest, latency_tiers

MODES = ("unlimited-far", "unlimited-beyond-limits", "beyond-stricter-limits", "reserve")
EL_ROOM = room.Room(
    "EL", ("latency-fit-running", "latency-fit"),
    shown=(("objective", "objective {:.3f}"), ("hard_violations", "{:.1f} hard violations per run"),
           ("hard_violations_unreachable", "{:.1f} unreachable"), ("hard_violations_crowded", "{:.1f} crowded"),
           ("soft_violations", "{:.1f} soft"), ("mean_power_watts", "{:.0f} W")),
    ratios=(("objective", "objective"), ("hard_violations", "hard violations")))
RANK = 1e7  # the reserve's tiers: farther apart than anything latency-fit-running adds inside one


class LimitsOracle:
    """A scorer that reads the latency limits of its world's pod classes (privileged; never a policy to
    ship, though a scheduler could learn the same from the pods it has seen)."""

    def __init__(self, sim: Simulation, mode: str, rng: np.random.Generator):
        if mode not in MODES:
            raise ValueError(f"unknown limits oracle {mode!r}: expected one of {', '.join(MODES)}")
        self.mode, self.rng, self.name = mode, rng, mode
        self.limits = [c.latency_limits[0] for c in sim.world.pod_classes if c.latency_limits]

    def values(self, nodes: NodeState, pod: PodRequest) -> np.ndarray:
        if self.mode == "reserve":
            return self._reserve(nodes, pod)
        if not pod.has_latency_limits and self.mode == "unlimited-far":
            return latency_fit(nodes, pod, self.rng)
        latency, running = nodes.latency_ms, nodes.pods > 0
        if not pod.has_latency_limits:
            beyond = latency > max((hard for _, hard in self.limits), default=-np.inf)
            return latency_fit(nodes, pod, self.rng) + RUNNING_BONUS * (running & beyond)
        scores = latency_fit_running(nodes, pod, self.rng)
        if self.mode != "beyond-stricter-limits":
            return scores
        stricter = max((hard for soft, hard in self.limits if soft < pod.soft_limit), default=-np.inf)
        return scores - RUNNING_BONUS * (running & ~(latency > stricter))

    def _reserve(self, nodes: NodeState, pod: PodRequest) -> np.ndarray:
        scores = latency_fit_running(nodes, pod, self.rng)
        if not self.limits or not pod.has_latency_limits:
            return scores
        strict_soft, strict_hard = min(self.limits)
        if pod.soft_limit <= strict_soft:
            return scores
        tiers = latency_tiers(nodes, pod)
        kept = (tiers == LATENCY_TIER_SOFT) & (nodes.latency_ms <= strict_hard)
        # the order inside a tier stays latency-fit-running's; the kept nodes come after the hard tier
        rank = np.where(kept, LATENCY_TIER_HARD - 0.5, tiers)
        return rank * RANK + (scores - tiers * LATENCY_FIT_TIER_GAP)


def main(argv: list[str] | None = None) -> int:
    return room.main(argv, "python -m agent.evaluate.limits_room", __doc__.split("\n\n")[0],
                     {mode: (lambda sim, rng, mode=mode: LimitsOracle(sim, mode, rng)) for mode in MODES}, EL_ROOM)


if __name__ == "__main__":
    sys.exit(main())
