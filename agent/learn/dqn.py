"""Double DQN over the DeepSets Q-network, in one file you can read top to bottom (after cleanrl's
dqn.py). Every hyper-parameter is in TrainConfig; `rlscore-train --help` lists them.

Episodes draw a node count in [min_nodes, max_nodes] and a scenario at random, so one policy learns
clusters of every size it will meet; the equivariant network carries it to larger ones.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import gymnasium
import numpy as np
import torch
from torch.nn import functional as F
from tqdm import tqdm

import agent  # noqa: F401  (registers the environment)
from agent import ENV_ID
from agent.learn.model_io import save_model
from agent.learn.network import QNetwork
from agent.state import POLICIES, normalize_policy


@dataclass
class TrainConfig:
    policy: str = "EE"
    """EE, LB or EL: which reward the agent learns"""
    total_timesteps: int = 20_000
    """placement decisions to train on"""
    seed: int = 1
    """seeds python, numpy, torch and the environment"""
    learning_rate: float = 1e-3
    """Adam step size"""
    buffer_size: int = 30_000
    """replay buffer capacity (transitions)"""
    gamma: float = 0.5
    """discount: a placement's consequences are mostly immediate; a short horizon keeps targets
    low-variance, so training takes minutes"""
    target_network_frequency: int = 250
    """steps between copies of the online network into the target network"""
    batch_size: int = 128
    """transitions per gradient step"""
    start_e: float = 1.0
    """initial exploration rate"""
    end_e: float = 0.05
    """final exploration rate"""
    exploration_fraction: float = 0.4
    """share of total_timesteps over which epsilon decays linearly"""
    learning_starts: int = 1_000
    """random steps that fill the buffer before learning starts"""
    train_frequency: int = 2
    """environment steps per gradient step"""
    max_grad_norm: float = 10.0
    """gradient clipping (global L2 norm)"""
    hidden: tuple[int, ...] = (64, 64)
    """equivariant layer widths"""
    min_nodes: int = 2
    """smallest cluster drawn per episode"""
    max_nodes: int = 32
    """largest cluster drawn per episode (and observation padding)"""
    scenarios: tuple[str, ...] = ("test1", "test2", "poisson", "latency-shift")
    """arrival scenarios drawn per episode"""
    episode_decisions: int = 200
    """placements per episode"""
    churn: bool = True
    """nodes leave and join during training episodes"""
    torch_threads: int = 1
    """CPU threads for torch (the network is small; more threads mostly add overhead)"""
    out: str = "models"
    """directory for <policy>.pt and its .json sidecar"""
    log_dir: str = "runs"
    """TensorBoard log directory ('' to disable)"""
    progress: bool = True
    """show a progress bar"""
    extra_metadata: dict = field(default_factory=dict)
    """merged into the sidecar (e.g. the evaluation table)"""


def linear_schedule(start: float, end: float, duration: int, t: int) -> float:
    return max(end, start + (end - start) * t / max(duration, 1))


class ReplayBuffer:
    """Fixed-size ring buffer of padded observations; masks of next states are kept for the
    double-DQN target, which may only pick a candidate node."""

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
        self.done = np.zeros(size, np.float32)

    def add(self, obs, action, reward, next_obs, done) -> None:
        i = self.pos
        self.nodes[i], self.pod[i], self.mask[i] = obs["nodes"], obs["pod"], obs["action_mask"]
        self.next_nodes[i], self.next_pod[i] = next_obs["nodes"], next_obs["pod"]
        self.next_mask[i] = next_obs["action_mask"]
        self.action[i], self.reward[i], self.done[i] = action, reward, done
        self.pos = (i + 1) % self.size
        self.full = self.full or self.pos == 0

    def sample(self, batch: int, rng: np.random.Generator) -> dict[str, torch.Tensor]:
        idx = rng.integers(0, self.size if self.full else self.pos, batch)
        return {k: torch.from_numpy(getattr(self, k)[idx]) for k in
                ("nodes", "pod", "mask", "next_nodes", "next_pod", "next_mask", "action", "reward", "done")}


def to_tensors(obs: dict[str, np.ndarray]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return (torch.from_numpy(obs["nodes"]).unsqueeze(0), torch.from_numpy(obs["pod"]).unsqueeze(0),
            torch.from_numpy(obs["action_mask"].astype(bool)).unsqueeze(0))


def git_commit() -> str:
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                check=True, cwd=Path(__file__).parent).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, cwd=Path(__file__).parent).stdout.strip()
        return commit + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def train(cfg: TrainConfig) -> tuple[QNetwork, dict]:
    """Train one policy; returns the online network and the training record for the sidecar."""
    cfg.policy = normalize_policy(cfg.policy)
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(cfg.torch_threads)
    rng = np.random.default_rng(cfg.seed)

    env = gymnasium.make(ENV_ID, policy=cfg.policy, max_nodes=cfg.max_nodes, min_nodes=cfg.min_nodes,
                         scenarios=cfg.scenarios, episode_decisions=cfg.episode_decisions,
                         churn=cfg.churn).unwrapped
    q_network = QNetwork(cfg.hidden)
    target_network = QNetwork(cfg.hidden)
    target_network.load_state_dict(q_network.state_dict())
    optimizer = torch.optim.Adam(q_network.parameters(), lr=cfg.learning_rate)
    buffer = ReplayBuffer(cfg.buffer_size, cfg.max_nodes, q_network.node_features, q_network.pod_features)
    writer = None
    if cfg.log_dir:
        from torch.utils.tensorboard import SummaryWriter
        writer = SummaryWriter(f"{cfg.log_dir}/{cfg.policy.lower()}-seed{cfg.seed}-{int(time.time())}")

    start = time.time()
    obs, _ = env.reset(seed=cfg.seed)
    episode_return, episode_returns, losses = 0.0, [], []
    bar = tqdm(range(cfg.total_timesteps), desc=f"train {cfg.policy}", disable=not cfg.progress,
               mininterval=1.0, file=sys.stderr)
    for step in bar:
        # Epsilon-greedy over the candidate nodes only.
        epsilon = linear_schedule(cfg.start_e, cfg.end_e, int(cfg.exploration_fraction * cfg.total_timesteps), step)
        valid = np.flatnonzero(obs["action_mask"])
        if step < cfg.learning_starts or rng.random() < epsilon:
            action = int(rng.choice(valid))
        else:
            with torch.no_grad():
                action = int(q_network(*to_tensors(obs)).argmax(dim=1).item())

        next_obs, reward, terminated, truncated, _ = env.step(action)
        # Truncation is a time limit, not a terminal state: bootstrap through it.
        buffer.add(obs, action, reward, next_obs, float(terminated))
        episode_return += reward
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
                td_target = batch["reward"] + cfg.gamma * next_value * (1.0 - batch["done"])
            q = q_network(batch["nodes"], batch["pod"], batch["mask"]).gather(
                1, batch["action"].unsqueeze(1)).squeeze(1)
            loss = F.smooth_l1_loss(q, td_target)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(q_network.parameters(), cfg.max_grad_norm)
            optimizer.step()
            losses.append(loss.item())
            if writer and step % 200 == 0:
                writer.add_scalar("losses/td_loss", loss.item(), step)
                writer.add_scalar("losses/q_values", q.mean().item(), step)
                writer.add_scalar("charts/epsilon", epsilon, step)
            if step % 500 == 0 and episode_returns:
                bar.set_postfix(loss=f"{np.mean(losses[-200:]):.4f}",
                                ret=f"{np.mean(episode_returns[-10:]):.1f}", eps=f"{epsilon:.2f}")

        if step % cfg.target_network_frequency == 0:
            target_network.load_state_dict(q_network.state_dict())

    bar.close()
    if writer:
        writer.close()
    seconds = time.time() - start
    config = dataclasses.asdict(cfg)
    config.pop("extra_metadata")
    record = {
        "training": {
            "algorithm": "double DQN, DeepSets Q-network, action mask",
            "steps": cfg.total_timesteps,
            "seed": cfg.seed,
            "seconds": round(seconds, 1),
            "steps_per_second": round(cfg.total_timesteps / max(seconds, 1e-9), 1),
            "final_mean_episode_return": float(np.mean(episode_returns[-10:])) if episode_returns else None,
            "hyperparameters": config,
            "git_commit": git_commit(),
            "torch": torch.__version__,
        }
    }
    return q_network.eval(), record


def save_trained(cfg: TrainConfig, network: QNetwork, record: dict) -> Path:
    path = Path(cfg.out) / f"{cfg.policy.lower()}.pt"
    return save_model(path, network, cfg.policy, {**record, **cfg.extra_metadata})


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlscore-train", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    defaults = TrainConfig()
    parser.add_argument("--policy", required=True, type=str.upper, choices=POLICIES)
    parser.add_argument("--timesteps", type=int, default=defaults.total_timesteps, help="placement decisions")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--out", default=defaults.out, help="output directory for <policy>.pt + .json")
    parser.add_argument("--log-dir", default=defaults.log_dir, help="TensorBoard logs ('' disables)")
    parser.add_argument("--no-eval", action="store_true",
                        help="skip the evaluation recorded in the sidecar")
    parser.add_argument("--no-progress", action="store_true")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.timesteps < 1:
        print("rlscore-train: --timesteps must be >= 1", file=sys.stderr)
        return 2
    cfg = TrainConfig(policy=args.policy, total_timesteps=args.timesteps, seed=args.seed, out=args.out,
                      log_dir=args.log_dir, progress=not args.no_progress)
    network, record = train(cfg)
    record["training"]["command"] = "rlscore-train " + " ".join(argv if argv is not None else sys.argv[1:])
    path = save_trained(cfg, network, record)
    if not args.no_eval:
        # Record how the policy does against the baselines on held-out seeds, in the sidecar.
        from agent.evaluate.compare import evaluate_shipped_model
        evaluate_shipped_model(path)
    print(f"wrote {path} ({record['training']['seconds']} s, "
          f"{record['training']['steps_per_second']} steps/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
