"""The evaluation every shipped model records in its sidecar: all families of its policy, held-out
seeds, every baseline of the policy, and the goals."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from agent.evaluate.compare import EVAL_SEED_BASE, evaluate, summarize
from agent.evaluate.goals import check_goals
from agent.evaluate.report import markdown_table
from agent.learn.model_io import load_model, sha256_of, sidecar_path
from agent.scoring import ModelScorer
from agent.sim.families import families_for

SEEDS = 4
ARRIVALS = 300


def shipped_evaluation(policy: str, scorers: list, seeds: int = SEEDS, arrivals: int = ARRIVALS,
                       progress: bool = True) -> tuple[list[dict], list]:
    """Summary rows and goal checks of the standard evaluation."""
    results, _ = evaluate(policy, scorers, families_for(policy), seeds, arrivals, progress=progress)
    rows = summarize(results)
    return rows, check_goals(policy, rows)


def evaluate_shipped_model(path: Path, seeds: int = SEEDS, arrivals: int = ARRIVALS, progress: bool = True) -> list:
    """Evaluate a freshly trained model and record the table and goals in its sidecar."""
    model = load_model(path)
    policy = model.policy
    rows, checks = shipped_evaluation(policy, [ModelScorer(model)], seeds, arrivals, progress)
    side = sidecar_path(path)
    meta = json.loads(side.read_text())
    meta["evaluation"] = {
        "command": f"rlscore-eval --policy {policy} --model {path} --seeds {seeds} --arrivals {arrivals}",
        "seed_base": EVAL_SEED_BASE,
        "families": list(families_for(policy)),
        "table": markdown_table(policy, rows).splitlines(),
        "goals": [asdict(c) for c in checks],
        "all_goals_met": all(c.ok for c in checks),
    }
    if meta["sha256"] != sha256_of(path):
        raise RuntimeError(f"{path} changed while it was being evaluated")
    side.write_text(json.dumps(meta, indent=2) + "\n")
    return checks
