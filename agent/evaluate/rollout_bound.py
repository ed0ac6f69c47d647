"""How much room the rules leave: one step of policy improvement by rollouts, on evaluation worlds.

A learned scorer can beat the best rule only where some other placement than the rule's leads to a
lower cost. This measures that room directly. At each measured decision the simulation is branched
(the exogenous event stream is shared, so every branch meets the same future: common random numbers),
each candidate rule's choice is placed in its own branch, the base rule places the next `horizon`
pods, and the cheapest branch's placement is taken (rollout, Bertsekas' one-step lookahead). The
rollout policy knows the future arrivals of its world: what it gains is an upper bound on what a
scorer could gain over the base rule by departing from it among these rules' choices, not a
policy to ship. With `--futures K` it compares the branches on K futures drawn afresh at each
decision instead (agent.sim.futures.redraw_future) and knows only what a scheduler could: what it
gains there is room a scorer can learn from the state. With `--base RULE` the rollout improves on
that rule (a trainer's teacher, say) instead of each world's best.

It also says how faint the signal is that TD learning must find. Per decision it records the paired
gain of the best branch over the base rule's branch, in units of the spread of the per-decision
reward (what the demonstrations' reward scale normalizes to one): a gain of 0.01 such units needs
of the order of 1/0.01^2 unpaired samples of the same situation for a TD target to tell it apart.

    python -m agent.evaluate.rollout_bound --policy LB --worlds 6
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np

from agent.evaluate.compare import EVAL_SEED_BASE, HOLDOUT_SEED_BASE
from agent.parallel import worker_pool
from agent.sim.futures import branchable, redraw_future
from agent.sim.mixed import LEADING_RULES, MIXED
from agent.sim.outcomes import cost
from agent.sim.simulator import Simulation
from rlscore.core.rules import RULES
from rlscore.core.scoring import choose
from rlscore.core.state import normalize_policy

# the rules whose choices a branch tries: those that lead some mixed worlds, and for LB the rule its
# hot-node goal is stated against
CANDIDATES = {**LEADING_RULES, "LB": (*LEADING_RULES["LB"], "least-utilized")}


def rule_choice(rule: str, sim: Simulation, policy: str, rng: np.random.Generator) -> int:
    state, pod = sim.candidate_state(policy)
    return choose(RULES[rule](state, pod, rng), rng)


def base_choice(rule: str, sim: Simulation, policy: str, seed: int) -> int:
    """The base rule's choice, its ties broken by the decision's index: the same in every branch."""
    return rule_choice(rule, sim, policy, np.random.default_rng([seed, sim.decisions]))


def finish(sim: Simulation, base: str, policy: str, seed: int, end: int) -> Simulation:
    """Let `base` place pods until `end` decisions have been made; stop at the next pod."""
    while sim.decisions < end:
        sim.place(base_choice(base, sim, policy, seed))
        sim.next_decision()
    return sim


def filled(family_name: str, seed: int, policy: str, rule: str) -> Simulation:
    """A world of the family after one fill placed by `rule` (the steady state evaluation measures),
    stopped at its next pod."""
    sim = branchable(Simulation.of_family(family_name, seed, limits=policy == "EL"))
    sim.next_decision()
    return finish(sim, rule, policy, seed, int(np.ceil(sim.world.pods_alive)))


def rule_costs(sim: Simulation, rule: str, policy: str, seed: int, count: int) -> np.ndarray:
    """The cost of each of the next `count` decisions with `rule` placing every pod."""
    costs = []
    for _ in range(count):
        before = sim.ledger.copy()
        finish(sim, rule, policy, seed, sim.decisions + 1)
        costs.append(cost(policy, sim.ledger.minus(before), sim.units))
    return np.array(costs)


def rule_costs_and_spread(family_name: str, seed: int, policy: str, rules, count: int) -> tuple[dict, float]:
    """Each rule's per-decision costs over `count` decisions after its own fill, and the unit the gains
    here are measured in: the mean of the rules' standard deviations of that cost."""
    costs = {rule: rule_costs(filled(family_name, seed, policy, rule), rule, policy, seed, count) for rule in rules}
    return costs, max(float(np.mean([c.std() for c in costs.values()])), 1e-12)


def branch_cost(sim: Simulation, first: int, base: str, policy: str, seed: int, end: int) -> float:
    """Cost, to the end of the window, of placing the current pod on candidate `first`, then the
    rest by `base`."""
    branch = copy.deepcopy(sim)
    start = branch.ledger.copy()
    branch.place(first)
    branch.next_decision()
    finish(branch, base, policy, seed, end)
    return cost(policy, branch.ledger.minus(start), branch.units)


def option_costs(sim: Simulation, options: set[int], base: str, policy: str, seed: int, end: int, futures: int,
                 rng: np.random.Generator) -> dict[int, np.ndarray]:
    """Each candidate's costs to the end of the window (branch_cost): on the world's own future
    (`futures` 0: one cost), or on each of `futures` futures drawn afresh from this moment, every
    candidate meeting the same ones (agent.sim.futures.redraw_future)."""
    if futures == 0:
        return {c: np.array([branch_cost(sim, c, base, policy, seed, end)]) for c in options}
    costs = {c: np.zeros(futures) for c in options}
    for k in range(futures):
        future = redraw_future(copy.deepcopy(sim), rng)
        for c in options:
            costs[c][k] = branch_cost(future, c, base, policy, seed, end)
    return costs


