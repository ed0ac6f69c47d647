"""Gymnasium environment `rlscore/Scheduling-v0`: one step = place one pod on one node.

Each episode draws a scenario family and a world from it (node count, hardware, workload; see
agent.sim.families). The observation pads the feature matrix of the feasible nodes to `max_nodes`
slots; the action is a slot; `action_masks()` (and the observation's `action_mask`) mark the slots
holding a feasible node. Features come from `rlscore.core.features.node_features` on exactly the feasible
set, as at serving time; rewards from `agent.learn.rewards`.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from agent.learn.rewards import INVALID_ACTION_REWARD, REWARD_VARIANTS, STEPWISE, thesis_reward
from agent.sim.families import TRAIN_NODES, check_node_draw, draw_node_count, families_for, family
from agent.sim.outcomes import OutcomeReward
from agent.sim.simulator import Simulation
from rlscore.core.features import FEATURE_CLIP, NUM_NODE_FEATURES, NUM_POD_FEATURES, node_features
from rlscore.core.state import latency_tiers, normalize_policy

MAX_EPISODE_DECISIONS = 4096


class SchedulingEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, policy: str = "EE", max_nodes: int = TRAIN_NODES[1], min_nodes: int = TRAIN_NODES[0],
                 families: tuple[str, ...] | None = None, episode_decisions: int = 256,  # at least; see reset
                 reward: str = "outcome", gamma: float = 0.99, shaping: bool = True, training: bool = True,
                 node_draw: str = "uniform", shaping_gamma: float | None = None, energy_potential: str = "committed"):
        self.policy = normalize_policy(policy)
        if not 1 <= min_nodes <= max_nodes:
            raise ValueError(f"need 1 <= min_nodes <= max_nodes, got {min_nodes}, {max_nodes}")
        if reward not in REWARD_VARIANTS:
            raise ValueError(f"unknown reward variant {reward!r}: expected one of {', '.join(REWARD_VARIANTS)}")
        self.max_nodes, self.min_nodes = max_nodes, min_nodes
        self.node_draw = check_node_draw(node_draw)  # refused here, before the first reset
        self.families = tuple(families or families_for(self.policy))
        for name in self.families:
            family(name)  # unknown: a ValueError naming the known ones
        self.episode_decisions = episode_decisions
        self.reward_variant = reward
        self.outcome = OutcomeReward(self.policy, gamma, shaping, shaping_gamma)
        self.energy_potential = energy_potential
        self.training = training
        self.limits = self.policy == "EL"  # EL learns to read latency limits; EE and LB pods carry none
        self.observation_space = spaces.Dict({
            "nodes": spaces.Box(0.0, FEATURE_CLIP, (max_nodes, NUM_NODE_FEATURES), np.float32),
            "pod": spaces.Box(0.0, FEATURE_CLIP, (NUM_POD_FEATURES,), np.float32),
            "action_mask": spaces.MultiBinary(max_nodes),
        })
        self.action_space = spaces.Discrete(max_nodes)
        self.sim: Simulation | None = None
        self._obs: dict[str, np.ndarray] | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = options or {}
        nodes = int(options.get("nodes") or draw_node_count(self.np_random, self.min_nodes, self.max_nodes,
                                                            self.node_draw))
        if not 1 <= nodes <= self.max_nodes:
            raise ValueError(f"options['nodes'] must be in 1..{self.max_nodes}, got {nodes}")
        name = options.get("family") or str(self.np_random.choice(self.families))
        self.sim = Simulation.of_family(name, int(self.np_random.integers(2**31)), nodes, self.limits, self.training)
        # long enough to fill the world about three times over: steady state is what a cluster lives in
        self._episode_length = int(min(max(self.episode_decisions, 3 * self.sim.world.pods_alive), MAX_EPISODE_DECISIONS))
        self.sim.next_decision()
        return self._observe(), self._info()

    def _observe(self) -> dict[str, np.ndarray]:
        assert self.sim is not None
        self._state, self._pod = self.sim.candidate_state(self.policy)
        self._potential = self.sim.potential(self.policy, self.outcome.gamma, self.energy_potential)
        features, pod_vec = node_features(self._state, self._pod)
        n = len(self._state)
        if n > self.max_nodes:
            raise RuntimeError(f"{n} candidate nodes do not fit the {self.max_nodes} observation slots")
        nodes = np.zeros((self.max_nodes, NUM_NODE_FEATURES), dtype=np.float32)
        mask = np.zeros(self.max_nodes, dtype=np.int8)
        nodes[:n] = features
        mask[:n] = 1
        self._obs = {"nodes": nodes, "pod": pod_vec, "action_mask": mask}
        return self._obs

    def action_masks(self) -> np.ndarray:
        assert self._obs is not None, "call reset() first"
        return self._obs["action_mask"].astype(bool)

    def _info(self, **extra: Any) -> dict[str, Any]:
        assert self.sim is not None
        cluster = self.sim.cluster
        return {"family": self.sim.world.family, "nodes": len(cluster),
                "active_nodes": int(np.sum(cluster.active())), "unschedulable": self.sim.ledger.unschedulable,
                **extra}

    def step(self, action):
        assert self.sim is not None and self._obs is not None, "call reset() first"
        action = int(action)
        before = self.sim.ledger.copy()
        terminated = False
        if not (0 <= action < self.max_nodes and self._obs["action_mask"][action]):
            # An invalid slot: the pod stays pending; the agent is told so and sees the next pod.
            r, extra = INVALID_ACTION_REWARD, {"invalid_action": True}
            self.sim.skip()
        else:
            r = 0.0
            if self.reward_variant == "stepwise":
                r = STEPWISE[self.policy](self._state, self._pod, action)
            elif self.reward_variant == "thesis":
                r, terminated = thesis_reward(self.policy, self._state, self._pod, action)
            tiers = latency_tiers(self._state, self._pod)
            extra = {"invalid_action": False, "latency_ms": float(self._state.latency_ms[action]),
                     "latency_tier": int(tiers[action]), "best_latency_tier": int(tiers.max())}
            self.sim.place(action)
        self.sim.next_decision()
        potential_before = self._potential
        obs = self._observe()
        if self.reward_variant == "outcome" and not extra["invalid_action"]:
            r = self.outcome(self.sim.ledger.minus(before), self.sim.units, potential_before, self._potential)
        truncated = self.sim.decisions >= self._episode_length
        return obs, float(r), terminated, truncated, self._info(**extra)
