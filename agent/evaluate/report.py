"""Evaluation output: markdown and CSV tables per family, and plots like the thesis figures."""

from __future__ import annotations

import csv
from dataclasses import asdict
from pathlib import Path

import numpy as np

from agent.evaluate.compare import RunResult, Trace
from agent.evaluate.goals import GoalCheck

# The columns that say most about each policy's objective.
COLUMNS = {
    "EE": ("objective", "mean_power_watts", "unschedulable", "mean_active_nodes"),
    "LB": ("objective", "hot_node_share", "request_cv", "cpu_share_cv"),
    "EL": ("objective", "hard_violations", "soft_violations", "hard_violations_avoidable", "mean_power_watts",
           "mean_active_nodes"),
}
HEADERS = {"objective": "objective", "mean_power_watts": "power W", "unschedulable": "unschedulable",
           "mean_active_nodes": "active nodes", "hot_node_share": "hot-node share", "request_cv": "request CV",
           "cpu_share_cv": "cpu share CV", "hard_violations": "hard viol.", "soft_violations": "soft viol.",
           "hard_violations_avoidable": "avoidable hard viol.", "soft_rate": "soft rate"}


def _cell(value) -> str:
    if isinstance(value, float):
        if np.isnan(value):
            return "-"
        return f"{value:.4g}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


def markdown_table(policy: str, rows: list[dict]) -> str:
    cols = ("family", "nodes", "scorer", *COLUMNS[policy])
    head = [HEADERS.get(c, c) for c in cols]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in sorted(rows, key=lambda r: (r["family"], str(r["nodes"]), r["objective"])):
        lines.append("| " + " | ".join(_cell(r[c]) for c in cols) + " |")
    return "\n".join(lines)


def write_outputs(out: Path, policy: str, results: list[RunResult], rows: list[dict], checks: list[GoalCheck],
                  traces: dict[str, Trace], title: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "runs.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(asdict(results[0]).keys()))
        writer.writeheader()
        writer.writerows(asdict(r) for r in results)
    with open(out / "summary.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        writer.writeheader()
        writer.writerows(rows)
    goal_lines = [f"- [{'x' if c.ok else ' '}] {c.family} @ {c.nodes}: {c.described()}" for c in checks]
    (out / "summary.md").write_text(f"# {title}\n\nObjective: the policy's cost per arrival, lower is better "
                                    f"(agent/sim/outcomes.py).\n\n{markdown_table(policy, rows)}\n\n## Goals\n\n"
                                    + ("\n".join(goal_lines) or "(no goal applies)") + "\n")
    plot_objectives(out, policy, rows)
    if traces:
        plot_traces(out, policy, traces)


def plot_objectives(out: Path, policy: str, rows: list[dict]) -> None:
    """One bar chart per (family, nodes): every scorer's objective relative to the best baseline."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = sorted({(r["family"], str(r["nodes"])) for r in rows})
    fig, axes = plt.subplots(len(groups), 1, figsize=(9, 2.2 * len(groups)), squeeze=False)
    for ax, (family_name, nodes) in zip(axes[:, 0], groups):
        cell = sorted((r for r in rows if r["family"] == family_name and str(r["nodes"]) == nodes),
                      key=lambda r: r["objective"])
        values = [r["objective"] for r in cell]
        colours = ["tab:red" if r["scorer"].startswith("rl-") else "tab:grey" for r in cell]
        ax.barh([r["scorer"] for r in cell], values, color=colours)
        ax.set_title(f"{family_name} @ {nodes} nodes: objective (lower is better)", fontsize=9)
        ax.tick_params(labelsize=7)
    fig.tight_layout()
    fig.savefig(out / "objectives.png", dpi=90)
    plt.close(fig)


def _moving_average(values: list[float], window: int = 10) -> np.ndarray:
    v = np.asarray(values, dtype=float)
    if len(v) < window:
        return v
    return np.convolve(v, np.ones(window) / window, mode="valid")


def plot_traces(out: Path, policy: str, traces: dict[str, Trace]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rl = f"rl-{policy.lower()}"
    if rl in traces and traces[rl].pods_per_node:
        pods = np.array(traces[rl].pods_per_node)
        fig, ax = plt.subplots(figsize=(8, 4))
        for node in range(pods.shape[1]):
            ax.plot(pods[:, node], label=f"node-{node}")
        for i, s in enumerate(traces[rl].shifts):
            ax.axvline(s, linestyle="--", color="grey", label="latency change" if i == 0 else None)
        ax.set(xlabel="decisions", ylabel="scheduled pods", title=f"{rl}: pods per node")
        if pods.shape[1] <= 12:
            ax.legend(fontsize="small")
        fig.tight_layout()
        fig.savefig(out / "pods_per_node.png", dpi=100)
        plt.close(fig)

    for attr, ylabel, name in (("active_nodes", "active nodes", "active_nodes.png"),
                               ("power_watts", "cluster power W", "power.png"),
                               ("hot_nodes", "nodes above 85% cpu", "hot_nodes.png"),
                               ("chosen_latency", "chosen node latency (ms, moving avg)", "latency.png")):
        fig, ax = plt.subplots(figsize=(8, 4))
        for scorer, trace in traces.items():
            series = getattr(trace, attr)
            if series:
                ax.plot(_moving_average(series), label=scorer, linewidth=2 if scorer == rl else 1)
        ax.set(xlabel="decisions", ylabel=ylabel, title=f"{policy}: {ylabel} over time")
        ax.legend(fontsize="small")
        fig.tight_layout()
        fig.savefig(out / name, dpi=100)
        plt.close(fig)
