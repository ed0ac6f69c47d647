"""The goals a shipped policy is held to, checked on an evaluation's summary rows.

1. On every scenario family of its policy, the model is at least as good as the *best* baseline on
   the policy's objective (within OBJECTIVE_TOLERANCE, the seed-to-seed noise of a tie).
2. Where the heuristic its old reward encoded leaves room, it is clearly better (per-family goals).
3. The per-decision goals (active nodes, cpu share CV, latency tiers) hold on the thesis patterns and the
   steady streams at 3, 10 and 100 nodes.

Given the per-seed runs, each goal that compares the model with a baseline as "<= k x the
baseline's" (the objective, energy, unschedulable pods, hot-node time, active nodes, cpu share CV)
also carries the comparison paired by seed (`paired`): the same ratio with a 95% bootstrap interval
over the seeds, read against the goal's bound k (1 for the objective). A miss whose interval reaches
the bound cannot be told from meeting it on these seeds (which is not to say it does); one whose
interval lies above it is the model really behind. The best baseline is chosen on the same seeds,
which favours it, so "behind" is if anything overstated. Goals on absolute levels (hard violations
near zero, none avoidable) and the "at least as high" rates stay unpaired.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agent.evaluate.compare import RunResult, best_baseline, values_by_seed
from agent.sim.families import PROFILE_FAMILIES, evaluation_families_for

OBJECTIVE_TOLERANCE = 0.02
PAIRED_RESAMPLES = 2000
PER_DECISION_FAMILIES = {"EE": ("test1", "test2", "poisson"), "LB": ("test1", "test2", "poisson"),
                  "EL": ("test1", "test2", "latency-shift")}
PER_DECISION_NODES = (3, 10, 100)
# "<= 0.5 x default" is only checked on the thesis's fixed 30-pod patterns: poisson keeps 30-70% of
# the cluster's cpu requested, and then the load itself needs that share of the nodes.
EE_HALF_OF_DEFAULT_FAMILIES = ("test1", "test2")


@dataclass
class GoalCheck:
    goal: str
    family: str
    nodes: int | str
    ok: bool
    detail: str
    paired: dict | None = None  # objective goals, when the per-seed runs are given (see above)
    baseline: str | None = None  # the scorer compared with, where the figures chose it (a best rule)

    def described(self) -> str:
        """The goal with its figures and, where paired, the reading by seed."""
        paired = describe_paired(self.paired)
        return f"{self.goal} ({self.detail}{'; ' + paired if paired else ''})"


def missed_beyond_noise(checks: list[GoalCheck]) -> int:
    """Missed goals whose paired interval lies above the goal's bound: the model really behind."""
    return sum(not c.ok and bool(c.paired) and c.paired["reading"] == "behind" for c in checks)


def interval_reading(low: float, high: float, bound: float = 1.0) -> str:
    """A 95% interval of a ratio read against `bound`: "behind" wholly above it, "ahead" wholly below."""
    return "behind" if low > bound else "ahead" if high < bound else "tie"


def paired_ratio(model: dict[int, float], baseline: dict[int, float], resamples: int = PAIRED_RESAMPLES,
                 bound: float = 1.0) -> dict | None:
    """The model's mean over the baseline's on the seeds both ran, with a 95% bootstrap interval
    (seeds resampled together, a fixed stream so the record reproduces), read against `bound` (a
    goal of "<= bound x the baseline's"; the reading is "behind" when the whole interval lies above
    it). None when the baseline's total is 0 on them (no ratio to take)."""
    seeds = sorted(set(model) & set(baseline))
    m = np.array([model[s] for s in seeds])
    b = np.array([baseline[s] for s in seeds])
    if not seeds or b.sum() <= 0:
        return None
    picks = np.random.default_rng(0).integers(0, len(seeds), size=(resamples, len(seeds)))
    totals = b[picks].sum(axis=1)
    ratios = m[picks].sum(axis=1)[totals > 0] / totals[totals > 0]
    low, high = (float(x) for x in np.percentile(ratios, [2.5, 97.5]))
    reading = interval_reading(low, high, bound)
    paired = {"seeds": len(seeds), "ratio": round(float(m.sum() / b.sum()), 4), "ci95": [round(low, 4), round(high, 4)],
              "seeds_behind": int(np.sum(m > b * bound * (1 + 1e-9))), "reading": reading}
    if bound != 1.0:
        paired["bound"] = bound
    return paired


def clearly_behind(paired: dict | None) -> bool:
    """Behind beyond the seeds' noise (paired interval above 1) *and* by more than the goals' tie:
    what a miss beyond noise is (a missed objective goal whose interval lies above 1)."""
    return bool(paired) and paired["reading"] == "behind" and paired["ratio"] > 1.0 + OBJECTIVE_TOLERANCE


