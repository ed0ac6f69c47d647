"""A hand-written switch for LB (docs/training.md, "A rule selector"): one-step-lb until some node's
measured cpu is above its request share by `margin`, then LoadVariationRiskBalancing. Prints each
margin's objective per cell beside the two rules, on the evaluation's seeds and measurement.

    .venv/bin/python docs/experiments/lb_hand_switch.py [--margins 0,0.1,0.3] [--families usage-skew,one-pool]
"""

import argparse

import numpy as np

from agent.evaluate.compare import evaluate, summarize
from agent.evaluate.shipped import ARRIVALS, SEEDS
from agent.heuristics import HEURISTICS, load_variation_risk_balancing, one_step_lb
from agent.sim.families import evaluation_families_for


def hand_switch(margin: float):
    def score(nodes, pod, rng):
        share = nodes.cpu_requested / np.maximum(nodes.cpu_capacity, 1e-9)
        known = np.isfinite(nodes.cpu_utilization)
        hot = bool(np.any(known & (nodes.cpu_utilization > share + margin)))
        return (load_variation_risk_balancing if hot else one_step_lb)(nodes, pod, rng)
    return score


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--margins", default="0,0.1,0.3")
    parser.add_argument("--families", default=",".join(evaluation_families_for("LB")))
    args = parser.parse_args()
    names = []
    for margin in (float(m) for m in args.margins.split(",")):
        name = f"switch-at-{margin:g}"
        HEURISTICS[name] = hand_switch(margin)  # registered for this run only
        names.append(name)
    results, _ = evaluate("LB", [], tuple(args.families.split(",")), SEEDS, ARRIVALS, progress=False,
                          baselines=(*names, "one-step-lb", "load-variation-risk-balancing"))
    for row in summarize(results):
        print(f"{row['family']:>11} {str(row['nodes']):>6} {row['scorer']:>30} {row['objective']:.4f}")


if __name__ == "__main__":
    main()
