"""The candidate LB rule of docs/training.md, "A one-step LB rule with a risk margin" (2026-11-27, not
a baseline): one-step-lb whose hot check adds k standard deviations of the node's measured cpu
utilization over time (LoadVariationRiskBalancing's margin), measured with the shipped LB, one-step-lb
and LoadVariationRiskBalancing on both seed ranges.

    .venv/bin/python docs/experiments/lb_risk_margin_rule.py usage-skew,one-pool [--k 1] [--holdout]
"""

import argparse
from dataclasses import replace

import numpy as np

from agent.evaluate import compare
from agent.heuristics import HEURISTICS
from agent.learn.model_io import load_model
from agent.scoring import ModelScorer
from agent.sim.outcomes import placement_costs


def one_step_lb_with_margin(k: float):
    def score(nodes, pod, rng):
        """one-step-lb's cost on the nodes as they would measure k standard deviations busier (the
        hot check reads the measured use; unknown use stays unknown, then the requests count)."""
        swing = np.nan_to_num(nodes.cpu_utilization_stddev, nan=0.0)
        return -placement_costs("LB", replace(nodes, cpu_utilization=nodes.cpu_utilization + k * swing), pod)
    return score


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("families")
    parser.add_argument("--k", type=float, default=1.0)
    parser.add_argument("--holdout", action="store_true")
    args = parser.parse_args()
    HEURISTICS["one-step-lb-margin"] = one_step_lb_with_margin(args.k)
    seed_base = compare.HOLDOUT_SEED_BASE if args.holdout else compare.EVAL_SEED_BASE
    model = ModelScorer(load_model("models/lb.pt", expected_policy="LB"), name="rl-lb")
    rules = ("one-step-lb", "load-variation-risk-balancing", "one-step-lb-margin")
    results, _ = compare.evaluate("LB", [model], tuple(args.families.split(",")), seeds=8, baselines=rules,
                                  progress=False, seed_base=seed_base)
    per_family: dict[str, dict[str, list[float]]] = {}
    for r in results:
        per_family.setdefault(r.family, {}).setdefault(r.scorer, []).append(r.objective)
    for family_name, runs in per_family.items():
        means = {name: round(float(np.mean(v)), 4) for name, v in runs.items()}
        margin, lvrb = np.array(runs["one-step-lb-margin"]), np.array(runs["load-variation-risk-balancing"])
        print(family_name, means, f"margin rule ahead of LoadVariationRiskBalancing on {int((margin < lvrb).sum())}/8")


if __name__ == "__main__":
    main()
