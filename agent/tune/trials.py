"""One tuning problem: a cluster (a World), the policy whose objective counts, and the simulated
trial that measures a score configuration on it.

A trial replays the cluster's workload with the configuration placing every pod, as the simulator's
evaluation does (burn-in, then a fixed number of arrivals), and returns the policy's objective per
arrival (lower is better). Every method sees the same seeded replay, so their trials are comparable;
results are cached per (configuration, seed), since samplers may propose a configuration twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from agent.evaluate.compare import measure
from agent.sim.simulator import Simulation
from agent.sim.world import World
from agent.tune.kube_scores import DEFAULT, KubeScorer, ScoreConfig

TRIAL_ARRIVALS = 200


@dataclass
class TuningTask:
    world: World
    policy: str
    seed: int  # the replay every trial uses
    arrivals: int = TRIAL_ARRIVALS
    name: str = "cluster"
    _cache: dict = field(default_factory=dict, repr=False)
    simulated: int = 0  # replays actually run (cache misses)

    def objective(self, config: ScoreConfig, seed: int | None = None) -> float:
        """The policy's objective per arrival with `config` placing the pods (lower is better)."""
        seed = self.seed if seed is None else seed
        key = (config, seed)
        if key not in self._cache:
            result, _ = measure(KubeScorer(config), Simulation(self.world, seed), seed, self.policy, self.arrivals)
            self._cache[key] = result.objective
            self.simulated += 1
        return self._cache[key]

    @property
    def default_objective(self) -> float:
        return self.objective(DEFAULT)

    def improvement(self, config: ScoreConfig, seed: int | None = None) -> float:
        """Relative improvement over kube-scheduler's default weights on the same replay
        (0.2 = 20% lower objective); 0 when the default already scores 0."""
        default = self.objective(DEFAULT, seed)
        if default <= 1e-12:
            return 0.0
        return (default - self.objective(config, seed)) / default


@dataclass
class TrialLog:
    """What one tuning method tried, in order."""

    method: str
    configs: list[ScoreConfig] = field(default_factory=list)
    improvements: list[float] = field(default_factory=list)

    def add(self, config: ScoreConfig, improvement: float) -> None:
        self.configs.append(config)
        self.improvements.append(float(improvement))

    @property
    def best(self) -> tuple[ScoreConfig, float]:
        """The best configuration tried, or the default when none improved on it (an operator keeps
        the default weights then)."""
        if not self.improvements or max(self.improvements) <= 0:
            return DEFAULT, 0.0
        i = int(np.argmax(self.improvements))
        return self.configs[i], self.improvements[i]
