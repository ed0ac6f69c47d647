"""Scaling on Ray: evaluation throughput (worlds/s) and the DQN learner's environment-step rate against
the number of Ray worker processes, on a real Ray cluster started on this machine (a head that runs
nothing and 1 or 2 worker nodes of one cpu each, separate processes on loopback). Goal: 2 workers give
>= 1.7x the throughput of 1. Run with the Ray venv:

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
EVAL = ["--policy", "EE", "--families", "poisson", "--seeds", "8", "--arrivals", "300", "--nodes", "16",
        "--no-model", "--no-progress"]
TRAIN = ["--policy", "LB", "--families", "poisson", "--total-timesteps", "4096", "--demo-worlds", "2",
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
        run("agent.evaluate.cli", [*EVAL, "--out", str(work / "warm"), "--seeds", "1", "--ray-address", address])
        eval_s = run("agent.evaluate.cli", [*EVAL, "--out", str(work / f"eval-{workers}"), "--ray-address", address])
        run("agent.learn.train", [*TRAIN, "--actors", str(workers), "--out", str(work / f"train-{workers}"),
                                  "--ray-address", address])
        training = json.loads((work / f"train-{workers}" / "lb.json").read_text())["training"]
        interaction_s = training["seconds"] - training["demonstrations"]["seconds"]  # no pre-training steps
        return {"workers": workers, "eval_s": eval_s, "worlds_per_s": 8 / eval_s,
                "env_steps_per_s": training["interaction_steps"] / interaction_s}
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
    print("\nRay scaling (loopback cluster: a head that runs nothing, worker nodes of 1 cpu each)")
    print("| workers | evaluation worlds/s | ratio | DQN environment steps/s (one actor per worker) | ratio |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['workers']} | {row['worlds_per_s']:.2f} | x{row['worlds_per_s'] / rows[0]['worlds_per_s']:.2f} "
              f"| {row['env_steps_per_s']:.0f} | x{row['env_steps_per_s'] / rows[0]['env_steps_per_s']:.2f} |")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
