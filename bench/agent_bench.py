"""`make bench`: training throughput and model inference cost, printed (never asserted)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch

from rlscore.core.model import load_model
from agent.sim.simulator import Simulation

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


def training_table() -> None:
    """A short DQN run per policy (demonstrations, pre-training, interaction), its phases timed, beside
    what the shipped model's sidecar records of its own training."""
    from agent.learn.dqn import DQNConfig, train

    print("\n## Training (a short DQN run per policy; the shipped model's record beside it)\n")
    print("| policy | measured now: seconds | env steps/s | gradient steps/s | recorded: algorithm | seconds | "
          "TD steps |")
    print("|---|---|---|---|---|---|---|")
    for policy in ("EE", "LB", "EL"):
        side = MODELS / f"{policy.lower()}.json"
        recorded = json.loads(side.read_text())["training"] if side.is_file() else {}
        cfg = DQNConfig(policy=policy, demo_worlds=8, demo_decisions=128, pretrain_steps=300, total_timesteps=4000,
                        log_dir="", progress=False, workers=1)
        t0 = time.perf_counter()
        _, record = train(cfg)
        seconds = time.perf_counter() - t0
        r = record["training"]
        env_rate = r["interaction_steps"] / max(r["environment_seconds"], 1e-9)
        print(f"| {policy} | {seconds:.0f} | {env_rate:.0f} | {r['gradient_steps'] / seconds:.0f} | "
              f"{str(recorded.get('algorithm', '-')).split(':')[0]} | {recorded.get('wall_seconds', '-')} | "
              f"{recorded.get('td_steps', '-')} |")


def main() -> None:
    print(f"# rlscore agent benchmark ({torch.get_num_threads()} torch threads available)")
    inference_table()
    training_table()


if __name__ == "__main__":
    main()
