"""Randomized clusters to tune: a policy's scenario families at sizes 4..40, drawn per seed.

Training clusters use seeds below EVAL_SEED_BASE and the families' wider training draws; held-out
clusters use seeds from EVAL_SEED_BASE up, which training never draws, so the RL tuner is judged on
clusters it never saw.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agent.evaluate.compare import EVAL_SEED_BASE
from agent.sim.families import families_for, family
from agent.sim.world import World
from rlscore.core.state import POLICIES
from agent.tune.trials import TRIAL_ARRIVALS, TuningTask

NODES = (4, 40)


@dataclass(frozen=True)
class Cluster:
    name: str
    policy: str
    world: World
    replay_seed: int  # the seeded replay tuning trials run on

    def task(self, arrivals: int = TRIAL_ARRIVALS, replays: int | None = None) -> TuningTask:
        return TuningTask(self.world, self.policy, self.replay_seed, arrivals, self.name, replays)


def draw(policy: str, index: int, held_out: bool, nodes: tuple[int, int] = NODES, base_seed: int = 0) -> Cluster:
    """Cluster number `index` of `policy`: its family, size and world all follow from the seed."""
    seed = (EVAL_SEED_BASE if held_out else 0) + base_seed * 100_003 + index
    rng = np.random.default_rng(np.random.SeedSequence([seed, POLICIES.index(policy)]))
    names = families_for(policy)
    fam = names[int(rng.integers(len(names)))]
    n = int(rng.integers(nodes[0], nodes[1] + 1))
    world = family(fam).world(rng, n, limits=policy == "EL", training=not held_out)
    return Cluster(f"{policy.lower()}-{fam}-{n}n-{'heldout' if held_out else 'train'}{index}", policy, world,
                   int(rng.integers(2**31)))


def training_clusters(count: int, base_seed: int = 0, nodes: tuple[int, int] = NODES) -> list[Cluster]:
    """`count` clusters, the policies in turn."""
    return [draw(POLICIES[i % len(POLICIES)], i, False, nodes, base_seed) for i in range(count)]
