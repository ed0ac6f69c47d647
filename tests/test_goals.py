"""The goal checks' comparison paired by seed: which misses are the model behind, which a tie the
seeds cannot tell apart."""

from dataclasses import fields

import pytest

from agent.evaluate.compare import METRICS, RunResult, summarize
from agent.evaluate.goals import check_goals, describe_paired, missed_beyond_noise, paired_ratio

OBJECTIVE_GOAL = "objective <= best baseline x 1.02"


def runs(scorer: str, objectives: list[float], family: str = "two-d") -> list[RunResult]:
    """One run per seed on a family of drawn sizes (its rows say nodes "random")."""
    out = []
    for seed, objective in enumerate(objectives):
        values = {f.name: 0.0 for f in fields(RunResult) if f.name in METRICS}
        values.update(objective=objective, mean_active_nodes=1.0, mean_power_watts=100.0)
        out.append(RunResult(scorer=scorer, family=family, nodes=4 + seed, seed=seed, arrivals=300, **values))
    return out


BASE = [1.0, 1.2, 0.8, 1.1, 0.9, 1.0, 1.3, 0.7]


@pytest.mark.parametrize("name, model, ok, reading, behind", [
    ("behind on every seed", [b * 1.1 for b in BASE], False, "behind", 8),
    ("a tie: ahead on some seeds, behind on others", [b * f for b, f in zip(BASE, (1.3, 0.8, 1.25, 0.85, 1.2, 0.9, 1.15, 0.9))],
     False, "tie", 4),
    ("ahead on every seed", [b * 0.9 for b in BASE], True, "ahead", 0),
    ("the same as the baseline", BASE, True, "tie", 0),
])
def test_objective_goal_is_paired_by_seed(name, model, ok, reading, behind):
    results = runs("rl-ee", model) + runs("most-allocated", BASE) + runs("tetris", [b * 2 for b in BASE])
    rows = summarize(results)
    goal = next(c for c in check_goals("EE", rows, results) if c.goal == OBJECTIVE_GOAL)
    assert goal.ok is ok, name
    assert "most-allocated" in goal.detail  # the best baseline, not the other one
    paired = goal.paired
    assert paired["reading"] == reading and paired["seeds_behind"] == behind and paired["seeds"] == 8, (name, paired)
    # the ratio is the goal's own (row means), inside its interval
    assert paired["ratio"] == pytest.approx(sum(model) / sum(BASE), abs=1e-4)
    assert paired["ci95"][0] <= paired["ratio"] <= paired["ci95"][1]
    assert f"behind on {behind}: {reading}" in describe_paired(paired)
    assert goal.described() == f"{OBJECTIVE_GOAL} ({goal.detail}; {describe_paired(paired)})"
    assert missed_beyond_noise([goal]) == (reading == "behind")


def test_without_runs_or_a_zero_baseline_nothing_is_paired():
    results = runs("rl-ee", [1.0, 1.0]) + runs("most-allocated", [1.0, 1.0])
    assert all(c.paired is None for c in check_goals("EE", summarize(results)))
    assert paired_ratio({0: 1.0, 1: 2.0}, {0: 0.0, 1: 0.0}) is None
    assert paired_ratio({0: 1.0}, {1: 1.0}) is None  # no seed in common
    assert describe_paired(None) == ""


def test_the_interval_is_reproducible_and_narrows_with_seeds():
    model, base = {s: 1.0 + 0.1 * (s % 3) for s in range(32)}, {s: 1.05 for s in range(32)}
    few = paired_ratio({s: model[s] for s in range(6)}, {s: base[s] for s in range(6)})
    many = paired_ratio(model, base)
    assert paired_ratio(model, base) == many
    assert many["ci95"][1] - many["ci95"][0] < few["ci95"][1] - few["ci95"][0]
