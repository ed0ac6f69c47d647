"""The rule selector: a DeepSets network that picks, per pod, which hand-written rule places it.

Why. A clone (agent.learn.imitation) copies each situation's best rule into a network that scores
the nodes itself. It learns *which* rule fits a situation well, but it copies the rule's ranking only
approximately: LB's clone matched one-step-lb on 88% of held-out decisions, and its departures (nodes
whose request imbalance differs by ~1%, which the 64-wide network does not resolve) left it 2-3%
behind one-step-lb on test1 at 10 nodes on both seed ranges (docs/training.md). A selector keeps the part
the network does well, recognising the situation, and lets the rule itself score the nodes: where it
picks the right rule it places exactly as that rule does, ties and all.

How it learns. The teachers (agent.learn.teachers: each family's, size band's or world's best rule,
measured by the objective over whole runs on training seeds) schedule the imitation worlds; at every
decision the recording notes, for each of the selector's rules, the chance that following it places as
the teacher did (`Demonstrations.agreement`). The loss is the likelihood that the selector's pick agrees,
-log sum_k p_k a_k, so where several rules agree the selector is free to pick any of them and only the
decisions where they differ teach it; a small cross-entropy towards the teacher's own rule
(`prior_weight`) settles states where nothing differs. Per decision, so a policy can follow one rule
until the state shows what another one reads (LB: one-step-lb until measured load runs far above the
requests, then headroom-balance).

Every hyper-parameter is in SelectorConfig; `rlscore-train --algo selector` runs it.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm import tqdm

from agent.learn.common import TrainConfig, seed_everything, training_record
from agent.learn.imitation import CLONE_BATCH_PARTS, Demonstrations, demonstrations
from rlscore.core.model import MAX_SELECTOR_RULES
from agent.learn.network import RuleSelector
from agent.learn.teachers import teacher_names
from agent.learn.threads import ThreadBudget
from rlscore.core.state import normalize_policy


@dataclass
class SelectorConfig(TrainConfig):
    total_timesteps: int = 0
    """no reinforcement learning: the selector is fitted to the teachers' decisions"""
    teachers: dict = field(default_factory=dict)
    """family -> teacher heuristic, or [[max_nodes, heuristic], ...] per size band
    (agent.learn.teachers.assign_teachers); the selector's rules are every rule named here"""
    teacher_futures: int = 0
    """per-world teachers (agent.learn.teachers.world_teacher; 0: the family's or band's). None by
    default, also where the policy's clones use them (EE): they run every rule on each world's machines
    over 3 streams, 87% of EE's recording time; a selector is fitted to every rule's agreement at each
    decision, not to one rule per world, and the same time buys it about 8x the worlds"""
    imitation_worlds: int = 48
    """worlds per family the teachers schedule (rlscore-train's default per policy: SELECTOR_WORLDS).
    With 12 (the clones' number; about 4 of 2-5 nodes per family) LB's selector (training seed 1), at 3
    nodes of test1, test2 and poisson, picked usage-skew's LoadVariationRiskBalancing on 7% of the
    decisions even counting only picks it was 90% sure of, and was x1.35 of one-step-lb on test2 at 3
    nodes. With 48 it picked it on 0.8% and 0.5% (training seeds 1 and 2) and met those cells
    (docs/training.md)"""
    imitation_decisions: int = 256
    """placements recorded per world"""
    imitation_steps: int = 3000
    """gradient steps"""
    batch_size: int = 256
    """decisions per step"""
    learning_rate: float = 1e-3
    """Adam step size"""
    prior_weight: float = 0.1
    """weight of the cross-entropy towards the teacher's own rule, beside the agreement likelihood"""
    torch_threads: int = 2
    """most torch threads; fewer while other work holds the cores (agent.learn.threads)"""

    def __post_init__(self) -> None:
        if self.total_timesteps != 0:
            raise ValueError("a rule selector is fitted to its teachers' decisions: --timesteps must be 0")


# Worlds per family by policy. EE: 96, with the family's or band's teacher (no per-world teachers:
# SelectorConfig.teacher_futures), met 33/33 goals on the evaluation seeds and 31/33 on the hold-out ones
# (training seed 2), where 48 worlds with per-world teachers on 3 streams met 31/33, each world ~8x as
# costly to record: which node to open first in a 2-5 node cluster is where EE's rules differ most, and 48
# worlds per family hold only about 15 of those (docs/training.md).
SELECTOR_WORLDS = {"EE": 96, "LB": 48, "EL": 48}


def selector_rules(teachers: dict) -> tuple[str, ...]:
    """The rules a selector chooses among: every rule the teachers name."""
    rules = tuple(teacher_names(teachers))
    if not 1 <= len(rules) <= MAX_SELECTOR_RULES:
        raise ValueError(f"a rule selector needs 1..{MAX_SELECTOR_RULES} rules, the teachers name {len(rules)}")
    return rules


