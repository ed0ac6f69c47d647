"""DQN from demonstrations: the product trainer of rlscore's policies, in one file you can read top to
bottom (after cleanrl's dqn.py; the idea is DQfD, Hester et al. 2018). Every hyper-parameter is in
DQNConfig; `rlscore-train --help` lists them.

1. Worlds. Each episode is one simulated cluster: a mixed world (agent/sim/mixed.py: every difficulty
   drawn at once) or a world of one of the policy's single-difficulty families.
2. Teachers. Each world has a teacher: its family's (or size band's) best rule, measured on training
   seeds (TEACHERS), or for a mixed world the rule whose runs on that world's machines cost least
   over a few arrival streams of its own (agent.learn.teachers.world_teacher).
3. Demonstrations. The teachers schedule `demo_worlds` worlds; every decision is kept with the
   teacher's choice (all of its tied best nodes) and the outcome reward that followed.
4. Pre-training on the demonstrations alone: n-step double-DQN TD on the outcome reward, plus a
   large-margin loss that makes the teacher's choice worth `margin` more than any other node. The
   network sees each node's standing under every rule (rlscore.core.features.RULE_FEATURES), so it
   can follow any teacher exactly and learn where to depart from it.
5. Interaction. `num_envs` environments placed by the network (epsilon-greedy) add their own
   transitions; batches mix them with demonstrations (`demo_share`), the margin loss applied to the
   demonstrations only, TD to all. The demonstrations stay in the replay for good. With `prioritized`,
   each buffer replays its transitions in proportion to their last TD error (Schaul et al., 2016).

The served scores are the network's Q-values. With `anchor` (a rule selector's file), every value above,
in the losses, the targets and the network's own play, is the network's plus the anchor's term
(agent.learn.anchor), and the model file holds the selector to add it as served. `demonstrations_only` trains the same network on the
same demonstrations with the margin loss alone, for as many gradient steps, and no interaction: the
ablation that says what TD learning adds (`rlscore-eval` compares the two).
"""

from __future__ import annotations

import copy
import itertools
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
from tqdm import tqdm

from agent.evaluate.rollout_bound import CANDIDATES as ROLLOUT_RULES
from agent.evaluate.rollout_bound import base_choice, confident_pick, option_costs, rule_choice
from agent.learn.anchor import ANCHOR_TERMS, SelectorAnchor, standing_in
from agent.learn.common import (TrainConfig, TrainingLog, git_commit, make_actor, seed_everything, shaping_factor,
                                training_record)
from agent.learn.env import MAX_EPISODE_DECISIONS, SchedulingEnv
from agent.learn.model_io import save_model
from agent.learn.network import Critics, DuelingQ, NodeScorer, values_by_extent
from agent.learn.teachers import mixed_world_teacher, teacher_for, teacher_targets
from agent.learn.threads import ThreadBudget
from agent.parallel import (RAY_TASK_RETRIES, ClusterLost, carried_state, connect_ray, ray_address, restore_carried,
                            worker_pool)
from agent.sim.families import draw_node_count, families_for, family
from agent.sim.futures import branchable
from agent.sim.mixed import LEADING_RULES, MIXED
from agent.sim.scenarios import can_draw_afresh
from rlscore.core.features import (CANDIDATE_SETS, NUM_NODE_FEATURES, NUM_POD_FEATURES,
                                   RULE_FEATURES, input_columns, ranked_candidates)
from rlscore.core.state import normalize_policy

# Each single-difficulty family's teacher: its best rule on training seeds
# (agent.learn.teachers.pick_teachers, with bands=SIZE_BANDS), per cluster-size band where the best rule
# changes with size ([[max nodes, rule], ...]; a larger world takes the last band's). LB's usage-skew: on 10
# training seeds headroom-informed is x1.069 of each seed's best rule, headroom-balance x2.13
# (pick_teachers("LB", ("usage-skew",))).
TEACHERS = {
    "EE": {"test1": "most-allocated", "test2": "one-step-ee", "poisson": "efficient-first",
           "two-d": "efficient-first", "fragmentation": "efficient-first", "hardware": "efficient-first",
           "hardware-unknown": "most-allocated", "churn": "efficient-first"},
    "LB": {"test1": "one-step-lb", "test2": "one-step-lb", "poisson": "one-step-lb", "usage-skew": "headroom-informed",
           "two-d": "one-step-lb", "churn": "one-step-lb"},
    "EL": {"test1": [[5, "latency-pack"], [64, "one-step-el"]], "test2": "one-step-el",
           "latency-shift": [[5, "latency-fit"], [20, "one-step-el"], [64, "latency-pack"]],
           "scarce-near": "latency-fit", "hardware": "one-step-el",
           "churn": [[5, "latency-greedy"], [20, "latency-fit"], [64, "one-step-el"]]},
}
# A world whose family has no teacher above (a mixed world, a cluster profile) is taught by the cheapest of
# these on its own machines (the rules that lead some mixed worlds on training seeds), the first unless
# another is cheaper by more than agent.learn.teachers.WORLD_MARGIN.
CANDIDATE_TEACHERS = LEADING_RULES
WEIGHT_AVERAGES = ("last", "uniform", "ema")
BOOTSTRAPS = ("max", "teacher")
CONSERVATIVE_ROWS = ("all", "demonstrations", "interaction")


