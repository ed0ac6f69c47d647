"""`make bench`: training throughput and model inference cost, printed (never asserted)."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from agent.learn.model_io import load_model
from agent.sim.simulator import Simulation
from agent.learn.train import config_for, run

MODELS = Path("models")


def inference_table(node_counts=(3, 10, 100, 1000, 5000), repeats: int = 50) -> None:
    torch.set_num_threads(1)
    print("\n## Scoring one pod (features + Q-network, 1 thread), median of runs\n")
    print("| policy | " + " | ".join(f"{n} nodes" for n in node_counts) + " |")
    print("|---|" + "---|" * len(node_counts))
    for policy in ("ee", "lb", "el"):
        path = MODELS / f"{policy}.pt"
        if not path.is_file():
            print(f"| {policy.upper()} | (no {path}) |")
            continue
        model = load_model(path)
        cells = []
        for n in node_counts:
            sim = Simulation.of_family("poisson", seed=0, nodes=n)
            sim.next_decision()
            state, pod = sim.candidate_state()
            times = []
            for _ in range(repeats if n <= 1000 else 10):
                t0 = time.perf_counter()
                model.q_values(state, pod)
                times.append(time.perf_counter() - t0)
            cells.append(f"{1000 * np.median(times):.3f} ms")
        print(f"| {policy.upper()} | " + " | ".join(cells) + " |")


def training_table(steps: int = 4096) -> None:
    """A short run with the algorithm each shipped model was trained with, against its record."""
    print("\n## Training\n")
    print("| policy | algorithm | recorded steps | recorded seconds | steps/s (recorded) | steps/s (measured now) |")
    print("|---|---|---|---|---|---|")
    for policy in ("EE", "LB", "EL"):
        side = MODELS / f"{policy.lower()}.json"
        recorded = json.loads(side.read_text())["training"] if side.is_file() else {}
        algo = "ppo" if str(recorded.get("algorithm", "PPO")).startswith("PPO") else "dqn"
        with tempfile.TemporaryDirectory() as tmp:
            cfg = config_for(algo, policy=policy, total_timesteps=steps, log_dir="", progress=False, out=tmp)
            t0 = time.perf_counter()
            run(cfg, algo)
            rate = steps / (time.perf_counter() - t0)
        print(f"| {policy} | {algo} | {recorded.get('steps', '-')} | {recorded.get('seconds', '-')} | "
              f"{recorded.get('steps_per_second', '-')} | {rate:.0f} |")


def cloning_table(steps: int = 300) -> None:
    """The shipped models are their teachers' clones: each one's whole training time (teacher picking
    included; the goal is 15 minutes) as recorded, and its cloning step timed now on demonstrations
    recorded as its own were (same teachers and sizes, 4 worlds per family; no per-world teachers)."""
    from agent.learn.imitation import clone, demonstrations
    from agent.learn.network import NodeScorer

    torch.set_num_threads(2)
    print("\n## Cloning (the shipped recipe: teachers' demonstrations, then supervised steps)\n")
    print("| policy | recorded wall s (goal <= 900) | recorded cloning | ms per step (recorded) | "
          "ms per step (measured now) |")
    print("|---|---|---|---|---|")
    for policy in ("EE", "LB", "EL"):
        side = MODELS / f"{policy.lower()}.json"
        recorded = json.loads(side.read_text())["training"] if side.is_file() else {}
        hyper, imitation = recorded.get("hyperparameters", {}), recorded.get("imitation")
        if not imitation:
            print(f"| {policy} | {recorded.get('wall_seconds', '-')} | (not a clone) | - | - |")
            continue
        demos = demonstrations(policy, hyper["teachers"], 4, hyper.get("imitation_decisions", 256),
                               hyper["min_nodes"], hyper["max_nodes"], seed=hyper.get("seed", 1),
                               node_draw=hyper.get("node_draw", "uniform"))
        few = demonstrations(policy, hyper["teachers"], 1, 16, hyper["min_nodes"], hyper["max_nodes"], seed=99)
        torch.manual_seed(0)
        actor = NodeScorer(tuple(hyper.get("hidden", (64, 64))))
        clone(actor, demos, few, 30, progress=False)  # warm-up: torch's first steps allocate
        now = clone(actor, demos, few, steps, progress=False)
        print(f"| {policy} | {recorded.get('wall_seconds', '-')} | {imitation['steps']} steps in "
              f"{imitation['seconds']} s | {1000 * imitation['seconds'] / imitation['steps']:.1f} | "
              f"{1000 * now['seconds'] / steps:.1f} |")


def main() -> None:
    print(f"# rlscore agent benchmark ({torch.get_num_threads()} torch threads available)")
    inference_table()
    training_table()
    cloning_table()


if __name__ == "__main__":
    main()
