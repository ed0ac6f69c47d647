"""How faint a gain TD learning finds at a given budget, on a world where the teacher is plainly wrong.

The mixed worlds leave a scorer a gain of a few hundredths of the per-decision cost's spread over the
best rule, and only with foresight (agent.evaluate.rollout_bound). This measures the converse: where a
rule is known to beat the teacher, how small may that gain per decision be before the DQN, at a given
number of interaction steps, stops finding it?

The world is the tests' tiny scarce-near world: one small node near the users, two big far ones; strict
pods meet their latency limit only on the near node, loose pods anywhere. latency-pack, the teacher,
fills the near node with loose pods, and the strict pods that come next break their limits;
latency-fit keeps the near node for them. Two knobs make that gain fainter while the right move stays
the same. A cell's share thins the strict pods, so the teacher's mistake costs less on average; this
thins the cost's spread too, so the gain in spreads falls only slowly. A cell's noise adds Gaussian
noise of that many spreads to every reward TD learns from (DQNConfig.reward_noise), which divides
the gain in the spreads TD sees by sqrt(1 + noise^2). Per cell it prints that gain (latency-fit's
over the teacher per decision, measured after one fill), then each DQN's objective over the teacher's,
paired by seed, beside the demonstrations-only twin of its share.

    python -m agent.learn.faint_signal --cells 0.5:0,0.5:2,0.5:5,0.5:15,0.5:40,0.1:0 --steps 9000,36000 --seeds 1,2

`--margin-floors 0.02,0` trains each DQN of the grid with each floor of the margin loss's weight, and
`--prioritized 0,0.6` with uniform and with prioritized replay, and `--trust-heads 0,4` without and with
four critic heads that lift the margin per decision where they agree (DQNConfig.trust_heads).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from agent.evaluate.cli import paired_text
from agent.evaluate.compare import EVAL_SEED_BASE, evaluate, summarize, values_by_seed
from agent.evaluate.goals import paired_ratio
from agent.evaluate.rollout_bound import rule_costs_and_spread, run_world
from agent.learn.dqn import DQNConfig, train
from agent.learn.model_io import save_model
from agent.parallel import worker_pool
from agent.sim import families
from agent.sim.families import Family
from agent.sim.world import GIB, LARGE, Hardware, NodeSpec, PodClass, World
from rlscore.core.model import load_model
from rlscore.core.scoring import ModelScorer

TEACHER, RIGHT = "latency-pack", "latency-fit"
NEAR = Hardware("near", 1000.0, 4.0 * GIB, 110, 30.0, 80.0, 50.0 * GIB)


def tiny_scarce_near(strict_share: float = 0.5) -> Family:
    """The tiny scarce-near family (three nodes, EL) with `strict_share` of its pods strict."""
    if not 0.0 < strict_share < 1.0:
        raise ValueError(f"the strict pods' share must lie strictly between 0 and 1, not {strict_share}")
    name = "tiny-scarce-near" if strict_share == 0.5 else f"tiny-scarce-near-{strict_share:g}"

    def draw(rng: np.random.Generator, n: int | None, limits: bool, training: bool) -> World:
        nodes = (NodeSpec(NEAR, 3.0), NodeSpec(LARGE, 40.0), NodeSpec(LARGE, 45.0))
        strict = PodClass("strict", strict_share, (250.0,), (0.5, 1.0), (0.5, 0.5), ((10.0, 15.0),))
        loose = PodClass("loose", 1.0 - strict_share, (250.0,), (0.5, 1.0), (0.5, 0.5), ((100.0, 150.0),))
        order = tuple(nodes[i] for i in rng.permutation(3))
        return World(name, order, (strict, loose), load=0.03, mean_lifetime_s=30.0, metrics_interval_s=0.0,
                     latency_drift=False)

    return Family(name, ("EL",), "a test world: the teacher latency-pack is wrong on the loose pods", draw,
                  eval_nodes=(3,))


@contextmanager
def registered(family: Family) -> Iterator[str]:
    """The family known by its name while the block runs (trainers and evaluations look it up), among
    the families kept apart from the built-in set, as a cluster profile's is."""
    families.PROFILE_FAMILIES[family.name] = family
    try:
        yield family.name
    finally:
        families.PROFILE_FAMILIES.pop(family.name, None)


def tiny_config(family: str, **overrides) -> DQNConfig:
    """The DQN of the tiny world: small network, short episodes, latency-pack as its teacher."""
    values = dict(policy="EL", families=(family,), min_nodes=3, max_nodes=3, seed=3, log_dir="", progress=False,
                  teachers={family: TEACHER}, demo_worlds=8, demo_decisions=128, burn_in=0, pretrain_steps=300,
                  total_timesteps=12_000, num_envs=4, episode_decisions=128, gamma=0.95, n_step=4,
                  start_e=0.2, end_e=0.05, batch_size=64, train_frequency=2, target_network_frequency=250,
                  learning_rate=1e-3, hidden=(32, 32), torch_threads=1, workers=1)
    values.update(overrides)
    return DQNConfig(**values)


