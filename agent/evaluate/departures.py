"""Where a model departs from a heuristic, and on which kind of decision.

The model and the heuristic are asked about the same states: the ones the heuristic's own placements
lead to, on the evaluation's seeded worlds (`--follow model`: the model's own, which is where its
departures add up to what evaluation measures). A departure is a decision where the model's pick is not
among the heuristic's tied best. Decisions are split by what the heuristic does: open an empty node,
or place onto a node that already runs pods. A cloned model that loses to its teacher in a cell shows
here whether it packs differently or opens other nodes (the choice whose best answer depends on the
load still to come, which no node feature shows).

    python -m agent.evaluate.departures models/ee.safetensors --baseline most-allocated --family test1 --nodes 3

`--window N` also prices every third departure that opens an empty node where the baseline packs: the
reward training gives each of the two picks (shaped with the discount's factor and with 1) and the
policy's cost over the next N decisions with the baseline placing them, both branches meeting the same
future. It says whether the reward, or what TD made of the future, sent the model there. `--returns H`
also gives each priced pair the discounted sum of training's rewards over H decisions (what TD
estimates), the rest placed by the model itself and by the baseline: how far apart the two picks are
in the quantity TD learns, next to the noise of a single return.

`--other FILE` asks a second model (another training seed, say) about the same states: how often both
depart where the baseline packs, against what two independent models departing as often would share, and
how often to the same node. Departures that several seeds share are a bias of the recipe, not noise.
"""

from __future__ import annotations

import argparse
import copy
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from agent.evaluate.compare import EVAL_SEED_BASE, HOLDOUT_SEED_BASE, cells
from agent.evaluate.rollout_bound import base_choice, branch_cost
from agent.sim.families import family
from agent.sim.futures import branchable
from agent.sim.outcomes import OutcomeReward
from agent.sim.simulator import Simulation
from rlscore.core.model import ModelValidationError, load_model
from rlscore.core.scoring import HeuristicScorer, ModelScorer, Scorer, choose

OPENING, RUNNING = "opens an empty node", "places onto a running node"


@dataclass
class Departures:
    decisions: dict[str, int] = field(default_factory=lambda: {OPENING: 0, RUNNING: 0})
    departed: dict[str, int] = field(default_factory=lambda: {OPENING: 0, RUNNING: 0})
    opened_instead: int = 0  # departures onto an empty node where the baseline places onto a running one
    model_opens: int = 0  # decisions where the model's pick is an empty node
    # per priced opening: rewards (model's, baseline's) shaped with the discount, then with 1, then the costs
    priced: list[tuple[float, float, float, float, float, float]] = field(default_factory=list)
    window: int = 0
    # per priced opening with `returns`: training returns (model's pick, baseline's) continued by the
    # model, then by the baseline
    returns: list[tuple[float, float, float, float]] = field(default_factory=list)
    horizon: int = 0
    # with a second model, on the decisions where the baseline places onto a running node: its departures,
    # those both make, and those both make to the same node
    other_departed: int = 0
    both_departed: int = 0
    same_node: int = 0
    other: str = ""

    def lines(self) -> list[str]:
        total = sum(self.decisions.values())
        out = [f"{sum(self.departed.values())} of {total} decisions depart from the baseline",
               (f"  the model switches an empty node on at {self.model_opens} decisions, the baseline at "
                f"{self.decisions[OPENING]}")]
        for kind in (OPENING, RUNNING):
            n, k = self.decisions[kind], self.departed[kind]
            out.append(f"  where the baseline {kind}: {k} of {n}" + (f" ({100 * k / n:.1f}%)" if n else ""))
        if self.departed[RUNNING]:
            out.append(f"    of them onto an empty node (one more node on): {self.opened_instead}")
        if self.priced:
            a = np.array(self.priced)
            out.append(f"  {len(a)} of those openings priced against the baseline's pick:")
            for label, k in (("the reward training gives (shaping x gamma)", 0), ("the reward with shaping x 1", 2)):
                out.append(f"    {label}: {a[:, k].mean():.2f} for the model's pick, {a[:, k + 1].mean():.2f} for the "
                           f"baseline's; the model's higher on {np.mean(a[:, k] > a[:, k + 1]):.0%}")
            gap = a[:, 4] - a[:, 5]
            out.append(f"    cost over the next {self.window} decisions (the baseline after): {a[:, 4].mean():.1f} against "
                       f"{a[:, 5].mean():.1f} (difference {gap.mean():.2f} +- {1.96 * gap.std() / np.sqrt(len(a)):.2f}); "
                       f"the model's cheaper on {np.mean(gap < 0):.0%}")
        if self.other:
            n, k, m = self.decisions[RUNNING], self.departed[RUNNING], self.other_departed
            independent = k * m / n if n else 0.0
            out.append(f"  {self.other} departs where the baseline {RUNNING} at {m}; both at {self.both_departed} "
                       f"({independent:.0f} if independent), both to the same node at {self.same_node}")
        if self.returns:
            r = np.array(self.returns)
            out.append(f"  training's discounted return over {self.horizon} decisions (what TD estimates):")
            for label, k in (("the model", 0), ("the baseline", 2)):
                gap = r[:, k] - r[:, k + 1]
                out.append(f"    the rest placed by {label}: {r[:, k].mean():.1f} for the model's pick, {r[:, k + 1].mean():.1f}"
                           f" for the baseline's (difference {gap.mean():.2f} +- {1.96 * gap.std() / np.sqrt(len(r)):.2f},"
                           f" spread of one return {r[:, k].std():.1f}); the model's higher on {np.mean(gap > 0):.0%}")
        return out


