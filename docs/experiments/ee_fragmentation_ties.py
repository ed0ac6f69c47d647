"""Two variants of efficient-first on EE's fragmentation, hardware and churn families (docs/training.md,
"EE's teachers on 48 seeds", 2026-11-28): does breaking efficient-first's ties more tightly within a
power class leave fewer pods without a node than MostAllocated while drawing efficient-first's power? (No.)

    .venv/bin/python docs/experiments/ee_fragmentation_ties.py fragmentation,hardware,churn --seeds 32

efficient-first orders nodes by full-load watts per core, then by MostAllocated's score, which rounds
the shares to whole points, so nodes a few tenths of a point apart tie and one is drawn at random.
"""

import argparse

import numpy as np

from agent.evaluate.compare import EVAL_WORKERS, evaluate, summarize
from agent.heuristics import _requested_after, best_fit, efficiency_rank

SWEEP_SEED_BASE = 70_000_000  # neither evaluation range, nor the training worlds'
RIVALS = ("efficient-first", "most-allocated", "best-fit", "one-step-ee")


class EfficientThenBestFit:
    name = "efficient-then-best-fit"

    def __init__(self):
        self.rng = np.random.default_rng(0)

    def values(self, nodes, pod):
        return efficiency_rank(nodes) * 1e4 + best_fit(nodes, pod, self.rng)


class EfficientThenExactShares:
    name = "efficient-then-exact-shares"

    def values(self, nodes, pod):
        cpu, mem = _requested_after(nodes, pod)
        with np.errstate(divide="ignore", invalid="ignore"):
            shares = np.nan_to_num(cpu / nodes.cpu_capacity, nan=-1) + np.nan_to_num(mem / nodes.memory_capacity, nan=-1)
        return efficiency_rank(nodes) * 1e4 + shares


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("families", help="comma-separated EE families")
    parser.add_argument("--seeds", type=int, default=32)
    args = parser.parse_args()
    families = tuple(args.families.split(","))
    results, _ = evaluate("EE", [EfficientThenBestFit(), EfficientThenExactShares()], families, args.seeds,
                          baselines=RIVALS, progress=False, seed_base=SWEEP_SEED_BASE, workers=EVAL_WORKERS)
    for r in sorted(summarize(results), key=lambda r: (r["family"], str(r["nodes"]), r["objective"])):
        print(f"{r['family']:14s} {r['scorer']:28s} objective {r['objective']:.4f}  {r['mean_power_watts']:.0f} W  "
              f"without a node {r['unschedulable']:.3f} per run  active {r['mean_active_nodes']:.2f}")


if __name__ == "__main__":
    main()
