"""Train the RL tuner: simulate the catalogue on randomized training clusters, then learn on the table.

    python -m agent.tune.train_tuner --clusters 100 --out models/tuner.pt

Step 1 (minutes, in parallel): for each training cluster, the default weights and every catalogue
entry on the cluster's replay; the improvements form a (clusters x catalogue) table, saved beside the
tuner (`<out>-table.npz`; `--table` reuses one). Step 2 (seconds): policy gradient on the table (see
rl_tuner). The sidecar records the command, commit, hyper-parameters, wall time and how the greedy
tuner does on the validation clusters against picking at random from the catalogue and against the
best fixed sequence of five.
"""

from __future__ import annotations

import argparse
import multiprocessing
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from agent.parallel import add_ray_argument, use_ray, worker_pool
from agent.tune.clusters import Cluster, training_clusters
from agent.tune.rl_tuner import (DOMAIN_FEATURES, RLTuner, TrainConfig, domain_features, evaluate_on_table,
                                 train_on_table)
from agent.tune.search_space import CATALOGUE

ROOT = Path(__file__).resolve().parents[2]


def simulate_row(cluster: Cluster, arrivals: int, replays: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Domain features and every catalogue entry's improvement on one cluster's trial replays."""
    torch.set_num_threads(1)
    task = cluster.task(arrivals, replays)
    return domain_features(cluster.world, cluster.policy), np.array([task.improvement(c) for c in CATALOGUE])


def _row(args):
    return simulate_row(*args)


def build_table(clusters: list[Cluster], arrivals: int, replays: int | None, workers: int
                ) -> tuple[np.ndarray, np.ndarray]:
    jobs = [(c, arrivals, replays) for c in clusters]
    with worker_pool(workers) as pool:
        rows = list(tqdm(pool.map(_row, jobs), total=len(jobs), desc="simulating the catalogue", file=sys.stderr))
    return np.stack([r[0] for r in rows]), np.stack([r[1] for r in rows])


def fixed_sequence_reward(train: np.ndarray, test: np.ndarray, trials: int) -> float:
    """The best single sequence of `trials` catalogue entries for the training clusters (greedy set
    cover of the mean best improvement), applied to every test cluster: a tuner without observations."""
    chosen: list[int] = []
    for _ in range(trials):
        scores = [np.maximum(train[:, chosen + [j]].max(axis=1), 0).mean() if j not in chosen else -1
                  for j in range(train.shape[1])]
        chosen.append(int(np.argmax(scores)))
    return float(np.maximum(test[:, chosen].max(axis=1), 0).mean())


def random_picks_reward(table: np.ndarray, trials: int, rng: np.random.Generator, repeats: int = 200) -> float:
    picks = [np.maximum(table[i, rng.choice(table.shape[1], trials, replace=False)].max(), 0)
             for _ in range(repeats) for i in range(len(table))]
    return float(np.mean(picks))


def git_commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def main(argv: list[str] | None = None) -> int:
    defaults = TrainConfig()
    parser = argparse.ArgumentParser(prog="python -m agent.tune.train_tuner", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--clusters", type=int, default=defaults.clusters)
    parser.add_argument("--iterations", type=int, default=defaults.iterations)
    parser.add_argument("--trials", type=int, default=defaults.trials)
    parser.add_argument("--arrivals", type=int, default=defaults.arrivals, help="measured arrivals per replay")
    parser.add_argument("--replays", type=int, default=defaults.replays,
                        help="simulated replays per trial, averaged (default: each policy's, as rlscore-tune)")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--workers", type=int, default=max(1, min(2, multiprocessing.cpu_count())))
    parser.add_argument("--table", type=Path, default=None, help="reuse a simulated table instead of simulating")
    parser.add_argument("--out", type=Path, default=ROOT / "models" / "tuner.pt")
    add_ray_argument(parser)
    args = parser.parse_args(argv)
    use_ray(args.ray_address)
    if args.clusters < 5 or min(args.iterations, args.trials, args.arrivals, args.workers) < 1 or (
            args.replays is not None and args.replays < 1):
        parser.error("--clusters must be >= 5; --iterations, --trials, --arrivals, --replays, --workers >= 1")
    cfg = replace(defaults, clusters=args.clusters, iterations=args.iterations, trials=args.trials,
                  arrivals=args.arrivals, replays=args.replays, seed=args.seed)
    started, commit = time.perf_counter(), git_commit()
    table_path = args.out.with_name(args.out.stem + "-table.npz")
    if args.table:
        try:
            saved = np.load(args.table)
            domains, table = saved["domains"], saved["table"]
        except (OSError, KeyError, ValueError) as exc:
            parser.error(f"--table {args.table}: {exc}")
        if domains.shape[1] != len(DOMAIN_FEATURES) or table.shape[1] != len(CATALOGUE):
            parser.error(f"--table {args.table} was simulated for another catalogue or feature set")
        simulate_s = 0.0
    else:
        clusters = training_clusters(cfg.clusters, cfg.seed, cfg.nodes)
        domains, table = build_table(clusters, cfg.arrivals, cfg.replays, args.workers)
        simulate_s = time.perf_counter() - started
        table_path.parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(table_path, domains=domains, table=table, names=np.array([c.name for c in clusters]))
        print(f"simulated {len(clusters)} clusters x {len(CATALOGUE)} configurations in {simulate_s:.0f} s "
              f"-> {table_path}", file=sys.stderr)
    rng = np.random.default_rng(cfg.seed)
    order = rng.permutation(len(table))
    n_val = max(1, int(round(cfg.validation_share * len(table))))
    val, tr = order[:n_val], order[n_val:]
    learn_started = time.perf_counter()
    net, history = train_on_table(domains[tr], table[tr], cfg, validation=(domains[val], table[val]),
                                  progress=lambda row: print(f"  {row}", file=sys.stderr))
    learn_s = time.perf_counter() - learn_started
    validation = {
        "clusters": int(n_val),
        "rl_tuner_greedy": evaluate_on_table(net, domains[val], table[val], cfg.trials),
        "random_catalogue_picks": random_picks_reward(table[val], cfg.trials, rng),
        "best_fixed_sequence": fixed_sequence_reward(table[tr], table[val], cfg.trials),
        "oracle_best_in_catalogue": float(np.maximum(table[val].max(axis=1), 0).mean()),
    }
    metadata = {
        "command": " ".join(["python -m agent.tune.train_tuner", *(argv if argv is not None else sys.argv[1:])]),
        "git_commit": commit,
        "hyperparameters": asdict(cfg),
        "table": table_path.name,
        "training_clusters": len(tr),
        "simulate_seconds": round(simulate_s, 1),
        "learn_seconds": round(learn_s, 1),
        "wall_seconds": round(time.perf_counter() - started, 1),
        "validation_mean_best_improvement": validation,
        "history": history,
        "reward": "best improvement over the default weights within the trials, counted from 0",
    }
    RLTuner(net, CATALOGUE, metadata).save(args.out)
    print(f"wrote {args.out}: validation mean best improvement {validation}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
