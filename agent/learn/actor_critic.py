"""Actor-critic training (PPO, or A2C) over the DeepSets networks, in one file you can read top to
bottom (after cleanrl's ppo.py). Every hyper-parameter is in ACConfig.

The actor is the same `NodeScorer` that DQN trains and the server serves: its per-node outputs are
the logits of a masked softmax over the candidate nodes. The critic (`ValueHead`) pools its own
equivariant trunk over the candidates into one state value. Several environments step side by side;
advantages come from GAE over `num_steps` decisions, so a consequence that arrives dozens of
decisions later still reaches the decision that caused it. A2C is the special case of one update
epoch over the whole batch without clipping (A2cScheduler's multi-step TD actor-critic).
With teachers (agent.learn.teachers), the actor is first cloned from them and then kept near them
by a kickstart pull that decays to a floor (docs/training.md).
"""

from __future__ import annotations

import sys
import time
from functools import partial
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from agent.learn.common import TrainConfig, make_actor, make_env, seed_everything, tensorboard, training_record
from agent.learn.network import NodeScorer, ValueHead
from agent.learn.teachers import teacher_names
from agent.learn.vector_env import EnvWorkers
from rlscore.core.state import normalize_policy


@dataclass
class ACConfig(TrainConfig):
    algo: str = "ppo"
    """ppo, or a2c (one epoch, one minibatch, no clipping)"""
    num_envs: int = 16
    """environments stepped side by side"""
    num_steps: int = 64
    """decisions per environment per update"""
    learning_rate: float = 3e-4
    """Adam step size (annealed linearly to 0)"""
    gae_lambda: float = 0.95
    """GAE lambda"""
    num_minibatches: int = 2
    """minibatches per epoch (big ones: the equivariant layers are many small kernels)"""
    update_epochs: int = 3
    """passes over each batch"""
    clip_coef: float = 0.2
    """PPO's surrogate clipping"""
    ent_coef: float = 0.01
    """entropy bonus: keeps exploring alternatives to the first good heuristic it finds"""
    vf_coef: float = 0.5
    """value loss weight"""
    max_grad_norm: float = 0.5
    """gradient clipping (global L2 norm)"""
    normalize_rewards: bool = True
    """divide rewards by a running std of the discounted return (scales differ per family)"""
    kickstart: float = 0.0
    """initial weight of the cross-entropy towards each family's teacher (0: learn from scratch)"""
    kickstart_fraction: float = 0.5
    """share of training over which that weight decays linearly to kickstart_floor"""
    kickstart_floor: float = 0.0
    """weight the pull keeps after decaying: where the outcome reward is a weak or noisy signal the
    student stays near its teacher instead of drifting; a clear, repeated advantage still wins"""
    teachers: dict = field(default_factory=dict)
    """family -> teacher heuristic, or [[max_nodes, heuristic], ...] per size band
    (agent.learn.teachers.assign_teachers; filled when kickstarting)"""
    imitation_steps: int = 0
    """supervised steps on the teachers' own trajectories before PPO starts (0: none;
    agent.learn.imitation)"""
    imitation_worlds: int = 12
    """worlds per family the teachers schedule for those demonstrations (LB with 36 and an annealed step
    agreed with its teachers as often, 93.4% against 93.5%, and met 18/23 goals against 19/23;
    docs/training.md)"""
    imitation_decisions: int = 256
    """placements recorded per world"""
    imitation_anneal: bool = False
    """decay the cloning step size linearly to 0 over each cloning run (agent.learn.imitation.clone)"""
    dagger_rounds: int = 0
    """after cloning: rounds in which the actor schedules the imitation worlds itself, the teachers
    label its decisions, and cloning goes on over all decisions so far (DAgger; agent.learn.imitation)"""
    dagger_steps: int = 0
    """supervised steps per DAgger round (0: half of imitation_steps)"""
    extra_worlds: list = field(default_factory=list)
    """[[family, worlds, min_nodes, max_nodes], ...]: more cloning worlds of one family within a size
    range, taught by that family's own teachers, for a size band whose teacher differs from the rest of
    its family (2-5 nodes are 31% of log-uniform draws). EE with test2=32@3-5 met test2 at 3 nodes on
    training seeds 1-3 (the plain recipe on seed 2 only) but not more goals overall (30, 32, 31 of 33
    against 31, 32, 29), and the plain seed-2 clone ships (docs/training.md, "More worlds where a
    band's teacher differs")"""
    teacher_futures: int = 0
    """per-world teachers: each world's teacher is the teachers' rule that does best on its machines
    over this many arrival streams (0: the family's or band's teacher; agent.learn.teachers.world_teacher)"""
    critic_warmup_fraction: float = 0.0
    """after cloning or from an --init model: share of the run in which only the critic learns (a
    random critic's advantages would first push the trained actor anywhere)"""
    env_workers: int = 2
    """processes that step the environments during rollouts (0: in this process)"""
    torch_threads: int = 2
    """torch threads for the updates, while the environment workers wait"""

    def __post_init__(self) -> None:
        if self.algo not in ("ppo", "a2c"):
            raise ValueError(f"algo must be ppo or a2c, got {self.algo!r}")
        if self.algo == "a2c":
            self.update_epochs, self.num_minibatches, self.clip_coef = 1, 1, float("inf")


