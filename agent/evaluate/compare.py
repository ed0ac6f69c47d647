"""Evaluate a trained policy against kube-scheduler's scoring and other baselines on the same seeded
arrivals, check the policy's goals, and write a markdown/CSV table and plots like the thesis figures.

Evaluation seeds live in their own range (>= EVAL_SEED_BASE), which training never draws from.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from agent.features import latency_tiers
from agent.heuristics import POLICY_HEURISTIC
from agent.learn.model_io import load_model, sha256_of, sidecar_path
from agent.sim.scenarios import SCENARIOS, LatencyLimits
from agent.scoring import HeuristicScorer, ModelScorer, Scorer, choose
from agent.sim.simulator import Simulation
from agent.state import POLICIES, normalize_policy

EVAL_SEED_BASE = 2**40
BASELINES = ("default-scheduler", "least-allocated", "most-allocated", "random")


def baselines_for(policy: str) -> tuple[str, ...]:
    """kube-scheduler's scorings and chance for every policy; EL adds the latency heuristics."""
    return BASELINES + (("latency-greedy", POLICY_HEURISTIC["EL"]) if policy == "EL" else ())
GOAL_SCENARIOS = {"EE": ("test1", "test2", "poisson"), "LB": ("test1", "test2", "poisson"),
                  "EL": ("test1", "test2", "latency-shift")}
GOAL_NODES = (3, 10, 100)
# "<= 0.5 x default" is only checked on the thesis's fixed 30-pod patterns: poisson keeps 30-70% of
# the cluster's cpu requested, and then the load itself needs that share of the nodes.
EE_HALF_OF_DEFAULT_SCENARIOS = ("test1", "test2")


@dataclass
class Trace:
    """What one scorer did in one run, step by step (for plots)."""

    active_nodes: list[int] = field(default_factory=list)
    chosen_latency: list[float] = field(default_factory=list)
    pods_per_node: list[np.ndarray] = field(default_factory=list)
    shifts: list[int] = field(default_factory=list)


@dataclass
class RunResult:
    scorer: str
    scenario: str
    nodes: int
    seed: int
    decisions: int
    mean_active_nodes: float
    cpu_share_cv: float  # mean over steps of the coefficient of variation of per-node cpu request share
    hard_violations_avoidable: int  # over the hard limit while a feasible node met it
    soft_rate: float  # share of latency-limited pods placed within their soft limit
    best_tier_rate: float  # share placed in the best latency tier any feasible node offered
    post_shift_best_tier_rate: float  # the same, for pods placed after the first latency shift
    mean_chosen_latency_ms: float
    unschedulable: int
    decision_ms: float


def run(scorer: Scorer, scenario: str, nodes: int, seed: int, decisions: int, latency_limits: bool,
        keep_trace: bool = False) -> tuple[RunResult, Trace]:
    sim = Simulation(scenario, nodes, seed, LatencyLimits(enabled=latency_limits))
    tie_rng = np.random.default_rng(seed)
    trace = Trace()
    cvs, latencies, tiers_ok, soft, after_shift = [], [], [], [], []
    violations, spent = 0, 0.0
    for step in range(decisions):
        sim.next_decision()
        state, pod = sim.candidate_state()
        t0 = time.perf_counter()
        candidate = choose(scorer.values(state, pod), tie_rng)
        spent += time.perf_counter() - t0
        tiers = latency_tiers(state, pod)
        sim.place(candidate)

        cluster = sim.cluster
        present = cluster.present
        share = cluster.cpu_requested[present] / cluster.cpu_capacity[present]
        cvs.append(float(share.std() / share.mean()) if share.mean() > 0 else 0.0)
        latencies.append(float(state.latency_ms[candidate]))
        if pod.has_latency_limits:
            best = tiers.max()
            tiers_ok.append(tiers[candidate] == best)
            soft.append(tiers[candidate] == 2)
            violations += int(tiers[candidate] == 0 and best > 0)
            if sim.latency_shifts:
                after_shift.append(tiers[candidate] == best)
        active = int(np.sum(present & (cluster.pods > 0)))
        trace.active_nodes.append(active)
        trace.chosen_latency.append(latencies[-1])
        if keep_trace:
            trace.pods_per_node.append(np.where(present, cluster.pods, 0).copy())
    trace.shifts = list(sim.latency_shifts)
    nan = float("nan")
    result = RunResult(
        scorer=scorer.name, scenario=scenario, nodes=nodes, seed=seed, decisions=decisions,
        mean_active_nodes=float(np.mean(trace.active_nodes)),
        cpu_share_cv=float(np.mean(cvs)),
        hard_violations_avoidable=violations,
        soft_rate=float(np.mean(soft)) if soft else nan,
        best_tier_rate=float(np.mean(tiers_ok)) if tiers_ok else nan,
        post_shift_best_tier_rate=float(np.mean(after_shift)) if after_shift else nan,
        mean_chosen_latency_ms=float(np.mean(latencies)),
        unschedulable=sim.unschedulable,
        decision_ms=1000.0 * spent / decisions,
    )
    return result, trace