def training_reward(sim: Simulation, candidate: int, policy: str, shaping_gamma: float | None) -> float:
    """The outcome reward training gives placing the current pod on `candidate` (the default discount)."""
    return training_return(sim, candidate, policy, shaping_gamma=shaping_gamma)


def training_return(sim: Simulation, first: int, policy: str, horizon: int = 1, rest=None,
                    shaping_gamma: float | None = None) -> float:
    """The discounted sum of the rewards training gives over `horizon` decisions from placing the current
    pod on `first`, the rest placed by `rest(sim) -> candidate`."""
    branch = copy.deepcopy(sim)
    reward = OutcomeReward(policy, shaping_gamma=shaping_gamma)
    total, pick = 0.0, first
    for k in range(horizon):
        if k:
            pick = rest(branch)
        before, potential = branch.ledger.copy(), branch.potential(policy, reward.gamma)
        branch.place(pick)
        branch.next_decision()
        total += reward.gamma**k * reward(branch.ledger.minus(before), branch.units, potential,
                                          branch.potential(policy, reward.gamma))
    return total


def greedy(scorer: Scorer):
    """`scorer`'s pick as training_return's `rest` (the model's own, as departures reads it)."""
    return lambda sim: int(np.argmax(scorer.values(*sim.candidate_state())))


def by_rule(rule: str, policy: str, seed: int):
    """`rule`'s pick as training_return's `rest`, its ties broken alike in every branch (base_choice)."""
    return lambda sim: base_choice(rule, sim, policy, seed)