class RunningStd:
    """Running variance of the discounted return, per environment (cleanrl's NormalizeReward)."""

    def __init__(self, num_envs: int, gamma: float):
        self.gamma = gamma
        self.returns = np.zeros(num_envs)
        self.mean, self.var, self.count = 0.0, 1.0, 1e-4

    def scale(self, rewards: np.ndarray, dones: np.ndarray) -> np.ndarray:
        self.returns = self.returns * self.gamma * (1 - dones) + rewards
        batch_mean, batch_var, n = self.returns.mean(), self.returns.var(), len(self.returns)
        delta, total = batch_mean - self.mean, self.count + n
        self.mean += delta * n / total
        self.var = (self.var * self.count + batch_var * n + delta**2 * self.count * n / total) / total
        self.count = total
        return rewards / np.sqrt(self.var + 1e-8)


def masked_logits(logits: torch.Tensor) -> torch.Tensor:
    """-inf (masked nodes) to a large finite negative, so the softmax and entropy stay finite."""
    return torch.where(torch.isfinite(logits), logits, torch.full_like(logits, -1e9))


def teacher_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per decision, the cross-entropy of the policy (masked logits) against the teacher's choice (a
    distribution over its tied best nodes): the pull of kickstarting and the loss of cloning."""
    return -(targets * torch.log_softmax(logits, dim=-1)).sum(-1)


def kickstart_weight(cfg: ACConfig, update: int, updates: int) -> float:
    """The pull towards the teachers at `update` of `updates`: kickstart, decaying linearly to the
    floor over kickstart_fraction of the run (0 throughout when not kickstarting)."""
    if cfg.kickstart <= 0:
        return 0.0
    left = max(0.0, 1.0 - update / max(cfg.kickstart_fraction * updates, 1e-9))
    return cfg.kickstart_floor + (cfg.kickstart - cfg.kickstart_floor) * left


def _imitate(cfg: ACConfig, actor: NodeScorer):
    """Behaviour cloning of the teachers into the actor (agent.learn.imitation)."""
    from agent.learn.imitation import clone, demonstrations

    torch.set_num_threads(cfg.torch_threads)
    print(f"recording the teachers on {cfg.imitation_worlds} worlds per family ...", file=sys.stderr)
    train_demos = demonstrations(cfg.policy, cfg.teachers, cfg.imitation_worlds, cfg.imitation_decisions,
                                 cfg.min_nodes, cfg.max_nodes, seed=cfg.seed, node_draw=cfg.node_draw,
                                 teacher_futures=cfg.teacher_futures)
    extra_record = []
    for index, (family_name, worlds, low, high) in enumerate(cfg.extra_worlds):
        print(f"recording {family_name}'s teachers on {worlds} more worlds of {low}-{high} nodes ...", file=sys.stderr)
        # the family's own teachers only, on worlds drawn apart from the main ones (seed + 500 + index)
        extra = demonstrations(cfg.policy, {family_name: cfg.teachers[family_name]}, worlds, cfg.imitation_decisions,
                               low, high, seed=cfg.seed + 500 + index, node_draw="uniform",
                               teacher_futures=cfg.teacher_futures)
        train_demos.extend(extra)
        extra_record.append({"family": family_name, "worlds": worlds, "min_nodes": low, "max_nodes": high,
                             "nodes": [nodes for _, _, nodes in extra.worlds], "decisions": len(extra),
                             "world_teachers": extra.world_teachers.get(family_name, {})})
    held_out = demonstrations(cfg.policy, cfg.teachers, max(1, cfg.imitation_worlds // 6), cfg.imitation_decisions,
                              cfg.min_nodes, cfg.max_nodes, seed=cfg.seed + 1, node_draw=cfg.node_draw,
                              teacher_futures=cfg.teacher_futures)
    record = clone(actor, train_demos, held_out, cfg.imitation_steps, anneal=cfg.imitation_anneal,
                   progress=cfg.progress, threads=cfg.torch_threads)
    if extra_record:
        record["extra_worlds"] = extra_record
    if cfg.dagger_rounds > 0:
        record["dagger"] = dagger(cfg, actor, train_demos, held_out)
    if cfg.teacher_futures:
        record["world_teachers"] = train_demos.world_teachers
        print("per-world teachers: " + "; ".join(f"{f}: " + ", ".join(f"{t} x{n}" for t, n in taught.items())
                                                 for f, taught in train_demos.world_teachers.items()), file=sys.stderr)
    last = record["dagger"][-1]["held_out_agreement"] if cfg.dagger_rounds > 0 else record["held_out_agreement"]
    print(f"the actor agrees with its teachers on {last:.1%} of held-out decisions", file=sys.stderr)
    return record, held_out


def dagger(cfg: ACConfig, actor: NodeScorer, train_demos, held_out) -> list[dict]:
    """DAgger rounds after cloning (Ross et al., 2011): a clone that agrees with its teacher on the
    teacher's own states still drifts from them on its own, where one different choice leads to a
    cluster the teacher never showed it. Each round the actor schedules the same imitation worlds,
    the teachers label every decision it meets, and cloning continues on the aggregate."""
    from agent.learn.imitation import agreement, clone, demonstrations

    steps = cfg.dagger_steps or max(1, cfg.imitation_steps // 2)
    rounds = []
    for k in range(cfg.dagger_rounds):
        print(f"DAgger round {k + 1}/{cfg.dagger_rounds}: the actor schedules, the teachers label ...",
              file=sys.stderr)
        own = demonstrations(cfg.policy, cfg.teachers, cfg.imitation_worlds, cfg.imitation_decisions, cfg.min_nodes,
                             cfg.max_nodes, seed=cfg.seed + 1000 * (k + 1), node_draw=cfg.node_draw,
                             teacher_futures=cfg.teacher_futures, actor=actor, like=train_demos)
        on_own_states = agreement(actor, own)
        train_demos.extend(own)
        step = clone(actor, train_demos, held_out, steps, anneal=cfg.imitation_anneal, progress=cfg.progress,
                     threads=cfg.torch_threads)
        rounds.append({"round": k + 1, "decisions": len(own), "agreement_on_own_states": round(on_own_states, 4),
                       "steps": steps, "held_out_agreement": step["held_out_agreement"], "seconds": step["seconds"]})
        print(f"  the actor agreed with its teachers on {on_own_states:.1%} of the decisions on its own "
              f"states; after {steps} more steps, {step['held_out_agreement']:.1%} of held-out ones", file=sys.stderr)
    return rounds


def train(cfg: ACConfig, init: NodeScorer | None = None) -> tuple[NodeScorer, dict]:
    """Train one policy; returns the actor (what is served) and the training record."""
    cfg.policy = normalize_policy(cfg.policy)
    seed_everything(cfg)
    envs = EnvWorkers(partial(make_env, cfg), cfg.num_envs, cfg.seed, cfg.env_workers,
                      cfg.teachers if cfg.kickstart > 0 else None)
    try:
        return _train(cfg, init, envs)
    finally:
        envs.close()


def _train(cfg: ACConfig, init: NodeScorer | None, envs: EnvWorkers) -> tuple[NodeScorer, dict]:
    actor, critic = make_actor(cfg, init), ValueHead(cfg.hidden)
    imitation = held_out = None
    if cfg.imitation_steps > 0 and cfg.teachers:
        imitation, held_out = _imitate(cfg, actor)
    params = list(actor.parameters()) + list(critic.parameters())
    optimizer = torch.optim.Adam(params, lr=cfg.learning_rate, eps=1e-5)
    writer = tensorboard(cfg, cfg.algo)
    reward_norm = RunningStd(cfg.num_envs, cfg.gamma)

    n, slots = cfg.num_envs, cfg.max_nodes
    f_node, f_pod = actor.node_features, actor.pod_features
    obs_nodes = torch.zeros((cfg.num_steps, n, slots, f_node))
    obs_pod = torch.zeros((cfg.num_steps, n, f_pod))
    obs_mask = torch.zeros((cfg.num_steps, n, slots), dtype=torch.bool)
    actions = torch.zeros((cfg.num_steps, n), dtype=torch.long)
    logprobs = torch.zeros((cfg.num_steps, n))
    rewards = torch.zeros((cfg.num_steps, n))
    dones = torch.zeros((cfg.num_steps, n))
    values = torch.zeros((cfg.num_steps, n))
    targets = torch.zeros((cfg.num_steps, n, slots)) if cfg.kickstart > 0 else None

    start = time.time()
    nodes_np, pod_np, mask_np, targets_np = envs.current()
    next_nodes, next_pod, next_mask = torch.from_numpy(nodes_np), torch.from_numpy(pod_np), torch.from_numpy(mask_np)
    next_done = torch.zeros(n)
    episode_returns: list[float] = []
    running = np.zeros(n)
    batch_size = n * cfg.num_steps
    # 0 decisions after cloning: the clone itself is the result (a candidate of its own)
    updates = 0 if cfg.total_timesteps == 0 and imitation is not None else max(1, cfg.total_timesteps // batch_size)
    minibatch = max(1, batch_size // cfg.num_minibatches)
    bar = tqdm(range(updates), desc=f"{cfg.algo} {cfg.policy}", disable=not cfg.progress, mininterval=1.0,
               file=sys.stderr)
    global_step = 0
    for update in bar:
        optimizer.param_groups[0]["lr"] = cfg.learning_rate * (1.0 - update / updates)
        torch.set_num_threads(1)  # rollouts: the cores belong to the environment workers
        for step in range(cfg.num_steps):
            global_step += n
            obs_nodes[step], obs_pod[step], obs_mask[step], dones[step] = next_nodes, next_pod, next_mask, next_done
            if targets is not None:
                targets[step] = torch.from_numpy(targets_np)
            with torch.no_grad():
                width = int(next_mask.sum(dim=1).max())
                nodes_w, mask_w = next_nodes[:, :width], next_mask[:, :width]
                dist = torch.distributions.Categorical(logits=masked_logits(actor(nodes_w, next_pod, mask_w)))
                action = dist.sample()
                values[step] = critic(nodes_w, next_pod, mask_w)
            actions[step], logprobs[step] = action, dist.log_prob(action)
            result = envs.step(action.numpy())
            step_rewards = result.rewards.copy()
            running += step_rewards
            for i, obs in result.cut_off.items():
                # A time limit is not an end: bootstrap from the state the episode stopped in
                # (the critic predicts normalized returns; scale back before normalizing again).
                with torch.no_grad():
                    v_boot = float(critic(torch.from_numpy(obs["nodes"])[None], torch.from_numpy(obs["pod"])[None],
                                          torch.from_numpy(obs["action_mask"].astype(bool))[None])[0])
                step_rewards[i] += cfg.gamma * v_boot * (np.sqrt(reward_norm.var + 1e-8) if cfg.normalize_rewards else 1.0)
            step_dones = (result.terminated | result.truncated).astype(np.float64)
            for i in np.flatnonzero(step_dones):
                episode_returns.append(running[i])
                running[i] = 0.0
                if writer:
                    writer.add_scalar("charts/episodic_return", episode_returns[-1], global_step)
            if cfg.normalize_rewards:
                step_rewards = reward_norm.scale(step_rewards, step_dones)
            rewards[step] = torch.from_numpy(step_rewards).float()
            next_nodes, next_pod, next_mask = (torch.from_numpy(result.nodes), torch.from_numpy(result.pod),
                                               torch.from_numpy(result.mask))
            targets_np = result.targets
            next_done = torch.from_numpy(step_dones).float()

        torch.set_num_threads(cfg.torch_threads)  # updates: the workers wait
        # Generalized advantage estimation.
        with torch.no_grad():
            next_value = critic(next_nodes, next_pod, next_mask)
            advantages = torch.zeros_like(rewards)
            last = torch.zeros(n)
            for t in reversed(range(cfg.num_steps)):
                not_done = 1.0 - (next_done if t == cfg.num_steps - 1 else dones[t + 1])
                following = next_value if t == cfg.num_steps - 1 else values[t + 1]
                delta = rewards[t] + cfg.gamma * following * not_done - values[t]
                last = delta + cfg.gamma * cfg.gae_lambda * not_done * last
                advantages[t] = last
            returns = advantages + values

        b_nodes, b_pod = obs_nodes.reshape(batch_size, slots, f_node), obs_pod.reshape(batch_size, f_pod)
        b_mask, b_actions = obs_mask.reshape(batch_size, slots), actions.reshape(-1)
        b_logprobs, b_adv, b_returns = logprobs.reshape(-1), advantages.reshape(-1), returns.reshape(-1)
        b_targets = targets.reshape(batch_size, slots) if targets is not None else None
        kick = kickstart_weight(cfg, update, updates)
        # a trained actor (cloned, or loaded to fine-tune; its critic is not stored) waits for its critic
        warming_up = (imitation is not None or init is not None) and update < cfg.critic_warmup_fraction * updates
        counts = b_mask.sum(dim=1).numpy()
        for _ in range(cfg.update_epochs):
            # Minibatches of similar node counts, trimmed to their largest: episodes draw 2..64
            # nodes, and most of a padded batch would otherwise be padding.
            order = np.argsort(counts + np.random.uniform(0, 8, batch_size), kind="stable")
            chunks = [order[lo:lo + minibatch] for lo in range(0, batch_size, minibatch)]
            np.random.shuffle(chunks)
            for chunk in chunks:
                mb = torch.from_numpy(chunk)
                width = int(counts[chunk].max())
                nodes_mb, pod_mb, mask_mb = b_nodes[mb, :width], b_pod[mb], b_mask[mb, :width]
                logits = masked_logits(actor(nodes_mb, pod_mb, mask_mb))
                dist = torch.distributions.Categorical(logits=logits)
                new_logprob = dist.log_prob(b_actions[mb])
                ratio = (new_logprob - b_logprobs[mb]).exp()
                adv = b_adv[mb]
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                policy_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - cfg.clip_coef, 1 + cfg.clip_coef)).mean()
                value_loss = 0.5 * ((critic(nodes_mb, pod_mb, mask_mb) - b_returns[mb]) ** 2).mean()
                entropy = dist.entropy().mean()
                if warming_up:  # the actor waits until the critic's advantages mean something
                    loss = cfg.vf_coef * value_loss
                else:
                    loss = policy_loss - cfg.ent_coef * entropy + cfg.vf_coef * value_loss
                if kick > 0 and not warming_up:
                    teacher_loss = teacher_cross_entropy(logits, b_targets[mb, :width]).mean()
                    loss = loss + kick * teacher_loss
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
                optimizer.step()
        if writer:
            writer.add_scalar("losses/policy", policy_loss.item(), global_step)
            writer.add_scalar("losses/value", value_loss.item(), global_step)
            writer.add_scalar("losses/entropy", entropy.item(), global_step)
        if episode_returns:
            bar.set_postfix(ret=f"{np.mean(episode_returns[-20:]):.1f}", ent=f"{entropy.item():.2f}",
                            v=f"{value_loss.item():.3f}")

    bar.close()
    if writer:
        writer.close()
    name = "PPO" if cfg.algo == "ppo" else "A2C"
    teachers = teacher_names(cfg.teachers)
    kicked = f", kickstarted from {teachers}" if cfg.kickstart > 0 else ""
    supervised = f"{cfg.imitation_steps} supervised steps"
    if imitation is not None and cfg.dagger_rounds > 0:
        supervised += f", then {cfg.dagger_rounds} DAgger rounds of {imitation['dagger'][0]['steps']}"
    cloned = f" ({updates * batch_size} decisions) after cloning {teachers} ({supervised})" if imitation is not None else ""
    algorithm = f"{name}{cloned}, DeepSets actor (masked softmax over nodes) and pooled critic, GAE{kicked}"
    if updates == 0:
        algorithm = (f"behaviour cloning of {teachers} ({supervised}, no reinforcement learning), DeepSets actor "
                     f"(masked softmax over nodes)")
    record = training_record(cfg, algorithm, time.time() - start, episode_returns)
    record["training"]["steps"] = updates * batch_size
    if imitation is not None:
        from agent.learn.imitation import agreement
        # how far reinforcement learning moved the actor from its teachers, on the same decisions
        imitation["final_agreement"] = round(agreement(actor, held_out), 4)
        record["training"]["imitation"] = imitation
    return actor.eval(), record
