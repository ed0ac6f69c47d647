"""The RL tuner (after Learning to Score): a policy that picks the next score configuration to try
from what it has seen so far, trained across many randomized clusters and workloads.

- Action: one configuration of `search_space.CATALOGUE` not tried yet.
- Observation: coarse facts about the cluster and workload (`domain_features`: policy, size, node
  type mix, power curves known or not, latency limits, load, usage against requests, pod sizes,
  cpu/memory mix), never its node-level detail; plus the trials so far (which entries, and the
  improvement each gave over the default weights) and how many trials are left.
- Reward: the best improvement over the default weights within the trial budget (an operator keeps
  the default when nothing beats it, so it counts from 0), paid as the best-so-far grows.

Training runs on a table: for each training cluster, every catalogue entry's improvement on that
cluster's replay is simulated once (the expensive part, in parallel); episodes then draw clusters
and play the trial sequence against the table, so millions of trial steps cost seconds. The gradient
is REINFORCE with a leave-one-out baseline over several episodes of the same cluster.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from agent.sim.world import World
from rlscore.core.state import POLICIES
from agent.tune.kube_scores import ScoreConfig
from agent.tune.trials import TrialLog, TuningTask

TUNER_FORMAT = "rlscore-tuner-v1"
DOMAIN_FEATURES = (
    "policy_ee", "policy_lb", "policy_el", "log2_nodes", "node_types", "cpu_capacity_cv", "power_known",
    "watts_per_core_cv", "latency_limited_share", "load", "usage_mean", "usage_spread", "pod_to_node_cpu",
    "memory_per_cpu_spread", "large_pod_share", "churn", "metrics_interval",
)


def domain_features(world: World, policy: str) -> np.ndarray:
    """Coarse facts an operator knows about a cluster, each scaled to about 0..1."""
    cpu = np.array([n.hardware.cpu_millicores for n in world.nodes])
    watts = np.array([n.hardware.power_max_watts for n in world.nodes]) / (cpu / 1000.0)
    weights = np.array([c.weight for c in world.pod_classes], dtype=float)
    weights = weights / weights.sum()
    usage_mid = np.array([np.mean(c.usage) for c in world.pod_classes])
    pod_cpu = np.array([np.mean(c.cpu_millicores) for c in world.pod_classes])
    mem_mid = np.array([np.mean(c.memory_per_cpu_gib) for c in world.pod_classes])
    limited = np.array([bool(c.latency_limits) for c in world.pod_classes], dtype=float)
    big = np.array([max(c.cpu_millicores) >= 0.25 * cpu.mean() for c in world.pod_classes], dtype=float)
    load = world.load if world.arrivals == "poisson" else min(1.0, world.pods_alive * float(pod_cpu @ weights)
                                                               / world.total_cpu_millicores)
    values = [
        *(1.0 if policy == p else 0.0 for p in POLICIES),
        np.log2(world.size) / 7.0,
        len({n.hardware for n in world.nodes}) / 4.0,
        float(cpu.std() / cpu.mean()),
        1.0 if world.power_visible else 0.0,
        float(watts.std() / watts.mean()) if world.power_visible else 0.0,
        float(limited @ weights),
        float(load),
        float(usage_mid @ weights),
        float(usage_mid.max() - usage_mid.min()),
        float(np.log2(1.0 + 100.0 * float(pod_cpu @ weights) / cpu.mean()) / 7.0),
        float((mem_mid.max() - mem_mid.min()) / max(mem_mid.mean(), 1e-9)),
        float(big @ weights),
        1.0 if world.churn else 0.0,
        world.metrics_interval_s / 10.0,
    ]
    return np.clip(np.nan_to_num(np.array(values, dtype=np.float32)), -5.0, 5.0)


class TunerNetwork(nn.Module):
    def __init__(self, domain_dim: int, actions: int, hidden: int = 128):
        super().__init__()
        self.domain_dim, self.actions, self.hidden = domain_dim, actions, hidden
        self.body = nn.Sequential(nn.Linear(domain_dim + 2 * actions + 2, hidden), nn.Tanh(),
                                  nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, actions))

    def forward(self, obs: torch.Tensor, tried: torch.Tensor) -> torch.Tensor:
        logits = self.body(obs)
        return logits.masked_fill(tried, -1e9)


def observation(domain: torch.Tensor, tried: torch.Tensor, seen: torch.Tensor, step: int, trials: int
                ) -> torch.Tensor:
    """domain | tried mask | improvement seen per entry (clipped to +-1) | best so far | trials left."""
    best = torch.where(tried, seen, torch.zeros_like(seen)).amax(dim=1, keepdim=True).clamp(min=0.0)
    left = torch.full_like(best, (trials - step) / trials)
    return torch.cat([domain, tried.float(), seen.clamp(-1.0, 1.0), best, left], dim=1)


@dataclass
class TrainConfig:
    """Every hyper-parameter of the RL tuner's training, in one place."""

    clusters: int = 100  # training clusters simulated for the table
    validation_share: float = 0.2  # of those, held out to watch generalization during training
    trials: int = 5
    iterations: int = 3000
    clusters_per_batch: int = 64
    episodes_per_cluster: int = 8  # the leave-one-out baseline needs several per cluster
    learning_rate: float = 1e-3
    entropy_coef: float = 0.01
    hidden: int = 128
    seed: int = 1
    nodes: tuple[int, int] = (4, 40)
    arrivals: int = 200  # per replay
    replays: int | None = None  # simulated replays averaged per table entry; None: the policy's, as a trial


