"""Which nodes each scorer keeps busy: per evaluation world, the pods on every node at a few points
of the evaluation's own run, beside the objective that run measures.

The departures tool asks a model about one rule's states; once the two have placed differently,
their clusters differ, and what follows is not in that count. Rules that open the same nodes can
still keep different ones on: on test2 at 3 nodes one-step-ee lets a small node drain onto a more
efficient one and switches it off, MostAllocated refills the small node and keeps both
(docs/training.md, "Rules that tie on outcome but place differently").

    python -m agent.evaluate.occupancy models/ee.safetensors one-step-ee most-allocated --family test2 --nodes 3
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from agent.evaluate.compare import EVAL_SEED_BASE, HOLDOUT_SEED_BASE, cells, run
from rlscore.core.model import LoadedModel, ModelValidationError, load_model
from rlscore.core.scoring import HeuristicScorer, ModelScorer, Scorer
from agent.sim.families import family
from agent.sim.simulator import Simulation
from rlscore.core.state import POLICIES

DEFAULT_AT = (30, 120, 330)


@dataclass
class Occupancy:
    objective: float  # as the evaluation measures this run
    pods: list[tuple[int, ...]]  # pods per node after each of the `at` placements the run reached


def occupancy(make_scorer: Callable[[], Scorer], family_name: str, nodes: int | None, seed: int, policy: str,
              at: tuple[int, ...], arrivals: int = 300) -> Occupancy:
    """The pods per node after each count in `at` (counted from the first placement, burn-in included;
    counts past the run's end are left out) and the objective of the run `rlscore-eval` makes of a
    fresh scorer from `make_scorer()` on one world: one run gives both."""
    result, trace = run(make_scorer(), family_name, seed, policy, nodes, arrivals, pods_at=at)
    return Occupancy(result.objective, [tuple(int(p) for p in trace.pods_at[k]) for k in at if k in trace.pods_at])


def scorer_factory(name: str, policy: str, model: LoadedModel | None = None) -> Callable[[int], Scorer]:
    """Fresh scorers per seed: a model file's (`model` when it is already loaded), or a heuristic's
    seeded as the evaluation seeds it."""
    if name.endswith(".safetensors"):
        model = model or load_model(Path(name), expected_policy=policy)
        return lambda seed: ModelScorer(model)
    HeuristicScorer(name, np.random.default_rng(0))  # refuses an unknown name before any run
    return lambda seed: HeuristicScorer(name, np.random.default_rng(seed))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agent.evaluate.occupancy", description=__doc__.splitlines()[0])
    parser.add_argument("scorers", nargs="+", help="model files (.safetensors) and heuristics of the policy")
    parser.add_argument("--family", required=True)
    parser.add_argument("--policy", choices=POLICIES, default=None,
                        help="the objective (default: the first model's policy; required with heuristics alone)")
    parser.add_argument("--nodes", type=int, default=None, help="cluster size (default: the family's evaluation sizes)")
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--at", default=",".join(map(str, DEFAULT_AT)),
                        help="placement counts after which to show the pods per node")
    parser.add_argument("--holdout", action="store_true", help="the hold-out seeds instead of the evaluation's")
    args = parser.parse_args(argv)
    try:
        at = tuple(sorted({int(x) for x in args.at.split(",") if x.strip()}))
    except ValueError:
        at = ()
    if args.seeds < 1 or (args.nodes is not None and args.nodes < 1) or not at or at[0] < 1:
        print("occupancy: --seeds, --nodes and every --at count must be positive", file=sys.stderr)
        return 2
    try:
        family(args.family)
        policy, loaded = args.policy, {}
        if policy is None:  # the first model's, which is then loaded once
            model_file = next((s for s in args.scorers if s.endswith(".safetensors")), None)
            if model_file is None:
                raise ValueError("--policy is needed when no model file is given")
            loaded[model_file] = load_model(Path(model_file))
            policy = loaded[model_file].policy
        factories = {name: scorer_factory(name, policy, loaded.get(name)) for name in args.scorers}
    except (ModelValidationError, ValueError) as exc:
        print(f"occupancy: {exc}", file=sys.stderr)
        return 2
    seed_base = HOLDOUT_SEED_BASE if args.holdout else EVAL_SEED_BASE
    means = {name: [] for name in args.scorers}
    print(f"{args.family}, {policy}'s objective; pods per node after {', '.join(map(str, at))} placements")
    for family_name, size, seed in cells((args.family,), args.seeds, (args.nodes,) if args.nodes else None, seed_base):
        sim = Simulation.of_family(family_name, seed, size, limits=policy == "EL")
        cores = ", ".join(f"{c / 1000:g}" for c in sim.cluster.cpu_capacity)
        print(f"seed {seed - seed_base}: {sim.world.size} nodes of {cores} cores")
        for name, make in factories.items():
            found = occupancy(lambda: make(seed), family_name, size, seed, policy, at)
            means[name].append(found.objective)
            print(f"  {name:<28} {found.objective:9.4g}  " + "  ".join(str(p) for p in found.pods))
    print("mean objective: " + ", ".join(f"{name} {np.mean(v):.4g}" for name, v in means.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
