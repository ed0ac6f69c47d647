"""How much energy knowing each pod's lifetime is worth on EE's worlds.

A node can be switched off once its last pod leaves, so where a pod lands decides for how long a node
stays on as well as what it draws. A scheduler could be told a pod's expected lifetime (a Job's
deadline, a workload's history), as headroom-informed is told its usage. Before that becomes an
annotation and a network input, this measures the most it could be worth: two oracle scorers that
read every pod's real departure time, which only the simulator knows, against efficient-first on the
same worlds (paired by seed):

- `committed`: the node where the pod adds least committed energy (the idle and background draw for
  as long as the pod keeps the node on beyond its other pods, plus the pod's own dynamic draw while
  it runs; the potential training's reward shaping uses);
- `outlived`: efficient-first's order, with the running nodes whose pods all stay longer than this
  one first (the pod never keeps a node on by itself).

What a scheduler could know (a class's mean lifetime) is worth less than what these know.

    python -m agent.evaluate.lifetime_room --seeds 64
"""

from __future__ import annotations

import sys

import numpy as np

from agent.evaluate import room
from agent.sim.simulator import Simulation
from rlscore.core.rules import efficient_first
from rlscore.core.state import NodeState, PodRequest

ORACLES = ("committed", "outlived")
# lifts the nodes that outlive the pod above every other: efficient-first lies within +-1e9
OUTLIVED_OFFSET = 1e10


class LifetimeOracle:
    """A scorer that reads the simulation it scores for: the departures of the pod and of every pod
    already bound (privileged; never a policy to ship)."""

    def __init__(self, sim: Simulation, mode: str, rng: np.random.Generator):
        if mode not in ORACLES:
            raise ValueError(f"unknown lifetime oracle {mode!r}: expected one of {', '.join(ORACLES)}")
        self.sim, self.mode, self.rng, self.name = sim, mode, rng, f"lifetime-{mode}"

    def values(self, nodes: NodeState, pod: PodRequest) -> np.ndarray:
        sim, c = self.sim, self.sim.cluster
        idx, now, arriving = sim.candidates, sim.time, sim.pod
        stays = max(arriving.depart_at - now, 0.0)
        active = c.active()[idx]
        node_stays = np.where(active, np.maximum(c.last_departure[idx] - now, 0.0), 0.0)
        if self.mode == "outlived":
            return efficient_first(nodes, pod, self.rng) + OUTLIVED_OFFSET * (active & (node_stays >= stays))
        slope = (c.power_max[idx] - c.power_idle[idx]) / c.cpu_capacity[idx]  # watts per used millicore
        base = c.power_idle[idx] + slope * c.background_cpu[idx] * c.cpu_capacity[idx]
        added = base * np.maximum(stays - node_stays, 0.0) + slope * arriving.cpu_millicores * arriving.usage * stays
        return -added


def main(argv: list[str] | None = None) -> int:
    return room.main(argv, "python -m agent.evaluate.lifetime_room", __doc__.split("\n\n")[0],
                     {mode: (lambda sim, rng, mode=mode: LifetimeOracle(sim, mode, rng)) for mode in ORACLES})


if __name__ == "__main__":
    sys.exit(main())
