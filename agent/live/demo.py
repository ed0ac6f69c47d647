"""`make demo`: the thesis's test patterns on the local cluster, once per policy and once with the
default scheduler; prints where the pods landed and writes a comparison plot.

Runs against the cluster that `local-cluster/cluster.sh up` started (KUBECONFIG from its `env`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from pathlib import Path

import numpy as np

from agent.live.loadgen import LiveCluster, RunResult, replay

RUNS = (  # label, scheduler, policy
    ("rl EE", "rl-scheduler", "EE"),
    ("rl LB", "rl-scheduler", "LB"),
    ("rl EL", "rl-scheduler", "EL"),
    ("default", "default-scheduler", None),
)


def table(results: dict[str, RunResult], nodes: list[str], latencies: dict[str, float]) -> str:
    head = ["run"] + [f"{n} ({latencies[n]:g} ms)" for n in nodes] + ["active nodes (end)", "mean latency ms",
                                                                       "within 30 ms"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, r in results.items():
        counts = Counter(p.node for p in r.placements)
        chosen = [x for x in r.chosen_latency if np.isfinite(x)]
        within = np.mean([x <= 30 for x in chosen]) if chosen else float("nan")
        lines.append("| " + " | ".join([label] + [str(counts.get(n, 0)) for n in nodes] + [
            str(r.active_nodes[-1] if r.active_nodes else 0), f"{np.mean(chosen):.1f}" if chosen else "-",
            f"{within:.0%}"]) + " |")
    return "\n".join(lines)


def plot(results: dict[str, RunResult], nodes: list[str], out: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    width = 0.8 / len(results)
    for k, (label, r) in enumerate(results.items()):
        counts = Counter(p.node for p in r.placements)
        axes[0].bar(np.arange(len(nodes)) + k * width, [counts.get(n, 0) for n in nodes], width, label=label)
        axes[1].plot(r.active_nodes, label=label)
        axes[2].plot(r.chosen_latency, label=label)
    axes[0].set(xticks=np.arange(len(nodes)) + 0.4 - width / 2, xticklabels=nodes, ylabel="pods", title="pods per node")
    axes[1].set(xlabel="arrivals", ylabel="nodes with pods", title="active nodes")
    axes[2].axhline(30, color="grey", linestyle="--", label="hard limit")
    axes[2].set(xlabel="arrivals", ylabel="ms", title="latency of the chosen node")
    for ax in axes:
        ax.legend(fontsize="small")
    fig.suptitle(title)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agent.live.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="test1", help="thesis pattern: test1 or test2")
    parser.add_argument("--pods", type=int, default=24)
    parser.add_argument("--speed", type=float, default=20.0, help="scenario seconds per real second")
    parser.add_argument("--out", type=Path, default=Path("demo-output"))
    args = parser.parse_args(argv)
    try:
        cluster = LiveCluster(os.environ.get("KUBECONFIG"), namespace="rlscore-demo")
        latencies = cluster.node_latencies()
    except Exception as exc:  # no cluster: say how to get one
        print(f"demo: cannot reach the local cluster ({exc}); run `make local-up` first", file=sys.stderr)
        return 2
    nodes = sorted(latencies)
    print(f"{len(nodes)} KWOK nodes; {args.pods} nginx deployments (250m, 64Mi, latency soft 20 / hard 30 ms) "
          f"per run, thesis pattern {args.scenario}, {args.speed:g}x faster\n", file=sys.stderr)
    results: dict[str, RunResult] = {}
    for label, scheduler, policy in RUNS:
        print(f"== {label}", file=sys.stderr)
        run = f"demo-{label.replace(' ', '-').lower()}"
        cluster.cleanup(run)
        results[label] = replay(cluster, args.scenario, args.pods, scheduler, policy, args.speed, seed=1,
                                run=run, progress=False)
        cluster.cleanup(run)
    print(table(results, nodes, latencies))
    out = args.out / "demo.png"
    plot(results, nodes, out, f"rlscore on the local cluster: {args.scenario}, {args.pods} pods")
    print(f"\nplot: {out}")
    pending = sum(1 for r in results.values() for p in r.placements if not p.node)
    if pending:
        print(f"{pending} pod(s) were not scheduled in time", file=sys.stderr)
    return 1 if pending else 0


if __name__ == "__main__":
    sys.exit(main())
