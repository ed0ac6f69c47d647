"""What every trainer shares: the hyper-parameters common to all algorithms, seeding, the
environments, and the training record that goes into a model's sidecar."""

from __future__ import annotations

import dataclasses
import random
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from rlscore.core.features import input_columns
from agent.learn.env import SchedulingEnv
from agent.learn.network import NodeScorer
from agent.sim.families import TRAIN_NODES


@dataclass
class TrainConfig:
    policy: str = "EE"
    """EE, LB or EL: which objective the agent learns"""
    total_timesteps: int = 200_000
    """placement decisions to train on"""
    seed: int = 1
    """seeds python, numpy, torch and the environments"""
    reward: str = "outcome"
    """reward variant: outcome (the objective over time), stepwise (a per-decision heuristic score) or thesis"""
    shaping: bool = True
    """potential-based shaping of the outcome reward (leaves the optimal policy unchanged)"""
    energy_potential: str = "committed"
    """the shaping potential's energy: committed (the draw until the pods leave, which the simulator
    knows and the candidates' features do not show) or rate (the draw now, as if it lasted)"""
    shaping_gamma: float = -1.0
    """the factor on Phi(s') in the shaping term: -1 the discount gamma (leaves the optimal policy
    unchanged); 1 charges each decision exactly the cost it commits the cluster to (for energy, the draw it
    adds until the pods leave), the undiscounted total the evaluation measures"""
    gamma: float = 0.99
    """discount: ~100 decisions of horizon, so later consequences of a placement count"""
    families: tuple[str, ...] = ()
    """scenario families drawn per episode (empty: every family of the policy)"""
    min_nodes: int = TRAIN_NODES[0]
    """smallest cluster drawn per episode"""
    max_nodes: int = TRAIN_NODES[1]
    """largest cluster drawn per episode (and observation padding)"""
    node_draw: str = "uniform"
    """how each episode's cluster size is drawn: uniform, or log-uniform (small clusters as often as big)"""
    episode_decisions: int = 256
    """placements per episode"""
    hidden: tuple[int, ...] = (64, 64)
    """equivariant layer widths"""
    candidates: str = ""
    """what the served network ranks: all; best-latency-tier, only the candidates in the pod's best latency
    tier; running-first, only the running nodes when one is a candidate; best-latency-tier-running-first, the
    running nodes of that tier when one is a candidate (the rest rank below them); '': the --init model's, else
    all"""
    blind_to: tuple[str, ...] = ()
    """inputs (feature or group names of rlscore.core.features.INPUT_GROUPS) the served network may not
    read: its first layer's weights on them stay zero"""
    torch_threads: int = 1
    """CPU threads for torch (the networks are small; more threads mostly add overhead)"""
    out: str = "models"
    """directory for <policy>.safetensors and its .json sidecar"""
    log_dir: str = "runs"
    """TensorBoard log directory ('' to disable)"""
    progress: bool = True
    """show a progress bar"""
    init: str = ""
    """start from this model's weights (fine-tuning) instead of random ones"""
    profile: str = ""
    """train on this cluster profile (rlscore-calibrate's output) instead of the scenario families"""
    extra_metadata: dict = field(default_factory=dict)
    """merged into the sidecar (e.g. the evaluation table)"""


def seed_everything(cfg: TrainConfig) -> np.random.Generator:
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(cfg.torch_threads)
    return np.random.default_rng(cfg.seed)


def make_actor(cfg: TrainConfig, init: NodeScorer | None = None) -> NodeScorer:
    """The served network, from `init`'s weights when fine-tuning, blind to `cfg.blind_to`; it ranks
    `cfg.candidates`, which the trainer resolved (an empty setting keeps `init`'s)."""
    actor = NodeScorer(cfg.hidden, candidates=cfg.candidates or "all")
    if init is not None:
        actor.load_state_dict(init.state_dict())
    actor.blind_to(input_columns(cfg.blind_to))
    return actor


def make_env(cfg: TrainConfig) -> SchedulingEnv:
    return SchedulingEnv(cfg.policy, max_nodes=cfg.max_nodes, min_nodes=cfg.min_nodes,
                         families=cfg.families or None, episode_decisions=cfg.episode_decisions,
                         reward=cfg.reward, gamma=cfg.gamma, shaping=cfg.shaping, training=True,
                         node_draw=cfg.node_draw, shaping_gamma=shaping_factor(cfg),
                         energy_potential=cfg.energy_potential)


def shaping_factor(cfg: TrainConfig) -> float | None:
    """TrainConfig.shaping_gamma as the environment takes it (None: the discount)."""
    return None if cfg.shaping_gamma < 0 else cfg.shaping_gamma


class TrainingLog:
    """TensorBoard scalars of a training run under `TrainConfig.log_dir` (`tensorboard --logdir runs`),
    one run directory each: the mean of each loss over its last 500 steps and the margin loss's weight every
    `every` gradient steps, exploration and every finished episode's return by interaction step. With
    log_dir '' it writes nothing (and never imports TensorBoard)."""

    def __init__(self, cfg: TrainConfig, algo: str, every: int = 100):
        self.every, self.writer = every, None
        if cfg.log_dir:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(Path(cfg.log_dir) / f"{cfg.policy.lower()}-{algo}-seed{cfg.seed}-{int(time.time())}")

    @property
    def directory(self) -> str | None:
        return str(self.writer.get_logdir()) if self.writer is not None else None

    def gradient_step(self, step: int, losses: dict, margin_weight: float) -> None:
        """After gradient step `step`: `losses` maps a loss's name to its recent values (empty: not used)."""
        if self.writer is None or step % self.every:
            return
        for name, values in losses.items():
            if values:
                self.writer.add_scalar(f"loss/{name}", float(np.mean(values)), step)
        self.writer.add_scalar("schedule/margin_weight", margin_weight, step)

    def episodes(self, step: int, returns: list[float], epsilon: float) -> None:
        """Episodes that finished by interaction step `step`, and the exploration rate then."""
        if self.writer is None:
            return
        for value in returns:
            self.writer.add_scalar("episode/return", value, step)
        self.writer.add_scalar("schedule/epsilon", epsilon, step)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def git_commit() -> str:
    try:
        here = Path(__file__).parent
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                check=True, cwd=here).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, cwd=here).stdout.strip()
        return commit + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def training_record(cfg: TrainConfig, algorithm: str, seconds: float, episode_returns: list[float],
                    commit: str) -> dict:
    """The sidecar's `training` key; `commit` is `git_commit()` when the run started (the code it ran,
    not the checkout it ended on)."""
    config = dataclasses.asdict(cfg)
    config.pop("extra_metadata")
    return {
        "training": {
            "algorithm": algorithm,
            "steps": cfg.total_timesteps,
            "seed": cfg.seed,
            "reward": cfg.reward,
            "seconds": round(seconds, 1),
            "steps_per_second": round(cfg.total_timesteps / max(seconds, 1e-9), 1),
            "final_mean_episode_return": float(np.mean(episode_returns[-20:])) if episode_returns else None,
            "hyperparameters": config,
            "git_commit": commit,
            "torch": torch.__version__,
        }
    }
