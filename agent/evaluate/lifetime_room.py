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

import argparse
import sys

import numpy as np
from tqdm import tqdm

from agent.evaluate.compare import EVAL_SEED_BASE, HOLDOUT_SEED_BASE, measure
from agent.evaluate.goals import paired_ratio
from agent.sim.simulator import Simulation
from rlscore.core.rules import efficient_first
from rlscore.core.scoring import HeuristicScorer
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


def run_seed(family: str, seed: int) -> dict[str, tuple[float, float, int]]:
    """(objective, mean active nodes, pods left without a node) of efficient-first and each oracle."""
    out = {}
    for name in ("efficient-first", *ORACLES):
        sim = Simulation.of_family(family, seed, None)
        rng = np.random.default_rng(seed)
        scorer = HeuristicScorer(name, rng) if name == "efficient-first" else LifetimeOracle(sim, name, rng)
        result, _ = measure(scorer, sim, seed, "EE")
        out[name] = (result.objective, result.mean_active_nodes, result.unschedulable)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agent.evaluate.lifetime_room", description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", default="mixed")
    parser.add_argument("--seeds", type=int, default=64)
    parser.add_argument("--holdout", action="store_true", help="the hold-out seeds instead of the evaluation seeds")
    args = parser.parse_args(argv)
    if args.seeds < 2:
        parser.error("--seeds must be >= 2 (the interval resamples them)")
    base = HOLDOUT_SEED_BASE if args.holdout else EVAL_SEED_BASE
    runs = {}
    for k in tqdm(range(args.seeds), desc="worlds", file=sys.stderr):
        runs[base + k] = run_seed(args.family, base + k)
    ef = {s: r["efficient-first"][0] for s, r in runs.items()}
    for name in ("efficient-first", *ORACLES):
        nodes = np.mean([r[name][1] for r in runs.values()])
        pending = np.mean([r[name][2] for r in runs.values()])
        line = f"{name}: {nodes:.1f} active nodes, {pending:.1f} pods without a node per run"
        if name != "efficient-first":
            p = paired_ratio({s: r[name][0] for s, r in runs.items()}, ef)
            line += f"; energy objective x{p['ratio']:.3f} ({p['ci95'][0]:.3f}-{p['ci95'][1]:.3f}, {p['reading']}) of efficient-first's"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
