"""Which of a model's decisions cost it a cell (docs/training.md, "Openings labelled by rollout",
2026-11-27): a rule schedules each world's first k placements, then the model takes over, on the
evaluation's worlds, seeds and measurement. If handing over after k placements gives the rule's own
objective, the model's loss lies in its first k decisions; if not, in the later ones.

    .venv/bin/python docs/experiments/rule_then_model.py models/ee.pt [--rule one-step-ee]
        [--family test2] [--nodes 3] [--after 0,30,60]
"""

import argparse

import numpy as np

from agent.evaluate.compare import EVAL_SEED_BASE, cells, run
from agent.evaluate.shipped import ARRIVALS, SEEDS
from agent.learn.model_io import load_model
from agent.scoring import HeuristicScorer, ModelScorer


class RuleThenModel:
    """The rule's values for the first `after` decisions, the model's from then on."""

    name = "rule-then-model"

    def __init__(self, rule: HeuristicScorer, model: ModelScorer, after: int):
        self.rule, self.model, self.after, self.calls = rule, model, after, 0

    def values(self, nodes, pod):
        self.calls += 1
        return (self.rule if self.calls <= self.after else self.model).values(nodes, pod)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--rule", default="one-step-ee")
    parser.add_argument("--family", default="test2")
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--after", default="0,30,60", help="placement counts at which the model takes over")
    args = parser.parse_args()
    model = load_model(args.model)
    worlds = list(cells((args.family,), SEEDS, (args.nodes,), EVAL_SEED_BASE))

    def objectives(scorer_for_seed) -> list[float]:
        return [run(scorer_for_seed(seed), name, seed, model.policy, size, ARRIVALS)[0].objective
                for name, size, seed in worlds]

    def rule(seed: int) -> HeuristicScorer:
        return HeuristicScorer(args.rule, np.random.default_rng(seed))

    for after in [int(k) for k in args.after.split(",")]:
        values = objectives(lambda seed: RuleThenModel(rule(seed), ModelScorer(model), after))
        print(f"{args.rule} for the first {after:>3} placements, then the model: {np.mean(values):.4f}  "
              + " ".join(f"{v:.3f}" for v in values))
    alone = objectives(rule)
    print(f"{args.rule} alone: {np.mean(alone):.4f}  " + " ".join(f"{v:.3f}" for v in alone))


if __name__ == "__main__":
    main()
