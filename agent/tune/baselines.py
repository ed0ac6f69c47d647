"""The tuners the RL tuner is measured against, all from optuna with the same trial budget and seeds:
random search, Bayesian optimization (a Gaussian process) and TPE. Each minimizes the policy's
objective over `search_space.suggest`.

At five trials the samplers' default warm-up (10 random trials) would leave TPE and the GP as pure
random search; they start modelling after `STARTUP_TRIALS` so that they get to act within the budget.
"""

from __future__ import annotations

import logging

import optuna

from agent.tune.search_space import suggest
from agent.tune.trials import TrialLog, TuningTask

STARTUP_TRIALS = 2
METHODS = ("random", "bo", "tpe")


def sampler(method: str, seed: int) -> optuna.samplers.BaseSampler:
    if method == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if method == "tpe":
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=STARTUP_TRIALS, multivariate=True)
    if method == "bo":
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=STARTUP_TRIALS)
    raise ValueError(f"unknown tuning method {method!r}: expected one of {', '.join(METHODS)}")


def tune(task: TuningTask, method: str, trials: int, seed: int) -> TrialLog:
    """`trials` trials of an optuna sampler on `task`."""
    optuna.logging.set_verbosity(logging.WARNING)
    study = optuna.create_study(direction="minimize", sampler=sampler(method, seed))
    log = TrialLog(method)

    def objective(trial: optuna.Trial) -> float:
        config = suggest(trial)
        value = task.objective(config)
        log.add(config, task.improvement(config))
        return value

    study.optimize(objective, n_trials=trials)
    return log