METRICS = ("mean_active_nodes", "cpu_share_cv", "hard_violations_avoidable", "soft_rate",
           "best_tier_rate", "post_shift_best_tier_rate", "mean_chosen_latency_ms", "unschedulable",
           "decision_ms")


def summarize(results: list[RunResult]) -> list[dict]:
    """Mean over seeds per (scenario, nodes, scorer)."""
    groups: dict[tuple, list[RunResult]] = {}
    for r in results:
        groups.setdefault((r.scenario, r.nodes, r.scorer), []).append(r)
    rows = []
    for (scenario, nodes, scorer), runs in groups.items():
        row = {"scenario": scenario, "nodes": nodes, "scorer": scorer, "seeds": len(runs)}
        for metric in METRICS:
            values = [getattr(r, metric) for r in runs]
            row[metric] = float(np.nanmean(values)) if not all(np.isnan(values)) else float("nan")
        rows.append(row)
    return rows


@dataclass
class GoalCheck:
    goal: str
    scenario: str
    nodes: int
    ok: bool
    detail: str


def check_goals(policy: str, rows: list[dict]) -> list[GoalCheck]:
    """The issue's goals, per (scenario, nodes) present in `rows` for the goal scenarios."""
    table = {(r["scenario"], r["nodes"], r["scorer"]): r for r in rows}
    rl = f"rl-{policy.lower()}"
    checks = []
    for scenario, nodes in sorted({(r["scenario"], r["nodes"]) for r in rows}):
        if scenario not in GOAL_SCENARIOS[policy] or (scenario, nodes, rl) not in table:
            continue
        me = table[(scenario, nodes, rl)]

        def base(name: str) -> dict:
            return table[(scenario, nodes, name)]

        def add(goal: str, ok: bool, detail: str) -> None:
            checks.append(GoalCheck(goal, scenario, nodes, bool(ok), detail))

        if policy == "EE":
            most, default = base("most-allocated"), base("default-scheduler")
            add("active <= 1.05 x most-allocated",
                me["mean_active_nodes"] <= 1.05 * most["mean_active_nodes"] + 1e-9,
                f"{me['mean_active_nodes']:.2f} vs {most['mean_active_nodes']:.2f}")
            if scenario in EE_HALF_OF_DEFAULT_SCENARIOS:
                add("active <= 0.5 x default-scheduler",
                    me["mean_active_nodes"] <= 0.5 * default["mean_active_nodes"] + 1e-9,
                    f"{me['mean_active_nodes']:.2f} vs {default['mean_active_nodes']:.2f}")
        elif policy == "LB":
            least = base("least-allocated")
            add("cpu share CV <= 1.1 x least-allocated",
                me["cpu_share_cv"] <= 1.1 * least["cpu_share_cv"] + 1e-9,
                f"{me['cpu_share_cv']:.3f} vs {least['cpu_share_cv']:.3f}")
        else:
            greedy, default = base("latency-greedy"), base("default-scheduler")
            add("no avoidable hard-limit violation", me["hard_violations_avoidable"] == 0,
                f"{me['hard_violations_avoidable']:.1f} per run")
            add("soft-limit rate >= latency-greedy", me["soft_rate"] >= greedy["soft_rate"] - 1e-9,
                f"{me['soft_rate']:.3f} vs {greedy['soft_rate']:.3f}")
            add("active <= 0.6 x default-scheduler",
                me["mean_active_nodes"] <= 0.6 * default["mean_active_nodes"] + 1e-9,
                f"{me['mean_active_nodes']:.2f} vs {default['mean_active_nodes']:.2f}")
            if not np.isnan(me["post_shift_best_tier_rate"]):
                add("after a latency shift, best tier >= latency-greedy",
                    me["post_shift_best_tier_rate"] >= greedy["post_shift_best_tier_rate"] - 1e-9,
                    f"{me['post_shift_best_tier_rate']:.3f} vs {greedy['post_shift_best_tier_rate']:.3f}")
    return checks


