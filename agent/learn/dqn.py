"""Double DQN over the DeepSets scorer, with n-step returns, in one file you can read top to bottom
(after cleanrl's dqn.py). Every hyper-parameter is in DQNConfig; `rlscore-train --help` lists them.

Episodes draw a scenario family and a node count at random, so one policy learns clusters of every
size and situation it will meet; the equivariant network carries it to larger ones.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F
from tqdm import tqdm

from agent.learn.common import TrainConfig, make_actor, make_env, seed_everything, tensorboard, training_record
from agent.learn.network import NodeScorer
from rlscore.core.state import normalize_policy


@dataclass
class DQNConfig(TrainConfig):
    learning_rate: float = 5e-4
    """Adam step size"""
    buffer_size: int = 50_000
    """replay buffer capacity (transitions)"""
    n_step: int = 8
    """rewards summed before bootstrapping: carries a consequence back 8 decisions per update"""
    target_network_frequency: int = 500
    """steps between copies of the online network into the target network"""
    batch_size: int = 128
    """transitions per gradient step"""
    start_e: float = 1.0
    """initial exploration rate"""
    end_e: float = 0.03
    """final exploration rate"""
    exploration_fraction: float = 0.3
    """share of total_timesteps over which epsilon decays linearly"""
    learning_starts: int = 2_000
    """random steps that fill the buffer before learning starts"""
    train_frequency: int = 2
    """environment steps per gradient step"""
    max_grad_norm: float = 10.0
    """gradient clipping (global L2 norm)"""
    reward_scale: float = 0.05
    """rewards are multiplied by this before learning (shaped outcome rewards are large)"""


def linear_schedule(start: float, end: float, duration: int, t: int) -> float:
    return max(end, start + (end - start) * t / max(duration, 1))


class ReplayBuffer:
    """Fixed-size ring buffer of padded observations; masks of next states are kept for the
    double-DQN target, which may only pick a candidate node. `discount` is gamma^steps of the
    n-step return stored with each transition."""

    def __init__(self, size: int, max_nodes: int, node_features: int, pod_features: int):
        self.size, self.pos, self.full = size, 0, False
        self.nodes = np.zeros((size, max_nodes, node_features), np.float32)
        self.pod = np.zeros((size, pod_features), np.float32)
        self.mask = np.zeros((size, max_nodes), bool)
        self.next_nodes = np.zeros_like(self.nodes)
        self.next_pod = np.zeros_like(self.pod)
        self.next_mask = np.zeros_like(self.mask)
        self.action = np.zeros(size, np.int64)
        self.reward = np.zeros(size, np.float32)
        self.discount = np.zeros(size, np.float32)

    def add(self, obs, action, reward, next_obs, discount) -> None:
        i = self.pos
        self.nodes[i], self.pod[i], self.mask[i] = obs["nodes"], obs["pod"], obs["action_mask"]
        self.next_nodes[i], self.next_pod[i] = next_obs["nodes"], next_obs["pod"]
        self.next_mask[i] = next_obs["action_mask"]
        self.action[i], self.reward[i], self.discount[i] = action, reward, discount
        self.pos = (i + 1) % self.size
        self.full = self.full or self.pos == 0

    def sample(self, batch: int, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        idx = rng.integers(0, self.size if self.full else self.pos, batch)
        return {k: torch.from_numpy(getattr(self, k)[idx]) for k in
                ("nodes", "pod", "mask", "next_nodes", "next_pod", "next_mask", "action", "reward", "discount")}


def to_tensors(obs: dict[str, np.ndarray]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return (torch.from_numpy(obs["nodes"]).unsqueeze(0), torch.from_numpy(obs["pod"]).unsqueeze(0),
            torch.from_numpy(obs["action_mask"].astype(bool)).unsqueeze(0))


def train(cfg: DQNConfig, init: NodeScorer | None = None) -> tuple[NodeScorer, dict]:
    """Train one policy; returns the online network and the training record for the sidecar."""
    cfg.policy = normalize_policy(cfg.policy)
    rng = seed_everything(cfg)
    env = make_env(cfg)
    q_network = make_actor(cfg, init)
    target_network = NodeScorer(cfg.hidden)
    target_network.load_state_dict(q_network.state_dict())
    optimizer = torch.optim.Adam(q_network.parameters(), lr=cfg.learning_rate)
    buffer = ReplayBuffer(cfg.buffer_size, cfg.max_nodes, q_network.node_features, q_network.pod_features)
    writer = tensorboard(cfg, "dqn")

    start = time.time()
    obs, _ = env.reset(seed=cfg.seed)
    pending: deque = deque()  # the last n (obs, action, reward) of this episode, for n-step returns
    episode_return, episode_returns, losses = 0.0, [], []
    bar = tqdm(range(cfg.total_timesteps), desc=f"dqn {cfg.policy}", disable=not cfg.progress,
               mininterval=1.0, file=sys.stderr)
    for step in bar:
        # Epsilon-greedy over the candidate nodes only.
        epsilon = linear_schedule(cfg.start_e, cfg.end_e, int(cfg.exploration_fraction * cfg.total_timesteps), step)
        valid = np.flatnonzero(obs["action_mask"])
        if (init is None and step < cfg.learning_starts) or rng.random() < epsilon:
            action = int(rng.choice(valid))
        else:
            with torch.no_grad():
                action = int(q_network(*to_tensors(obs)).argmax(dim=1).item())

        next_obs, reward, terminated, truncated, _ = env.step(action)
        episode_return += reward
        pending.append((obs, action, reward * cfg.reward_scale))
        if len(pending) == cfg.n_step or terminated or truncated:
            # Flush n-step transitions: all of them at an episode's end, else the oldest. A terminal
            # state is not bootstrapped (discount 0); a truncated one is (time limit, not an end).
            while pending:
                ret = sum(r * cfg.gamma**k for k, (_, _, r) in enumerate(pending))
                first_obs, first_action, _ = pending[0]
                discount = 0.0 if terminated else cfg.gamma ** len(pending)
                buffer.add(first_obs, first_action, ret, next_obs, discount)
                pending.popleft()
                if not (terminated or truncated):
                    break
        obs = next_obs
        if terminated or truncated:
            episode_returns.append(episode_return)
            if writer:
                writer.add_scalar("charts/episodic_return", episode_return, step)
            episode_return = 0.0
            obs, _ = env.reset()

        if step >= cfg.learning_starts and step % cfg.train_frequency == 0:
            batch = buffer.sample(cfg.batch_size, rng)
            with torch.no_grad():
                # Double DQN: the online network picks the next action, the target network values it.
                next_online = q_network(batch["next_nodes"], batch["next_pod"], batch["next_mask"])
                next_action = next_online.argmax(dim=1, keepdim=True)
                next_target = target_network(batch["next_nodes"], batch["next_pod"], batch["next_mask"])
                next_value = next_target.gather(1, next_action).squeeze(1)
                next_value = torch.where(torch.isfinite(next_value), next_value, torch.zeros_like(next_value))
                td_target = batch["reward"] + batch["discount"] * next_value
            q = q_network(batch["nodes"], batch["pod"], batch["mask"]).gather(
                1, batch["action"].unsqueeze(1)).squeeze(1)
            loss = F.smooth_l1_loss(q, td_target)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(q_network.parameters(), cfg.max_grad_norm)
            optimizer.step()
            losses.append(loss.item())
            if writer and step % 500 == 0:
                writer.add_scalar("losses/td_loss", loss.item(), step)
                writer.add_scalar("losses/q_values", q.mean().item(), step)
                writer.add_scalar("charts/epsilon", epsilon, step)
            if step % 1000 == 0 and episode_returns:
                bar.set_postfix(loss=f"{np.mean(losses[-200:]):.4f}",
                                ret=f"{np.mean(episode_returns[-10:]):.1f}", eps=f"{epsilon:.2f}")

        if step % cfg.target_network_frequency == 0:
            target_network.load_state_dict(q_network.state_dict())

    bar.close()
    if writer:
        writer.close()
    record = training_record(cfg, "double DQN, n-step returns, DeepSets scorer, action mask",
                             time.time() - start, episode_returns)
    return q_network.eval(), record
