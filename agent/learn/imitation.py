"""Behaviour cloning from the teachers, before reinforcement learning starts.

Kickstarting alone did not make the actor reproduce its teachers: measured on states the teacher
visits, the argmax of a 200k-step PPO actor agreed with the teacher (default-scheduler on two-d and
poisson) on ~48% of decisions, because the pull towards the teacher shares ~1 200 annealed gradient
steps with the policy loss and decays. A few thousand supervised steps on the teachers' own
trajectories reach ~90%. So the actor first learns to place pods as each family's teacher does, and
then PPO (with the kickstart pull, on the actor's own states) decides where it can do better: the
policy starts at the best hand-written rule instead of near it.
"""

from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm import tqdm

from rlscore.core.features import node_features
from rlscore.core.rules import RULES
from rlscore.core.kernels import TIE
from agent.learn.actor_critic import masked_logits, teacher_cross_entropy

from agent.learn.model_io import served
from agent.learn.network import NodeScorer
from agent.learn.teachers import teacher_for, teacher_names, teacher_targets, world_teacher
from agent.learn.threads import ThreadBudget
from agent.parallel import fork_pool
from rlscore.core.scoring import choose
from agent.sim.families import draw_node_count
from agent.sim.simulator import Simulation

DEMO_SEED_BASE = 2 * 10**6  # below EVAL_SEED_BASE and away from the teachers' picking seeds
TEACHER_WORKERS = 2  # processes for the per-world teachers' runs (this machine's cores)
CLONE_BATCH_PARTS = 3  # each cloning batch in parts of like-sized candidate sets (Demonstrations.chunks)


