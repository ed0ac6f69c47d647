"""Teachers for kickstarting: per scenario family, the hand-written scorer that does best on the
policy's objective, found by measuring every baseline on *training* seeds (evaluation seeds stay
unseen).

Kickstarting (Schmitt et al., 2018) adds a cross-entropy towards the teacher's choice to the
actor-critic loss, with a weight that decays to a small floor: the policy starts from the best rule
for each situation (cloned first, agent.learn.imitation) and the outcome reward decides where it
departs from it. Without a teacher, PPO from scratch settled on MostAllocated in the families where
"prefer the efficient nodes" wins, because that advantage only shows over many decisions
(docs/rewards.md); with the pull decaying to zero it drifted away from the teacher where the reward
is noisy (docs/training.md).
"""

from __future__ import annotations

import multiprocessing

import numpy as np

from agent.heuristics import HEURISTICS
from agent.state import NodeState, PodRequest

TEACHER_SEED_BASE = 10**6  # below EVAL_SEED_BASE, away from the trainers' own draws


def pick_teachers(policy: str, families: tuple[str, ...], seeds: int = 10, arrivals: int = 300,
                  workers: int = 2) -> dict[str, dict]:
    """{family: {"teacher": name, "relative_objective": {baseline: mean objective / best on the seed}}},
    measured on training seeds; relative per seed, so one big world does not outweigh the rest."""
    from agent.evaluate.compare import baselines_for

    names = [b for b in baselines_for(policy) if b != "random"]
    jobs = [(b, family_name, k, policy, arrivals) for family_name in families for k in range(seeds) for b in names]
    with multiprocessing.get_context("fork").Pool(workers) as pool:  # one process per core
        values = iter(pool.map(_objective, jobs, chunksize=4))
    out = {}
    for family_name in families:
        table = np.array([[next(values) for _ in names] for _ in range(seeds)])
        relative = table / np.maximum(table.min(axis=1, keepdims=True), 1e-9)
        scores = dict(zip(names, relative.mean(axis=0).round(4).tolist()))
        out[family_name] = {"teacher": min(scores, key=scores.get), "relative_objective": scores}
    return out


class TeacherError(ValueError):
    """A teacher choice that names no baseline of the policy."""


def assign_teachers(policy: str, families: tuple[str, ...], choice: str = "per-family", **picking) -> dict[str, dict]:
    """pick_teachers' record with each family's teacher set by `choice`, comma-separated: a base --
    "per-family" (each family's own best), "overall" (the baseline with the lowest mean relative
    objective over the families) or one baseline's name for every family -- and any number of
    `family=baseline` overrides. Why not always per-family: when families look alike to the network,
    teachers that disagree (spread here, pack there) pull it towards a blend worse than either."""
    from agent.evaluate.compare import baselines_for

    names = [b for b in baselines_for(policy) if b != "random"]
    base, overrides = "per-family", {}
    for part in (p.strip() for p in choice.split(",") if p.strip()):
        if "=" in part:
            family_name, _, name = (x.strip() for x in part.partition("="))
            if family_name not in families:
                raise TeacherError(f"{family_name!r} is not one of the families trained on ({', '.join(families)})")
            overrides[family_name] = name
        else:
            base = part
    for name in (base, *overrides.values()):
        if name not in ("per-family", "overall") and name not in names:
            raise TeacherError(f"unknown teacher {name!r} for {policy}: expected per-family, overall or one of "
                               f"{', '.join(names)}")
    if "overall" in overrides.values() or "per-family" in overrides.values():
        raise TeacherError("a family's override names one baseline, not per-family or overall")
    picked = pick_teachers(policy, families, **picking)
    if base == "overall":
        base = min(names, key=lambda b: np.mean([p["relative_objective"][b] for p in picked.values()]))
    return {f: {**p, "teacher": overrides.get(f, p["teacher"] if base == "per-family" else base)}
            for f, p in picked.items()}


def _objective(job: tuple) -> float:
    from agent.evaluate.compare import run
    from agent.scoring import HeuristicScorer

    baseline, family_name, k, policy, arrivals = job
    return run(HeuristicScorer(baseline, np.random.default_rng(k)), family_name, TEACHER_SEED_BASE + k, policy,
               None, arrivals)[0].objective


def teacher_targets(name: str, nodes: NodeState, pod: PodRequest, slots: int, rng: np.random.Generator) -> np.ndarray:
    """The teacher's choice as a distribution over `slots` (uniform over its tied best nodes)."""
    values = HEURISTICS[name](nodes, pod, rng)
    best = values >= values.max() - 1e-9
    target = np.zeros(slots, dtype=np.float32)
    target[: len(values)] = best / best.sum()
    return target
