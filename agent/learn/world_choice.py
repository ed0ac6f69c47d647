"""How much choosing each world's rule can win: the best rule of each evaluated run in hindsight,
against the rule a scheduler would choose for that world without seeing the run.

The hindsight choice sees the evaluated stream; the teachers' choice (agent.learn.teachers.world_teacher,
as training picks per-world teachers) sees only the world's machines and pod kinds, through runs on
other streams of it. Where they differ, the gap between "the best rule of each world" and the best
single rule is the stream's luck, which no scorer can learn. Reads the runs of an `rlscore-eval`:

    rlscore-eval --policy EL --families mixed --seeds 32 --model build/el-twin.safetensors --out eval/EL
    python -m agent.learn.world_choice --policy EL --runs eval/EL/runs.csv --futures 8

Each ratio is given twice: the geometric mean of the per-run ratios (every world weighs the same,
however small its objective) and the ratio of the sums with its paired 95% interval, the reading
rlscore-eval's goals use (worlds weigh by their objective; a choice "beats the rule beyond noise"
when the interval lies below 1).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from pathlib import Path

from agent.evaluate.compare import EVAL_WORKERS, simulation_of_run
from agent.evaluate.goals import paired_ratio
from agent.evaluate.report import read_runs
from agent.learn.dqn import DQNConfig
from agent.learn.teachers import mixed_world_teacher
from agent.parallel import worker_pool
from agent.sim.mixed import LEADING_RULES

DECISIONS = DQNConfig.demo_decisions  # placements per teacher run, as training's default


def measure(policy: str, runs: dict, futures: int, reference: str, workers: int = EVAL_WORKERS,
            steady: bool = False) -> dict:
    """The hindsight best rule, the teachers' choice and every model, each as a ratio to `reference`,
    the models also to the teachers' choice: geometric means of the per-run ratios ("ratios") and
    ratios of sums paired by run ("paired", agent.evaluate.goals.paired_ratio); and how often the two
    choices agree. `steady`: the teachers' runs are measured after one fill, as evaluation's are,
    not from an empty cluster as training picks them."""
    rules = list(LEADING_RULES[policy])
    missing = sorted({r for v in runs.values() for r in (*rules, reference) if r not in v})
    if missing:
        raise ValueError(f"the runs lack {', '.join(missing)}: evaluate with every baseline of {policy}")
    models = sorted({s for v in runs.values() for s in v if s.startswith("rl-")})
    values: dict[str, dict[tuple, float]] = defaultdict(dict)  # scorer -> run -> objective
    agree = 0
    with worker_pool(workers) as pool:
        for run, v in sorted(runs.items()):
            seed, family_name, nodes = run
            world = simulation_of_run(family_name, seed, nodes, policy).world
            chosen = mixed_world_teacher(policy, world, seed, DECISIONS, futures, pool=pool, steady=steady)
            hindsight = min(rules, key=v.__getitem__)
            agree += chosen == hindsight
            for name, scorer in ((reference, reference), ("hindsight best rule", hindsight),
                                 ("teachers' choice", chosen), *((m, m) for m in models)):
                values[name][run] = v[scorer]
    comparisons = [("hindsight best rule", reference), ("teachers' choice", reference)]
    for m in models:
        comparisons += [(m, reference), (m, "teachers' choice")]
    ratios, paired = {}, {}
    for name, base in comparisons:
        label = name if base == reference else f"{name} / {base}"
        logs = [math.log(values[name][run] / values[base][run]) for run in values[base]]
        ratios[label] = math.exp(sum(logs) / len(logs))
        paired[label] = paired_ratio(values[name], values[base])
    return {"runs": len(runs), "agree": agree / len(runs), "ratios": ratios, "paired": paired}

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agent.learn.world_choice", description=__doc__.splitlines()[0])
    parser.add_argument("--policy", required=True, choices=sorted(LEADING_RULES))
    parser.add_argument("--runs", type=Path, required=True, help="runs.csv of an rlscore-eval with every baseline")
    parser.add_argument("--futures", type=int, default=2, help="streams of each world the teachers' choice is made on")
    parser.add_argument("--reference", default=None, help="the rule every ratio is to (default: the policy's first "
                                                          "leading rule)")
    parser.add_argument("--steady", action="store_true", help="measure the teachers' runs after one fill, as "
                                                                "evaluation does (training: from an empty cluster)")
    parser.add_argument("--workers", type=int, default=EVAL_WORKERS, help="processes to run the worlds on")
    args = parser.parse_args(argv)
    if args.futures < 1 or args.workers < 1:
        parser.error("--futures and --workers must be >= 1")
    reference = args.reference or LEADING_RULES[args.policy][0]
    try:
        runs = read_runs(args.runs)
        if not runs:
            parser.error(f"{args.runs}: no runs")
        result = measure(args.policy, runs, args.futures, reference, args.workers, args.steady)
    except (OSError, ValueError) as e:
        print(f"world_choice: {e}", file=sys.stderr)
        return 2
    print(f"{args.policy}, {result['runs']} runs, teachers' choice on {args.futures} other streams of each world"
          f"{' after one fill' if args.steady else ''}; ratios to {reference}")
    print(f"  {'':<48} {'geometric mean':<16} ratio of sums (95%, paired by run)")
    for name, ratio in result["ratios"].items():
        p = result["paired"][name]
        summed = f"x{p['ratio']:.3f} ({p['ci95'][0]:.3f}-{p['ci95'][1]:.3f}, {p['reading']})" if p else "-"
        print(f"  {name:<48} {f'x{ratio:.3f}':<16} {summed}")
    print(f"  the teachers' choice is the hindsight best on {result['agree']:.0%} of the runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