def agreement_loss(logits: torch.Tensor, agreement: torch.Tensor, teacher: torch.Tensor,
                   prior_weight: float) -> torch.Tensor:
    """Per decision: -log of the chance that the selector's rule places as the teacher did (the rules'
    probabilities weighted by their agreement), plus prior_weight x the cross-entropy towards the
    teacher's own rule."""
    log_p = torch.log_softmax(logits, dim=-1)
    agree = -torch.logsumexp(log_p + torch.log(agreement.clamp(min=1e-6)), dim=-1)
    return agree + prior_weight * torch.nn.functional.nll_loss(log_p, teacher, reduction="none")


def selector_agreement(selector: RuleSelector, demos: Demonstrations, batch_size: int = 512) -> tuple[float, dict[str, float]]:
    """The chance that the selector's pick places as the teacher did (mean agreement of the rule it picks),
    and how often it picks each rule."""
    agreement = np.stack(demos.agreement)
    picks = []
    with torch.no_grad():
        for lo in range(0, len(demos), batch_size):
            nodes, pod, mask, _ = demos.batch(np.arange(lo, min(lo + batch_size, len(demos))))
            picks.append(selector(nodes, pod, mask).argmax(dim=1).numpy())
    chosen = np.concatenate(picks)
    share = np.bincount(chosen, minlength=len(selector.rules)) / max(len(chosen), 1)
    return (float(agreement[np.arange(len(chosen)), chosen].mean()),
            {rule: round(float(s), 4) for rule, s in zip(selector.rules, share)})


def fit(selector: RuleSelector, train: Demonstrations, held_out: Demonstrations, cfg: SelectorConfig) -> dict:
    """Adam on agreement_loss over random batches of the teachers' decisions; what the sidecar records."""
    started, threads_before = time.time(), torch.get_num_threads()
    budget = ThreadBudget(cfg.torch_threads)
    index_of = {rule: k for k, rule in enumerate(selector.rules)}
    agreement = torch.from_numpy(np.stack(train.agreement))
    teacher = torch.tensor([index_of[t] for t in train.teacher_rule])
    optimizer = torch.optim.Adam(selector.parameters(), lr=cfg.learning_rate)
    rng = np.random.default_rng(0)
    bar = tqdm(range(cfg.imitation_steps), desc="fitting the rule selector", disable=not cfg.progress, mininterval=1.0,
               file=sys.stderr)
    for step in bar:
        budget.check()
        optimizer.zero_grad()
        loss = 0.0
        for part in train.parts(rng.integers(0, len(train), cfg.batch_size), CLONE_BATCH_PARTS):
            nodes, pod, mask, _ = train.batch(part)
            # the batch's mean loss, its gradient summed over the parts of like-sized candidate sets
            term = agreement_loss(selector(nodes, pod, mask), agreement[part], teacher[part], cfg.prior_weight)
            term = term.sum() / cfg.batch_size
            term.backward()
            loss += term.item()
        optimizer.step()
        if step % 200 == 0:
            bar.set_postfix(loss=f"{loss:.4f}")
    bar.close()
    torch.set_num_threads(threads_before)
    held_agreement, held_share = selector_agreement(selector, held_out)
    return {"steps": cfg.imitation_steps, "batch_size": cfg.batch_size, "learning_rate": cfg.learning_rate,
            "prior_weight": cfg.prior_weight, "demonstrations": len(train), "held_out": len(held_out),
            "held_out_agreement": round(held_agreement, 4), "held_out_rule_share": held_share,
            "seconds": round(time.time() - started, 1), "threads": budget.wanted, "threads_lowered": budget.lowered}


def train(cfg: SelectorConfig, init=None) -> tuple[RuleSelector, dict]:
    """Record the teachers with every rule's agreement, fit the selector; returns it and the training record."""
    if init is not None:
        raise ValueError("a rule selector is fitted afresh from its teachers; it does not start from a model")
    cfg.policy = normalize_policy(cfg.policy)
    seed_everything(cfg)
    started = time.time()
    rules = selector_rules(cfg.teachers)
    torch.set_num_threads(cfg.torch_threads)
    print(f"recording the teachers on {cfg.imitation_worlds} worlds per family, judging {', '.join(rules)} ...",
          file=sys.stderr)
    record_args = dict(min_nodes=cfg.min_nodes, max_nodes=cfg.max_nodes, node_draw=cfg.node_draw,
                       teacher_futures=cfg.teacher_futures, judge=rules)
    train_demos = demonstrations(cfg.policy, cfg.teachers, cfg.imitation_worlds, cfg.imitation_decisions,
                                 seed=cfg.seed, **record_args)
    held_out = demonstrations(cfg.policy, cfg.teachers, max(1, cfg.imitation_worlds // 6), cfg.imitation_decisions,
                              seed=cfg.seed + 1, **record_args)
    selector = RuleSelector(rules, cfg.hidden)
    imitation = fit(selector, train_demos, held_out, cfg)
    if cfg.teacher_futures:
        imitation["world_teachers"] = train_demos.world_teachers
    selector.eval()
    print(f"the selector's pick places as the teachers did on {imitation['held_out_agreement']:.1%} of held-out "
          f"decisions (rules picked: {imitation['held_out_rule_share']})", file=sys.stderr)
    record = training_record(cfg, "selector", time.time() - started, [])
    record["training"]["imitation"] = imitation
    record["training"]["rules"] = list(rules)
    return selector, record
