"""`make bench`: training throughput and model inference cost, printed (never asserted)."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from rlscore.core.model import load_model
from agent.sim.simulator import Simulation
from agent.learn.train import config_for, run

MODELS = Path("models")


def inference_table(node_counts=(3, 10, 100, 1000, 5000), repeats: int = 50) -> None:
    torch.set_num_threads(1)
    print("\n## Scoring one pod (features + Q-network, 1 thread), median of runs\n")
    print("| policy | " + " | ".join(f"{n} nodes" for n in node_counts) + " |")
    print("|---|" + "---|" * len(node_counts))
    for policy in ("ee", "lb", "el"):
        path = MODELS / f"{policy}.safetensors"
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
        if recorded.get("algorithm") == "selector":
            print(f"| {policy} | selector | - | {recorded.get('seconds', '-')} | - | (a rule selector: no RL steps) |")
            continue
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
        if recorded.get("algorithm") == "selector":
            print(f"| {policy} | {recorded.get('wall_seconds', '-')} | a rule selector: {imitation['steps']} steps in "
                  f"{imitation['seconds']} s | {1000 * imitation['seconds'] / imitation['steps']:.1f} | - |")
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


def cloning_beside_other_work(steps: int = 1000) -> None:
    """Cloning's thread budget (agent/learn/threads.py) against fixed threads, alone and beside a
    busy loop in another process that holds one core; the weights come out the same either way. The
    budget looks every 5 s, so a run of a few seconds would not show it."""
    import subprocess
    import sys

    from agent.learn import threads
    from agent.learn.imitation import clone, demonstrations
    from agent.learn.network import NodeScorer

    teachers = {"test1": "one-step-lb", "poisson": "one-step-lb"}
    demos = demonstrations("LB", teachers, 4, 256, 2, 64, seed=1, node_draw="log-uniform")
    few = demonstrations("LB", teachers, 1, 16, 2, 64, seed=99)
    budget_check = threads.ThreadBudget.check
    clone(NodeScorer(), demos, few, 30, progress=False)  # warm-up: torch's first steps allocate

    first: dict = {}

    def timed(adapt: bool) -> tuple[float, bool]:
        """ms per step, and whether the weights equal the first run's"""
        threads.ThreadBudget.check = budget_check if adapt else (lambda self: self.threads)  # off: fixed threads
        try:
            torch.manual_seed(0)
            actor = NodeScorer()
            record = clone(actor, demos, few, steps, progress=False, threads=2)
        finally:
            threads.ThreadBudget.check = budget_check
        weights = actor.state_dict()
        if not first:
            first.update(weights)
        return 1000 * record["seconds"] / steps, all(torch.equal(weights[k], first[k]) for k in weights)

    print(f"\n## Cloning beside other work (LB, test1 and poisson, {steps} steps, up to 2 threads)\n")
    print("| threads | alone: ms per step | beside a one-core busy loop: ms per step | weights equal the first run's |")
    print("|---|---|---|---|")
    for adapt, name in ((False, "fixed at 2"), (True, "the budget (what training uses)")):
        alone, same = timed(adapt)
        busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            beside, same_beside = timed(adapt)
        finally:
            busy.kill()
            busy.wait()
        print(f"| {name} | {alone:.1f} | {beside:.1f} | {'yes' if same and same_beside else 'no'} |")


def main() -> None:
    print(f"# rlscore agent benchmark ({torch.get_num_threads()} torch threads available)")
    inference_table()
    training_table()
    cloning_table()
    cloning_beside_other_work()


if __name__ == "__main__":
    main()
