"""Distillation: several trained networks of one policy taught to a single network of the same size.

Runs of one recipe that differ only in their seed land apart, each by its own path; the mean of their
standardized values (agent.evaluate.ensemble) keeps what they agree on. Serving K networks costs K
forward passes per pod, so the student learns that mean and is served at one network's cost.

1. States. The ensemble schedules training worlds drawn as its members' own training drew them
   (their sidecars' families, sizes and mixed share), each filled first by its burn-in teacher; with
   probability `epsilon` a decision is random, so the student also meets the states a small error of
   its own leads to (the idea of DAgger).
2. Targets. Every decision keeps the ensemble's values of its candidates (mean 0 per decision).
3. Fitting. The student's values, centred over each decision's candidates, regress onto the targets
   (masked mean squared error); the last `validation_share` of the worlds are kept out and measure how
   often the student's pick is the ensemble's.

    python -m agent.learn.distill --policy LB --member a.safetensors --member b.safetensors ... --out DIR
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from agent.evaluate.ensemble import EnsembleScorer
from agent.learn.common import git_commit
from agent.learn.dqn import DQNConfig, burn_in_teacher, make_env, train, warm_start, world_plan
from agent.learn.model_io import save_model
from agent.learn.network import NodeScorer
from agent.learn.train import field_docs
from agent.parallel import ray_address, shared, worker_pool
from rlscore.core.model import LoadedModel, ModelValidationError, load_model
from rlscore.core.state import POLICIES, normalize_policy

# DistillConfig's fields that are command-line options
OPTIONS = ("seed", "worlds", "decisions", "epsilon", "steps", "batch_size", "learning_rate", "validation_share",
           "workers", "torch_threads")
# what a member's training drew its worlds from, copied into the plan of the states
WORLD_KEYS = ("families", "min_nodes", "max_nodes", "node_draw", "mixed_share", "burn_in", "teachers")
MAX_STATE_BYTES = 6 * 2**30
"""most memory the kept decisions may take, padded to the members' largest cluster (LB's 256 x 256
decisions at 48 nodes take about 0.6 GiB)"""


@dataclass
class DistillConfig:
    policy: str = "LB"
    """EE, LB or EL: the members' policy"""
    members: tuple[str, ...] = ()
    """model files of the ensemble (node scorers of one policy and one architecture)"""
    seed: int = 1
    """seeds the worlds, the exploration and the student's initial weights"""
    worlds: int = 256
    """training worlds the ensemble schedules"""
    decisions: int = 256
    """decisions kept per world (after its burn-in)"""
    epsilon: float = 0.1
    """share of random decisions while the ensemble plays"""
    steps: int = 20_000
    """gradient steps of the student"""
    batch_size: int = 256
    """decisions per gradient step"""
    learning_rate: float = 1e-3
    """Adam's step size at the start; it decays to a tenth by the last step (cosine)"""
    validation_share: float = 0.1
    """share of the worlds kept out of fitting, to measure agreement"""
    workers: int = 2
    """processes that play the worlds side by side"""
    torch_threads: int = 1
    """CPU threads for torch"""
    progress: bool = True
    """show progress bars"""

    def __post_init__(self) -> None:
        self.policy = normalize_policy(self.policy)
        if len(self.members) < 2:
            raise ValueError(f"members: an ensemble needs at least two models, got {len(self.members)}")
        if self.worlds < 2:
            raise ValueError(f"worlds must be at least 2 (one fitted, one held out), got {self.worlds}")
        for name in ("decisions", "steps", "batch_size", "workers", "torch_threads"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not 0.0 <= self.epsilon <= 1.0:
            raise ValueError(f"epsilon must be in [0, 1], got {self.epsilon}")
        if not 0.0 < self.validation_share < 1.0:
            raise ValueError(f"validation_share must be in (0, 1), got {self.validation_share}")
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be positive, got {self.learning_rate}")


def load_members(cfg: DistillConfig) -> EnsembleScorer:
    """The members as one ensemble (which checks they are node scorers of one policy), sharing one
    architecture; raises ValueError naming the file or the problem."""
    members = []
    for path in cfg.members:
        try:
            members.append(load_model(path, expected_policy=cfg.policy))
        except ModelValidationError as exc:
            raise ValueError(f"{path}: {exc}") from exc
    ensemble = EnsembleScorer(members, name="members")
    shapes = {(tuple(m.architecture.hidden), m.architecture.node_features, m.architecture.pod_features)
              for m in members}
    if len(shapes) != 1:
        raise ValueError(f"members of several architectures: {sorted(shapes)}")
    return ensemble


def world_config(cfg: DistillConfig, members: list[LoadedModel]) -> DQNConfig:
    """The world distribution of the first member's training run (its sidecar), for the policy."""
    drawn = members[0].metadata.get("training", {}).get("hyperparameters", {})
    values = {key: drawn[key] for key in WORLD_KEYS if key in drawn}
    if "families" in values:
        values["families"] = tuple(values["families"])
    return DQNConfig(policy=cfg.policy, seed=cfg.seed, progress=False, **values)


def _play_world(job: tuple) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """One world scheduled by the ensemble (the pool's shared value; run in a worker): per decision the
    candidates' features, the pod's, and the ensemble's values."""
    cfg, world_cfg, world = job
    ensemble = shared()
    rng = np.random.default_rng([cfg.seed, world[2]])
    env = make_env(world_cfg)
    obs = warm_start(env, world, burn_in_teacher(world_cfg, world), world_cfg.burn_in, rng)
    kept = []
    for _ in range(cfg.decisions):
        n = int(obs["action_mask"].sum())
        features, pod_vec = obs["nodes"][:n], obs["pod"]
        target = ensemble.values_from_features(features, pod_vec)
        kept.append((features.copy(), pod_vec.copy(), target.astype(np.float32)))
        action = int(rng.integers(n)) if rng.random() < cfg.epsilon else int(np.argmax(target))
        obs, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            break
    return kept


def stack(decisions: list, slots: int) -> dict[str, torch.Tensor]:
    """Decisions padded to `slots` candidates: nodes [D, slots, F], pod [D, P], mask, target."""
    count, width = len(decisions), decisions[0][0].shape[1]
    nodes = np.zeros((count, slots, width), dtype=np.float32)
    target = np.zeros((count, slots), dtype=np.float32)
    mask = np.zeros((count, slots), dtype=bool)
    for i, (features, _, values) in enumerate(decisions):
        n = len(features)
        nodes[i, :n], target[i, :n], mask[i, :n] = features, values, True
    pods = np.stack([pod for _, pod, _ in decisions]).astype(np.float32)
    return {"nodes": torch.from_numpy(nodes), "pod": torch.from_numpy(pods), "mask": torch.from_numpy(mask),
            "target": torch.from_numpy(target)}


def centred(q: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Values minus their mean over each decision's candidates (0 off the mask)."""
    q = q.masked_fill(~mask, 0.0)
    return (q - q.sum(dim=1, keepdim=True) / mask.sum(dim=1, keepdim=True)).masked_fill(~mask, 0.0)


def distillation_loss(q: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per decision: the mean squared gap between the student's centred values and the targets'."""
    gap = (centred(q, mask) - centred(target, mask)) ** 2
    return gap.sum(dim=1) / mask.sum(dim=1)


def held_out_figures(network: NodeScorer, data: dict[str, torch.Tensor]) -> tuple[float, float]:
    """The student's agreement with the ensemble and its distillation loss, from one pass over the data."""
    with torch.no_grad():
        q = network(data["nodes"], data["pod"], data["mask"])
    return agreement(q, data), float(distillation_loss(q, data["target"], data["mask"]).mean())


def agreement(q: torch.Tensor, data: dict[str, torch.Tensor]) -> float:
    """Share of decisions (with a choice) where the student's pick (the best of q) is among the ensemble's best."""
    best = data["target"].masked_fill(~data["mask"], float("-inf"))
    top = best >= best.max(dim=1, keepdim=True).values - 1e-6
    chosen = top.gather(1, q.argmax(dim=1, keepdim=True)).squeeze(1)
    choice = data["mask"].sum(dim=1) > 1
    return float(chosen[choice].float().mean()) if bool(choice.any()) else 1.0


def distil(cfg: DistillConfig) -> tuple[NodeScorer, dict]:
    """The student network and the training record for its sidecar."""
    started, commit = time.time(), git_commit()
    ensemble = load_members(cfg)
    members = ensemble.models
    world_cfg = world_config(cfg, members)
    arch = members[0].architecture
    need = cfg.worlds * cfg.decisions * world_cfg.max_nodes * (arch.node_features + 2) * 4
    if need > MAX_STATE_BYTES:
        raise ValueError(f"{cfg.worlds} worlds x {cfg.decisions} decisions at up to {world_cfg.max_nodes} nodes "
                         f"would keep {need / 2**30:.1f} GiB of states (at most {MAX_STATE_BYTES / 2**30:.0f}): "
                         "ask for fewer --worlds or --decisions")
    plan = world_plan(world_cfg, cfg.worlds, cfg.seed)
    print(f"the ensemble of {len(members)} schedules {len(plan)} worlds x {cfg.decisions} decisions ...",
          file=sys.stderr)
    with worker_pool(cfg.workers, shared=ensemble) as pool:
        played = list(tqdm(pool.map(_play_world, [(cfg, world_cfg, world) for world in plan]), total=len(plan),
                           desc="ensemble states", disable=not cfg.progress, mininterval=1.0, file=sys.stderr))
    held = min(max(1, round(cfg.validation_share * len(played))), len(played) - 1)
    fit = stack([d for world in played[:-held] for d in world], world_cfg.max_nodes)
    check = stack([d for world in played[-held:] for d in world], world_cfg.max_nodes)
    play_seconds = time.time() - started

    torch.set_num_threads(cfg.torch_threads)
    torch.manual_seed(cfg.seed)
    student = NodeScorer(tuple(arch.hidden), arch.node_features, arch.pod_features, arch.candidates or "all")
    optimizer = torch.optim.Adam(student.parameters(), lr=cfg.learning_rate)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, cfg.steps, eta_min=cfg.learning_rate / 10)
    rng = np.random.default_rng(cfg.seed)
    count = len(fit["mask"])
    bar = tqdm(range(cfg.steps), desc="distilling", disable=not cfg.progress, mininterval=1.0, file=sys.stderr)
    recent: list[float] = []
    for step in bar:
        rows = torch.from_numpy(rng.integers(count, size=cfg.batch_size))
        q = student(fit["nodes"][rows], fit["pod"][rows], fit["mask"][rows])
        loss = distillation_loss(q, fit["target"][rows], fit["mask"][rows]).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        recent = (recent + [loss.item()])[-200:]
        if step % 1000 == 0 and step < cfg.steps - 1:
            bar.set_postfix(loss=f"{np.mean(recent):.4f}", agree=f"{held_out_figures(student, check)[0]:.3f}")
    student.eval()
    held_agreement, held_loss = held_out_figures(student, check)
    bar.set_postfix(loss=f"{np.mean(recent):.4f}", agree=f"{held_agreement:.3f}")
    bar.close()
    config = dataclasses.asdict(cfg)
    record = {"training": {
        "algorithm": f"distilled from an ensemble of {len(members)} networks: the mean of their values, each "
                     "standardized per decision, regressed on the states the ensemble reaches",
        "seed": cfg.seed, "hyperparameters": config, "git_commit": commit, "torch": torch.__version__,
        "seconds": round(time.time() - started, 1), "ensemble_seconds": round(play_seconds, 1),
        "decisions": {"fitted": count, "held_out": len(check["mask"])},
        "held_out": {"agreement": round(held_agreement, 4), "loss": round(held_loss, 5)},
        "world_hyperparameters": {key: getattr(world_cfg, key) for key in WORLD_KEYS},
        "members": [{"file": str(m.path), "sha256": m.metadata.get("sha256"),
                     "training": {k: m.metadata.get("training", {}).get(k)
                                  for k in ("algorithm", "seed", "steps", "td_steps", "gradient_steps")}}
                    for m in members],
    }}
    return student, record


def _train_run(job: tuple) -> tuple[dict, dict]:
    """One run of the recipe (here, or in a Ray task): its served weights and its record."""
    cfg, init = job
    network, record = train(cfg, init)
    return network.state_dict(), record


def distil_runs(cfg: DQNConfig, init: NodeScorer | None, members_dir: Path) -> tuple[NodeScorer, dict]:
    """`cfg.members` runs of the recipe, seeds cfg.seed, cfg.seed + 1, ..., each written to members_dir
    with its sidecar, distilled into one network; its record lists the runs."""
    started = time.time()
    stem = f"{cfg.policy.lower()}{'-demonstrations' if cfg.demonstrations_only else ''}"
    on_ray = ray_address() is not None
    # on Ray the runs go side by side, a task each, each recording its demonstrations in its own task
    jobs = [(dataclasses.replace(cfg, seed=cfg.seed + k, members=1, extra_metadata={},
                                 workers=1 if on_ray else cfg.workers, actors=0 if on_ray else cfg.actors), init)
            for k in range(cfg.members)]
    print(f"{cfg.members} runs (seeds {cfg.seed}..{cfg.seed + cfg.members - 1}) "
          f"{'side by side on Ray' if on_ray else 'one after another'} ...", file=sys.stderr)
    paths, runs = [], []
    with worker_pool(cfg.members if on_ray else 1) as pool:
        for (run, _), (state, record) in zip(jobs, pool.map(_train_run, jobs)):
            network = NodeScorer(tuple(run.hidden), candidates=run.candidates or "all")
            network.load_state_dict(state)
            path = save_model(members_dir / f"{stem}-seed{run.seed}.safetensors", network, cfg.policy, record)
            print(f"wrote {path}", file=sys.stderr)
            paths.append(str(path))
            runs.append(record["training"])
    student, record = distil(DistillConfig(policy=cfg.policy, members=tuple(paths), seed=cfg.seed,
                                           worlds=cfg.distil_worlds, decisions=cfg.distil_decisions,
                                           steps=cfg.distil_steps, workers=cfg.workers,
                                           torch_threads=cfg.torch_threads, progress=cfg.progress))
    training = record["training"]
    recipe = dataclasses.asdict(cfg)
    recipe.pop("extra_metadata")
    training.update({
        "algorithm": f"{cfg.members} runs of {runs[0]['algorithm']}, {training['algorithm']}",
        "steps": cfg.total_timesteps, "recipe": recipe,
        "gradient_steps": sum(r["gradient_steps"] for r in runs), "td_steps": sum(r["td_steps"] for r in runs),
        "interaction_steps": sum(r["interaction_steps"] for r in runs),
        "demonstrations": {"decisions": sum(r["demonstrations"]["decisions"] for r in runs),
                           "per_run": [r["demonstrations"]["decisions"] for r in runs]},
        # the work, summed over the runs; on Ray the runs overlap, so the wall clock is less
        "seconds": round(sum(r["seconds"] for r in runs) + training["seconds"], 1),
        "wall_seconds": round(time.time() - started, 1),
        "distillation_seconds": training["seconds"], "runs_side_by_side_on_ray": on_ray,
    })
    return student, record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agent.learn.distill", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--policy", required=True, type=str.upper, choices=POLICIES)
    parser.add_argument("--member", action="append", default=[], type=Path, required=True,
                        help="a model of the ensemble (repeat, at least twice)")
    parser.add_argument("--out", default="models", help="output directory")
    parser.add_argument("--name", default=None, help="file name (default <policy>-distilled.safetensors)")
    parser.add_argument("--no-progress", action="store_true")
    defaults, docs = DistillConfig.__dataclass_fields__, field_docs(DistillConfig)
    for name in OPTIONS:
        default = defaults[name].default
        parser.add_argument("--" + name.replace("_", "-"), type=type(default), default=default, help=docs[name])
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.member if not p.is_file()]
    if missing:
        parser.error(f"--member: no such file: {', '.join(missing)}")
    try:
        cfg = DistillConfig(policy=args.policy, members=tuple(str(p) for p in args.member),
                            progress=not args.no_progress,
                            **{name: getattr(args, name) for name in OPTIONS})
        student, record = distil(cfg)
    except ValueError as exc:
        print(f"distill: {exc}", file=sys.stderr)
        return 2
    record["training"]["command"] = "python -m agent.learn.distill " + " ".join(
        argv if argv is not None else sys.argv[1:])
    path = Path(args.out) / (args.name or f"{cfg.policy.lower()}-distilled.safetensors")
    save_model(path, student, cfg.policy, record)
    held = record["training"]["held_out"]
    print(f"wrote {path} ({record['training']['seconds']} s; on held-out states its pick is the ensemble's in "
          f"{held['agreement']:.1%})")
    print(json.dumps(held))
    return 0


if __name__ == "__main__":
    sys.exit(main())
