"""The weights and strategies tuning chooses from, the same for every method.

NodeResourcesFit: strategy, cpu and memory weight 1..10, plugin weight 1..10; BalancedAllocation:
plugin weight 0..10 (0 = disabled); RequestedToCapacityRatio: a three-point shape (score at 0%, a
knee at 10..90% with its score, score at 100%, scores 0..10). The space is static (every parameter is
drawn even where the strategy ignores it), so Bayesian optimization models all of it.

The RL tuner picks from `CATALOGUE`, a fixed set of configurations spread over the same space: the
classic strategies with cpu- or memory-leaning weights, with and without BalancedAllocation, and
shapes that pack, spread, or pack up to a target and then spread.
"""

from __future__ import annotations

import optuna

from agent.tune.kube_scores import DEFAULT, STRATEGIES, ScoreConfig

WEIGHT_RANGE = (1, 10)
BALANCED_RANGE = (0, 10)


def suggest(trial: optuna.Trial) -> ScoreConfig:
    strategy = trial.suggest_categorical("strategy", STRATEGIES)
    cpu = trial.suggest_int("cpu_weight", *WEIGHT_RANGE)
    memory = trial.suggest_int("memory_weight", *WEIGHT_RANGE)
    fit = trial.suggest_int("fit_weight", *WEIGHT_RANGE)
    balanced = trial.suggest_int("balanced_weight", *BALANCED_RANGE)
    at_0 = trial.suggest_int("shape_score_at_0", 0, 10)
    knee_u = trial.suggest_int("shape_knee_utilization", 10, 90, step=10)
    knee = trial.suggest_int("shape_score_at_knee", 0, 10)
    at_100 = trial.suggest_int("shape_score_at_100", 0, 10)
    shape = ((0, at_0), (knee_u, knee), (100, at_100)) if strategy == "RequestedToCapacityRatio" else ()
    return ScoreConfig(strategy, cpu, memory, shape, fit, balanced)


def _catalogue() -> tuple[ScoreConfig, ...]:
    out: list[ScoreConfig] = []
    resource_weights = ((1, 1), (3, 1), (1, 3))  # (cpu, memory)
    for cpu, memory in resource_weights:
        for fit, balanced in ((1, 0), (3, 1), (1, 3)):  # (fit, balanced)
            out.append(ScoreConfig("LeastAllocated", cpu, memory, (), fit, balanced))
        for fit, balanced in ((1, 0), (1, 1), (3, 1), (1, 3)):
            out.append(ScoreConfig("MostAllocated", cpu, memory, (), fit, balanced))
    shapes = (
        ((0, 0), (50, 5), (100, 10)),   # pack, linear (MostAllocated's shape)
        ((0, 0), (80, 10), (100, 10)),  # pack fast up to 80%, then indifferent
        ((0, 0), (60, 10), (100, 2)),   # pack up to a 60% target, then spread
        ((0, 2), (80, 10), (100, 0)),   # pack up to 80%, then spread hard
        ((0, 10), (50, 8), (100, 0)),   # spread, gently at first
        ((0, 10), (70, 7), (100, 0)),   # spread, hard near full
    )
    for shape in shapes:
        for fit, balanced in ((1, 0), (1, 1)):
            out.append(ScoreConfig("RequestedToCapacityRatio", 1, 1, shape, fit, balanced))
    if DEFAULT in out:
        out.remove(DEFAULT)  # its improvement is known to be 0
    return tuple(out)


CATALOGUE = _catalogue()