def evaluate(policy: str, model_scorer: Scorer | None, scenarios: tuple[str, ...], node_counts: tuple[int, ...],
             seeds: int = 3, decisions: int = 300, baselines: tuple[str, ...] | None = None,
             progress: bool = True, traces_for: tuple[str, int] | None = None
             ) -> tuple[list[RunResult], dict[str, Trace]]:
    """Run the model (if any) and every baseline on the same seeded scenarios."""
    policy = normalize_policy(policy)
    latency_limits = policy == "EL"
    names = list(baselines if baselines is not None else baselines_for(policy))
    jobs = [(s, n, seed) for s in scenarios for n in node_counts for seed in range(seeds)]
    results: list[RunResult] = []
    traces: dict[str, Trace] = {}
    for scenario, nodes, k in tqdm(jobs, desc=f"eval {policy}", disable=not progress, file=sys.stderr):
        seed = EVAL_SEED_BASE + k
        scorers: list[Scorer] = [HeuristicScorer(name, np.random.default_rng(seed)) for name in names]
        if model_scorer is not None:
            scorers.insert(0, model_scorer)
        for scorer in scorers:
            keep = traces_for == (scenario, nodes) and k == 0
            result, trace = run(scorer, scenario, nodes, seed, decisions, latency_limits, keep)
            results.append(result)
            if keep:
                traces[scorer.name] = trace
    return results, traces