def describe_paired(paired: dict | None) -> str:
    if not paired:
        return ""
    low, high = paired["ci95"]
    against = f" against the bound x{paired['bound']:g}" if "bound" in paired else ""
    return (f"paired over {paired['seeds']} seeds: x{paired['ratio']:.3f} (95% {low:.3f}-{high:.3f}){against}, "
            f"behind on {paired['seeds_behind']}: {paired['reading']}")


def check_goals(policy: str, rows: list[dict], results: list[RunResult] | None = None) -> list[GoalCheck]:
    """The goals on the summary rows; with the runs behind them, the "<= k x a baseline" goals are also
    paired by seed."""
    table = {(r["family"], r["nodes"], r["scorer"]): r for r in rows}
    by_seed: dict[str, dict] = {}
    rl = f"rl-{policy.lower()}"
    checks: list[GoalCheck] = []
    for family_name, nodes in sorted({(r["family"], r["nodes"]) for r in rows}, key=str):
        me = table.get((family_name, nodes, rl))
        if me is None:
            continue

        def base(name: str) -> dict | None:
            return table.get((family_name, nodes, name))

        def paired(metric: str, baseline: str, bound: float = 1.0) -> dict | None:
            """The model's `metric` over `baseline`'s, seed by seed (None without the runs)."""
            if not results:
                return None
            if metric not in by_seed:
                by_seed[metric] = values_by_seed(results, metric)
            mine, theirs = by_seed[metric].get((family_name, nodes, rl)), by_seed[metric].get((family_name, nodes, baseline))
            return paired_ratio(mine, theirs, bound=bound) if mine and theirs else None

        def add(goal: str, ok: bool, detail: str, paired: dict | None = None, baseline: str | None = None) -> None:
            checks.append(GoalCheck(goal, family_name, nodes, bool(ok), detail, paired, baseline))

        if family_name in evaluation_families_for(policy) or family_name in PROFILE_FAMILIES:
            best = best_baseline(rows, family_name, nodes, rl)
            add(f"objective <= best baseline x {1 + OBJECTIVE_TOLERANCE:g}",
                me["objective"] <= best["objective"] * (1 + OBJECTIVE_TOLERANCE) + 1e-9,
                f"{me['objective']:.4g} vs {best['scorer']} {best['objective']:.4g}",
                paired("objective", best["scorer"]), best["scorer"])
        _family_goals(policy, family_name, me, base, add, paired)
        if family_name in MIXED_FAMILIES:
            _mixed_goals(policy, family_name, me, base, add, paired,
                         [r for r in rows if (r["family"], r["nodes"]) == (family_name, nodes)])
        if family_name in PER_DECISION_FAMILIES[policy] and nodes in PER_DECISION_NODES:
            _per_decision_goals(policy, family_name, me, base, add, paired)
    return checks


MIXED_FAMILIES = ("mixed", "mixed-wide")


def _mixed_goals(policy, family_name, me, base, add, paired, rows_of_cell) -> None:
    """On worlds that mix every difficulty a policy must beat the best single rule for its objective
    beyond noise, and its objective's headline measure as the issue states it."""
    rules = [r for r in rows_of_cell if not r["scorer"].startswith("rl-") and r["scorer"] != "random"]
    best = min(rules, key=lambda r: r["objective"])
    p = paired("objective", best["scorer"])
    add("objective below the best rule beyond noise (paired 95% interval below 1)",
        bool(p) and p["reading"] == "ahead", f"{me['objective']:.4g} vs {best['scorer']} {best['objective']:.4g}", p,
        best["scorer"])
    if policy == "LB" and base("least-utilized"):
        lu = base("least-utilized")
        add("hot-node time <= 0.8 x least-utilized", me["hot_node_share"] <= 0.8 * lu["hot_node_share"] + 1e-9,
            f"{me['hot_node_share']:.4f} vs {lu['hot_node_share']:.4f}", paired("hot_node_share", "least-utilized", 0.8))
        coolest = min(rules, key=lambda r: r["hot_node_share"])
        add("hot-node time below every rule's", me["hot_node_share"] < coolest["hot_node_share"],
            f"{me['hot_node_share']:.4f} vs {coolest['scorer']} {coolest['hot_node_share']:.4f}",
            paired("hot_node_share", coolest["scorer"]), coolest["scorer"])
    if policy == "EL" and base("latency-fit"):
        fit = base("latency-fit")
        add("hard violations <= latency-fit", me["hard_violations"] <= fit["hard_violations"] + 1e-9,
            f"{me['hard_violations']:.1f} vs {fit['hard_violations']:.1f} per run", paired("hard_violations", "latency-fit"))
    if policy == "EE" and base("efficient-first"):
        ef = base("efficient-first")
        add("energy <= 0.95 x efficient-first", me["mean_power_watts"] <= 0.95 * ef["mean_power_watts"],
            f"{me['mean_power_watts']:.0f} W vs {ef['mean_power_watts']:.0f} W",
            paired("mean_power_watts", "efficient-first", 0.95))
        add("unschedulable <= efficient-first", me["unschedulable"] <= ef["unschedulable"] + 1e-9,
            f"{me['unschedulable']:.2f} vs {ef['unschedulable']:.2f} per run", paired("unschedulable", "efficient-first"))


