"""Gymnasium environment `rlscore/Scheduling-v0`: one step = place one pod on one node.

The observation pads the feature matrix of the feasible nodes to `max_nodes` slots; the action is a
slot; `action_masks()` (and the observation's `action_mask`) mark the slots holding a feasible node.
Features come from `agent.features.node_features` on exactly the feasible set, as at serving time.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from agent.features import FEATURE_CLIP, NUM_NODE_FEATURES, NUM_POD_FEATURES, latency_tiers, node_features
from agent.learn.rewards import INVALID_ACTION_REWARD, reward
from agent.sim.scenarios import SCENARIOS, LatencyLimits
from agent.sim.simulator import Simulation
from agent.state import normalize_policy


class SchedulingEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, policy: str = "EE", max_nodes: int = 32, min_nodes: int = 2,
                 scenarios: tuple[str, ...] | None = None, episode_decisions: int = 200,
                 churn: bool = True, latency_limits: bool | None = None,
                 heterogeneous: bool = True):
        self.policy = normalize_policy(policy)
        if not 1 <= min_nodes <= max_nodes:
            raise ValueError(f"need 1 <= min_nodes <= max_nodes, got {min_nodes}, {max_nodes}")
        self.max_nodes, self.min_nodes = max_nodes, min_nodes
        self.scenarios = tuple(scenarios or SCENARIOS)
        for name in self.scenarios:
            if name not in SCENARIOS:
                raise ValueError(f"unknown scenario {name!r}: expected one of {', '.join(SCENARIOS)}")
        self.episode_decisions = episode_decisions
        self.churn = churn
        self.heterogeneous = heterogeneous
        # EL learns to read latency limits; EE and LB pods carry none unless asked.
        enabled = self.policy == "EL" if latency_limits is None else latency_limits
        self.limits = LatencyLimits(enabled=enabled, jitter=enabled)
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
        nodes = int(options.get("nodes") or self.np_random.integers(self.min_nodes, self.max_nodes + 1))
        if not 1 <= nodes <= self.max_nodes:
            raise ValueError(f"options['nodes'] must be in 1..{self.max_nodes}, got {nodes}")
        scenario = options.get("scenario") or str(self.np_random.choice(self.scenarios))
        self.sim = Simulation(scenario, nodes, int(self.np_random.integers(2**31)), self.limits,
                              churn=self.churn, heterogeneous=self.heterogeneous)
        self.sim.next_decision()
        return self._observe(), self._info()

    def _observe(self) -> dict[str, np.ndarray]:
        assert self.sim is not None
        self._state, self._pod = self.sim.candidate_state()
        features, pod_vec = node_features(self._state, self._pod)
        n = len(self._state)
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
        return {"scenario": self.sim.scenario, "nodes": len(cluster),
                "active_nodes": int(np.sum(cluster.present & (cluster.pods > 0))),
                "unschedulable": self.sim.unschedulable, **extra}

    def step(self, action):
        assert self.sim is not None and self._obs is not None, "call reset() first"
        action = int(action)
        if not (0 <= action < self.max_nodes and self._obs["action_mask"][action]):
            # An invalid slot: the pod stays pending; the agent is told so and sees the next pod.
            r, extra = INVALID_ACTION_REWARD, {"invalid_action": True}
            self.sim.unschedulable += 1
            self.sim.decisions += 1
            self.sim.pod = None
        else:
            r = reward(self.policy, self._state, self._pod, action)
            tiers = latency_tiers(self._state, self._pod)
            extra = {"invalid_action": False, "latency_ms": float(self._state.latency_ms[action]),
                     "latency_tier": int(tiers[action]), "best_latency_tier": int(tiers.max())}
            self.sim.place(action)
        self.sim.next_decision()
        truncated = self.sim.decisions >= self.episode_decisions
        return self._observe(), float(r), False, truncated, self._info(**extra)