def confident_pick(costs: dict[int, np.ndarray], own: int, z: float) -> int:
    """The cheapest candidate on average, if its paired gain over `own` is more than `z` standard
    errors (over the futures) above zero; `own` otherwise (z 0 takes the cheapest on average)."""
    means = {c: float(v.mean()) for c, v in costs.items()}
    pick = min(means, key=lambda c: (means[c], c != own))
    gain = costs[own] - costs[pick]
    if pick == own or z <= 0:
        return pick
    error = float(gain.std(ddof=1)) / np.sqrt(len(gain)) if len(gain) > 1 else float("inf")
    return pick if gain.mean() > z * error else own


@dataclass
class WorldBound:
    seed: int
    nodes: int
    rule_objectives: dict
    base_rule: str
    rollout_objective: float
    ratio: float
    departures: float  # share of measured decisions where the rollout left the base rule's choice
    mean_gain: float  # mean paired gain per decision, in units of the per-decision cost's spread
    seconds: float


def run_world(job: tuple) -> WorldBound:
    """Every candidate rule on one world, then the rollout of the best of them, over the same window:
    `decisions` decided by the rollout, then `tail` more by the base rule (the window's placements
    keep costing after it). Every branch runs to the window's end, and the base rule breaks ties by
    the decision's index, so on the world's own future (`futures` 0) the rollout is never worse than
    its base (a deterministic world with one known future): what it gains is the room there is. On
    futures drawn afresh it can be worse: it does not know the one that comes. `base` names the rule to
    improve on instead of the world's best (a trainer's teacher, say); "" takes the best."""
    policy, seed, decisions, tail, family_name, futures, z, base = job
    started = time.time()
    rules = CANDIDATES[policy] + ((base,) if base and base not in CANDIDATES[policy] else ())

    costs, spread = rule_costs_and_spread(family_name, seed, policy, rules, decisions + tail)
    objectives = {rule: float(c.mean()) for rule, c in costs.items()}
    base = base or min(objectives, key=objectives.get)

    sim = filled(family_name, seed, policy, base)
    end = sim.decisions + decisions + tail
    start, departed, gains = sim.ledger.copy(), 0, []
    for k in range(decisions):
        options = {rule_choice(rule, sim, policy, np.random.default_rng([seed, k, i])) for i, rule in enumerate(rules)}
        own = base_choice(base, sim, policy, seed)
        values = option_costs(sim, options | {own}, base, policy, seed, end, futures,
                              np.random.default_rng([seed, k, 2**31]))
        pick = confident_pick(values, own, z)
        departed += pick != own
        gains.append(float(values[own].mean() - values[pick].mean()) / spread)
        sim.place(pick)
        sim.next_decision()
    finish(sim, base, policy, seed, end)
    rollout = cost(policy, sim.ledger.minus(start), sim.units) / (decisions + tail)
    return WorldBound(seed=seed, nodes=len(sim.cluster), rule_objectives={k: round(v, 6) for k, v in objectives.items()},
                      base_rule=base, rollout_objective=round(rollout, 6),
                      ratio=round(rollout / max(objectives[base], 1e-12), 4), departures=round(departed / decisions, 3),
                      mean_gain=round(float(np.mean(gains)), 4), seconds=round(time.time() - started, 1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", required=True, type=normalize_policy)
    parser.add_argument("--family", default=MIXED, help="scenario family of the worlds (default: mixed)")
    parser.add_argument("--worlds", type=int, default=6)
    parser.add_argument("--decisions", type=int, default=60, help="measured decisions per world")
    parser.add_argument("--tail", type=int, default=100, help="decisions by the base rule after the measured ones, counted in the window")
    parser.add_argument("--holdout", action="store_true", help="hold-out seeds instead of evaluation seeds")
    parser.add_argument("--futures", type=int, default=0,
                        help="compare the candidates on this many futures drawn afresh at each decision, not on the "
                             "world's own (0): the room a scheduler that cannot see the future has")
    parser.add_argument("--confidence", type=float, default=0.0, metavar="Z",
                        help="with --futures: depart from the base rule only where the mean paired gain over the "
                             "futures is more than Z standard errors above zero (0: wherever it is positive)")
    parser.add_argument("--base", default="", choices=["", *sorted(RULES)], metavar="RULE",
                        help="improve on this rule instead of each world's best one (default: the best)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", default="", help="also write the per-world records here")
    args = parser.parse_args(argv)
    for name in ("worlds", "decisions", "tail", "workers"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1")
    if args.futures < 0:
        parser.error("--futures must be >= 0")
    if args.confidence < 0 or (args.confidence > 0 and args.futures < 2):
        parser.error("--confidence must be >= 0, and needs --futures >= 2")
    base = HOLDOUT_SEED_BASE if args.holdout else EVAL_SEED_BASE
    jobs = [(args.policy, base + k, args.decisions, args.tail, args.family, args.futures, args.confidence, args.base)
            for k in range(args.worlds)]
    with worker_pool(args.workers) as pool:
        results = list(pool.map(run_world, jobs))
    for r in results:
        print(f"seed {r.seed - base:3d} nodes {r.nodes:3d} base {r.base_rule:30s} {r.rule_objectives[r.base_rule]:.5f} "
              f"rollout {r.rollout_objective:.5f} x{r.ratio:.3f} departs {r.departures:.2f} "
              f"gain {r.mean_gain:.4f} ({r.seconds:.0f} s)")
    ratios = np.array([r.ratio for r in results])
    print(f"{args.policy} on {args.family}: rollout / {args.base or 'best rule'} x{ratios.mean():.3f} (geometric "
          f"x{np.exp(np.log(ratios).mean()):.3f}, min {ratios.min():.3f}, max {ratios.max():.3f}); departs from "
          f"{args.base or 'the best rule'} on {np.mean([r.departures for r in results]):.0%} of decisions; mean paired gain "
          f"{np.mean([r.mean_gain for r in results]):.4f} spreads of the per-decision cost")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(r) for r in results], f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
