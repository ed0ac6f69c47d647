"""One tuning problem: a cluster (a World), the policy whose objective counts, and the simulated
trial that measures a score configuration on it.

A trial replays the cluster's workload with the configuration placing every pod, as the simulator's
evaluation does (burn-in, then a fixed number of arrivals), and returns the policy's objective per
arrival (lower is better), averaged over seeded replays: on one replay the random tie-breaks and the
arrival order move hot-node time and latency violations by more than any weight change does (a
configuration that gained 38% on one replay lost 34% on three fresh ones). EL needs the most: stock
plugins cannot see latency, so whether the first strict pods happen to land on a near node decides a
whole replay (per-replay objectives of one configuration on one cluster: 0.08 or 8.5, nothing
between), and a trial estimates how often that lottery is won. Every method sees the same replays,
so their trials are comparable; replays are cached per (configuration, seed), since samplers may
propose a configuration twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from agent.evaluate.compare import measure
from agent.parallel import ray_address, shared, worker_pool
from agent.sim.simulator import Simulation
from agent.sim.world import World
from agent.tune.kube_scores import DEFAULT, KubeScorer, ScoreConfig

TRIAL_ARRIVALS = 200
TRIAL_REPLAYS = {"EE": 3, "LB": 3, "EL": 10}  # per policy, see above


def relative_improvement(default: float, value: float) -> float:
    """How much lower `value` is than the default weights' objective (0.2 = 20% lower); 0 when the
    default already scores 0."""
    return (default - value) / default if default > 1e-12 else 0.0


@dataclass
class TuningTask:
    world: World
    policy: str
    seed: int  # the first replay every trial runs; the others follow it (seed + 1, ...)
    arrivals: int = TRIAL_ARRIVALS
    name: str = "cluster"
    replays: int | None = None  # per trial; None: the policy's TRIAL_REPLAYS
    workers: int = 1  # processes a trial's replays run on (agent.parallel.worker_pool; Ray when configured)
    _cache: dict = field(default_factory=dict, repr=False)
    simulated: int = 0  # replays actually run (cache misses)

    def __post_init__(self) -> None:
        if self.policy not in TRIAL_REPLAYS:
            raise ValueError(f"unknown policy {self.policy!r}: expected one of {', '.join(TRIAL_REPLAYS)}")
        if self.replays is None:
            self.replays = TRIAL_REPLAYS[self.policy]
        if self.replays < 1 or self.arrivals < 1:
            raise ValueError(f"a trial needs >= 1 replay of >= 1 arrival, got {self.replays} x {self.arrivals}")

    @property
    def seeds(self) -> tuple[int, ...]:
        """The replays every trial runs on."""
        return tuple(self.seed + k for k in range(self.replays))

    def fresh_seeds(self, count: int) -> tuple[int, ...]:
        """Replays no trial runs on, to re-measure a chosen configuration out of sample."""
        return tuple(self.seed + 1000 * (k + 1) for k in range(count))

    def replay(self, config: ScoreConfig, seed: int) -> float:
        """The policy's objective per arrival on one seeded replay with `config` placing the pods."""
        key = (config, seed)
        if key not in self._cache:
            self._cache[key] = replay_objective(self.world, self.policy, self.arrivals, config, seed)
            self.simulated += 1
        return self._cache[key]

    def objective(self, config: ScoreConfig, seeds: tuple[int, ...] | None = None) -> float:
        """The policy's objective per arrival with `config` placing the pods (lower is better), the
        mean over the trial's replays or over `seeds`; the replays not yet cached run side by side."""
        seeds = self.seeds if seeds is None else seeds
        missing = [s for s in dict.fromkeys(seeds) if (config, s) not in self._cache]
        if len(missing) > 1 and (self.workers > 1 or ray_address()):
            with worker_pool(self.workers, shared=(self.world, self.policy, self.arrivals)) as pool:
                for s, value in zip(missing, pool.map(_replay, [(config, s) for s in missing])):
                    self._cache[(config, s)] = value
                    self.simulated += 1
        return float(np.mean([self.replay(config, s) for s in seeds]))

    @property
    def default_objective(self) -> float:
        return self.objective(DEFAULT)

    def improvement(self, config: ScoreConfig, seeds: tuple[int, ...] | None = None) -> float:
        """Relative improvement over kube-scheduler's default weights on the same replays
        (0.2 = 20% lower objective); 0 when the default already scores 0."""
        return relative_improvement(self.objective(DEFAULT, seeds), self.objective(config, seeds))


def replay_objective(world, policy: str, arrivals: int, config: ScoreConfig, seed: int) -> float:
    """The policy's objective per arrival on one seeded replay of `world` with `config` placing the pods."""
    result, _ = measure(KubeScorer(config), Simulation(world, seed), seed, policy, arrivals)
    return result.objective


def _replay(job: tuple[ScoreConfig, int]) -> float:
    """One replay of a worker_pool (TuningTask.objective), the pool's shared value being the task's world."""
    return replay_objective(*shared(), *job)


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
