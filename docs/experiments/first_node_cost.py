"""What the first node opened costs where it is not taught (docs/training.md, "Openings labelled by
rollout", 2026-11-27): on small training worlds the model's band teacher (from its sidecar) schedules
each world, only the first pod is placed on the node with the lowest idle draw or on the one with
the fewest watts per core, and the run's objective is compared with the teacher's own run.

    .venv/bin/python docs/experiments/first_node_cost.py models/ee.pt [--sizes 3,4,5] [--seeds 6]
"""

import argparse
import json
from pathlib import Path

import numpy as np

from agent.evaluate.compare import run
from agent.learn.model_io import sidecar_path
from agent.learn.teachers import TEACHER_SEED_BASE, teacher_for
from agent.scoring import HeuristicScorer
from agent.sim.simulator import Simulation


class FirstOn:
    """One node for the first pod, then the rule."""

    name = "first-on"

    def __init__(self, node: int, rule: HeuristicScorer):
        self.node, self.rule, self.calls = node, rule, 0

    def values(self, nodes, pod):
        self.calls += 1
        if self.calls > 1:
            return self.rule.values(nodes, pod)
        return (np.arange(len(nodes)) == self.node).astype(float)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="an EE model; its sidecar names the teachers")
    parser.add_argument("--sizes", default="3,4,5")
    parser.add_argument("--seeds", type=int, default=6)
    args = parser.parse_args()
    teachers = {f: v["teacher"] for f, v in json.loads(sidecar_path(Path(args.model)).read_text())["training"]
                ["teachers"].items()}
    for family_name in sorted(teachers):
        idle_first, efficient_first = [], []
        for size in (int(n) for n in args.sizes.split(",")):
            for k in range(args.seeds):
                seed = TEACHER_SEED_BASE + 500 + k
                sim = Simulation.of_family(family_name, seed, size)
                if not sim.world.power_visible or sim.world.power_hidden:
                    break  # the scorers do not see the power: neither node can be told
                cluster = sim.cluster
                teacher = teacher_for(teachers, family_name, size)

                def objective(first: int | None) -> float:
                    rule = HeuristicScorer(teacher, np.random.default_rng(seed))
                    scorer = rule if first is None else FirstOn(first, rule)
                    return run(scorer, family_name, seed, "EE", size, 300)[0].objective

                own = objective(None)
                idle_first.append(objective(int(np.argmin(cluster.power_idle))) / own)
                efficient_first.append(objective(int(np.argmin(cluster.power_max / cluster.cpu_capacity))) / own)
        if idle_first:
            print(f"{family_name:<14} lowest idle first {np.mean(idle_first):.3f} (worst {max(idle_first):.3f})  "
                  f"fewest watts per core first {np.mean(efficient_first):.3f} (worst {max(efficient_first):.3f})")


if __name__ == "__main__":
    main()