def teacher_gain(family: str, seeds: int, decisions: int) -> float:
    """latency-fit's gain over the teacher per decision, after one fill, on evaluation seeds, in the unit
    rollout_bound measures the mixed worlds' gains in (the spread of the per-decision cost)."""
    gains = []
    for k in range(seeds):
        costs, spread = rule_costs_and_spread(family, EVAL_SEED_BASE + k, "EL", (TEACHER, RIGHT), decisions)
        gains.append(float(costs[TEACHER].mean() - costs[RIGHT].mean()) / spread)
    return float(np.mean(gains))


def one_step_room(family: str, worlds: int, futures: int, workers: int) -> tuple[float, float, float]:
    """One step of policy improvement over the teacher by rollouts on `futures` futures drawn afresh
    (rollout_bound with the teacher as its base): what the first step of policy iteration from the
    teacher can find in the state. -> (its objective over the teacher's, share of decisions departed,
    mean gain per decision in spreads), over `worlds` evaluation worlds of 100 decisions and 30 more."""
    jobs = [("EL", EVAL_SEED_BASE + k, 100, 30, family, futures, 0.0, TEACHER) for k in range(worlds)]
    with worker_pool(workers) as pool:
        bounds = list(pool.map(run_world, jobs))
    return (float(np.mean([b.ratio for b in bounds])), float(np.mean([b.departures for b in bounds])),
            float(np.mean([b.mean_gain for b in bounds])))


@dataclass(frozen=True)
class Run:
    """One training run of the grid: a DQN, or (demonstrations_only) the twin, which never sees a reward."""
    share: float
    noise: float
    steps: int
    seed: int
    demonstrations_only: bool = False
    margin_floor: float = DQNConfig.margin_floor
    prioritized: float = 0.0
    trust_heads: int = 0

    @property
    def label(self) -> str:
        if self.demonstrations_only:
            return f"twin {self.steps}"
        floor = f" floor {self.margin_floor:g}" if self.margin_floor != DQNConfig.margin_floor else ""
        replay = f" per {self.prioritized:g}" if self.prioritized else ""
        trust = f" trust {self.trust_heads}" if self.trust_heads else ""
        return f"dqn {self.steps} s{self.seed}{floor}{replay}{trust}"

    @property
    def name(self) -> str:
        """Its scorer's name in the evaluation: unique among the runs of one share."""
        return f"{self.label} noise {self.noise:g}"

    def columns(self, gain: float) -> tuple[str, str]:
        """Its reward noise and the gain per decision in the spreads it sees, as the table shows them."""
        if self.demonstrations_only:
            return "", "none (no TD)"
        return f"{self.noise:g}", f"{gain / np.sqrt(1 + self.noise ** 2):.3f}"


def train_job(job: tuple[Run, str]) -> tuple[Run, str, float]:
    """One run of the grid (a forked worker) -> the saved model's path and the run's seconds."""
    run, out = job
    family = tiny_scarce_near(run.share)
    started = time.time()
    with registered(family):
        net, record = train(tiny_config(family.name, total_timesteps=run.steps, seed=run.seed,
                                        reward_noise=run.noise, demonstrations_only=run.demonstrations_only,
                                        margin_floor=run.margin_floor, prioritized=run.prioritized,
                                        trust_heads=run.trust_heads))
    path = save_model(Path(out) / f"{family.name}-{run.name.replace(' ', '-')}.safetensors", net, "EL",
                      {"training": record["training"]})
    return run, str(path), time.time() - started


def parse_cells(text: str) -> list[tuple[float, float]]:
    """"share:noise,..." -> [(share, noise), ...], each share inside (0, 1), each noise >= 0."""
    cells = []
    for item in text.split(","):
        share, _, noise = item.partition(":")
        cell = (float(share), float(noise or 0))
        tiny_scarce_near(cell[0])  # refuses a share outside (0, 1)
        if not cell[1] >= 0:
            raise ValueError(f"the reward noise must be >= 0, not {noise}")
        cells.append(cell)
    return cells


