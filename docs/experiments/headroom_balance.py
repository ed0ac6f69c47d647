"""headroom-balance (agent.heuristics, docs/training.md "headroom-balance", 2026-11-28): its burst
factor and load limit swept on a training seed range, and the rule against LB's other baselines on
both evaluation seed ranges.

    .venv/bin/python docs/experiments/headroom_balance.py sweep usage-skew,one-pool --seeds 16
    .venv/bin/python docs/experiments/headroom_balance.py ranges usage-skew,one-pool,two-d,churn --seeds 32
"""

import argparse

import numpy as np

from agent.evaluate.compare import EVAL_SEED_BASE, EVAL_WORKERS, HOLDOUT_SEED_BASE, evaluate, summarize, values_by_seed
from agent.heuristics import headroom_values

SWEEP_SEED_BASE = 70_000_000  # neither evaluation range, nor the training worlds' (DEMO_SEED_BASE + ...)
RIVALS = ("one-step-lb", "target-load-packing", "load-variation-risk-balancing", "least-utilized")


class Headroom:
    """headroom-balance with its two constants as parameters."""

    def __init__(self, burst: float, limit: float):
        self.burst, self.limit, self.name = burst, limit, f"headroom {burst}x/{limit}"
        self.rng = np.random.default_rng(0)

    def values(self, nodes, pod):
        return headroom_values(nodes, pod, self.rng, self.burst, self.limit)


def table(rows, families) -> None:
    for family_name in families:
        cell = sorted((r for r in rows if r["family"] == family_name), key=lambda r: r["objective"])
        print(f"{family_name}: " + " | ".join(f"{r['scorer']} {r['objective']:.4f} (hot {r['hot_node_share']:.3f}, "
                                              f"request CV {r['request_cv']:.3f})" for r in cell))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("sweep", "ranges"))
    parser.add_argument("families", help="comma-separated; families of random size (usage-skew, one-pool, two-d, churn)")
    parser.add_argument("--seeds", type=int, default=16)
    args = parser.parse_args()
    families = tuple(args.families.split(","))
    if args.what == "sweep":
        variants = [Headroom(b, 0.8) for b in (2.5, 3.0, 3.5)] + [Headroom(3.0, lim) for lim in (0.7, 0.75)]
        results, _ = evaluate("LB", variants, families, args.seeds, baselines=RIVALS, progress=False,
                              seed_base=SWEEP_SEED_BASE, workers=EVAL_WORKERS)
        table(summarize(results), families)
        return
    for label, seed_base in (("evaluation", EVAL_SEED_BASE), ("hold-out", HOLDOUT_SEED_BASE)):
        results, _ = evaluate("LB", [], families, args.seeds, baselines=(*RIVALS, "headroom-balance"),
                              progress=False, seed_base=seed_base, workers=EVAL_WORKERS)
        rows, by_seed = summarize(results), values_by_seed(results)
        print(f"-- {label} seeds")
        table(rows, families)
        for family_name in families:
            rival = min((r for r in rows if r["family"] == family_name and r["scorer"] != "headroom-balance"),
                        key=lambda r: r["objective"])
            mine, theirs = by_seed[(family_name, "random", "headroom-balance")], by_seed[(family_name, "random", rival["scorer"])]
            print(f"{family_name}: headroom-balance ahead of {rival['scorer']} on "
                  f"{sum(mine[s] < theirs[s] for s in mine)}/{len(mine)} worlds")


if __name__ == "__main__":
    main()
