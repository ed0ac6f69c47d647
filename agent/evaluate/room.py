"""What knowing one more thing about each pod or world would be worth to a policy: scorers that read it
against the policy's reference rules on the same worlds, paired by seed. The scorer modules
(lifetime_room, usage_room, limits_room) say what they know; this runs and reads them alike."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from agent.evaluate.compare import EVAL_SEED_BASE, HOLDOUT_SEED_BASE, RunResult, measure
from agent.evaluate.goals import paired_ratio
from agent.sim.simulator import Simulation
from rlscore.core.scoring import HeuristicScorer, Scorer

# a scorer of a room module, made for the simulation it scores (an oracle reads it) and a tie-break stream
ScorerFactory = Callable[[Simulation, np.random.Generator], Scorer]


@dataclass(frozen=True)
class Room:
    """How a room module reads its scorers: the policy they are measured for, the rules they are paired
    with (the first is the one every ratio is taken against first), the measures printed per scorer
    (RunResult fields, with their labels) and the ones read as ratios to each rule."""

    policy: str
    rules: tuple[str, ...]
    shown: tuple[tuple[str, str], ...]
    ratios: tuple[tuple[str, str], ...]


EE_ROOM = Room("EE", ("efficient-first",),
               shown=(("mean_power_watts", "{:.0f} W"), ("mean_active_nodes", "{:.1f} active nodes"),
                      ("unschedulable", "{:.1f} pods without a node per run")),
               ratios=(("objective", "energy objective"), ("mean_power_watts", "power")))


def run_seed(family: str, seed: int, scorers: dict[str, ScorerFactory], room: Room = EE_ROOM) -> dict[str, RunResult]:
    """Each rule of the room and each scorer on one world."""
    out = {}
    for name in (*room.rules, *scorers):
        sim = Simulation.of_family(family, seed, None, limits=room.policy == "EL")
        rng = np.random.default_rng(seed)
        scorer = HeuristicScorer(name, rng) if name in room.rules else scorers[name](sim, rng)
        out[name], _ = measure(scorer, sim, seed, room.policy)
    return out


def main(argv: list[str] | None, prog: str, description: str, scorers: dict[str, ScorerFactory],
         room: Room = EE_ROOM) -> int:
    """The command line of a room module: each scorer's measures, and its ratios to each rule's, paired
    by seed."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--family", default="mixed")
    parser.add_argument("--seeds", type=int, default=64)
    parser.add_argument("--holdout", action="store_true", help="the hold-out seeds instead of the evaluation seeds")
    args = parser.parse_args(argv)
    if args.seeds < 2:
        parser.error("--seeds must be >= 2 (the interval resamples them)")
    base = HOLDOUT_SEED_BASE if args.holdout else EVAL_SEED_BASE
    runs = {base + k: run_seed(args.family, base + k, scorers, room)
            for k in tqdm(range(args.seeds), desc="worlds", file=sys.stderr)}

    def metric(name: str, field: str) -> dict[int, float]:
        return {s: float(getattr(r[name], field)) for s, r in runs.items()}

    for name in (*room.rules, *scorers):
        line = f"{name}: " + ", ".join(label.format(np.mean(list(metric(name, field).values())))
                                       for field, label in room.shown)
        for rule in room.rules:
            if rule == name:
                continue
            readings = []
            for field, label in room.ratios:
                p = paired_ratio(metric(name, field), metric(rule, field))
                ci = f"{p['ci95'][0]:.3f}-{p['ci95'][1]:.3f}"
                readings.append(f"{label} x{p['ratio']:.3f} ({ci}, {p['reading']})" if field == "objective"
                                else f"{label} x{p['ratio']:.3f} ({ci})")
            line += f"; {', '.join(readings)} of {rule}'s"
        print(line)
    return 0
