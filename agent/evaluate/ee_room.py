"""What knowing one more thing about each pod would be worth to EE: scorers that read it against
efficient-first on the same worlds, paired by seed. The scorer modules (lifetime_room, usage_room)
say what they know; this runs and reads them alike."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import numpy as np
from tqdm import tqdm

from agent.evaluate.compare import EVAL_SEED_BASE, HOLDOUT_SEED_BASE, measure
from agent.evaluate.goals import paired_ratio
from agent.sim.simulator import Simulation
from rlscore.core.scoring import HeuristicScorer, Scorer

BASELINE = "efficient-first"
# a scorer of a room module, made for the simulation it scores (an oracle reads it) and a tie-break stream
ScorerFactory = Callable[[Simulation, np.random.Generator], Scorer]
METRICS = ("objective", "mean_power_watts", "mean_active_nodes", "unschedulable")


def run_seed(family: str, seed: int, scorers: dict[str, ScorerFactory]) -> dict[str, tuple[float, ...]]:
    """METRICS of efficient-first and of each scorer on one world."""
    out = {}
    for name in (BASELINE, *scorers):
        sim = Simulation.of_family(family, seed, None)
        rng = np.random.default_rng(seed)
        scorer = HeuristicScorer(name, rng) if name == BASELINE else scorers[name](sim, rng)
        result, _ = measure(scorer, sim, seed, "EE")
        out[name] = tuple(float(getattr(result, m)) for m in METRICS)
    return out


def main(argv: list[str] | None, prog: str, description: str, scorers: dict[str, ScorerFactory]) -> int:
    """The command line of a room module: each scorer's power, nodes on and stranded pods, and its
    energy objective and power as paired ratios to efficient-first's."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--family", default="mixed")
    parser.add_argument("--seeds", type=int, default=64)
    parser.add_argument("--holdout", action="store_true", help="the hold-out seeds instead of the evaluation seeds")
    args = parser.parse_args(argv)
    if args.seeds < 2:
        parser.error("--seeds must be >= 2 (the interval resamples them)")
    base = HOLDOUT_SEED_BASE if args.holdout else EVAL_SEED_BASE
    runs = {base + k: run_seed(args.family, base + k, scorers)
            for k in tqdm(range(args.seeds), desc="worlds", file=sys.stderr)}

    def metric(name: str, i: int) -> dict[int, float]:
        return {s: r[name][i] for s, r in runs.items()}

    for name in (BASELINE, *scorers):
        power, nodes, pending = (np.mean(list(metric(name, i).values())) for i in (1, 2, 3))
        line = f"{name}: {power:.0f} W, {nodes:.1f} active nodes, {pending:.1f} pods without a node per run"
        if name != BASELINE:
            p, w = (paired_ratio(metric(name, i), metric(BASELINE, i)) for i in (0, 1))
            line += (f"; energy objective x{p['ratio']:.3f} ({p['ci95'][0]:.3f}-{p['ci95'][1]:.3f}, {p['reading']}), "
                     f"power x{w['ratio']:.3f} ({w['ci95'][0]:.3f}-{w['ci95'][1]:.3f}) of {BASELINE}'s")
        print(line)
    return 0
