"""How far apart two runs of one rule land when only its tie-breaks differ (or one pick): the
smallest difference an evaluation of these worlds can tell from chance.

A rule breaks ties between equally good nodes at random, as kube-scheduler's selectHost does. On a
world with churn a few other picks early lead to another cluster later, so one run of a rule is one
draw of where the rule can land. This runs the rule twice on each evaluation world, once with the
tie stream rlscore-eval gives it (the same run, to the bit) and once with another, and pairs the two
as rlscore-eval pairs a model with a rule. A model whose paired interval against the rule is no
narrower than this one is not told from a second run of the rule.

A rule that never ties (latency-fit on continuous latencies) runs the same way twice; `--other pick`
makes the second run differ by one decision instead: the first pod with a choice goes to the rule's
second-best node, everything after is the rule's again.

    python -m agent.evaluate.ties --policy LB --rule headroom-balance --families mixed --seeds 32
    python -m agent.evaluate.ties --policy EL --rule latency-fit --families mixed --seeds 32 --other pick
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass

import numpy as np

from agent.evaluate.cli import family_list, node_count_list
from agent.evaluate.compare import (
    EVAL_SEED_BASE,
    EVAL_WORKERS,
    HOLDOUT_SEED_BASE,
    baselines_for,
    cells,
    run,
)
from agent.evaluate.goals import paired_ratio
from agent.parallel import worker_pool
from agent.sim.families import evaluation_families_for
from rlscore.core.scoring import HeuristicScorer, Scorer
from rlscore.core.state import POLICIES, NodeState, PodRequest

OTHER_TIES = 7919  # the other run's tie stream: the world's seed plus this
OTHERS = ("ties", "pick")  # what the second run changes: its tie stream, or one pick


@dataclass
class SecondPickOnce:
    """A scorer whose first decision with a choice goes to its second-best node (one of its best, where
    several tie); then it is itself."""

    scorer: Scorer
    done: bool = False

    @property
    def name(self) -> str:
        return f"{self.scorer.name}+one-other-pick"

    def values(self, nodes: NodeState, pod: PodRequest) -> np.ndarray:
        values = self.scorer.values(nodes, pod)
        if self.done or values.size < 2:
            return values
        self.done = True
        values = np.array(values, dtype=float)
        values[int(np.argmax(values))] = -np.inf
        return values


def run_with_ties(policy: str, rule: str, family_name: str, nodes: int | None, seed: int, ties: int,
                  arrivals: int, other_pick: bool = False) -> float:
    """The rule's objective on the evaluation world (family, nodes, seed), its ties broken by `ties`
    (`ties == seed`: rlscore-eval's run of it); with `other_pick`, its first choice goes elsewhere."""
    scorer = HeuristicScorer(rule, np.random.default_rng(ties))
    result, _ = run(SecondPickOnce(scorer) if other_pick else scorer, family_name, seed, policy, nodes, arrivals,
                    ties=ties)
    return result.objective


def _both(job: tuple) -> tuple[float, float]:
    policy, rule, family_name, nodes, seed, arrivals, other = job
    own = run_with_ties(policy, rule, family_name, nodes, seed, seed, arrivals)
    if other == "pick":
        return own, run_with_ties(policy, rule, family_name, nodes, seed, seed, arrivals, other_pick=True)
    return own, run_with_ties(policy, rule, family_name, nodes, seed, seed + OTHER_TIES, arrivals)


def measure_ties(policy: str, rule: str, family_names: tuple[str, ...], seeds: int, arrivals: int = 300,
                 node_counts: tuple[int, ...] | None = None, seed_base: int = EVAL_SEED_BASE,
                 workers: int = 1, other: str = "ties") -> list[dict]:
    """Per cell (family, nodes): the other run's objectives (`other`: another tie stream, or one other
    pick) over the own ones, paired by seed, and the spread (standard deviation) of the per-world log
    ratio."""
    if other not in OTHERS:
        raise ValueError(f"other must be one of {', '.join(OTHERS)}, not {other!r}")
    jobs = cells(family_names, seeds, node_counts, seed_base)
    with worker_pool(workers if len(jobs) > 1 else 1) as pool:
        pairs = list(pool.map(_both, [(policy, rule, name, nodes, seed, arrivals, other)
                                      for name, nodes, seed in jobs]))
    by_cell: dict[tuple, tuple[dict, dict]] = {}
    for (name, nodes, seed), (first_run, second_run) in zip(jobs, pairs):
        mine, theirs = by_cell.setdefault((name, nodes), ({}, {}))
        mine[seed], theirs[seed] = first_run, second_run
    out = []
    for (name, nodes), (own, second) in by_cell.items():
        logs = [math.log(second[s] / own[s]) for s in own if own[s] > 0 and second[s] > 0]
        out.append({"family": name, "nodes": nodes, "seeds": len(own), "paired": paired_ratio(second, own),
                    "log_ratio_sd": float(np.std(logs)) if logs else None,
                    "differ": sum(own[s] != second[s] for s in own)})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agent.evaluate.ties", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--policy", required=True, type=str.upper, choices=POLICIES)
    parser.add_argument("--rule", required=True, help="one of the policy's baselines")
    parser.add_argument("--families", type=family_list, default=None, help="default: the policy's")
    parser.add_argument("--nodes", type=node_count_list, default=None, help="node counts (default: as rlscore-eval)")
    parser.add_argument("--seeds", type=int, default=32)
    parser.add_argument("--holdout", action="store_true", help="the hold-out seeds instead of the evaluation seeds")
    parser.add_argument("--arrivals", type=int, default=300, help="pod arrivals per run")
    parser.add_argument("--workers", type=int, default=EVAL_WORKERS, help="processes to run the worlds on")
    parser.add_argument("--other", choices=OTHERS, default="ties",
                        help="what the second run changes: its tie stream, or its first pick with a choice "
                             "(for rules that never tie)")
    args = parser.parse_args(argv)
    if args.rule not in baselines_for(args.policy):
        parser.error(f"--rule {args.rule!r} is not a baseline of {args.policy}: "
                     f"expected one of {', '.join(baselines_for(args.policy))}")
    if args.seeds < 2 or args.arrivals < 1 or args.workers < 1:
        parser.error("--seeds must be >= 2, --arrivals and --workers >= 1")
    families = args.families or evaluation_families_for(args.policy)
    rows = measure_ties(args.policy, args.rule, families, args.seeds, args.arrivals, args.nodes,
                        HOLDOUT_SEED_BASE if args.holdout else EVAL_SEED_BASE, args.workers, args.other)
    changed = "other tie-breaks" if args.other == "ties" else "one other pick"
    print(f"{args.rule} ({args.policy}) with {changed}, over its own runs, paired by seed:")
    for r in rows:
        p, sd = r["paired"], r["log_ratio_sd"]
        ratio = f"x{p['ratio']:.3f} (95% {p['ci95'][0]:.3f}-{p['ci95'][1]:.3f})" if p else "no ratio (objective 0)"
        spread = f"per-world spread (sd of log ratio) {sd:.3f}" if sd is not None else "no per-world spread"
        print(f"  {r['family']} @ {r['nodes'] or 'random'}: {ratio}; {spread}; "
              f"{r['differ']} of {r['seeds']} worlds differ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