@dataclass
class Demonstrations:
    """Decisions of the teachers: features, pod vector and the teacher's (tie-uniform) choice each."""

    nodes: list[np.ndarray]
    pods: list[np.ndarray]
    targets: list[np.ndarray]
    worlds: list = field(default_factory=list)
    """(family, world seed, nodes) of each world recorded, in order"""
    world_teacher_of: dict = field(default_factory=dict)
    """world seed -> its per-world teacher (with teacher_futures; agent.learn.teachers.world_teacher)"""
    judged: tuple[str, ...] = ()
    """rules whose agreement with the teacher each decision records (for a rule selector, agent.learn.selector)"""
    agreement: list[np.ndarray] = field(default_factory=list)
    """per decision, per judged rule: the share of that rule's tied best nodes that are the teacher's
    (the chance that following the rule places as the teacher does)"""
    teacher_rule: list[str] = field(default_factory=list)
    """per decision with judged rules: the teacher that labelled it"""
    _cache: tuple | None = field(default=None, init=False, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def world_teachers(self) -> dict:
        """family -> {teacher: worlds it taught}, with per-world teachers"""
        taught: dict = {}
        for family_name, world_seed, _ in self.worlds:
            if world_seed in self.world_teacher_of:
                counts = taught.setdefault(family_name, {})
                teacher = self.world_teacher_of[world_seed]
                counts[teacher] = counts.get(teacher, 0) + 1
        return taught

    def extend(self, other: "Demonstrations") -> None:
        self.nodes += other.nodes
        self.pods += other.pods
        self.targets += other.targets
        self.agreement += other.agreement
        self.teacher_rule += other.teacher_rule

    def _padded(self) -> tuple[torch.Tensor, ...]:
        """Every decision padded to the largest candidate set once (rebuilt when decisions were added):
        a batch is then an index, not a Python loop over its rows."""
        if self._cache is None or len(self._cache[0]) != len(self):
            widths = torch.tensor([len(n) for n in self.nodes])
            nodes = torch.zeros(len(self), int(widths.max()), self.nodes[0].shape[1])
            targets = torch.zeros(nodes.shape[:2])
            for i, (n, t) in enumerate(zip(self.nodes, self.targets)):
                nodes[i, :len(n)] = torch.from_numpy(n)
                targets[i, :len(n)] = torch.from_numpy(t)
            self._cache = (nodes, torch.from_numpy(np.stack(self.pods)), targets, widths)
        return self._cache

    def batch(self, index: np.ndarray) -> tuple[torch.Tensor, ...]:
        """Padded to the batch's largest candidate set: nodes, pod, mask, targets."""
        nodes, pods, targets, widths = self._padded()
        index = torch.as_tensor(index, dtype=torch.long)
        width = int(widths[index].max())
        mask = torch.arange(width) < widths[index].unsqueeze(1)
        return nodes[index, :width], pods[index], mask, targets[index, :width]

    def chunks(self, index: np.ndarray, parts: int) -> list[tuple[torch.Tensor, ...]]:
        """The batch sorted by candidate-set size and cut into `parts` batches, each padded to its own
        largest set (as PPO trims its minibatches, agent.learn.actor_critic). With log-uniform cluster
        sizes most sets are small and a few have 64 nodes, so one padded batch is mostly padding: in
        three parts LB's 10 000 cloning steps took 323 s instead of 451 s on 2 cores (docs/training.md)."""
        return [self.batch(part) for part in self.parts(index, parts)]

    def parts(self, index: np.ndarray, parts: int) -> list[np.ndarray]:
        """The indices of `chunks`' batches."""
        widths = self._padded()[3].numpy()
        ordered = np.asarray(index)[np.argsort(widths[index], kind="stable")]
        return np.array_split(ordered, min(parts, len(ordered)))


def demonstrations(policy: str, teachers: dict, worlds_per_family: int, decisions: int,
                   min_nodes: int, max_nodes: int, seed: int = 0, node_draw: str = "uniform",
                   teacher_futures: int = 0, actor: NodeScorer | None = None,
                   like: Demonstrations | None = None, judge: tuple[str, ...] = ()) -> Demonstrations:
    """Each family's teacher scheduling `worlds_per_family` training worlds (sizes drawn as the
    trainer's episodes draw them) for `decisions` placements each, every decision recorded. With
    `teacher_futures`, each world's teacher is the one of the teachers' rules that does best on its
    machines over that many arrival streams (agent.learn.teachers.world_teacher).

    With `actor`, the actor places the pods and the teacher only labels each decision (DAgger): the
    states are the ones the actor's own choices lead to. With `like`, the worlds are that recording's
    (same machines, same arrivals, same per-world teachers). With `judge`, each decision also records
    how often each of those rules would place as the teacher does (`Demonstrations.agreement`)."""
    rng = np.random.default_rng(seed)
    demos = Demonstrations([], [], [], judged=tuple(judge))
    rules = teacher_names(teachers)
    actor_values = served(actor, policy).q_values_from_features if actor is not None else None  # the served forward pass
    if like is not None:
        demos.world_teacher_of = like.world_teacher_of

    def record(sim: Simulation, teacher: str) -> None:
        for _ in range(decisions):
            sim.next_decision()
            state, pod = sim.candidate_state(policy)
            target = teacher_targets(teacher, state, pod, len(state), rng)
            features, pod_vec = node_features(state, pod)
            demos.nodes.append(features)
            demos.pods.append(pod_vec)
            demos.targets.append(target)
            if judge:
                demos.agreement.append(rule_agreement(judge, state, pod, target > 0, rng))
                demos.teacher_rule.append(teacher)
            # among the tied best (the teacher's, or the actor's), as the scheduler would
            sim.place(choose(target if actor_values is None else actor_values(features, pod_vec), rng))

    def worlds():
        if like is not None:
            yield from like.worlds
            return
        for f_index, family_name in enumerate(sorted(teachers)):
            for w in range(worlds_per_family):
                # drawn as each world starts, after the previous world's decisions drew from the same rng
                # (as ever: the shipped clones' worlds)
                nodes = draw_node_count(rng, min_nodes, max_nodes, node_draw)
                yield family_name, DEMO_SEED_BASE + seed * 10_000 + f_index * 1_000 + w, nodes

    per_world = teacher_futures > 0 and len(rules) > 1  # with one rule there is nothing to choose
    # the per-world teachers' runs are most of a recording's time (EE: 87%): one rule per core
    with fork_pool(TEACHER_WORKERS) if per_world else contextlib.nullcontext() as pool:
        for family_name, world_seed, nodes in worlds():
            demos.worlds.append((family_name, world_seed, nodes))
            sim = Simulation.of_family(family_name, world_seed, nodes, limits=policy == "EL", training=True)
            teacher = teacher_for(teachers, family_name, sim.world.size)
            if per_world:
                if world_seed not in demos.world_teacher_of:
                    demos.world_teacher_of[world_seed] = world_teacher(policy, sim.world, world_seed, teacher, rules,
                                                                       decisions, teacher_futures, pool=pool)[0]
                teacher = demos.world_teacher_of[world_seed]
            record(sim, teacher)
    return demos


def rule_agreement(rules: tuple[str, ...], nodes, pod, teacher_best: np.ndarray,
                   rng: np.random.Generator) -> np.ndarray:
    """Per rule, the share of its tied best nodes that are among the teacher's best (0 where the rule
    has no finite best): how likely following it places as the teacher did."""
    shares = np.zeros(len(rules), dtype=np.float32)
    for k, rule in enumerate(rules):
        values = RULES[rule](nodes, pod, rng)
        best = values >= values.max() - TIE
        if best.any():
            shares[k] = (best & teacher_best[: len(values)]).sum() / best.sum()
    return shares


def agreement(actor: NodeScorer, demos: Demonstrations, batch_size: int = 512) -> float:
    """Share of decisions where the actor's best node is one of the teacher's best."""
    hits = 0
    with torch.no_grad():
        for lo in range(0, len(demos), batch_size):
            nodes, pod, mask, targets = demos.batch(np.arange(lo, min(lo + batch_size, len(demos))))
            logits = actor(nodes, pod, mask).masked_fill(~mask, -1e9)
            hits += int((targets.gather(1, logits.argmax(dim=1, keepdim=True)) > 0).sum())
    return hits / max(len(demos), 1)


def clone(actor: NodeScorer, train: Demonstrations, held_out: Demonstrations, steps: int, batch_size: int = 256,
          learning_rate: float = 1e-3, anneal: bool = False, progress: bool = True, threads: int | None = None) -> dict:
    """Cross-entropy towards the teachers' choices; returns what the sidecar records. With `anneal` the
    step size decays linearly to 0 over the steps, so the last steps settle near-ties instead of
    jumping between them. Up to `threads` torch threads (default: torch's count now), fewer while other
    work holds the cores (agent.learn.threads)."""
    started, threads_before = time.time(), torch.get_num_threads()
    budget = ThreadBudget(threads or threads_before)
    optimizer = torch.optim.Adam(actor.parameters(), lr=learning_rate)
    schedule = torch.optim.lr_scheduler.LinearLR(optimizer, 1.0, 0.0, total_iters=steps) if anneal else None
    rng = np.random.default_rng(0)
    bar = tqdm(range(steps), desc="imitating the teachers", disable=not progress, mininterval=1.0, file=sys.stderr)
    for step in bar:
        budget.check()
        optimizer.zero_grad()
        loss = 0.0
        for nodes, pod, mask, targets in train.chunks(rng.integers(0, len(train), batch_size), CLONE_BATCH_PARTS):
            # the batch's mean cross-entropy, its gradient summed over the parts
            part = teacher_cross_entropy(masked_logits(actor(nodes, pod, mask)), targets).sum() / batch_size
            part.backward()
            loss += part.item()
        optimizer.step()
        if schedule is not None:
            schedule.step()
        if step % 200 == 0:
            bar.set_postfix(loss=f"{loss:.3f}")
    bar.close()
    torch.set_num_threads(threads_before)
    return {"steps": steps, "batch_size": batch_size, "learning_rate": learning_rate, "anneal": anneal,
            "demonstrations": len(train), "held_out": len(held_out),
            "held_out_agreement": round(agreement(actor, held_out), 4), "seconds": round(time.time() - started, 1),
            "threads": budget.wanted, "threads_lowered": budget.lowered}
