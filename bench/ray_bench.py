"""Scaling on Ray: evaluation throughput (worlds/s) and the DQN learner's environment-step rate against
the number of Ray worker processes, on a real Ray cluster started on this machine (a head that runs
nothing and 1 or 2 worker nodes of one cpu each, separate processes on loopback). Goal: 2 workers give
>= 1.7x the throughput of 1. The learner runs in the driver: with its default one gradient step per
4 environment steps it, not the actors, sets the DQN's rate on two cores. Run with the Ray venv:

    PYTHONPATH=. .venv-ray/bin/python bench/ray_bench.py
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RAY = Path(sys.executable).parent / "ray"
ENV = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(ROOT)}
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([str(RAY), "start", "--block", "--disable-usage-stats", "--object-store-memory=200000000",
                             *args], env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def alive(address: str) -> int:
    out = subprocess.run([sys.executable, "-c", "import ray; ray.init(address=%r, logging_level='ERROR'); "
                          "print(sum(n['Alive'] for n in ray.nodes()))" % address],
                         env=ENV, capture_output=True, text=True, timeout=120)
    return int(out.stdout.split()[-1]) if out.returncode == 0 else 0


def run(module: str, args: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", module, *args], env=ENV, check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def measure(workers: int, work: Path) -> dict:
    port = free_port()
    address = f"127.0.0.1:{port}"
    temp = Path(tempfile.mkdtemp(prefix="rb", dir="/tmp"))
    nodes = [start(["--head", f"--port={port}", "--num-cpus=0", "--include-dashboard=false", f"--temp-dir={temp}"])]
    try:
        # one node at a time, each joined before the next starts: two raylets registering with a head
        # at once on one host do not both join
        for joined in range(1, workers + 2):
            if joined > 1:
                nodes.append(start([f"--address={address}", "--num-cpus=1"]))
            deadline = time.monotonic() + 120
            while alive(address) < joined:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"Ray node {joined} of {workers + 1} did not join within 120 s")
                time.sleep(1)
        run("agent.evaluate.cli", [*EVAL, "--seeds", "1", "--out", str(work / "warm"), "--ray-address", address])
        small_s, eval_s = (run("agent.evaluate.cli", [*EVAL, "--seeds", str(n), "--out", str(work / f"eval-{workers}-{n}"),
                                                      "--ray-address", address]) for n in (SEEDS_SMALL, SEEDS))
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
        for node in nodes:
            try:
                os.killpg(node.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
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