def parse_fractions(text: str, option: str) -> list[float]:
    """"a,b,..." -> [a, b, ...], each within 0..1."""
    values = [float(x) for x in text.split(",")]
    if not all(0.0 <= v <= 1.0 for v in values):
        raise ValueError(f"each {option} must be within 0..1, not {text}")
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cells", default="0.5:0,0.5:2,0.5:5,0.5:15,0.5:40,0.1:0",
                        help="comma-separated share:noise pairs: the strict pods' share (strictly between 0 and 1) "
                             "and the Gaussian noise added to TD's rewards, in spreads (DQNConfig.reward_noise)")
    parser.add_argument("--steps", default="9000,36000", help="comma-separated interaction steps per DQN run")
    parser.add_argument("--seeds", default="1,2", help="comma-separated training seeds of each DQN")
    parser.add_argument("--margin-floors", default=f"{DQNConfig.margin_floor:g}",
                        help="comma-separated margin floors of each DQN (DQNConfig.margin_floor: the margin loss's "
                             "weight once it has decayed)")
    parser.add_argument("--prioritized", default="0",
                        help="comma-separated prioritized replay exponents of each DQN (DQNConfig.prioritized; 0: uniform)")
    parser.add_argument("--trust-heads", default="0",
                        help="comma-separated critic head counts of each DQN (DQNConfig.trust_heads: the margin is "
                             "lifted per decision where the critics agree; 0: none, the margin floor)")
    parser.add_argument("--eval-seeds", type=int, default=32, help="evaluation worlds per share (300 arrivals each)")
    parser.add_argument("--gain-decisions", type=int, default=300, help="decisions per world for the gain")
    parser.add_argument("--workers", type=int, default=2, help="training runs side by side")
    parser.add_argument("--rollout-futures", type=int, default=0,
                        help="also measure one step of policy improvement over the teacher by rollouts on this many "
                             "futures drawn afresh, per share (0: not)")
    parser.add_argument("--out", default="", help="keep the trained models here (default: a temporary folder)")
    args = parser.parse_args(argv)
    try:
        cells = parse_cells(args.cells)
        steps = [int(x) for x in args.steps.split(",")]
        seeds = [int(x) for x in args.seeds.split(",")]
        alphas = parse_fractions(args.prioritized, "--prioritized")
        floors = parse_fractions(args.margin_floors, "--margin-floors")
        heads = [int(x) for x in args.trust_heads.split(",")]
    except ValueError as e:
        parser.error(str(e))
    if any(k == 1 or k < 0 for k in heads):
        parser.error(f"each --trust-heads must be 0 or at least 2, not {args.trust_heads}")
    if min(steps) < 1 or args.eval_seeds < 2 or args.gain_decisions < 1 or args.workers < 1 or args.rollout_futures < 0:
        parser.error("--steps must be >= 1, --eval-seeds >= 2, --gain-decisions >= 1, --workers >= 1 and "
                     "--rollout-futures >= 0")

    # per cell a DQN per budget and seed; per share one twin at the largest budget (it never sees a reward)
    runs = [Run(share, noise, n, seed, margin_floor=floor, prioritized=alpha, trust_heads=k)
            for share, noise in cells for n in steps for floor in floors for alpha in alphas for k in heads
            for seed in seeds]
    runs += [Run(share, 0.0, max(steps), seeds[0], True) for share in dict.fromkeys(share for share, _ in cells)]
    with tempfile.TemporaryDirectory() as scratch:
        out = args.out or scratch
        Path(out).mkdir(parents=True, exist_ok=True)
        print(f"training {len(runs)} runs on {args.workers} workers ...", flush=True)
        trained = {}
        with worker_pool(args.workers) as pool:
            for run, path, seconds in pool.map(train_job, [(run, out) for run in runs]):
                trained[run] = path
                print(f"  share {run.share:g}, noise {run.noise:g}, {run.label}: {seconds:.0f} s", flush=True)
        print()
        print("| strict share | reward noise | gain per decision (spreads TD sees) | run | objective / teacher (95%) | "
              "hard violations per limited pod (teacher's) |")
        print("|---|---|---|---|---|---|")
        for share in dict.fromkeys(share for share, _ in cells):
            with registered(tiny_scarce_near(share)) as name:
                gain = teacher_gain(name, args.eval_seeds, args.gain_decisions)
                mine = [run for run in runs if run.share == share]
                scorers = [ModelScorer(load_model(trained[run]), name=run.name) for run in mine]
                results, _ = evaluate("EL", scorers, (name,), seeds=args.eval_seeds, arrivals=300, progress=False,
                                      baselines=(TEACHER, RIGHT))
                rows = {r["scorer"]: r for r in summarize(results)}
                objectives = {cell[2]: v for cell, v in values_by_seed(results).items()}
            teacher_rate = rows[TEACHER]["hard_violation_rate"]
            lines = [(RIGHT, RIGHT, "", f"{gain:.3f}")] + [(run.name, run.label, *run.columns(gain)) for run in mine]
            for who, shown, noise, seen in lines:
                reading = paired_text(paired_ratio(objectives[who], objectives[TEACHER]))
                print(f"| {share:g} | {noise} | {seen} | {shown} | {reading} | "
                      f"{rows[who]['hard_violation_rate']:.3f} ({teacher_rate:.3f}) |")
    if args.rollout_futures:
        print()
        for share in dict.fromkeys(share for share, _ in cells):
            with registered(tiny_scarce_near(share)) as name:
                ratio, departed, gain = one_step_room(name, 4, args.rollout_futures, args.workers)
            print(f"share {share:g}: one step of policy improvement over {TEACHER} by rollouts on "
                  f"{args.rollout_futures} futures drawn afresh: x{ratio:.3f} of the teacher, departing on "
                  f"{departed:.0%} of decisions, {gain:.3f} spreads per decision", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
