"""`rlscore-eval`: a policy's model against every baseline of its objective, on held-out seeds of
each scenario family; tables, plots and the goal checks under eval/<policy>/."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from agent.evaluate.compare import (EVAL_SEED_BASE, EVAL_WORKERS, HOLDOUT_SEED_BASE, baselines_for, best_baseline,
                                    evaluate, summarize, values_by_seed)
from agent.evaluate.goals import check_goals, paired_ratio
from agent.evaluate.ensemble import load_ensemble
from agent.evaluate.report import markdown_table, write_outputs
from agent.parallel import add_ray_argument, use_ray
from rlscore.core.model import ModelValidationError, load_model
from rlscore.core.scoring import ModelScorer
from agent.sim.families import FAMILIES, evaluation_families_for, family
from rlscore.core.state import POLICIES


def node_count_list(text: str) -> tuple[int, ...]:
    """argparse type of --nodes: comma-separated node counts, each >= 1."""
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"node counts must be >= 1, got {text!r}")
    return values


def family_list(text: str) -> tuple[str, ...]:
    """argparse type of --families: comma-separated scenario families, or all."""
    if text == "all":
        return tuple(FAMILIES)
    values = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [v for v in values if v not in FAMILIES]
    if bad or not values:
        raise argparse.ArgumentTypeError(f"unknown family {bad or text!r}: expected {', '.join(FAMILIES)} or all")
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rlscore-eval", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--policy", required=True, type=str.upper, choices=POLICIES)
    parser.add_argument("--families", type=family_list, default=None,
                        help=f"comma-separated, from {', '.join(FAMILIES)}, or 'all' (default: the policy's)")
    parser.add_argument("--profile", type=Path, default=None,
                        help="evaluate on this cluster profile (rlscore-calibrate) instead of the families")
    parser.add_argument("--nodes", type=node_count_list, default=None,
                        help="node counts (default: 3,10,100 for the thesis patterns, drawn per seed otherwise)")
    parser.add_argument("--model", type=Path, action="append", default=None,
                        help="model file, repeatable (default models/<policy>.safetensors)")
    parser.add_argument("--no-model", action="store_true", help="baselines only")
    parser.add_argument("--rules", default=None, metavar="RULE,RULE[,...]",
                        help="run only these of the policy's rules beside the models (default: all of them); the "
                             "goals compare with every rule, so they are checked only when all are named")
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--holdout", action="store_true",
                        help="the hold-out seeds (never used to choose anything) instead of the evaluation seeds")
    parser.add_argument("--arrivals", type=int, default=300, help="pod arrivals per run")
    parser.add_argument("--workers", type=int, default=EVAL_WORKERS,
                        help="processes to run the worlds on (the results do not depend on it)")
    parser.add_argument("--out", type=Path, default=None, help="output directory (default eval/<policy>)")
    add_ray_argument(parser)
    parser.add_argument("--compare", type=scorer_pair, action="append", default=[], metavar="A:B",
                        help="also print scorer A's figures over scorer B's per cell, paired by seed (repeatable; "
                             "a rule's name or a model's, as the table shows it)")
    parser.add_argument("--ensemble", action="append", default=[], metavar="FILE,FILE[,...]",
                        help="also score with the mean of these models' values, each standardized per decision, "
                             "as one scorer rl-ensemble-<k> (repeatable; agent/evaluate/ensemble.py)")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    use_ray(args.ray_address)
    torch.set_num_threads(1)  # one small forward pass per decision: threads only add overhead
    policy = args.policy
    if args.seeds < 1 or args.arrivals < 1 or args.workers < 1:
        parser.error("--seeds, --arrivals and --workers must be >= 1")
    families = args.families or evaluation_families_for(policy)
    if args.profile is not None:
        if args.families or args.nodes:
            parser.error("--profile fixes the cluster: it excludes --families and --nodes")
        from rlscore.core.profile import ProfileError, load_profile
        from agent.sim.cluster_profile import register_profile
        try:
            families = (register_profile(load_profile(args.profile)),)
        except ProfileError as exc:
            print(f"rlscore-eval: {exc}", file=sys.stderr)
            return 2

    scorers = []
    if not args.no_model:
        paths = args.model or [Path("models") / f"{policy.lower()}.safetensors"]
        for path in paths:
            # one model is rl-<policy>; several are told apart by their directory and file name
            name = f"rl-{policy.lower()}" if len(paths) == 1 else f"rl-{path.parent.name}/{path.stem}"
            try:
                scorers.append(ModelScorer(load_model(path, expected_policy=policy), name=name))
            except ModelValidationError as exc:
                print(f"rlscore-eval: {exc}", file=sys.stderr)
                return 2
    for k, files in enumerate(args.ensemble, start=1):
        try:
            scorers.append(load_ensemble(files, policy, f"rl-ensemble-{k}"))
        except (ModelValidationError, ValueError) as exc:
            print(f"rlscore-eval: --ensemble {files}: {exc}", file=sys.stderr)
            return 2
    rules = baselines_for(policy)
    if args.rules is not None:
        asked = tuple(dict.fromkeys(r.strip() for r in args.rules.split(",") if r.strip()))
        unknown = [r for r in asked if r not in rules]
        if unknown or not asked:
            parser.error(f"--rules: {', '.join(unknown) if unknown else 'no rule named'}: expected rules of "
                         f"{policy} from {', '.join(rules)}")
        rules = asked
    known = set(rules) | {s.name for s in scorers}
    unknown = sorted({name for pair in args.compare for name in pair} - known)
    if unknown:
        parser.error(f"--compare: no scorer {', '.join(unknown)} in this evaluation: expected one of "
                     f"{', '.join(sorted(known))}")
    first = families[0]
    trace_key = (first, (args.nodes or family(first).eval_nodes or (None,))[0])
    results, traces = evaluate(policy, scorers, families, args.seeds, args.arrivals, baselines=rules,
                               node_counts=args.nodes, progress=not args.no_progress, traces_for=trace_key,
                               workers=args.workers, seed_base=HOLDOUT_SEED_BASE if args.holdout else EVAL_SEED_BASE)
    rows = summarize(results)
    every_rule = set(rules) == set(baselines_for(policy))
    checks = check_goals(policy, rows, results) if len(scorers) == 1 and every_rule else []
    out = args.out or Path("eval") / policy.lower()
    write_outputs(out, policy, results, rows, checks, traces, f"{policy}: {', '.join(families)}")
    print(markdown_table(policy, rows))
    for c in checks:
        print(f"{'PASS' if c.ok else 'FAIL'} {c.family} @ {c.nodes}: {c.described()}")
    for line in paired_lines([s.name for s in scorers], rows, results):
        print(line)
    for line in compare_lines(policy, args.compare, rows, results):
        print(line)
    print(f"wrote {out}/summary.md, summary.csv, runs.csv and plots")
    return 0


def scorer_pair(text: str) -> tuple[str, str]:
    """argparse type of --compare: A:B, two scorer names."""
    a, sep, b = text.partition(":")
    if not sep or not a.strip() or not b.strip():
        raise argparse.ArgumentTypeError(f"expected two scorer names as A:B, got {text!r}")
    return a.strip(), b.strip()


# Besides the objective, what each policy's goals read (--compare prints both)
GOAL_METRIC = {"EE": "unschedulable", "LB": "hot_node_share", "EL": "hard_violations"}


def compare_lines(policy: str, pairs: list[tuple[str, str]], rows: list[dict], results: list) -> list[str]:
    """Per cell and pair: A's objective and goal metric over B's, paired by seed (95% bootstrap interval)."""
    out = []
    cells = list(dict.fromkeys((r["family"], r["nodes"]) for r in rows))
    for metric in ("objective", GOAL_METRIC[policy]):
        values = values_by_seed(results, metric)
        for family_name, nodes in cells:
            for a, b in pairs:
                paired = paired_ratio(values[(family_name, nodes, a)], values[(family_name, nodes, b)])
                figure = paired_text(paired) if paired else f"no ratio ({b}'s total is 0)"
                out.append(f"compare {family_name} @ {nodes}: {metric} of {a} / {b}: {figure}")
    return out


def paired_text(paired: dict, other: str | None = None) -> str:
    """x<ratio> [of <other>] (<95% interval>, <reading>)."""
    of = f" of {other}" if other else ""
    return f"x{paired['ratio']}{of} ({paired['ci95'][0]}-{paired['ci95'][1]}, {paired['reading']})"


def paired_lines(models: list[str], rows: list[dict], results: list) -> list[str]:
    """With several models: per cell, each model's objective over the best rule's and over the first
    model's, paired by seed (95% bootstrap interval)."""
    if len(models) < 2:
        return []
    objectives = values_by_seed(results, "objective")
    out = []
    for family_name, nodes in dict.fromkeys((r["family"], r["nodes"]) for r in rows):
        best = best_baseline(rows, family_name, nodes, exclude=models[0])["scorer"]
        for model in models:
            mine = objectives[(family_name, nodes, model)]
            parts = []
            for other in ([best] + ([models[0]] if model != models[0] else [])):
                paired = paired_ratio(mine, objectives[(family_name, nodes, other)])
                if paired:
                    parts.append(paired_text(paired, other))
            out.append(f"paired {family_name} @ {nodes}: {model}: " + "; ".join(parts))
    return out


if __name__ == "__main__":
    sys.exit(main())
