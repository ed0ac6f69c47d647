"""Where an EL model breaks hard latency limits it could have kept, and what that costs.

An avoidable hard violation is a node over the pod's hard limit picked while the scorer could see one
within it; latency-fit, latency-pack and one-step-el never make one. For one model on EL evaluation
worlds this measures:
- the model as it is and the model ranked only among the nodes of the pod's best latency tier
  (latency-fit's first term in front of the model's values), each paired with latency-fit;
- at each of the model's avoidable violations, the reward training gave its pick and latency-fit's
  pick for that one decision (the outcome reward, shaped as in training), and each pick's cost to the
  end of a window with latency-fit placing the rest (the same future for both).

    python -m agent.evaluate.avoidable --model build/exp/el-dqn.safetensors --seeds 128 --window-seeds 8
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

import numpy as np

from agent.evaluate.cli import family_list
from agent.evaluate.compare import EVAL_SEED_BASE, EVAL_WORKERS, run
from agent.evaluate.departures import training_reward
from agent.evaluate.goals import paired_ratio
from agent.evaluate.rollout_bound import branch_cost
from agent.parallel import shared, worker_pool
from agent.sim.futures import branchable
from agent.sim.outcomes import avoidable_violation
from agent.sim.simulator import EventsExhausted, Simulation
from rlscore.core.model import ModelValidationError, load_model
from rlscore.core.rules import RULES
from rlscore.core.scoring import HeuristicScorer, ModelScorer, Scorer, choose
from rlscore.core.state import NodeState, PodRequest, latency_tiers

REFERENCE = "latency-fit"


@dataclass
class BestTierOnly:
    """A scorer ranked only among the nodes of the best latency tier the pod can get."""

    scorer: Scorer

    @property
    def name(self) -> str:
        return f"{self.scorer.name}+best-tier"

    def values(self, nodes: NodeState, pod: PodRequest) -> np.ndarray:
        values = np.asarray(self.scorer.values(nodes, pod), dtype=float)
        tiers = latency_tiers(nodes, pod)
        return np.where(tiers >= tiers.max(), values, -np.inf)


def is_avoidable(nodes: NodeState, pod: PodRequest, candidate: int) -> bool:
    """Whether placing the pod on `candidate` is a violation the simulator counts as avoidable."""
    return pod.has_latency_limits and avoidable_violation(nodes.latency_ms, candidate, pod.hard_limit)


def scorer_of(spec: str, seed: int) -> Scorer:
    """A rule by name (its ties broken by the world's seed, as rlscore-eval does), else the EL model the
    pool shares (measure reads the file once, before any worker starts)."""
    if spec in RULES:
        return HeuristicScorer(spec, np.random.default_rng(seed))
    return shared()


def one_step_reward(sim: Simulation, candidate: int) -> float:
    """The reward rlscore-train gives placing the current pod on `candidate` (its default outcome
    reward, shaped), read on a copy of the simulation."""
    return training_reward(sim, candidate, "EL", None)


def _runs(job: tuple) -> dict[str, tuple[float, int, int]]:
    spec, family_name, seed, arrivals = job
    model = scorer_of(spec, seed)
    # a rule gets a fresh tie stream for each run
    ranked = BestTierOnly(scorer_of(spec, seed) if spec in RULES else model)
    out = {}
    for scorer in (scorer_of(REFERENCE, seed), model, ranked):
        result, _ = run(scorer, family_name, seed, "EL", arrivals=arrivals)
        out[scorer.name] = (result.objective, result.hard_violations, result.hard_violations_avoidable)
    return out


def _violations(job: tuple) -> list[tuple[float, float, float, float]]:
    """(reward of the model's pick, of latency-fit's, cost to the window's end of each) at every
    avoidable violation the model makes on one world, after a burn-in of one fill."""
    spec, family_name, seed, arrivals, window = job
    scorer, reference = scorer_of(spec, seed), scorer_of(REFERENCE, seed)
    sim = branchable(Simulation.of_family(family_name, seed, None, limits=True))
    ties = np.random.default_rng(seed)  # as rlscore-eval's run of the scorer on this world
    burn = int(np.ceil(sim.world.pods_alive))
    measured = max(arrivals, burn)  # as compare.measure: at least one fill
    rows = []
    try:
        while sim.ledger.arrivals < burn + measured:
            sim.next_decision()
            state, pod = sim.candidate_state("EL")
            pick = choose(scorer.values(state, pod), ties)
            if sim.ledger.arrivals > burn and is_avoidable(state, pod, pick):
                theirs = choose(reference.values(state, pod), np.random.default_rng(seed))
                end = sim.decisions + window
                rows.append((one_step_reward(sim, pick), one_step_reward(sim, theirs),
                             branch_cost(sim, pick, REFERENCE, "EL", seed, end),
                             branch_cost(sim, theirs, REFERENCE, "EL", seed, end)))
            sim.place(pick)
    except EventsExhausted:
        pass
    return rows


def measure(spec: str, family_name: str, seeds: int, window_seeds: int, arrivals: int = 300,
            window: int = 150, workers: int = 1) -> dict:
    """Both readings above for `spec` (a model file or a rule), over `seeds` evaluation worlds (the
    violations over the first `window_seeds` of them)."""
    worlds = [EVAL_SEED_BASE + k for k in range(seeds)]
    model = None if spec in RULES else ModelScorer(load_model(spec, expected_policy="EL"))
    with worker_pool(workers, shared=model) as pool:
        runs = list(pool.map(_runs, [(spec, family_name, s, arrivals) for s in worlds]))
        rows = [r for found in pool.map(_violations, [(spec, family_name, s, arrivals, window)
                                                      for s in worlds[:window_seeds]]) for r in found]
    reference = {s: r[REFERENCE][0] for s, r in zip(worlds, runs)}
    scorers = {}
    for name in runs[0]:
        values = {s: r[name][0] for s, r in zip(worlds, runs)}
        scorers[name] = {"objective": float(np.mean(list(values.values()))),
                         "paired": paired_ratio(values, reference),
                         "hard_violations": float(np.mean([r[name][1] for r in runs])),
                         "avoidable": float(np.mean([r[name][2] for r in runs]))}
    found = np.array(rows, dtype=float).reshape(-1, 4)
    picks = None
    if len(found):
        picks = {"count": len(found), "worlds": min(window_seeds, seeds),
                 "reward_model": float(found[:, 0].mean()), "reward_reference": float(found[:, 1].mean()),
                 "reward_model_higher": float(np.mean(found[:, 0] > found[:, 1])),
                 "cost_model": float(found[:, 2].mean()), "cost_reference": float(found[:, 3].mean()),
                 "cost_model_lower": float(np.mean(found[:, 2] < found[:, 3]))}
    return {"scorers": scorers, "violations": picks, "window": window}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agent.evaluate.avoidable", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--model", required=True,
                        help="an EL model file, or a rule by name (efficient-first makes avoidable violations)")
    parser.add_argument("--family", type=family_list, default=("mixed",), help="one scenario family")
    parser.add_argument("--seeds", type=int, default=32, help="evaluation worlds for the paired objectives")
    parser.add_argument("--window-seeds", type=int, default=8,
                        help="of them, the worlds whose avoidable violations are looked into")
    parser.add_argument("--window", type=int, default=150, help="decisions each pick's cost runs to")
    parser.add_argument("--workers", type=int, default=EVAL_WORKERS, help="processes to run the worlds on")
    args = parser.parse_args(argv)
    if len(args.family) != 1:
        parser.error("--family takes one family")
    if args.seeds < 2 or args.window_seeds < 0 or args.window < 1 or args.workers < 1:
        parser.error("--seeds must be >= 2, --window-seeds >= 0, --window and --workers >= 1")
    try:
        result = measure(args.model, args.family[0], args.seeds, args.window_seeds, window=args.window,
                         workers=args.workers)
    except (OSError, ModelValidationError) as e:
        print(f"avoidable: {e}", file=sys.stderr)
        return 2
    print(f"{args.family[0]}, {args.seeds} evaluation worlds, paired with {REFERENCE}:")
    for name, s in result["scorers"].items():
        p = s["paired"]
        ratio = f"x{p['ratio']:.3f} (95% {p['ci95'][0]:.3f}-{p['ci95'][1]:.3f})" if p else "no ratio"
        print(f"  {name}: objective {s['objective']:.3f}, {ratio}; hard violations {s['hard_violations']:.1f} "
              f"per run, {s['avoidable']:.2f} of them avoidable")
    v = result["violations"]
    if v is None:
        print(f"no avoidable violation on the first {args.window_seeds} worlds")
        return 0
    print(f"its {v['count']} avoidable violations on the first {v['worlds']} worlds:")
    print(f"  one decision's reward (shaped, as in training): its pick {v['reward_model']:.2f}, {REFERENCE}'s "
          f"{v['reward_reference']:.2f}; its pick higher on {v['reward_model_higher']:.0%}")
    print(f"  cost to {result['window']} decisions on ({REFERENCE} after): its pick {v['cost_model']:.1f}, "
          f"{REFERENCE}'s {v['cost_reference']:.1f}; its pick cheaper on {v['cost_model_lower']:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
