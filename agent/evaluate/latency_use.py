"""Where EL's scorers put pods by latency, and which of the hard limits they break the cluster could
have met: what separates a scorer that breaks more hard limits than latency-fit from latency-fit.

Each scorer places the pods of the same seeded worlds along its own trajectory. Pods with a hard limit
are split by whether any node of the cluster, full or not, lies within it: when none does the limit is
broken whatever a scorer does; when one does, a broken limit means those nodes were full when the pod
came (both by the node's true latency, as the outcome counts it). For every limited pod it also
reports how far out inside the pod's best latency tier the scorer went (0: the nearest node of the tier,
1: the farthest; latency-fit takes the farthest, keeping the near nodes for the pods that need them) and
how often it switched an empty node on. Pods are counted from the empty cluster on (no burn-in).

    python -m agent.evaluate.latency_use --model models/el.safetensors --rules latency-fit,latency-pack --family mixed
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from agent.evaluate.compare import EVAL_SEED_BASE, HOLDOUT_SEED_BASE, cells
from agent.sim.families import family
from agent.sim.simulator import Simulation
from rlscore.core.model import ModelValidationError, load_model
from rlscore.core.scoring import HeuristicScorer, ModelScorer, Scorer, choose
from rlscore.core.state import latency_tiers

NO_LIMIT, OUT_OF_REACH, IN_REACH = "no hard limit", "hard limit no node meets", "hard limit some node meets"


@dataclass
class LatencyUse:
    pods: dict[str, int]
    broken: dict[str, int]  # hard limits broken, per kind of pod
    depth_in_tier: float  # mean over the limited pods: 0 the tier's nearest node, 1 its farthest
    opens: float  # share of the limited pods placed on an empty node

    def lines(self, name: str) -> list[str]:
        out = [(f"{name}: limited pods placed {self.depth_in_tier:.2f} of the way out in their best tier, "
                f"{self.opens:.1%} of them on an empty node")]
        for kind in (NO_LIMIT, OUT_OF_REACH, IN_REACH):
            n, k = self.pods[kind], self.broken[kind]
            out.append(f"  {kind}: {n} pods, {k} hard limits broken" + (f" ({k / n:.1%})" if n else ""))
        return out


def depth_in_tier(latency: np.ndarray, tiers: np.ndarray, pick: int) -> float:
    """How far out the pick lies among the nodes of the best tier by latency (0 nearest, 1 farthest;
    0.5 for a tier of one node, which leaves no choice)."""
    inside = np.flatnonzero(tiers == tiers.max())
    if len(inside) < 2:
        return 0.5
    nearer = np.sum(latency[inside] < latency[pick])
    return float(nearer / (len(inside) - 1))


def latency_use(scorer: Scorer | str, family_name: str, seeds: int, decisions: int,
                seed_base: int = EVAL_SEED_BASE) -> LatencyUse:
    """Place `decisions` pods of each seeded world of the family by `scorer` (a model or a rule's name)
    and count as the module docstring says."""
    pods = {NO_LIMIT: 0, OUT_OF_REACH: 0, IN_REACH: 0}
    broken = dict.fromkeys(pods, 0)
    depths: list[float] = []
    opens = 0
    for name, size, seed in cells((family_name,), seeds, None, seed_base):
        sim = Simulation.of_family(name, seed, size, limits=True)
        rng = np.random.default_rng(seed)
        placer = HeuristicScorer(scorer, rng) if isinstance(scorer, str) else scorer
        for _ in range(decisions):
            sim.next_decision()
            state, pod = sim.candidate_state("EL")  # the pod as the server hands it to EL, as rlscore-eval does
            pick = choose(placer.values(state, pod), rng)  # ties broken as rlscore-eval breaks them
            hard = pod.latency_hard_ms
            if hard is None:
                kind = NO_LIMIT
            else:
                kind = IN_REACH if np.any(sim.cluster.latency_ms <= hard) else OUT_OF_REACH
                depths.append(depth_in_tier(state.latency_ms, latency_tiers(state, pod), pick))
                opens += int(state.pods[pick] == 0)
                broken[kind] += int(not sim.cluster.latency_ms[sim.candidates[pick]] <= hard)  # as outcomes count
            pods[kind] += 1
            sim.place(pick)
    limited = len(depths)
    return LatencyUse(pods, broken, float(np.mean(depths)) if limited else float("nan"),
                      opens / limited if limited else float("nan"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agent.evaluate.latency_use", description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, action="append", default=[], help="an EL model (repeatable)")
    parser.add_argument("--rules", default="latency-fit,latency-pack", help="comma-separated rules of EL")
    parser.add_argument("--family", default="mixed")
    parser.add_argument("--seeds", type=int, default=16)
    parser.add_argument("--decisions", type=int, default=300, help="placements per world")
    parser.add_argument("--holdout", action="store_true", help="the hold-out seeds instead of the evaluation's")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.decisions < 1:
        print("latency_use: --seeds and --decisions must be positive", file=sys.stderr)
        return 2
    scorers: list[tuple[str, Scorer | str]] = []
    try:
        family(args.family)
        for path in args.model:
            scorers.append((str(path), ModelScorer(load_model(path, expected_policy="EL"))))
        for rule in filter(None, args.rules.split(",")):
            HeuristicScorer(rule, np.random.default_rng(0))
            scorers.append((rule, rule))
    except (ModelValidationError, ValueError) as exc:
        print(f"latency_use: {exc}", file=sys.stderr)
        return 2
    base = HOLDOUT_SEED_BASE if args.holdout else EVAL_SEED_BASE
    print(f"{args.family}, {args.seeds} seeds x {args.decisions} pods, each scorer on its own placements:")
    for name, scorer in scorers:
        print("\n".join(latency_use(scorer, args.family, args.seeds, args.decisions, base).lines(name)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