def _family_goals(policy, family_name, me, base, add, paired) -> None:
    if policy == "EE" and family_name == "hardware" and base("efficient-first"):
        ef = base("efficient-first")
        add("energy <= 1.05 x efficient-first", me["mean_power_watts"] <= 1.05 * ef["mean_power_watts"],
            f"{me['mean_power_watts']:.0f} W vs {ef['mean_power_watts']:.0f} W",
            paired("mean_power_watts", "efficient-first", 1.05))
    if policy == "EE" and family_name == "hardware-unknown" and base("most-allocated"):
        most = base("most-allocated")
        add("energy <= most-allocated (power unknown)", me["mean_power_watts"] <= most["mean_power_watts"] * 1.001,
            f"{me['mean_power_watts']:.0f} W vs {most['mean_power_watts']:.0f} W",
            paired("mean_power_watts", "most-allocated", 1.001))
    if policy == "EE" and family_name == "fragmentation" and base("most-allocated"):
        most = base("most-allocated")
        add("unschedulable <= most-allocated", me["unschedulable"] <= most["unschedulable"] + 1e-9,
            f"{me['unschedulable']:.2f} vs {most['unschedulable']:.2f} per run",
            paired("unschedulable", "most-allocated"))
    if policy == "LB" and family_name == "usage-skew" and base("least-utilized"):
        lu = base("least-utilized")
        add("hot-node time <= 1.1 x least-utilized", me["hot_node_share"] <= 1.1 * lu["hot_node_share"] + 1e-3,
            f"{me['hot_node_share']:.4f} vs {lu['hot_node_share']:.4f}", paired("hot_node_share", "least-utilized", 1.1))
    if policy == "EL" and family_name == "scarce-near":
        add("hard violations near zero (<= 1% of pods with limits)", me["hard_violation_rate"] <= 0.01,
            f"{me['hard_violation_rate']:.4f} (latency-pack {base('latency-pack')['hard_violation_rate']:.4f})"
            if base("latency-pack") else f"{me['hard_violation_rate']:.4f}")


def _per_decision_goals(policy, family_name, me, base, add, paired) -> None:
    if policy == "EE":
        most, default = base("most-allocated"), base("default-scheduler")
        add("active <= 1.05 x most-allocated", me["mean_active_nodes"] <= 1.05 * most["mean_active_nodes"] + 1e-9,
            f"{me['mean_active_nodes']:.2f} vs {most['mean_active_nodes']:.2f}",
            paired("mean_active_nodes", "most-allocated", 1.05))
        if family_name in EE_HALF_OF_DEFAULT_FAMILIES:
            add("active <= 0.5 x default-scheduler",
                me["mean_active_nodes"] <= 0.5 * default["mean_active_nodes"] + 1e-9,
                f"{me['mean_active_nodes']:.2f} vs {default['mean_active_nodes']:.2f}",
                paired("mean_active_nodes", "default-scheduler", 0.5))
    elif policy == "LB":
        least = base("least-allocated")
        add("cpu share CV <= 1.1 x least-allocated", me["cpu_share_cv"] <= 1.1 * least["cpu_share_cv"] + 1e-9,
            f"{me['cpu_share_cv']:.3f} vs {least['cpu_share_cv']:.3f}", paired("cpu_share_cv", "least-allocated", 1.1))
    else:
        greedy, default = base("latency-greedy"), base("default-scheduler")
        add("no avoidable hard-limit violation", me["hard_violations_avoidable"] == 0,
            f"{me['hard_violations_avoidable']:.1f} per run")
        add("soft-limit rate >= latency-greedy", me["soft_rate"] >= greedy["soft_rate"] - 1e-9,
            f"{me['soft_rate']:.3f} vs {greedy['soft_rate']:.3f}")
        add("active <= 0.6 x default-scheduler", me["mean_active_nodes"] <= 0.6 * default["mean_active_nodes"] + 1e-9,
            f"{me['mean_active_nodes']:.2f} vs {default['mean_active_nodes']:.2f}",
            paired("mean_active_nodes", "default-scheduler", 0.6))
        if not np.isnan(me["post_shift_best_tier_rate"]):
            add("after a latency shift, best tier >= latency-greedy",
                me["post_shift_best_tier_rate"] >= greedy["post_shift_best_tier_rate"] - 1e-9,
                f"{me['post_shift_best_tier_rate']:.3f} vs {greedy['post_shift_best_tier_rate']:.3f}")