@dataclass
class DQNConfig(TrainConfig):
    total_timesteps: int = 40_000
    """environment steps of the interaction phase (0: pre-training on the demonstrations only)"""
    max_nodes: int = 48
    """largest cluster drawn (and observation slots)"""
    node_draw: str = "log-uniform"
    """how a family world's size is drawn within 2..max_nodes (a mixed world draws its own)"""
    mixed_share: float = 0.5
    """share of the worlds (demonstrations and interaction) that are mixed worlds"""
    gamma: float = 0.99
    """discount per decision"""
    # demonstrations
    demo_worlds: int = 96
    """worlds the teachers schedule"""
    demo_decisions: int = 256
    """placements recorded per demonstration world"""
    demo_seed: int = -1
    """seed of the demonstrations (their worlds, teachers and recording); -1: --seed. Another seed's
    demonstrations under this run's interaction and initial weights ask which of the two decides how
    a training seed turns out"""
    teacher_futures: int = 2
    """arrival streams a mixed world's teacher is measured on"""
    teacher_steady: bool = False
    """measure a mixed world's candidate teachers after each has filled the world once, in the steady
    state the demonstrations are recorded in (burn_in) and evaluation measures; off, from an empty cluster"""
    rollout_every: int = 0
    """label every k-th demonstrated decision by rollouts instead of the teacher (0: never): the
    cheapest of the candidate rules' choices when the teacher places the next `rollout_horizon` pods of
    the world's own future after it (agent.evaluate.rollout_bound; privileged, as the shaping potential is)"""
    rollout_horizon: int = 64
    """pods the teacher places in each rollout branch"""
    rollout_futures: int = 0
    """compare the rollout candidates on this many futures drawn afresh from the decision on
    (agent.sim.futures.redraw_future), not on the world's own (0): targets that know only what a
    scheduler can; only worlds with Poisson arrivals are labelled then"""
    rollout_relabel: bool = True
    """a rollout-measured decision where the teacher's choice is not among the cheapest candidates
    teaches the cheapest instead (the margin loss); off, it keeps its teacher's choice and its rollouts
    only feed the advantage regression"""
    rollout_confidence: float = 0.0
    """with rollout_futures, relabel only where the cheapest candidate's mean paired gain over the
    teacher's choice is more than this many standard errors (over the futures) above zero
    (rollout_bound.confident_pick): the cheapest of a few noisy means is mostly noise; 0: the cheapest"""
    advantage_weight: float = 0.0
    """weight of regressing the Q differences among a rollout-labelled decision's candidates onto their
    paired rollout cost differences (needs rollout_every): unlike a label, they say by how much a
    departure pays; the branches share their futures, so the differences are paired"""
    # losses
    n_step: int = 8
    """rewards summed before bootstrapping"""
    bootstrap: str = "max"
    """what the n-step return is bootstrapped on: max (double DQN: the online network's best node, valued
    by the target network) or teacher (the target network's mean value over the nodes the world's teacher
    would pick there, read from its standing column): the network then learns its teachers' values, its
    greedy choice is one step of policy improvement over them, and no max over noisy values inflates the
    states with many near-equal choices"""
    action_gap: float = 0.0
    """advantage learning (Bellemare et al. 2016): the target of a node other than the target network's
    best is lowered by this share of its gap to the best, so near-equal values the regression cannot
    resolve keep the order they have (after pre-training: the teachers') until returns say otherwise;
    0: plain double DQN"""
    burn_in: int = 400
    """at most this many placements by the world's teacher before an episode is recorded or played: the
    steady state a cluster lives in (and evaluation measures), not the fill of an empty one"""
    episode_decisions: int = 200
    """placements the network makes per interaction episode (after the burn-in), so that the interaction
    meets many worlds rather than a few long ones"""
    reward_clip: float = 10.0
    """normalized rewards beyond +-this are clipped: a pod that fits no node costs hundreds of units at
    once, mostly whatever the placement (too big for any node), and such outliers drown the TD signal"""
    reward_noise: float = 0.0
    """a diagnostic: Gaussian noise of this spread (normalized units) added to every reward after clipping,
    to see how faint a gain TD still finds (agent.learn.faint_signal); 0 for every shipped model"""
    margin: float = 0.8
    """how much more the teacher's choice must be worth than any other node (in normalized reward units)"""
    margin_weight: float = 1.0
    """weight of the large-margin loss beside TD"""
    margin_floor: float = 0.02
    """the margin loss's weight decays linearly from margin_weight to this over the first
    `margin_decay` of the interaction: the teachers start the network, the outcome reward decides
    where it departs from them"""
    margin_decay: float = 0.2
    """share of the interaction over which the margin loss's weight decays to margin_floor"""
    conservative_weight: float = 0.0
    """weight of conservative Q-learning's regulariser (CQL(H), Kumar et al. 2020) on the replayed
    decisions of conservative_rows: the log-sum-exp of the state's values minus the taken node's value,
    so that nodes the replay rarely takes are not valued by extrapolation alone. It also holds the
    network to what it replays: from 0.1 up, the tests' tiny world keeps its teacher's mistakes
    (docs/training.md); 0: off"""
    conservative_rows: str = "all"
    """the replayed decisions the regulariser is on: all; the demonstrations (where it is a cross-entropy
    towards the teacher's choice that never decays); or the interaction (the network's own decisions,
    a cross-entropy towards what it did). On the tests' tiny world either half alone holds the network
    where pre-training left it (docs/training.md)"""
    anchor: str = ""
    """a rule selector's model file (the shipped EE one: models/ee.safetensors): the values are the
    network's plus anchor_weight x each node's standing under the rule the selector picks for the pod
    (agent.learn.anchor), in training and as served; the network learns only where to depart from the
    selector's rule. Empty: the network's values alone"""
    anchor_weight: float = 2.0
    """with --anchor: the weight of the picked rule's standing (in the values' units: normalized reward)"""
    anchor_on: str = "standing"
    """with --anchor, what the weight multiplies: each node's standing under the picked rule (1 for its
    best, falling by 1/(N-1) per node above: a small cluster's order is held, a large one's barely), or
    best: 1 on the rule's best nodes, 0 elsewhere (overruling the rule costs the weight at any size)"""
    dueling: bool = True
    """learn Q = V(s) + A(s, a) - mean A (agent.learn.network.DuelingQ) and serve A: the state value carries
    what the future brings whatever the placement, so TD's noise stays out of the nodes' ranking"""
    q_filter: bool = False
    """apply the margin loss only on decisions where the target network does not rate another node above
    the teacher's choice by more than the margin (Nair et al. 2018's Q-filter): a teacher's mistake,
    once TD has found it, stops being taught"""
    trust_heads: int = 0
    """critics: Q-value heads on a trunk of their own (agent.learn.network.Critics) that learn TD alone, no
    margin loss, each from its own random share of the transitions and each with a fixed random prior
    (bootstrapped DQN with randomized priors, Osband et al. 2016 and 2018); each plays its share of the
    interaction episodes, as the served network does. With them the served network's margin loss keeps
    margin_weight for good (margin_floor and margin_decay are not used) and is lifted decision by decision
    where the critics agree that a node outside the teacher's choices is worth more: the mean of their
    gaps more than trust_z of their spread above zero. TD then moves the served network where it has
    resolved a departure beyond its own noise, not wherever a global floor lets it. The critics are not
    written. 0: none; else at least 2 (their spread is the noise)"""
    trust_z: float = 1.0
    """with trust_heads: how many spreads of the critics' gaps their mean must clear to lift the margin"""
    head_share: float = 0.5
    """with trust_heads: the chance that a critic learns TD from a given transition (fixed per transition)"""
    prior_scale: float = 1.0
    """with trust_heads: the weight of each critic's random prior (normalized reward units); 0: none"""
    td_weight: float = 1.0
    """weight of the TD loss (0 with demonstrations_only)"""
    demonstrations_only: bool = False
    """the ablation: the margin loss on the demonstrations alone, no TD, no interaction"""
    # optimisation
    pretrain_steps: int = 4000
    """gradient steps on the demonstrations before interaction"""
    learning_rate: float = 3e-4
    """Adam step size"""
    weight_decay: float = 1e-5
    """L2 on the weights (DQfD's regulariser)"""
    batch_size: int = 128
    """transitions per gradient step"""
    demo_share: float = 0.25
    """share of each batch drawn from the demonstrations during interaction"""
    train_frequency: int = 4
    """environment steps (over all environments) per gradient step"""
    target_network_frequency: int = 1000
    """gradient steps between copies of the online network into the target network"""
    max_grad_norm: float = 10.0
    """gradient clipping (global L2 norm)"""
    weight_average: str = "last"
    """which weights are served: "last" (the online network's last ones), "uniform" (their mean over the
    gradient steps after `average_start`, SWA: Izmailov et al. 2018) or "ema" (an exponential moving
    average with `ema_decay`, Polyak); on LB's 120 000-step recipe neither moved a run beyond noise
    (docs/training.md)"""
    average_start: float = 0.5
    """share of the gradient steps after pre-training before the uniform average starts"""
    ema_decay: float = 0.999
    """the moving average's weight on its past per gradient step"""
    snapshot_dir: str = ""
    """also write here the last weights after each quarter of the steps after pre-training (last-q1..q3)
    and at the end (last), and the uniform and moving averages: every way of serving one run, to compare
    them paired"""
    buffer_size: int = 100_000
    """transitions the interaction replay keeps (the demonstrations are kept apart, all of them)"""
    prioritized: float = 0.0
    """prioritized replay's exponent alpha (Schaul et al., 2016): each buffer (the demonstrations, the
    interaction) draws a transition in proportion to (|its last TD error| + priority_floor)^alpha, and every
    loss weighs it back by importance weights whose exponent rises from priority_beta to 1 over the run; 0
    draws uniformly. Aimed at gains carried by rare events, which a uniform draw replays rarely; on
    agent.learn.faint_signal's tiny world it changes nothing beyond the spread between seeds"""
    priority_beta: float = 0.4
    """the importance weights' exponent when training starts (1: fully corrected)"""
    priority_floor: float = 0.01
    """added to every |TD error| (in reward spreads), so that every transition can still be drawn"""
    num_envs: int = 8
    """environments placed side by side in the interaction phase"""
    start_e: float = 0.05
    """exploration rate when interaction starts (the network already follows the teachers)"""
    end_e: float = 0.01
    """final exploration rate"""
    exploration_fraction: float = 0.5
    """share of the interaction over which epsilon decays linearly"""
    torch_threads: int = 2
    """most torch threads; fewer while other work holds the cores (agent.learn.threads)"""
    workers: int = 2
    """processes measuring the mixed worlds' teachers and recording the demonstrations"""
    actors: int = 0
    """with a Ray cluster (--ray-address): environment actors that play the interaction on the cluster and
    feed this learner's replay (Ape-X), one cpu each; 0 plays it here"""
    teachers: dict = field(default_factory=dict)
    """family -> teacher (default: TEACHERS[policy]); a world of another family has its own picked"""
    # several runs served as one
    members: int = 1
    """runs of this recipe (seeds --seed, --seed + 1, ...) distilled into the one network served
    (agent.learn.distill): a run's outcome depends on its path, and what the runs agree on survives
    their ensemble; 1: the single run is served"""
    distil_worlds: int = 256
    """with members > 1: training worlds the runs' ensemble schedules for the distillation"""
    distil_decisions: int = 256
    """with members > 1: decisions kept per distillation world"""
    distil_steps: int = 20_000
    """with members > 1: gradient steps of the distilled network"""

    def __post_init__(self) -> None:
        problems = []
        for name in ("total_timesteps", "demo_worlds", "demo_decisions", "pretrain_steps", "batch_size", "buffer_size",
                     "num_envs", "n_step", "train_frequency", "target_network_frequency", "episode_decisions",
                     "teacher_futures", "workers", "burn_in", "actors", "rollout_every", "rollout_horizon", "rollout_futures"):
            minimum = 0 if name in ("total_timesteps", "pretrain_steps", "burn_in", "actors", "rollout_every",
                                    "rollout_futures") else 1
            if getattr(self, name) < minimum:
                problems.append(f"--{name.replace('_', '-')} must be >= {minimum}")
        if self.energy_potential not in ("committed", "rate"):
            problems.append(f"--energy-potential must be committed or rate, not {self.energy_potential!r}")
        if not 0.0 <= self.conservative_weight <= 100.0:
            problems.append("--conservative-weight must be within 0..100")
        if not 0.0 <= self.action_gap < 1.0:
            problems.append("--action-gap must be within [0, 1)")
        if self.conservative_rows not in CONSERVATIVE_ROWS:
            problems.append(f"--conservative-rows must be one of {', '.join(CONSERVATIVE_ROWS)}, "
                            f"not {self.conservative_rows!r}")
        if self.bootstrap not in BOOTSTRAPS:
            problems.append(f"--bootstrap must be one of {', '.join(BOOTSTRAPS)}, not {self.bootstrap!r}")
        if self.weight_average not in WEIGHT_AVERAGES:
            problems.append(f"--weight-average must be one of {', '.join(WEIGHT_AVERAGES)}, "
                            f"not {self.weight_average!r}")
        if self.candidates not in ("", *CANDIDATE_SETS):
            problems.append(f"--candidates must be one of {', '.join(CANDIDATE_SETS)}, not {self.candidates!r}")
        if not 0.0 <= self.ema_decay < 1.0:
            problems.append("--ema-decay must be within [0, 1)")
        for name in ("mixed_share", "demo_share", "margin_decay", "average_start", "prioritized", "priority_beta"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                problems.append(f"--{name.replace('_', '-')} must be within 0..1")
        if not (self.shaping_gamma == -1.0 or 0.0 <= self.shaping_gamma <= 1.0):
            problems.append("--shaping-gamma must be -1 (the discount) or within 0..1")
        if not 0.0 < self.gamma <= 1.0:
            problems.append("--gamma must be within (0, 1]")
        for name in ("margin", "margin_weight", "margin_floor", "td_weight", "weight_decay", "reward_clip",
                     "advantage_weight", "anchor_weight", "reward_noise"):
            if not getattr(self, name) >= 0:
                problems.append(f"--{name.replace('_', '-')} must be >= 0")
        if not self.priority_floor > 0:
            problems.append("--priority-floor must be > 0")
        if not self.trust_z >= 0:
            problems.append("--trust-z must be >= 0")
        if not self.prior_scale >= 0:
            problems.append("--prior-scale must be >= 0")
        if not 0.0 < self.head_share <= 1.0:
            problems.append("--head-share must be within (0, 1]")
        if self.trust_heads == 1 or self.trust_heads < 0:
            problems.append("--trust-heads must be 0 (none) or at least 2 (their spread is the noise)")
        elif self.trust_heads and self.q_filter:
            problems.append("--trust-heads does not combine with --q-filter (the trust is a per-decision filter of "
                            "the margin loss of its own)")
        if not self.rollout_confidence >= 0:
            problems.append("--rollout-confidence must be >= 0")
        elif self.rollout_confidence > 0 and self.rollout_futures < 2:
            problems.append("--rollout-confidence needs --rollout-futures >= 2 (the spread over futures measures the noise)")
        if self.advantage_weight > 0 and not self.rollout_every:
            problems.append("--advantage-weight needs --rollout-every (the rollouts measure the advantages)")
        if not self.learning_rate > 0:
            problems.append("--learning-rate must be > 0")
        if not 1 <= self.min_nodes <= self.max_nodes:
            problems.append("need 1 <= --min-nodes <= --max-nodes")
        if not 0.0 <= self.end_e <= self.start_e <= 1.0:
            problems.append("need 0 <= --end-e <= --start-e <= 1")
        for name in self.families:
            try:
                family(name)
            except ValueError as exc:
                problems.append(f"--families: {exc}")
        try:
            input_columns(self.blind_to)
        except ValueError as exc:
            problems.append(f"--blind-to: {exc}")
        for name in ("members", "distil_decisions", "distil_steps"):
            if getattr(self, name) < 1:
                problems.append(f"--{name.replace('_', '-')} must be >= 1")
        if self.distil_worlds < 2:
            problems.append("--distil-worlds must be >= 2 (one fitted, one held out)")
        if self.anchor_on not in ANCHOR_TERMS:
            problems.append(f"--anchor-on must be one of {', '.join(ANCHOR_TERMS)}, not {self.anchor_on!r}")
        if self.anchor and self.members > 1:
            problems.append("--anchor serves one run: not with --members > 1")
        if self.anchor and self.actors:
            problems.append("--anchor is played here only: not with --actors (the Ray actors would play without it)")
        if self.members > 1 and self.snapshot_dir:
            problems.append("--snapshot-dir writes one run's weights: not with --members > 1")
        if self.demo_seed < -1:
            problems.append("--demo-seed must be >= 0 (or -1: --seed)")
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def demonstration_seed(self) -> int:
        return self.seed if self.demo_seed == -1 else self.demo_seed


# --- worlds and teachers ----------------------------------------------------------------------------

def world_plan(cfg: DQNConfig, count: int, seed: int) -> list[tuple[str, int, int]]:
    """The first `count` worlds of `worlds(cfg, seed)`."""
    return list(itertools.islice(worlds(cfg, seed), count))


def worlds(cfg: DQNConfig, seed: int) -> Iterator[tuple[str, int, int]]:
    """(family, nodes, env seed) of world after world, drawn as they are needed: mixed worlds in
    `mixed_share` of them, the others spread evenly over the policy's families."""
    rng = np.random.default_rng(seed)
    families = cfg.families or families_for(cfg.policy)
    singles = [f for f in families if f != MIXED]
    for k in itertools.count():
        if MIXED in families and (not singles or rng.random() < cfg.mixed_share):
            low, high = family(MIXED).node_range
            name, nodes = MIXED, int(rng.integers(low, min(high, cfg.max_nodes) + 1))
        else:
            name = singles[k % len(singles)]
            nodes = draw_node_count(rng, cfg.min_nodes, cfg.max_nodes, cfg.node_draw)
        yield name, nodes, int(rng.integers(2**31))


def make_env(cfg: DQNConfig) -> SchedulingEnv:
    """An environment whose episodes the trainer ends (never the environment's own time limit)."""
    return SchedulingEnv(cfg.policy, max_nodes=cfg.max_nodes, min_nodes=cfg.min_nodes,
                         families=cfg.families or families_for(cfg.policy), episode_decisions=MAX_EPISODE_DECISIONS,
                         reward=cfg.reward, gamma=cfg.gamma, shaping=cfg.shaping, training=True, node_draw=cfg.node_draw,
                         shaping_gamma=shaping_factor(cfg), energy_potential=cfg.energy_potential)


def warm_start(env: SchedulingEnv, world: tuple[str, int, int], teacher: str, burn_in: int,
               rng: np.random.Generator) -> dict:
    """Reset to the world and let its teacher place pods for one fill of it (at most `burn_in`); the
    observation the episode starts from."""
    name, nodes, seed = world
    obs, _ = env.reset(seed=seed, options={"family": name, "nodes": nodes})
    for _ in range(min(int(np.ceil(env.sim.world.pods_alive)), burn_in)):
        target = teacher_targets(teacher, env._state, env._pod, env.max_nodes, rng)
        obs, _, terminated, truncated, _ = env.step(int(rng.choice(np.flatnonzero(target > 0))))
        if terminated or truncated:
            obs, _ = env.reset(seed=seed, options={"family": name, "nodes": nodes})
            break
    return obs


def burn_in_teacher(cfg: DQNConfig, world: tuple[str, int, int]) -> str:
    """Who fills an interaction world before the network plays it: its family's teacher, or for a
    family without one (mixed worlds) the first candidate, without measuring them all."""
    teachers = cfg.teachers or TEACHERS[cfg.policy]
    name, nodes, _ = world
    if name not in teachers:
        return CANDIDATE_TEACHERS[cfg.policy][0]
    return teacher_for(teachers, name, nodes)


def _world_teacher(job: tuple) -> str:
    """The teacher of one world of a family without one (run in a worker)."""
    cfg, name, nodes, seed = job
    env = make_env(cfg)
    env.reset(seed=seed, options={"family": name, "nodes": nodes})
    return mixed_world_teacher(cfg.policy, env.sim.world, seed, cfg.demo_decisions, cfg.teacher_futures,
                               steady=cfg.teacher_steady)


def assign_teachers(cfg: DQNConfig, plan: list[tuple[str, int, int]]) -> list[str]:
    """Each planned world's teacher: its family's, or picked on its own machines."""
    teachers = cfg.teachers or TEACHERS[cfg.policy]
    unknown = [(cfg, name, nodes, seed) for name, nodes, seed in plan if name not in teachers]
    picked: list[str] = []
    if unknown:
        with worker_pool(max(1, cfg.workers)) as pool:
            picked = list(pool.map(_world_teacher, unknown))
    out, it = [], iter(picked)
    for name, nodes, _ in plan:
        out.append(next(it) if name not in teachers else teacher_for(teachers, name, nodes))
    return out


# --- replay -------------------------------------------------------------------------------------------

class Replay:
    """Transitions (s, a, n-step return, discount, s') with observations padded to `slots` nodes, and
    for demonstrations the teacher's choices (every tied best node). A ring of `size` entries. With
    `alpha` > 0 it is prioritized (DQNConfig.prioritized): a new transition gets the highest priority
    given so far, so it is replayed at least once soon, and `reprioritize` sets the others' from their TD
    errors. With `critics`, each entry says which critic heads learn TD from it (DQNConfig.trust_heads),
    drawn once per entry with chance `head_share` from `seed`'s stream."""

    def __init__(self, size: int, slots: int, anchor: SelectorAnchor | None = None, alpha: float = 0.0,
                 floor: float = 0.01, critics: int = 0, head_share: float = 1.0, seed: int = 0):
        self.size, self.pos, self.full = size, 0, False
        self.learns = np.random.default_rng(seed).random((size, critics)) < head_share
        self.anchor_of = anchor
        self.alpha, self.floor = alpha, floor
        self.priority = np.zeros(size)  # (|TD error| + floor)^alpha
        self.top = 1.0
        self.nodes = np.zeros((size, slots, NUM_NODE_FEATURES), np.float32)
        self.pod = np.zeros((size, NUM_POD_FEATURES), np.float32)
        self.width = np.zeros(size, np.int32)
        self.next_nodes = np.zeros_like(self.nodes)
        self.next_pod = np.zeros_like(self.pod)
        self.next_width = np.zeros(size, np.int32)
        self.action = np.zeros(size, np.int64)
        self.ret = np.zeros(size, np.float32)
        self.discount = np.zeros(size, np.float32)
        self.expert = np.zeros((size, slots), bool)
        self.advantage = np.full((size, slots), np.nan, np.float32)  # measured by rollouts, NaN elsewhere
        self.teacher = np.full(size, -1, np.int64)  # the world's teacher's standing column (RULE_FEATURES), -1: none
        # the anchor's pick's standing column in s and in s' (-1: no anchor)
        self.anchor = np.full(size, -1, np.int64)
        self.next_anchor = np.full(size, -1, np.int64)

    def __len__(self) -> int:
        return self.size if self.full else self.pos

    def add(self, obs: dict, action: int, ret: float, discount: float, next_obs: dict,
            expert: np.ndarray | None = None, advantage: np.ndarray | None = None, teacher: int = -1) -> None:
        i = self.pos
        self.nodes[i], self.pod[i], self.width[i] = obs["nodes"], obs["pod"], int(obs["action_mask"].sum())
        self.next_nodes[i], self.next_pod[i] = next_obs["nodes"], next_obs["pod"]
        self.next_width[i] = int(next_obs["action_mask"].sum())
        self.action[i], self.ret[i], self.discount[i] = action, ret, discount
        self.expert[i] = expert if expert is not None else False
        self.advantage[i] = advantage if advantage is not None else np.nan
        self.teacher[i] = teacher
        if self.anchor_of is not None:
            self.anchor[i], self.next_anchor[i] = self.anchor_of.column(obs), self.anchor_of.column(next_obs)
        self.priority[i] = self.top
        self.pos = (i + 1) % self.size
        self.full = self.full or self.pos == 0

    def sample(self, count: int, rng: np.random.Generator, beta: float = 1.0) -> dict[str, torch.Tensor]:
        """`count` transitions, trimmed to the widest candidate set among them, with their indices and
        importance weights (1 when drawn uniformly; prioritized: (N P(i))^-beta over the largest any
        transition could get, so none exceeds 1)."""
        n = len(self)
        if self.alpha > 0:
            cumulative = np.cumsum(self.priority[:n])
            idx = np.minimum(np.searchsorted(cumulative, rng.random(count) * cumulative[-1], side="right"), n - 1)
            share = self.priority[:n] / cumulative[-1]
            weight = (share[idx] / share.min()) ** -beta
        else:
            idx = rng.integers(0, n, count)
            weight = np.ones(count)
        width = int(max(self.width[idx].max(), self.next_width[idx].max()))
        slots = np.arange(width)
        return {"nodes": torch.from_numpy(self.nodes[idx, :width]), "pod": torch.from_numpy(self.pod[idx]),
                "mask": torch.from_numpy(slots < self.width[idx, None]),
                "next_nodes": torch.from_numpy(self.next_nodes[idx, :width]),
                "next_pod": torch.from_numpy(self.next_pod[idx]),
                "next_mask": torch.from_numpy(slots < self.next_width[idx, None]),
                "action": torch.from_numpy(self.action[idx]), "ret": torch.from_numpy(self.ret[idx]),
                "discount": torch.from_numpy(self.discount[idx]),
                "expert": torch.from_numpy(self.expert[idx, :width]),
                "advantage": torch.from_numpy(self.advantage[idx, :width]),
                "teacher": torch.from_numpy(self.teacher[idx]),
                "anchor": torch.from_numpy(self.anchor[idx]), "next_anchor": torch.from_numpy(self.next_anchor[idx]),
                "index": torch.from_numpy(idx), "weight": torch.from_numpy(weight.astype(np.float32)),
                "learns": torch.from_numpy(self.learns[idx])}

    def reprioritize(self, index: torch.Tensor, error: torch.Tensor) -> None:
        """The drawn transitions' priorities from their latest |TD error|; nothing when drawn uniformly."""
        if self.alpha > 0:
            priority = (error.abs().numpy().astype(np.float64) + self.floor) ** self.alpha
            self.priority[index.numpy()] = priority
            self.top = max(self.top, float(priority.max()))


def _cat(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Two batches as one, padded to the wider."""
    width = max(a["nodes"].shape[1], b["nodes"].shape[1])

    def pad(t: torch.Tensor, fill: float) -> torch.Tensor:
        extra = width - t.shape[1]
        if extra == 0:
            return t
        shape = (t.shape[0], extra, *t.shape[2:])
        return torch.cat([t, torch.full(shape, fill, dtype=t.dtype)], dim=1)

    wide = {"nodes": 0, "mask": 0, "next_nodes": 0, "next_mask": 0, "expert": 0, "advantage": float("nan")}
    return {k: torch.cat([pad(a[k], wide[k]), pad(b[k], wide[k])] if k in wide else [a[k], b[k]]) for k in a}


def teacher_column(teacher: str | None) -> int:
    """The index in RULE_FEATURES of the rule's standing column (-1: the rule has none)."""
    return RULE_FEATURES.index(teacher) if teacher in RULE_FEATURES else -1


class NStep:
    """Per environment, the last `n` (obs, action, reward, expert) of its episode: n-step returns."""

    def __init__(self, n: int, gamma: float, teacher: str | None = None):
        self.n, self.gamma = n, gamma
        self.teacher = teacher_column(teacher)
        self.pending: deque = deque()

    def push(self, obs, action, reward, expert, next_obs, terminated: bool, ended: bool, replay: Replay,
             advantage: np.ndarray | None = None) -> None:
        """Record a step; flush the oldest when n are pending, all of them when the episode ended (a
        terminal state is not bootstrapped, a time limit is)."""
        self.pending.append((obs, action, reward, expert, advantage))
        while self.pending and (len(self.pending) == self.n or ended):
            ret = sum(r * self.gamma**k for k, (_, _, r, _, _) in enumerate(self.pending))
            first_obs, first_action, _, first_expert, first_advantage = self.pending[0]
            discount = 0.0 if terminated else self.gamma ** len(self.pending)
            replay.add(first_obs, first_action, ret, discount, next_obs, first_expert, first_advantage, self.teacher)
            self.pending.popleft()
            if not ended:
                break


# --- the losses -----------------------------------------------------------------------------------

def anchored(values: torch.Tensor, nodes: torch.Tensor, columns: torch.Tensor | None,
             anchor: SelectorAnchor | None) -> torch.Tensor:
    """The values plus the anchor's standing term (DQNConfig.anchor); the values alone without one."""
    return values if anchor is None else values + anchor.values(nodes, columns)


def td_targets(q_network: NodeScorer, target_network: NodeScorer,
               batch: dict[str, torch.Tensor], bootstrap: str = "max", action_gap: float = 0.0,
               target_here: torch.Tensor | None = None, anchor: SelectorAnchor | None = None) -> torch.Tensor:
    """n-step double DQN's target per transition: the online network picks the next action, the target
    network values it; with `bootstrap` "teacher", the target network's mean value over the teacher's
    choices there (max where the transition's teacher has no standing column); with `action_gap` alpha,
    minus alpha x (the target network's best value of the state minus its value of the taken node), the
    advantage learning operator. `target_here`: the target network's values of the batch's own states,
    when the caller has them already (the Q-filter reads them too). With an `anchor`, every value is the
    network's plus the anchor's term."""
    with torch.no_grad():
        next_state = batch["next_nodes"], batch["next_pod"], batch["next_mask"]
        next_anchor = batch["next_nodes"], batch.get("next_anchor"), anchor
        target_values = anchored(values_by_extent(target_network, *next_state), *next_anchor)
        next_action = anchored(values_by_extent(q_network, *next_state), *next_anchor).argmax(dim=1, keepdim=True)
        next_value = target_values.gather(1, next_action).squeeze(1)
        if bootstrap == "teacher":
            next_value = torch.where(*teacher_value(target_values, batch), next_value)
        next_value = torch.nan_to_num(next_value, nan=0.0, posinf=0.0, neginf=0.0)
        target = batch["ret"] + batch["discount"] * next_value
        if action_gap > 0:
            here = target_here if target_here is not None else target_values_here(target_network, batch, anchor=anchor)
            gap = here.max(dim=1).values - here.gather(1, batch["action"].unsqueeze(1)).squeeze(1)
            target = target - action_gap * torch.nan_to_num(gap, nan=0.0, posinf=0.0, neginf=0.0)
    return target


def head_td_targets(online: Critics, target: Critics, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """[B, heads]: each head's n-step double-DQN target (the critics of DQNConfig.trust_heads): head k of the
    online critics picks the next node, head k of the target critics values it."""
    with torch.no_grad():
        next_state = batch["next_nodes"], batch["next_pod"], batch["next_mask"]
        target_values = values_by_extent(target, *next_state, heads=True)
        picked = values_by_extent(online, *next_state, heads=True).argmax(dim=1, keepdim=True)
        next_value = torch.nan_to_num(target_values.gather(1, picked).squeeze(1), nan=0.0, posinf=0.0, neginf=0.0)
        return batch["ret"].unsqueeze(1) + batch["discount"].unsqueeze(1) * next_value


def taken_values(q: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Each transition's value of the node it took: [B] from [B, N] values, [B, heads] from [B, N, heads]."""
    action = batch["action"].view(-1, 1, *[1] * (q.dim() - 2)).expand(-1, 1, *q.shape[2:])
    return q.gather(1, action).squeeze(1)


def target_values_here(target_network: NodeScorer, batch: dict[str, torch.Tensor],
                       rows: int | None = None, anchor: SelectorAnchor | None = None) -> torch.Tensor:
    """The target network's values of the batch's own states (not the next ones), of its first `rows`."""
    with torch.no_grad():
        values = values_by_extent(target_network, batch["nodes"][:rows], batch["pod"][:rows], batch["mask"][:rows])
        return values if anchor is None else anchored(values, batch["nodes"][:rows], batch["anchor"][:rows], anchor)


def teacher_value(values: torch.Tensor, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(which rows have a teacher's choice to bootstrap on, the mean of `values` [B, N] over it): the
    next state's nodes whose standing under the transition's teacher is 1 (its best, ties included) and
    that have a value."""
    column = batch["teacher"]
    standing = standing_in(batch["next_nodes"], column)
    chosen = (standing >= 1.0 - 1e-6) & batch["next_mask"] & torch.isfinite(values) & (column >= 0).unsqueeze(1)
    count = chosen.sum(dim=1)
    mean = torch.where(chosen, values, torch.zeros_like(values)).sum(dim=1) / count.clamp(min=1)
    return count > 0, mean


def best_of_teachers(q: torch.Tensor, expert: torch.Tensor) -> torch.Tensor:
    """The best value among the teacher's choices `expert` [B, N]: [B] from [B, N] values, [B, heads] from
    [B, N, heads]; -inf where the teacher has none."""
    chosen = expert if q.dim() == 2 else expert.unsqueeze(-1)
    return q.masked_fill(~chosen, float("-inf")).max(dim=1).values


def q_filtered(q_target: torch.Tensor, mask: torch.Tensor, expert: torch.Tensor, margin: float) -> torch.Tensor:
    """Per decision: whether the teacher's best choice is within `margin` of the best node by `q_target`."""
    q_target = q_target.masked_fill(~mask, float("-inf"))
    best = q_target.max(dim=1).values
    best_expert = best_of_teachers(q_target, expert)
    return best_expert >= best - margin


def trusted_departures(q_heads: torch.Tensor, mask: torch.Tensor, expert: torch.Tensor, z: float) -> torch.Tensor:
    """Per decision ([B] bool, from each critic's values [B, N, heads]): whether the critics agree that the
    node outside the teacher's choices they rate best on average is worth more than the best of those
    choices: its gap in each head has a mean more than `z` spreads (over the heads) above zero. One node for
    every head: a head's own best among many others would beat the teacher by its noise alone."""
    q = q_heads.masked_fill(~mask.unsqueeze(-1), float("-inf"))
    other = q.masked_fill(expert.unsqueeze(-1), float("-inf"))
    departure = other.mean(dim=-1).argmax(dim=1)  # -inf (no such node) stays -inf in the mean
    rows = torch.arange(len(q))
    gap = other[rows, departure] - best_of_teachers(q, expert)
    resolved = torch.isfinite(gap).all(dim=1)
    gap = torch.where(torch.isfinite(gap), gap, torch.zeros_like(gap))
    return resolved & (gap.mean(dim=1) - z * gap.std(dim=1) > 0)


def margin_loss(q: torch.Tensor, mask: torch.Tensor, expert: torch.Tensor, margin: float) -> torch.Tensor:
    """Per decision: max over nodes of (Q + margin where the node is not among the teacher's choices)
    minus the best Q among the teacher's choices. Zero once every teacher's choice is worth `margin`
    more than every other node; the teacher's tied choices are all right."""
    q = q.masked_fill(~mask, float("-inf"))
    augmented = (q + margin * (~expert).float()).max(dim=1).values
    best_expert = best_of_teachers(q, expert)
    return augmented - best_expert


def conservative_loss(q: torch.Tensor, mask: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """Per decision: log-sum-exp of the values over the valid nodes minus the taken node's value. It
    pushes every node down in proportion to its softmax weight and the taken one up, so a node the
    replay never takes ends up valued below the ones it does unless TD lifts it."""
    q = q.masked_fill(~mask, float("-inf"))
    return torch.logsumexp(q, dim=1) - q.gather(1, action.unsqueeze(1)).squeeze(1)


def conservative_rows(which: str, demo_rows: int, batch_rows: int) -> slice:
    """The rows of a batch (the demonstrations first) that conservative_loss is on."""
    return {"all": slice(0, batch_rows), "demonstrations": slice(0, demo_rows),
            "interaction": slice(demo_rows, batch_rows)}[which]


def advantage_loss(q: torch.Tensor, advantage: torch.Tensor) -> torch.Tensor:
    """Per decision with at least two measured candidates: the mean squared error between the Q values
    and the measured advantages over those candidates, each centred on its candidates' mean (only the
    differences are measured). Zero on the other decisions."""
    measured = ~torch.isnan(advantage)
    count = measured.sum(dim=1)
    n = count.clamp(min=1).float()
    target = torch.where(measured, advantage, torch.zeros_like(advantage))
    q = torch.where(measured, q, torch.zeros_like(q))
    target = target - (target.sum(dim=1) / n).unsqueeze(1)
    q = q - (q.sum(dim=1) / n).unsqueeze(1)
    error = torch.where(measured, (q - target) ** 2, torch.zeros_like(q)).sum(dim=1) / n
    return error * (count >= 2).float()


# --- training -------------------------------------------------------------------------------------

def margin_pull(cfg: DQNConfig, step: int) -> float:
    """The margin loss's weight at interaction step `step`: from margin_weight down to margin_floor over
    margin_decay of the interaction; with critics (trust_heads), margin_weight throughout (their trust
    lifts it per decision)."""
    if cfg.trust_heads:
        return cfg.margin_weight
    return linear_schedule(cfg.margin_weight, min(cfg.margin_floor, cfg.margin_weight),
                           int(cfg.margin_decay * cfg.total_timesteps), step)


def acting_head(cfg: DQNConfig, rng: np.random.Generator) -> int:
    """Who plays an interaction episode: the served network (0), or with critics (trust_heads) any critic
    k (k = 1..) as likely, as bootstrapped DQN's episodes are (Osband et al. 2016). A critic that plays its
    own departures sees where they lead; one that only watched the served network follow its teacher would
    value them off the states that network visits."""
    return int(rng.integers(0, 1 + cfg.trust_heads)) if cfg.trust_heads else 0


def played_values(values: torch.Tensor, critics: Critics | None, nodes: torch.Tensor, pod: torch.Tensor,
                  mask: torch.Tensor, acting: np.ndarray) -> torch.Tensor:
    """[E, N]: each environment's values under whoever plays its episode (acting_head): the served
    network's `values`, or critic k's."""
    if critics is None or not acting.any():
        return values
    pick = torch.from_numpy(acting)
    by_critic = critics.head_values(nodes, pod, mask)[torch.arange(len(pick)), :, (pick - 1).clamp(min=0)]
    return torch.where((pick > 0).unsqueeze(1), by_critic, values)


def linear_schedule(start: float, end: float, duration: int, t: int) -> float:
    return max(end, start + (end - start) * t / max(duration, 1))


class TrainingReward:
    """The reward as TD sees it: in units of the demonstrations' spread, clipped at `reward_clip`, and
    with `reward_noise` added (its own random stream, so runs without noise draw nothing more)."""

    def __init__(self, cfg: DQNConfig, scale: float, stream: int):
        self.scale, self.clip, self.noise = scale, cfg.reward_clip, cfg.reward_noise
        self.rng = np.random.default_rng([cfg.seed, 0x6E6F, stream])

    def __call__(self, reward: float) -> float:
        clipped = float(np.clip(reward * self.scale, -self.clip, self.clip))
        return clipped + float(self.rng.normal(0.0, self.noise)) if self.noise else clipped


def record_demonstrations(cfg: DQNConfig, plan, teachers, progress: bool,
                          anchor: SelectorAnchor | None = None) -> tuple[Replay, float, dict]:
    """The teachers' decisions on the planned worlds (after each world's burn-in), with n-step
    returns of the rewards in units of their spread (clipped at `reward_clip`); and that unit. Worlds
    are recorded side by side (`workers`), each with its own random stream, so the demonstrations do
    not depend on how many processes recorded them."""
    print(f"recording {len(plan)} worlds x {cfg.demo_decisions} decisions of demonstrations ...", file=sys.stderr)
    jobs = [(cfg, world, teacher) for world, teacher in zip(plan, teachers)]
    with worker_pool(max(1, cfg.workers)) as pool:
        recorded = list(tqdm(pool.map(_record_world, jobs), total=len(jobs), desc="demonstrations",
                             disable=not progress, mininterval=1.0, file=sys.stderr))
    episodes = [steps for steps, _, _, _ in recorded]
    rewards = [step[2] for steps in episodes for step in steps]
    labelled, departed, outside = (sum(r[k] for r in recorded) for k in (1, 2, 3))
    scale = 1.0 / max(float(np.std(rewards)), 1e-6)
    demos = Replay(sum(map(len, episodes)), cfg.max_nodes, anchor, cfg.prioritized, cfg.priority_floor,
                   cfg.trust_heads, cfg.head_share, seed=cfg.seed)
    training_reward = TrainingReward(cfg, scale, stream=0)
    for steps, teacher in zip(episodes, teachers):
        nstep = NStep(cfg.n_step, cfg.gamma, teacher)
        for obs, action, reward, expert, next_obs, terminated, ended, advantage in steps:
            nstep.push(obs, action, training_reward(reward), expert, next_obs, terminated, ended, demos,
                       None if advantage is None else advantage * scale)
    record = {"decisions": len(demos), "reward_mean": float(np.mean(rewards)), "reward_std": float(np.std(rewards)),
              "clipped_share": float(np.mean(np.abs(np.asarray(rewards) * scale) > cfg.reward_clip))}
    if cfg.candidates == "best-latency-tier":
        record["teacher_outside_best_latency_tier"] = outside
    elif cfg.candidates not in ("", "all"):
        record["teacher_outside_ranked"] = outside
    if labelled:
        record["rollout_labels"] = {"decisions": labelled, "departed_from_teacher": departed / labelled}
    return demos, scale, record


def _record_world(job: tuple) -> tuple[list, int, int]:
    """One world's demonstrated steps (run in a worker), how many were labelled by rollouts and departed
    from the teacher there, and how many teacher's choices lay outside the nodes the network ranks."""
    cfg, world, teacher = job
    rng = np.random.default_rng([cfg.demonstration_seed, world[2]])
    env = make_env(cfg)
    obs = warm_start(env, world, teacher, cfg.burn_in, rng)
    rollouts = cfg.rollout_every and (cfg.rollout_futures == 0 or can_draw_afresh(env.sim.world))
    if rollouts:
        branchable(env.sim)  # rollout branches copy the simulation
    steps, labelled, departed, outside = [], 0, 0, 0
    for k in range(cfg.demo_decisions):
        expert = teacher_targets(teacher, env._state, env._pod, cfg.max_nodes, rng) > 0
        advantage = None
        if rollouts and k % cfg.rollout_every == 0:
            advantage, pick = rollout_advantages(cfg, env, teacher, world[2], rng)
            labelled += 1
            cheapest = advantage >= np.nanmax(advantage) - 1e-9  # NaN compares false
            # the teacher's label stands where its choice is among the cheapest, or where the gain over
            # it is within the noise asked (the pick is then the teacher's own choice)
            if cheapest[pick] and not np.any(cheapest & expert):
                departed += 1
                if cfg.rollout_relabel:
                    expert = cheapest
        if cfg.candidates not in ("", "all"):
            ranked = np.zeros_like(expert)
            ranked[explorable(obs, cfg.candidates)] = True
            # a teacher's choice outside the nodes the network ranks (a soft limit given up for energy, a
            # node switched on where a running one had room) teaches nothing: every ranked node is marked
            # right, which makes the margin loss zero there
            inside = expert & ranked
            outside += int(not inside.any())
            expert = inside if inside.any() else ranked
        action = int(rng.choice(np.flatnonzero(expert)))
        next_obs, reward, terminated, truncated, _ = env.step(action)
        steps.append((obs, action, reward, expert, next_obs, terminated,
                      terminated or truncated or k == cfg.demo_decisions - 1, advantage))
        obs = next_obs
        if terminated or truncated:
            break
    return steps, labelled, departed, outside


def explorable(obs: dict, candidates: str) -> np.ndarray:
    """The slots an action may take: the candidates the network ranks (rlscore.core.features.CANDIDATE_SETS)."""
    valid = np.flatnonzero(obs["action_mask"])
    if candidates in ("", "all"):
        return valid
    return valid[ranked_candidates(obs["nodes"][valid], candidates)]


def rollout_advantages(cfg: DQNConfig, env: SchedulingEnv, teacher: str, seed: int,
                       rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """Per node, how much less the candidate rules' choices for the current pod cost than the dearest
    of them when the teacher places the next `rollout_horizon` pods after each (every branch meets the
    world's same future, or the mean over `rollout_futures` futures drawn afresh), in the objective's
    units, NaN on the nodes no candidate chose; and the node the rollouts pick: the cheapest, or the
    teacher's own choice unless the cheapest gains beyond `rollout_confidence` standard errors."""
    sim, policy = env.sim, cfg.policy
    options = {rule_choice(rule, sim, policy, rng) for rule in ROLLOUT_RULES[policy]}
    own = base_choice(teacher, sim, policy, seed)
    options.add(own)
    end = sim.decisions + 1 + cfg.rollout_horizon
    costs = option_costs(sim, options, teacher, policy, seed, end, cfg.rollout_futures, rng)
    means = {c: float(v.mean()) for c, v in costs.items()}
    worst = max(means.values())
    advantage = np.full(cfg.max_nodes, np.nan)
    for c, v in means.items():
        advantage[c] = worst - v
    return advantage, confident_pick(costs, own, cfg.rollout_confidence)


def train(cfg: DQNConfig, init: NodeScorer | None = None) -> tuple[NodeScorer, dict]:
    """Train one policy; returns the online network and the training record for the sidecar."""
    cfg.policy = normalize_policy(cfg.policy)
    cfg.candidates = cfg.candidates or (init.candidates if init is not None else "all")
    # the ablation takes as many gradient steps as the whole run does, all of them on the demonstrations
    interaction_steps = cfg.total_timesteps // cfg.train_frequency
    if cfg.demonstrations_only:
        cfg.td_weight, cfg.total_timesteps = 0.0, 0
    rng = seed_everything(cfg)
    anchor = SelectorAnchor(cfg.anchor, cfg.policy, cfg.anchor_weight, cfg.anchor_on) if cfg.anchor else None
    budget = ThreadBudget(cfg.torch_threads)
    started, commit = time.time(), git_commit()

    log = TrainingLog(cfg, "demonstrations-only" if cfg.demonstrations_only else "dqn")
    if log.directory:
        print(f"TensorBoard logs: {log.directory}", file=sys.stderr)

    # 1-3: worlds, teachers, demonstrations
    plan = world_plan(cfg, cfg.demo_worlds, cfg.demonstration_seed)
    print(f"picking the teachers of {cfg.demo_worlds} worlds ...", file=sys.stderr)
    teachers = assign_teachers(cfg, plan)
    taught: dict[str, dict[str, int]] = {}
    for (name, _, _), teacher in zip(plan, teachers):
        taught.setdefault(name, {}).setdefault(teacher, 0)
        taught[name][teacher] += 1
    # rewards in units of the demonstrations' spread, so that `margin` means the same for every policy
    demos, scale, demo_record = record_demonstrations(cfg, plan, teachers, cfg.progress, anchor)
    teacher_seconds = time.time() - started

    actor = make_actor(cfg, init)  # the served network
    q_network = DuelingQ(actor) if cfg.dueling else actor
    target_network = copy.deepcopy(q_network)
    critics = make_critics(cfg)
    target_critics = copy.deepcopy(critics)
    trained = [*q_network.parameters(), *(critics.trained.parameters() if critics is not None else ())]
    optimizer = torch.optim.Adam(trained, lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
    gradient_steps = 0
    losses = {name: deque(maxlen=500)
              for name in ("td", "margin", "advantage", "conservative", "critics", "trusted")}
    # the ablation takes its extra steps where the full run interacts: both average the same steps
    pretrain = cfg.pretrain_steps + (interaction_steps if cfg.demonstrations_only else 0)
    average_from = cfg.pretrain_steps + int(cfg.average_start * interaction_steps)
    quarters = {cfg.pretrain_steps + (k * interaction_steps) // 4: f"last-q{k}" for k in (1, 2, 3)}
    uniform = AveragedModel(q_network)
    ema = AveragedModel(q_network, multi_avg_fn=get_ema_multi_avg_fn(cfg.ema_decay))
    averaging = cfg.weight_average != "last" or bool(cfg.snapshot_dir)  # ~0.6 ms per step otherwise spent
    checkpoints: dict[str, dict] = {}

    def beta() -> float:
        """Prioritized replay's importance exponent: from priority_beta to 1 over the gradient steps."""
        progress = min(1.0, gradient_steps / max(pretrain + interaction_steps, 1))
        return cfg.priority_beta + (1.0 - cfg.priority_beta) * progress

    def learn(batch: dict[str, torch.Tensor], demo_rows: int, margin_weight: float,
              replay: Replay | None = None) -> None:
        """One gradient step on a batch whose first `demo_rows` come from the demonstrations and the rest
        from `replay` (whose priorities, and the demonstrations', it updates when prioritized)."""
        nonlocal gradient_steps
        budget.check()
        q = anchored(values_by_extent(q_network, batch["nodes"], batch["pod"], batch["mask"]), batch["nodes"],
                     batch["anchor"], anchor)
        judged = (values_by_extent(critics, batch["nodes"], batch["pod"], batch["mask"], heads=True)
                  if critics is not None else None)  # [B, N, critics]
        # the target network's values of these states: advantage learning reads every row, the Q-filter
        # the demonstrations only, so it takes them from advantage learning's pass when there is one
        target_here = (target_values_here(target_network, batch, anchor=anchor)
                       if cfg.td_weight > 0 and cfg.action_gap > 0 else None)
        loss = torch.zeros(())
        weight = batch["weight"]  # prioritized replay's importance weights (all 1 when drawn uniformly)
        if demo_rows and margin_weight > 0:
            mask, expert = batch["mask"][:demo_rows], batch["expert"][:demo_rows]
            m = margin_loss(q[:demo_rows], mask, expert, cfg.margin)
            if judged is not None:
                trusted = trusted_departures(judged[:demo_rows].detach(), mask, expert, cfg.trust_z)
                m = m * (~trusted).float()
                losses["trusted"].append(float(trusted.float().mean()))
            if cfg.q_filter:
                rated = (target_here if target_here is not None
                         else target_values_here(target_network, batch, demo_rows, anchor))
                m = m * q_filtered(rated[:demo_rows], mask, expert, cfg.margin).float()
            loss = loss + margin_weight * (weight[:demo_rows] * m).mean()
            losses["margin"].append(float(m.detach().mean()))
        if demo_rows and cfg.advantage_weight > 0:
            advantage = batch["advantage"][:demo_rows]
            labelled = int((~torch.isnan(advantage)).sum(dim=1).ge(2).sum())
            if labelled:
                a = (weight[:demo_rows] * advantage_loss(q[:demo_rows], advantage)).sum() / labelled
                loss = loss + cfg.advantage_weight * a
                losses["advantage"].append(float(a.detach()))
        if cfg.td_weight > 0:
            # the margin loss shares the online network's pass `q`: one forward and one backward, not two
            target = td_targets(q_network, target_network, batch, cfg.bootstrap, cfg.action_gap, target_here, anchor)
            taken = taken_values(q, batch)
            td = F.smooth_l1_loss(taken, target, reduction="none")
            error = (taken.detach() - target).abs()
            loss = loss + cfg.td_weight * (weight * td).mean()
            losses["td"].append(float(td.detach().mean()))
            if judged is not None:  # each critic on its own share of the rows
                learns = batch["learns"].float()
                critic_td = F.smooth_l1_loss(taken_values(judged, batch), head_td_targets(critics, target_critics, batch),
                                             reduction="none")
                critic_td = (critic_td * learns).sum(dim=1) / learns.sum(dim=1).clamp(min=1)
                loss = loss + cfg.td_weight * (weight * critic_td).mean()
                losses["critics"].append(float(critic_td.detach().mean()))
            demos.reprioritize(batch["index"][:demo_rows], error[:demo_rows])
            if replay is not None:
                replay.reprioritize(batch["index"][demo_rows:], error[demo_rows:])
            rows = conservative_rows(cfg.conservative_rows, demo_rows, len(q))
            if cfg.conservative_weight > 0 and rows.start < rows.stop:
                c = conservative_loss(q[rows], batch["mask"][rows], batch["action"][rows])
                loss = loss + cfg.conservative_weight * (weight[rows] * c).mean()
                losses["conservative"].append(float(c.detach().mean()))
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(q_network.parameters(), cfg.max_grad_norm)
        if critics is not None:
            torch.nn.utils.clip_grad_norm_(critics.trained.parameters(), cfg.max_grad_norm)
        optimizer.step()
        gradient_steps += 1
        log.gradient_step(gradient_steps, losses, margin_weight)
        if gradient_steps % cfg.target_network_frequency == 0:
            target_network.load_state_dict(q_network.state_dict())
            if critics is not None:
                target_critics.load_state_dict(critics.state_dict())
        if averaging:
            ema.update_parameters(q_network)
            if gradient_steps > average_from:
                uniform.update_parameters(q_network)
        if cfg.snapshot_dir and gradient_steps in quarters:
            checkpoints[quarters[gradient_steps]] = copy.deepcopy(q_network.state_dict())

    demo_rows = int(round(cfg.demo_share * cfg.batch_size))

    def learn_from(replay: Replay, margin_weight: float) -> None:
        """One gradient step on a batch of `demo_share` demonstrations and the rest from `replay`."""
        batch = _cat(demos.sample(demo_rows, rng, beta()), replay.sample(cfg.batch_size - demo_rows, rng, beta()))
        learn(batch, demo_rows, margin_weight, replay)

    # 4: pre-training on the demonstrations (the ablation: as many steps as the whole run takes)
    bar = tqdm(range(pretrain), desc=f"pre-training {cfg.policy}", disable=not cfg.progress, mininterval=1.0,
               file=sys.stderr)
    for step in bar:
        learn(demos.sample(cfg.batch_size, rng, beta()), cfg.batch_size, cfg.margin_weight)
        if step % 500 == 0:
            bar.set_postfix(margin=f"{np.mean(losses['margin'] or [0]):.3f}", td=f"{np.mean(losses['td'] or [0]):.3f}")
    bar.close()

    # 5: interaction
    episode_returns: list[float] = []
    env_seconds = 0.0
    on_ray = cfg.total_timesteps > 0 and cfg.actors > 0 and ray_address() is not None
    if on_ray:
        episode_returns, env_seconds = interact_on_ray(cfg, q_network, critics, learn_from, scale, losses, log)
    elif cfg.total_timesteps > 0:
        replay = Replay(cfg.buffer_size, cfg.max_nodes, anchor, cfg.prioritized, cfg.priority_floor,
                        cfg.trust_heads, cfg.head_share, seed=cfg.seed + 1)
        envs = [make_env(cfg) for _ in range(cfg.num_envs)]
        upcoming = worlds(cfg, cfg.seed + 1)

        teacher_of = [""] * len(envs)
        acting = np.zeros(len(envs), dtype=int)  # the head each environment's episode is played by

        def begin(i: int) -> dict:
            world = next(upcoming)
            teacher_of[i] = burn_in_teacher(cfg, world)
            acting[i] = acting_head(cfg, rng)
            return warm_start(envs[i], world, teacher_of[i], cfg.burn_in, rng)

        obs = [begin(i) for i in range(len(envs))]
        played = np.zeros(cfg.num_envs, dtype=int)
        nsteps = [NStep(cfg.n_step, cfg.gamma, teacher_of[i]) for i in range(len(envs))]
        returns = np.zeros(cfg.num_envs)
        training_reward = TrainingReward(cfg, scale, stream=1)
        bar = tqdm(total=cfg.total_timesteps, desc=f"dqn {cfg.policy}", disable=not cfg.progress, mininterval=1.0,
                   file=sys.stderr)
        step = 0
        while step < cfg.total_timesteps:
            epsilon = linear_schedule(cfg.start_e, cfg.end_e, int(cfg.exploration_fraction * cfg.total_timesteps), step)
            stacked = {k: torch.from_numpy(np.stack([o[k] for o in obs])) for k in ("nodes", "pod", "action_mask")}
            with torch.no_grad():
                state = stacked["nodes"], stacked["pod"], stacked["action_mask"].bool()
                values = q_network(*state)
                if anchor is not None:
                    columns = torch.tensor([anchor.column(o) for o in obs])
                    values = anchored(values, stacked["nodes"], columns, anchor)
                values = played_values(values, critics, *state, acting)
                greedy = values.argmax(dim=1).numpy()
            t0 = time.time()
            for i, env in enumerate(envs):
                valid = explorable(obs[i], cfg.candidates)
                action = int(rng.choice(valid)) if rng.random() < epsilon else int(greedy[i])
                next_obs, reward, terminated, truncated, _ = env.step(action)
                returns[i] += reward
                played[i] += 1
                ended = terminated or truncated or played[i] >= cfg.episode_decisions
                nsteps[i].push(obs[i], action, training_reward(reward), None, next_obs, terminated, ended, replay)
                if ended:
                    episode_returns.append(float(returns[i]))
                    log.episodes(step + 1, episode_returns[-1:], epsilon)
                    returns[i], played[i] = 0.0, 0
                    next_obs = begin(i)
                    nsteps[i] = NStep(cfg.n_step, cfg.gamma, teacher_of[i])
                obs[i] = next_obs
                step += 1
                bar.update()
                if step % cfg.train_frequency == 0 and len(replay) >= cfg.batch_size:
                    env_seconds += time.time() - t0
                    learn_from(replay, margin_pull(cfg, step))
                    t0 = time.time()
            env_seconds += time.time() - t0
            if step % 2000 < cfg.num_envs:
                bar.set_postfix(margin=f"{np.mean(losses['margin'] or [0]):.3f}",
                                td=f"{np.mean(losses['td'] or [0]):.3f}", eps=f"{epsilon:.3f}",
                                ret=f"{np.mean(episode_returns[-10:]) if episode_returns else 0:.1f}")
        bar.close()
    log.close()

    averages = {"uniform": uniform, "ema": ema}
    for name, averaged in averages.items():
        if averaged.n_averaged.item() == 0:  # too few steps to reach the average's start: the last weights
            averaged.module.load_state_dict(q_network.state_dict())
    served = {"last": q_network, **{name: averaged.module for name, averaged in averages.items()}}
    actor = _served_actor(served[cfg.weight_average], cfg.dueling)
    algorithm = ("demonstrations only: large-margin loss, no TD, DeepSets scorer" if cfg.demonstrations_only else
                 "DQN from demonstrations: large-margin loss + n-step double-DQN TD, DeepSets scorer, action mask")
    record = training_record(cfg, algorithm, time.time() - started, episode_returns, commit)
    record["training"].update({
        "demonstrations": {**demo_record, "worlds": len(plan), "teachers": taught, "reward_scale": scale,
                           "seconds": round(teacher_seconds, 1)},
        "gradient_steps": gradient_steps, "td_steps": gradient_steps if cfg.td_weight > 0 else 0,
        "interaction_steps": cfg.total_timesteps, "environment_seconds": round(env_seconds, 1),
        "final_losses": {k: round(float(np.mean(v)), 5) if v else None for k, v in losses.items()},
        "threads": budget.wanted, "threads_lowered": budget.lowered,
        "environment_actors": cfg.actors if on_ray else 0,
        "weights": {"served": cfg.weight_average, "uniform_average_steps": int(uniform.n_averaged.item()),
                    "uniform_average_from_step": average_from, "ema_decay": cfg.ema_decay},
    })
    if cfg.snapshot_dir:
        write_snapshots(cfg, {**checkpoints, **{name: net.state_dict() for name, net in served.items()}},
                        q_network, record)
    return actor.eval(), record


def make_critics(cfg: DQNConfig) -> Critics | None:
    """DQNConfig.trust_heads' critics (None without them), the served network's shape and candidates."""
    if not cfg.trust_heads:
        return None
    return Critics(cfg.trust_heads, cfg.hidden, cfg.candidates or "all", cfg.prior_scale)


def _served_actor(q_network: torch.nn.Module, dueling: bool) -> NodeScorer:
    return q_network.advantage if dueling else q_network


def write_snapshots(cfg: DQNConfig, states: dict[str, dict], like: torch.nn.Module, record: dict) -> None:
    """Every way of serving this run, each a model file with the run's sidecar and its own name in it."""
    for name, state in states.items():
        network = copy.deepcopy(like)
        network.load_state_dict(state)
        path = Path(cfg.snapshot_dir) / f"{cfg.policy.lower()}-{name}.safetensors"
        anchor = SelectorAnchor(cfg.anchor, cfg.policy, cfg.anchor_weight, cfg.anchor_on) if cfg.anchor else None
        save_model(path, _served_actor(network, cfg.dueling).eval(), cfg.policy, {**record, "snapshot": name}, anchor)
        print(f"wrote {path}", file=sys.stderr)


# --- interaction on Ray (Ape-X) ------------------------------------------------------------------------

ACTOR_ENVS = 4
"""environments one actor steps side by side (one forward pass for all of them)"""
ACTOR_STEPS = 256
"""environment steps an actor plays per call, with the weights it was handed"""


class EnvironmentActor:
    """A Ray actor: plays its own stream of worlds with the learner's latest weights and returns the
    n-step transitions (observations trimmed to the cluster's nodes) and the returns of finished episodes."""

    def __init__(self, cfg: DQNConfig, index: int, scale: float, carried: list):
        restore_carried(carried)  # a cluster profile's family, registered in the learner's process
        torch.set_num_threads(1)
        self.cfg, self.training_reward = cfg, TrainingReward(cfg, scale, stream=2 + index)
        self.rng = np.random.default_rng([cfg.seed, 1 + index])
        actor = make_actor(cfg)
        self.network = DuelingQ(actor) if cfg.dueling else actor
        self.critics = make_critics(cfg)
        self.worlds = worlds(cfg, cfg.seed + 1 + 7919 * (index + 1))
        self.envs = [make_env(cfg) for _ in range(ACTOR_ENVS)]
        self.teachers = [""] * ACTOR_ENVS
        self.acting = np.zeros(ACTOR_ENVS, dtype=int)
        self.obs = [self._begin(i) for i in range(ACTOR_ENVS)]
        self.nsteps = [NStep(cfg.n_step, cfg.gamma, self.teachers[i]) for i in range(ACTOR_ENVS)]
        self.played = np.zeros(len(self.envs), dtype=int)
        self.returns = np.zeros(len(self.envs))

    def _begin(self, i: int) -> dict:
        world = next(self.worlds)
        self.teachers[i] = burn_in_teacher(self.cfg, world)
        self.acting[i] = acting_head(self.cfg, self.rng)
        return warm_start(self.envs[i], world, self.teachers[i], self.cfg.burn_in, self.rng)

    def play(self, weights: dict, epsilon: float, steps: int) -> tuple[list, list[float], float]:
        cfg, started = self.cfg, time.time()
        self.network.load_state_dict(weights["network"])
        if self.critics is not None:
            self.critics.load_state_dict(weights["critics"])
        out, finished = _Transitions(), []
        for _ in range(max(1, steps // len(self.envs))):
            stacked = {k: torch.from_numpy(np.stack([o[k] for o in self.obs])) for k in ("nodes", "pod", "action_mask")}
            with torch.no_grad():
                state = stacked["nodes"], stacked["pod"], stacked["action_mask"].bool()
                greedy = played_values(self.network(*state), self.critics, *state, self.acting).argmax(dim=1).numpy()
            for i, env in enumerate(self.envs):
                valid = explorable(self.obs[i], cfg.candidates)
                action = int(self.rng.choice(valid)) if self.rng.random() < epsilon else int(greedy[i])
                next_obs, reward, terminated, truncated, _ = env.step(action)
                self.returns[i] += reward
                self.played[i] += 1
                ended = terminated or truncated or self.played[i] >= cfg.episode_decisions
                self.nsteps[i].push(self.obs[i], action, self.training_reward(reward), None, next_obs, terminated,
                                    ended, out)
                if ended:
                    finished.append(float(self.returns[i]))
                    self.returns[i], self.played[i] = 0.0, 0
                    next_obs = self._begin(i)
                    self.nsteps[i] = NStep(cfg.n_step, cfg.gamma, self.teachers[i])
                self.obs[i] = next_obs
        return out.items, finished, time.time() - started


class _Transitions:
    """What NStep flushes, kept as a list (observations trimmed to the cluster's nodes) to send back."""

    def __init__(self):
        self.items: list = []

    def add(self, obs, action, ret, discount, next_obs, expert=None, advantage=None, teacher=-1) -> None:
        """Replay.add's signature; an actor's own transitions have no teacher's choice nor advantage."""
        self.items.append((_trim(obs), action, ret, discount, _trim(next_obs), teacher))


def _trim(obs: dict) -> dict:
    width = int(obs["action_mask"].sum())
    return {"nodes": obs["nodes"][:width].copy(), "pod": obs["pod"], "action_mask": obs["action_mask"][:width].copy()}


def _pad(obs: dict, slots: int) -> dict:
    nodes = np.zeros((slots, obs["nodes"].shape[1]), np.float32)
    nodes[:len(obs["nodes"])] = obs["nodes"]
    mask = np.zeros(slots, obs["action_mask"].dtype)
    mask[:len(obs["action_mask"])] = obs["action_mask"]
    return {"nodes": nodes, "pod": obs["pod"], "action_mask": mask}


def interact_on_ray(cfg: DQNConfig, q_network: torch.nn.Module, critics: Critics | None,
                    learn_from: Callable[[Replay, float], None], scale: float, losses: dict,
                    log: TrainingLog) -> tuple[list[float], float]:
    """The interaction phase with `cfg.actors` EnvironmentActors on the Ray cluster feeding the replay:
    as each actor hands in its steps, it is sent off again with the newest weights there are, and the
    learner takes the gradient steps those steps are worth (one per `train_frequency`) meanwhile. An
    actor whose process dies is restarted (a new stream of worlds); a cluster that goes away ends the
    run with ClusterLost."""
    ray = connect_ray(ray_address())
    cpus = int(ray.cluster_resources().get("CPU", 0))
    if cpus < cfg.actors:  # an actor without a cpu would wait for one for good
        print(f"the Ray cluster has {cpus} cpus: {max(cpus, 1)} environment actors instead of {cfg.actors}",
              file=sys.stderr)
        cfg.actors = max(cpus, 1)
    remote = ray.remote(num_cpus=1, max_restarts=RAY_TASK_RETRIES, max_task_retries=RAY_TASK_RETRIES)(
        EnvironmentActor)
    actors = [remote.remote(cfg, k, scale, carried_state()) for k in range(cfg.actors)]
    replay = Replay(cfg.buffer_size, cfg.max_nodes, alpha=cfg.prioritized, floor=cfg.priority_floor,
                    critics=cfg.trust_heads, head_share=cfg.head_share, seed=cfg.seed + 1)

    def epsilon(step: int) -> float:
        return linear_schedule(cfg.start_e, cfg.end_e, int(cfg.exploration_fraction * cfg.total_timesteps), step)

    def weights():
        def state(module: torch.nn.Module) -> dict:
            return {k: v.detach().clone() for k, v in module.state_dict().items()}
        return ray.put({"network": state(q_network), "critics": state(critics) if critics is not None else None})

    submitted, step, learned, env_seconds, episode_returns = 0, 0, 0, 0.0, []
    current = weights()
    running = {}
    for actor in actors:
        running[actor.play.remote(current, epsilon(0), ACTOR_STEPS)] = actor
        submitted += ACTOR_STEPS
    bar = tqdm(total=cfg.total_timesteps, desc=f"dqn {cfg.policy} ({cfg.actors} actors on Ray)",
               disable=not cfg.progress, mininterval=1.0, file=sys.stderr)
    while running:
        [ref], _ = ray.wait(list(running), num_returns=1)
        actor = running.pop(ref)
        try:
            transitions, finished, seconds = ray.get(ref)
        except ray.exceptions.RayError as error:
            raise ClusterLost(f"DQN on Ray: an environment actor failed for good or the cluster went away "
                              f"({type(error).__name__}: {str(error)[:300]}); no model is written") from None
        for obs, action, ret, discount, next_obs, teacher in transitions:
            replay.add(_pad(obs, cfg.max_nodes), action, ret, discount, _pad(next_obs, cfg.max_nodes), teacher=teacher)
        played = min(ACTOR_STEPS, cfg.total_timesteps - step)
        step += played
        env_seconds += seconds
        episode_returns += finished
        log.episodes(step, finished, epsilon(step))
        bar.update(played)
        # the actor plays on at once with the newest weights there are, while the learner takes the
        # gradient steps its batch is worth (as Ape-X's actors do): an actor waiting for the learner
        # and a learner waiting for the actor would share one core between them
        if submitted < cfg.total_timesteps:
            current = weights()
            running[actor.play.remote(current, epsilon(step), ACTOR_STEPS)] = actor
            submitted += ACTOR_STEPS
        while learned < step // cfg.train_frequency and len(replay) >= cfg.batch_size:
            learn_from(replay, margin_pull(cfg, step))
            learned += 1
        bar.set_postfix(margin=f"{np.mean(losses['margin'] or [0]):.3f}", td=f"{np.mean(losses['td'] or [0]):.3f}",
                        ret=f"{np.mean(episode_returns[-10:]) if episode_returns else 0:.1f}", refresh=False)
    bar.close()
    for actor in actors:
        ray.kill(actor)
    return episode_returns, env_seconds