def departures(scorer: Scorer, baseline: str, family_name: str, nodes: int | None, seeds: int, decisions: int,
               seed_base: int = EVAL_SEED_BASE, limits: bool = False, policy: str = "EE", window: int = 0,
               returns: int = 0, follow_model: bool = False, other: Scorer | None = None) -> Departures:
    """Count the scorer's departures from `baseline` along the baseline's own trajectories (the scorer's
    with `follow_model`; with `window`, price every third opening, with `returns` also by training's
    return; with `other`, how many of its departures a second scorer shares; module docstring)."""
    out = Departures(window=window, horizon=returns, other=other.name if other is not None else "")
    for name, size, seed in cells((family_name,), seeds, (nodes,) if nodes else None, seed_base):
        sim = Simulation.of_family(name, seed, size, limits=limits)
        if window:
            branchable(sim)
        rng = np.random.default_rng(seed)
        heuristic = HeuristicScorer(baseline, rng)
        for _ in range(decisions):
            sim.next_decision()
            state, pod = sim.candidate_state()
            values = heuristic.values(state, pod)
            pick = choose(values, rng)
            kind = RUNNING if state.pods[pick] > 0 else OPENING
            out.decisions[kind] += 1
            own = int(np.argmax(scorer.values(state, pod)))
            departed = values[own] < values.max() - 1e-9
            out.departed[kind] += int(departed)
            opened = departed and kind == RUNNING and state.pods[own] == 0
            out.opened_instead += int(opened)
            out.model_opens += int(state.pods[own] == 0)
            if other is not None and kind == RUNNING:
                second = int(np.argmax(other.values(state, pod)))
                second_departed = values[second] < values.max() - 1e-9
                out.other_departed += int(second_departed)
                out.both_departed += int(departed and second_departed)
                out.same_node += int(departed and second_departed and second == own)
            if opened and window and out.opened_instead % 3 == 0:
                end = sim.decisions + window
                out.priced.append((training_reward(sim, own, policy, None), training_reward(sim, pick, policy, None),
                                   training_reward(sim, own, policy, 1.0), training_reward(sim, pick, policy, 1.0),
                                   branch_cost(sim, own, baseline, policy, seed, end),
                                   branch_cost(sim, pick, baseline, policy, seed, end)))
                if returns:
                    out.returns.append(tuple(training_return(sim, first, policy, returns, rest)
                                             for rest in (greedy(scorer), by_rule(baseline, policy, seed))
                                             for first in (own, pick)))
            sim.place(own if follow_model else pick)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agent.evaluate.departures", description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--baseline", required=True, help="a heuristic of the model's policy, e.g. most-allocated")
    parser.add_argument("--family", required=True)
    parser.add_argument("--nodes", type=int, default=None, help="cluster size (default: the family's evaluation sizes)")
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--decisions", type=int, default=400, help="placements per world")
    parser.add_argument("--holdout", action="store_true", help="the hold-out seeds instead of the evaluation's")
    parser.add_argument("--follow", choices=("baseline", "model"), default="baseline",
                        help="whose placements lead from one decision to the next")
    parser.add_argument("--window", type=int, default=0,
                        help="price every third opening over this many decisions (module docstring; 0: none)")
    parser.add_argument("--returns", type=int, default=0,
                        help="with --window, also price by training's discounted return over this many decisions")
    parser.add_argument("--other", type=Path, default=None,
                        help="a second model asked about the same states: the departures both make")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.decisions < 1 or (args.nodes is not None and args.nodes < 1) or args.window < 0 \
            or args.returns < 0 or (args.returns and not args.window):
        print("departures: --seeds, --decisions and --nodes must be positive, --window and --returns >= 0, "
              "--returns needs --window", file=sys.stderr)
        return 2
    try:
        model = load_model(args.model)
        family(args.family)
        scorer = ModelScorer(model)
        other = None
        if args.other is not None:
            other = ModelScorer(load_model(args.other, expected_policy=model.policy), name=str(args.other))
        HeuristicScorer(args.baseline, np.random.default_rng(0))
    except (ModelValidationError, ValueError) as exc:
        print(f"departures: {exc}", file=sys.stderr)
        return 2
    found = departures(scorer, args.baseline, args.family, args.nodes, args.seeds, args.decisions,
                       HOLDOUT_SEED_BASE if args.holdout else EVAL_SEED_BASE, limits=model.policy == "EL",
                       policy=model.policy, window=args.window, returns=args.returns,
                       follow_model=args.follow == "model", other=other)
    print(f"{args.model} against {args.baseline} on {args.family}"
          + (f" at {args.nodes} nodes" if args.nodes else "") + f", {args.seeds} seeds, on the {args.follow}'s states:")
    print("\n".join(found.lines()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
