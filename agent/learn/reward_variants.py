"""How the reward variants compare: PPO from scratch (no teacher) with each variant, on the family
of each policy where the consequence of a placement comes later, evaluated on held-out seeds against
the policy's baselines. The table in docs/rewards.md comes from

    .venv/bin/python -m agent.learn.reward_variants --timesteps 20000 --seeds 3
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

from agent.evaluate.compare import best_baseline, evaluate, summarize
from rlscore.core.model import load_model
from agent.learn.rewards import REWARD_VARIANTS
from agent.learn.train import config_for, run, save_trained
from rlscore.core.scoring import ModelScorer

# family per policy, and the measure that family is about
CASES = {"EE": ("hardware", "mean_power_watts"), "LB": ("usage-skew", "hot_node_share"),
         "EL": ("scarce-near", "hard_violation_rate")}


def compare(policy: str, timesteps: int, seeds: int, seed: int = 1) -> list[dict]:
    family, measure = CASES[policy]
    scorers, seconds = [], {}
    with tempfile.TemporaryDirectory() as out:
        for variant in REWARD_VARIANTS:
            cfg = config_for("ppo", policy=policy, total_timesteps=timesteps, seed=seed, reward=variant,
                             families=(family,), kickstart=0.0, log_dir="", progress=False, out=out)
            start = time.time()
            network, record = run(cfg, "ppo")
            seconds[variant] = time.time() - start
            path = save_trained(cfg, network, record, tempfile.mktemp(suffix=".safetensors", dir=out))
            scorers.append(ModelScorer(load_model(path), name=f"rl-{variant}"))
            print(f"{policy} {variant}: trained in {seconds[variant]:.0f} s", file=sys.stderr)
        results, _ = evaluate(policy, scorers, (family,), seeds=seeds, progress=False)
    rows = summarize(results)
    best = best_baseline(rows, family, "random", exclude="")
    out_rows = []
    for r in sorted(rows, key=lambda r: r["objective"]):
        out_rows.append({"policy": policy, "family": family, "scorer": r["scorer"], "objective": r["objective"],
                         "measure": measure, "value": r[measure], "vs_best_baseline": r["objective"] / best["objective"],
                         "best_baseline": best["scorer"]})
    return out_rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agent.learn.reward_variants", description=__doc__.splitlines()[0])
    parser.add_argument("--policies", default="EE,LB,EL")
    parser.add_argument("--timesteps", type=int, default=20_000)
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args(argv)
    print("| policy | family | scorer | objective | x best baseline | measure |\n|---|---|---|---|---|---|")
    for policy in args.policies.split(","):
        for r in compare(policy.strip().upper(), args.timesteps, args.seeds):
            print(f"| {r['policy']} | {r['family']} | {r['scorer']} | {r['objective']:.4g} | "
                  f"{r['vs_best_baseline']:.2f} | {r['measure']} {r['value']:.4g} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
