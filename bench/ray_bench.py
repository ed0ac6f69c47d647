"""Scaling on Ray: evaluation throughput (worlds/s) and the DQN learner's environment-step rate against
the number of Ray worker processes, on a real Ray cluster started on this machine (a head that runs
nothing and 1 or 2 worker nodes of one cpu each, separate processes on loopback). Goal: 2 workers give
>= 1.7x the throughput of 1. The learner runs in the driver: with its default one gradient step per
4 environment steps it, not the actors, sets the DQN's rate on two cores. Run with the Ray venv:

    PYTHONPATH=. .venv-ray/bin/python bench/ray_bench.py
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.helpers.ray_nodes import ENV, ROOT, RayNodes

# Each figure is a marginal rate, between a small and a large run of the same command on the same
# cluster: the command's fixed start (imports, connecting, Ray starting its worker processes and the
# actors) is left out, as it is from an evaluation of hundreds of worlds. The whole-command rate of
# the large run is printed beside it.
SEEDS_SMALL, SEEDS = 8, 32
EVAL = ["--policy", "EE", "--families", "poisson", "--arrivals", "300", "--nodes", "16", "--no-model", "--no-progress"]
STEPS_SMALL, STEPS = 4096, 16384
TRAIN = ["--policy", "LB", "--families", "poisson", "--demo-worlds", "2",
         "--demo-decisions", "32", "--pretrain-steps", "0", "--burn-in", "50", "--max-nodes", "16", "--no-eval",
         "--log-dir", "", "--no-progress"]


def run(module: str, args: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", module, *args], env=ENV, check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def measure(workers: int, work: Path) -> dict:
    temp = Path(tempfile.mkdtemp(prefix="rb", dir="/tmp"))  # Ray's socket paths must stay short
    nodes = RayNodes(temp)
    try:
        nodes.start("head", head=True, cpus=0)
        for k in range(workers):
            nodes.start(f"worker-{k}")
        address = nodes.address
        run("agent.evaluate.cli", [*EVAL, "--seeds", "1", "--out", str(work / "warm"), "--ray-address", address])
        small_s, eval_s = (run("agent.evaluate.cli", [*EVAL, "--seeds", str(n), "--ray-address", address,
                                                      "--out", str(work / f"eval-{workers}-{n}")])
                           for n in (SEEDS_SMALL, SEEDS))
        row = {"workers": workers, "worlds_per_s": (SEEDS - SEEDS_SMALL) / (eval_s - small_s),
               "whole_worlds_per_s": SEEDS / eval_s}
        # the learner takes one gradient step per --train-frequency environment steps: 4 by default (the
        # learner's rate), 64 (the actors' own rate, with the learner nearly idle)
        for key, frequency in (("env_steps_per_s", 4), ("light_env_steps_per_s", 64)):
            seconds = {}
            for steps in (STEPS_SMALL, STEPS):
                out = work / f"train-{workers}-{frequency}-{steps}"
                run("agent.learn.train", [*TRAIN, "--total-timesteps", str(steps), "--actors", str(workers),
                                          "--train-frequency", str(frequency), "--out", str(out),
                                          "--ray-address", address])
                training = json.loads((out / "lb.json").read_text())["training"]
                # no pre-training steps: after the demonstrations, all is interaction
                seconds[steps] = training["seconds"] - training["demonstrations"]["seconds"]
            row[key] = (STEPS - STEPS_SMALL) / (seconds[STEPS] - seconds[STEPS_SMALL])
        return row
    finally:
        nodes.stop()
        shutil.rmtree(temp, ignore_errors=True)


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="rlscore-ray-bench-"))
    rows = [measure(n, work) for n in (1, 2)]
    print("\nRay scaling (loopback cluster: a head that runs nothing, worker nodes of 1 cpu each; the learner "
          "runs in the driver, on the same machine). Marginal rates between a small and a large run.")
    print(f"| workers | evaluation worlds/s | ratio | whole command, {SEEDS} worlds | ratio "
          f"| DQN env steps/s | ratio | DQN env steps/s, learner-light | ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    first = rows[0]
    for row in rows:
        cells = []
        for key, digits in (("worlds_per_s", 2), ("whole_worlds_per_s", 2), ("env_steps_per_s", 0),
                            ("light_env_steps_per_s", 0)):
            cells += [f"{row[key]:.{digits}f}", f"x{row[key] / first[key]:.2f}"]
        print(f"| {row['workers']} | " + " | ".join(cells) + " |")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