def markdown_table(rows: list[dict]) -> str:
    cols = ["scenario", "nodes", "scorer", "mean_active_nodes", "cpu_share_cv",
            "hard_violations_avoidable", "soft_rate", "post_shift_best_tier_rate",
            "mean_chosen_latency_ms", "decision_ms"]
    head = ["scenario", "nodes", "scorer", "active nodes", "cpu CV", "avoidable hard viol.",
            "soft rate", "best tier after shift", "latency ms", "ms/decision"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in sorted(rows, key=lambda r: (r["scenario"], r["nodes"], r["scorer"])):
        cells = []
        for c in cols:
            v = r[c]
            cells.append(f"{v:.3f}" if isinstance(v, float) and not np.isnan(v) else
                         ("-" if isinstance(v, float) else str(v)))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_outputs(out: Path, policy: str, results: list[RunResult], rows: list[dict],
                  checks: list[GoalCheck], traces: dict[str, Trace], title: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "runs.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(asdict(results[0]).keys()))
        writer.writeheader()
        writer.writerows(asdict(r) for r in results)
    with open(out / "summary.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        writer.writeheader()
        writer.writerows(rows)
    goal_lines = [f"- [{'x' if c.ok else ' '}] {c.scenario} @ {c.nodes} nodes: {c.goal} ({c.detail})"
                  for c in checks]
    (out / "summary.md").write_text(f"# {title}\n\n{markdown_table(rows)}\n\n## Goals\n\n"
                                    + ("\n".join(goal_lines) or "(no goal applies)") + "\n")
    if traces:
        plot_traces(out, policy, traces)


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
        ax.set(xlabel="steps", ylabel="scheduled pods", title=f"{rl}: pods per node")
        if pods.shape[1] <= 12:
            ax.legend(fontsize="small")
        fig.tight_layout()
        fig.savefig(out / "pods_per_node.png", dpi=100)
        plt.close(fig)

    for attr, ylabel, name in (("active_nodes", "active nodes", "active_nodes.png"),
                               ("chosen_latency", "chosen node latency (ms, moving avg)", "latency.png")):
        fig, ax = plt.subplots(figsize=(8, 4))
        for scorer, trace in traces.items():
            ax.plot(_moving_average(getattr(trace, attr)), label=scorer, linewidth=2 if scorer == rl else 1)
        ax.set(xlabel="steps", ylabel=ylabel, title=f"{policy}: {ylabel} over time")
        ax.legend(fontsize="small")
        fig.tight_layout()
        fig.savefig(out / name, dpi=100)
        plt.close(fig)


def evaluate_shipped_model(path: Path, seeds: int = 3, decisions: int = 300, progress: bool = True) -> list[GoalCheck]:
    """Evaluate a freshly trained model on its goal scenarios and record the table in its sidecar."""
    model = load_model(path)
    policy = model.policy
    results, _ = evaluate(policy, ModelScorer(model), GOAL_SCENARIOS[policy], GOAL_NODES, seeds,
                          decisions, progress=progress)
    rows = summarize(results)
    checks = check_goals(policy, rows)
    side = sidecar_path(path)
    meta = json.loads(side.read_text())
    meta["evaluation"] = {
        "command": f"rlscore-eval --policy {policy} --scenario {','.join(GOAL_SCENARIOS[policy])} "
                   f"--nodes {','.join(map(str, GOAL_NODES))} --seeds {seeds} --decisions {decisions}",
        "seed_base": EVAL_SEED_BASE,
        "table": markdown_table(rows).splitlines(),
        "goals": [asdict(c) for c in checks],
        "all_goals_met": all(c.ok for c in checks),
    }
    assert meta["sha256"] == sha256_of(path)
    side.write_text(json.dumps(meta, indent=2) + "\n")
    return checks


def _int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"node counts must be >= 1, got {text!r}")
    return values


def _scenario_list(text: str) -> tuple[str, ...]:
    values = tuple(x.strip() for x in text.split(",") if x.strip())
    if text == "all":
        return SCENARIOS
    bad = [v for v in values if v not in SCENARIOS]
    if bad or not values:
        raise argparse.ArgumentTypeError(f"unknown scenario {bad or text!r}: expected {', '.join(SCENARIOS)} or all")
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rlscore-eval", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--policy", required=True, type=str.upper, choices=POLICIES)
    parser.add_argument("--scenario", type=_scenario_list, default=None,
                        help=f"comma-separated, from {', '.join(SCENARIOS)}, or 'all' "
                             "(default: the policy's goal scenarios)")
    parser.add_argument("--nodes", type=_int_list, default=GOAL_NODES, help="comma-separated node counts")
    parser.add_argument("--model", type=Path, default=None, help="model file (default models/<policy>.pt)")
    parser.add_argument("--no-model", action="store_true", help="baselines only")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--decisions", type=int, default=300, help="placements per run")
    parser.add_argument("--out", type=Path, default=None, help="output directory (default eval/<policy>)")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # one small forward pass per decision: threads only add overhead
    policy = args.policy
    scenarios = args.scenario or GOAL_SCENARIOS[policy]
    if args.seeds < 1 or args.decisions < 1:
        parser.error("--seeds and --decisions must be >= 1")

    scorer = None
    if not args.no_model:
        from agent.learn.model_io import ModelValidationError
        path = args.model or Path("models") / f"{policy.lower()}.pt"
        try:
            scorer = ModelScorer(load_model(path, expected_policy=policy))
        except ModelValidationError as exc:
            print(f"rlscore-eval: {exc}", file=sys.stderr)
            return 2
    trace_key = (scenarios[0], min(args.nodes))
    results, traces = evaluate(policy, scorer, scenarios, args.nodes, args.seeds, args.decisions,
                               progress=not args.no_progress, traces_for=trace_key)
    rows = summarize(results)
    checks = check_goals(policy, rows) if scorer else []
    out = args.out or Path("eval") / policy.lower()
    write_outputs(out, policy, results, rows, checks, traces,
                  f"{policy}: {', '.join(scenarios)} at {', '.join(map(str, args.nodes))} nodes")
    print(markdown_table(rows))
    for c in checks:
        print(f"{'PASS' if c.ok else 'FAIL'} {c.scenario} @ {c.nodes}: {c.goal} ({c.detail})")
    print(f"wrote {out}/summary.md, summary.csv, runs.csv and plots")
    return 0


if __name__ == "__main__":
    sys.exit(main())
