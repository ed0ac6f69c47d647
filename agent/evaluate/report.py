"""Evaluation output: markdown and CSV tables per family, and plots like the thesis figures."""

from __future__ import annotations

import csv
import math
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


RunKey = tuple[int, str, int]
"""seed, family, node count: the world a row of runs.csv was measured on; seed first, so that worlds sort
(and resample) as rlscore-eval's pairing by seed does"""


class RunsFileError(ValueError):
    """A runs.csv that is missing, or not as `write_outputs` writes it."""


def read_runs(path: str | Path, metric: str = "objective") -> dict[RunKey, dict[str, float]]:
    """runs.csv -> world -> scorer -> `metric`, every value a finite number: the file's readers (the
    recipe, the world choice) pair scorers world by world, and a hole or a NaN would bias the pairing
    silently."""
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in ("scorer", "family", "nodes", "seed", metric) if c not in (reader.fieldnames or ())]
            if missing and reader.fieldnames:
                raise RunsFileError(f"{path} has no column {', '.join(map(repr, missing))}: "
                                    "not an rlscore-eval runs.csv?")
            rows = list(reader)
    except OSError as e:
        raise RunsFileError(f"{path}: {e.strerror or e}") from e
    runs: dict[RunKey, dict[str, float]] = {}
    for row in rows:
        scorer, family = row["scorer"], row["family"]
        numbers = {}
        for column, kind in (("seed", int), ("nodes", int), (metric, float)):
            try:
                numbers[column] = kind(row[column])
            except (TypeError, ValueError) as e:
                raise RunsFileError(f"{path}: {scorer} has {column}={row[column]!r}, not "
                                    f"{'an integer' if kind is int else 'a number'}") from e
        if not math.isfinite(numbers[metric]):
            raise RunsFileError(f"{path}: {scorer} has {metric}={row[metric]} on {family} seed {row['seed']}")
        by_scorer = runs.setdefault((numbers["seed"], family, numbers["nodes"]), {})
        if scorer in by_scorer:
            raise RunsFileError(f"{path} lists {scorer} twice on {family} seed {row['seed']} at {row['nodes']} nodes")
        by_scorer[scorer] = numbers[metric]
    return runs


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


def table_rows(table: list[str]) -> list[dict[str, str]]:
    """A table `markdown_table` wrote (as lines, the way sidecars keep it) back as its cells, keyed by the
    column headings ("family", "scorer", "objective", "hard viol." ...)."""
    headings = [c.strip() for c in table[0].strip().strip("|").split("|")]
    rows = []
    for line in table[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != len(headings):
            raise ValueError(f"a table row has {len(cells)} cells under {len(headings)} headings: {line!r}")
        rows.append(dict(zip(headings, cells)))
    return rows


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


# --- the README's table of the shipped policies, from their sidecars ------------------------------------

README = Path(__file__).resolve().parents[2] / "README.md"
MODELS = Path(__file__).resolve().parents[2] / "models"
HEADLINES = {"EE": ("energy <= 0.95 x efficient-first", "unschedulable <= efficient-first"),
             "LB": ("hot-node time <= 0.8 x least-utilized", "hot-node time below every rule's"),
             "EL": ("hard violations <= latency-fit",)}
BEYOND_RULES = "objective below the best rule beyond noise (paired 95% interval below 1)"


def _paired(p: dict | None) -> str:
    if not p:
        return "-"
    low, high = p["ci95"]
    return f"x{p['ratio']:.3f} ({low:.3f}-{high:.3f})"


def _goal(record: dict, family: str, goal: str) -> dict | None:
    return next((g for g in record.get("goals", []) if g["family"] == family and g["goal"] == goal), None)


def _cells_from_goals(record: dict) -> dict[str, dict]:
    """Per mixed family, the best rule and the paired reading against it, as the record's goal "objective
    below the best rule" has them: for a model measured without an ablation, which pairs the same runs."""
    return {g["family"]: {"best_rule": g.get("baseline"), "vs_best_rule": g.get("paired")}
            for g in record.get("goals", []) if g["goal"] == BEYOND_RULES}


def readme_table(models: Path = MODELS) -> str:
    """Per policy: how it was trained, its goals on both seed ranges, and on the mixed worlds its
    objective against the best rule and its demonstrations-only twin, and the policy's headline goals."""
    import json

    lines = ["| policy | trained | goals met (evaluation / hold-out seeds) | misses beyond noise |",
             "|---|---|---|---|"]
    mixed = ["| policy | seeds | worlds | vs best rule | vs demonstrations only | vs the model it replaced | headline goals |",
             "|---|---|---|---|---|---|---|"]
    for policy in ("EE", "LB", "EL"):
        meta = json.loads((models / f"{policy.lower()}.json").read_text())
        training = meta.get("training", {})
        evaluation, holdout = meta.get("evaluation", {}), meta.get("holdout", {})
        seconds = f"{training.get('wall_seconds', training.get('seconds', '?'))} s"
        algorithm = training.get("algorithm", "?")
        if "demonstrations" in training:  # the DQN: what taught it and how far TD took it
            steps = f"{training['td_steps']} TD steps" if training.get("td_steps") else "no TD"
            trained = (f"{algorithm.split(':')[0]}; {training['demonstrations'].get('decisions', '?')} demonstrations, "
                       f"{steps}, {seconds}")
        else:  # an earlier trainer's model (a rule selector or a behaviour clone): no TD at all
            name = "rule selector" if algorithm.startswith("selector") else algorithm.split(" of ")[0]
            trained = f"{name} (earlier trainer, no TD), {seconds}"
        goals = " / ".join(f"{r.get('goals_met', '?')}/{r.get('goals_total', '?')}" for r in (evaluation, holdout))
        misses = " / ".join(str(r.get("missed_beyond_noise", "?")) for r in (evaluation, holdout))
        lines.append(f"| {policy} | {trained} | {goals} | {misses} |")
        ablation = meta.get("ablation", {})
        for key, record in (("evaluation", evaluation), ("hold-out", holdout)):
            cells = ablation.get("evaluation" if key == "evaluation" else "holdout") or _cells_from_goals(record)
            for family, cell in cells.items():
                heads = []
                for goal in HEADLINES[policy]:
                    g = _goal(record, family, goal)
                    if g:
                        heads.append(f"{goal}: {'met' if g['ok'] else 'missed'} ({g['detail']})")
                mixed.append(f"| {policy} | {key} | {family} | {_paired(cell.get('vs_best_rule'))} vs "
                             f"{cell.get('best_rule')} | {_paired(cell.get('vs_demonstrations_only'))} | "
                             f"{_paired(cell.get('vs_previous'))} | {'; '.join(heads) or '-'} |")
    return ("\n".join(lines) + "\n\nOn the mixed worlds (ratios of the objective, lower is better, paired by seed "
            "with a 95% bootstrap interval; below 1 means ahead):\n\n" + "\n".join(mixed) + "\n")


def main(argv: list[str] | None = None) -> int:
    """`python -m agent.evaluate.report readme [--write]`: the README's table of the shipped policies."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] != "readme":
        print("usage: python -m agent.evaluate.report readme [--write]", file=sys.stderr)
        return 2
    table = readme_table()
    if "--write" in args[1:]:
        from rlscore.generated import write_section
        write_section(README, "policies", table)
    else:
        print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