def rollout(net: TunerNetwork, domain: torch.Tensor, table: torch.Tensor, trials: int, greedy: bool = False,
            generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Play `trials` picks per row against a table of improvements; returns (reward, log-prob sum,
    entropy sum) per row. The reward is max(0, best improvement found)."""
    rows, k = table.shape
    tried = torch.zeros(rows, k, dtype=torch.bool)
    seen = torch.zeros(rows, k)
    logp = torch.zeros(rows)
    entropy = torch.zeros(rows)
    for step in range(trials):
        logits = net(observation(domain, tried, seen, step, trials), tried)
        dist = torch.distributions.Categorical(logits=logits)
        if greedy:
            action = logits.argmax(dim=1)
        else:
            action = torch.multinomial(dist.probs, 1, generator=generator).squeeze(1)
        logp = logp + dist.log_prob(action)
        entropy = entropy + dist.entropy()
        idx = torch.arange(rows)
        tried = tried.clone()
        tried[idx, action] = True
        seen = seen.clone()
        seen[idx, action] = table[idx, action]
    best = torch.where(tried, table, torch.full_like(table, -np.inf)).amax(dim=1).clamp(min=0.0)
    return best, logp, entropy


def train_on_table(domains: np.ndarray, table: np.ndarray, cfg: TrainConfig, validation: tuple | None = None,
                   progress=None) -> tuple[TunerNetwork, list[dict]]:
    """Policy gradient on a (clusters x catalogue) improvement table."""
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    net = TunerNetwork(domains.shape[1], table.shape[1], cfg.hidden)
    opt = torch.optim.Adam(net.parameters(), lr=cfg.learning_rate)
    dom, tab = torch.as_tensor(domains, dtype=torch.float32), torch.as_tensor(table, dtype=torch.float32)
    history = []
    m = cfg.episodes_per_cluster
    for it in range(cfg.iterations):
        pick = torch.randint(len(dom), (cfg.clusters_per_batch,), generator=gen)
        d = dom[pick].repeat_interleave(m, dim=0)
        t = tab[pick].repeat_interleave(m, dim=0)
        reward, logp, entropy = rollout(net, d, t, cfg.trials, generator=gen)
        grouped = reward.view(-1, m)
        baseline = (grouped.sum(dim=1, keepdim=True) - grouped) / (m - 1)  # leave-one-out
        advantage = (grouped - baseline).view(-1)
        loss = -(advantage.detach() * logp).mean() - cfg.entropy_coef * entropy.mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if it % 250 == 0 or it == cfg.iterations - 1:
            row = {"iteration": it, "train_reward": float(reward.mean())}
            if validation is not None:
                row["validation_greedy"] = evaluate_on_table(net, *validation, cfg.trials)
            history.append(row)
            if progress:
                progress(row)
    return net, history


@torch.no_grad()
def evaluate_on_table(net: TunerNetwork, domains: np.ndarray, table: np.ndarray, trials: int) -> float:
    reward, _, _ = rollout(net, torch.as_tensor(domains, dtype=torch.float32),
                           torch.as_tensor(table, dtype=torch.float32), trials, greedy=True)
    return float(reward.mean())


class RLTuner:
    """A trained tuner, ready to tune one cluster."""

    def __init__(self, net: TunerNetwork, catalogue: tuple[ScoreConfig, ...], metadata: dict[str, Any] | None = None):
        if net.actions != len(catalogue):
            raise ValueError(f"tuner network has {net.actions} actions for a catalogue of {len(catalogue)}")
        self.net, self.catalogue, self.metadata = net.eval(), catalogue, metadata or {}

    @torch.no_grad()
    def tune(self, task: TuningTask, trials: int) -> TrialLog:
        log = TrialLog("rl")
        k = len(self.catalogue)
        trials = min(trials, k)
        domain = torch.as_tensor(domain_features(task.world, task.policy)).unsqueeze(0)
        tried = torch.zeros(1, k, dtype=torch.bool)
        seen = torch.zeros(1, k)
        for step in range(trials):
            logits = self.net(observation(domain, tried, seen, step, trials), tried)
            action = int(logits.argmax(dim=1))
            config = self.catalogue[action]
            improvement = task.improvement(config)
            log.add(config, improvement)
            tried[0, action] = True
            seen[0, action] = improvement
        return log

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"format": TUNER_FORMAT, "domain_features": list(DOMAIN_FEATURES),
                    "catalogue": [c.to_dict() for c in self.catalogue], "hidden": self.net.hidden,
                    "state_dict": self.net.state_dict()}, path)
        path.with_suffix(".json").write_text(json.dumps(
            {"format": TUNER_FORMAT, "domain_features": list(DOMAIN_FEATURES),
             "catalogue": [c.label for c in self.catalogue], **self.metadata}, indent=2) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path) -> RLTuner:
        """Load and validate a tuner file; errors name the file and the problem."""
        path = Path(path)
        try:
            payload = torch.load(path, map_location="cpu", weights_only=True)
        except FileNotFoundError:
            raise ValueError(f"{path}: no such tuner file (train one with rlscore-tune --train)") from None
        except Exception as exc:  # a truncated or foreign file
            raise ValueError(f"{path}: not a tuner file: {exc}") from None
        if not isinstance(payload, dict) or payload.get("format") != TUNER_FORMAT:
            raise ValueError(f"{path}: not a {TUNER_FORMAT} file")
        if payload.get("domain_features") != list(DOMAIN_FEATURES):
            raise ValueError(f"{path}: trained on other domain features than this version computes")
        try:
            catalogue = tuple(ScoreConfig.from_dict(c) for c in payload["catalogue"])
            net = TunerNetwork(len(DOMAIN_FEATURES), len(catalogue), int(payload["hidden"]))
            net.load_state_dict(payload["state_dict"])
        except (KeyError, TypeError, ValueError, RuntimeError) as exc:
            raise ValueError(f"{path}: invalid tuner: {exc}") from None
        sidecar = path.with_suffix(".json")
        metadata = json.loads(sidecar.read_text()) if sidecar.exists() else {}
        return cls(net, catalogue, metadata)
