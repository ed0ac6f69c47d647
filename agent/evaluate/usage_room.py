"""How much energy knowing what each pod's workload uses is worth on EE's worlds.

efficient-first opens nodes in the order of their full-load watts per core: right for a pod that
keeps its cores busy, not for one that idles (its node draws little more than idle) or for a hog
(throttled at the node's full draw). What the workload uses per cpu requested can be told to the
scorer (`rlscore.io/cpu-usage-ratio`, which LB's headroom-informed reads), so before it becomes one
of EE's inputs this measures what it could be worth: efficient-first with its first key taken at the
utilization the pod would bring, idle + dynamic x min(usage, 1) watts per core, against
efficient-first itself on the same worlds (paired by seed; rlscore.core.rules.efficiency_rank):

- `informed`: the usage the pod's workload is known to use (its class's mean, what the annotation
  tells a real scheduler);
- `oracle`: the pod's own usage, which only the simulator knows (privileged; never a policy to ship).

Unknown usage reads as 1 (efficient-first's order), unknown power sorts last, as in efficient-first.

    python -m agent.evaluate.usage_room --seeds 128
"""

from __future__ import annotations

import sys

import numpy as np

from agent.evaluate import room
from agent.sim.simulator import Simulation
from rlscore.core.rules import efficiency_rank, most_allocated
from rlscore.core.state import NodeState, PodRequest

MODES = ("informed", "oracle")
# lifts a better power key above every worse one, as in efficient-first: MostAllocated lies within 0..100
KEY_SCALE = 1000.0


class UsageScorer:
    """efficient-first ordered by what this pod would draw: informed by the pod's annotation, or (the
    oracle) by the usage the simulation will give it."""

    def __init__(self, sim: Simulation, mode: str, rng: np.random.Generator):
        if mode not in MODES:
            raise ValueError(f"unknown usage scorer {mode!r}: expected one of {', '.join(MODES)}")
        self.sim, self.mode, self.rng, self.name = sim, mode, rng, f"usage-{mode}"

    def usage(self, pod: PodRequest) -> float:
        if self.mode == "oracle":
            return float(self.sim.pod.usage)
        return 1.0 if pod.cpu_usage_ratio is None else float(pod.cpu_usage_ratio)

    def values(self, nodes: NodeState, pod: PodRequest) -> np.ndarray:
        return efficiency_rank(nodes, self.usage(pod)) * KEY_SCALE + most_allocated(nodes, pod, self.rng)


def main(argv: list[str] | None = None) -> int:
    return room.main(argv, "python -m agent.evaluate.usage_room", __doc__.split("\n\n")[0],
                     {mode: (lambda sim, rng, mode=mode: UsageScorer(sim, mode, rng)) for mode in MODES})


if __name__ == "__main__":
    sys.exit(main())
