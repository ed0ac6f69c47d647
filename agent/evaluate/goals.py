"""The goals a shipped policy is held to, checked on an evaluation's summary rows.

1. On every scenario family of its policy, the model is at least as good as the *best* baseline on
   the policy's objective (within OBJECTIVE_TOLERANCE, the seed-to-seed noise of a tie).
2. Where the heuristic its old reward encoded leaves room, it is clearly better (per-family goals).
3. Wave 1's goals still hold on the thesis patterns at 3, 10 and 100 nodes.

Given the per-seed runs, each objective goal also carries the comparison paired by seed (`paired`):
the same ratio with a 95% bootstrap interval over the seeds. A miss whose interval reaches 1 cannot
be told from a tie on these seeds (which is not to say it is one); one whose interval lies above 1 is
the model really behind. The best
baseline is chosen on the same seeds, which favours it, so "behind" is if anything overstated.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agent.evaluate.compare import RunResult, best_baseline, objectives_by_seed
from agent.sim.families import PROFILE_FAMILIES, evaluation_families_for

OBJECTIVE_TOLERANCE = 0.02
PAIRED_RESAMPLES = 2000
WAVE1_FAMILIES = {"EE": ("test1", "test2", "poisson"), "LB": ("test1", "test2", "poisson"),
                  "EL": ("test1", "test2", "latency-shift")}
WAVE1_NODES = (3, 10, 100)
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

    def described(self) -> str:
        """The goal with its figures and, where paired, the reading by seed."""
        paired = describe_paired(self.paired)
        return f"{self.goal} ({self.detail}{'; ' + paired if paired else ''})"


def missed_beyond_noise(checks: list[GoalCheck]) -> int:
    """Missed goals whose paired interval lies above 1: the model really behind."""
    return sum(not c.ok and bool(c.paired) and c.paired["reading"] == "behind" for c in checks)


def paired_ratio(model: dict[int, float], baseline: dict[int, float], resamples: int = PAIRED_RESAMPLES) -> dict | None:
    """The model's mean objective over the baseline's on the seeds both ran, with a 95% bootstrap
    interval (seeds resampled together, a fixed stream so the record reproduces). None when the
    baseline's objective is 0 on them (no ratio to take)."""
    seeds = sorted(set(model) & set(baseline))
    m = np.array([model[s] for s in seeds])
    b = np.array([baseline[s] for s in seeds])
    if not seeds or b.sum() <= 0:
        return None
    picks = np.random.default_rng(0).integers(0, len(seeds), size=(resamples, len(seeds)))
    totals = b[picks].sum(axis=1)
    ratios = m[picks].sum(axis=1)[totals > 0] / totals[totals > 0]
    low, high = (float(x) for x in np.percentile(ratios, [2.5, 97.5]))
    reading = "behind" if low > 1.0 else "ahead" if high < 1.0 else "tie"
    return {"seeds": len(seeds), "ratio": round(float(m.sum() / b.sum()), 4), "ci95": [round(low, 4), round(high, 4)],
            "seeds_behind": int(np.sum(m > b * (1 + 1e-9))), "reading": reading}


def clearly_behind(paired: dict | None) -> bool:
    """Behind beyond the seeds' noise (paired interval above 1) *and* by more than the goals' tie:
    what a miss beyond noise is (a missed objective goal whose interval lies above 1)."""
    return bool(paired) and paired["reading"] == "behind" and paired["ratio"] > 1.0 + OBJECTIVE_TOLERANCE


def describe_paired(paired: dict | None) -> str:
    if not paired:
        return ""
    low, high = paired["ci95"]
    return (f"paired over {paired['seeds']} seeds: x{paired['ratio']:.3f} (95% {low:.3f}-{high:.3f}), behind on "
            f"{paired['seeds_behind']}: {paired['reading']}")


def check_goals(policy: str, rows: list[dict], results: list[RunResult] | None = None) -> list[GoalCheck]:
    """The goals on the summary rows; with the runs behind them, objective goals are also paired by seed."""
    table = {(r["family"], r["nodes"], r["scorer"]): r for r in rows}
    by_seed = objectives_by_seed(results) if results else {}
    rl = f"rl-{policy.lower()}"
    checks: list[GoalCheck] = []
    for family_name, nodes in sorted({(r["family"], r["nodes"]) for r in rows}, key=str):
        me = table.get((family_name, nodes, rl))
        if me is None:
            continue

        def base(name: str) -> dict | None:
            return table.get((family_name, nodes, name))

        def add(goal: str, ok: bool, detail: str, paired: dict | None = None) -> None:
            checks.append(GoalCheck(goal, family_name, nodes, bool(ok), detail, paired))

        if family_name in evaluation_families_for(policy) or family_name in PROFILE_FAMILIES:
            best = best_baseline(rows, family_name, nodes, rl)
            mine, theirs = by_seed.get((family_name, nodes, rl)), by_seed.get((family_name, nodes, best["scorer"]))
            add(f"objective <= best baseline x {1 + OBJECTIVE_TOLERANCE:g}",
                me["objective"] <= best["objective"] * (1 + OBJECTIVE_TOLERANCE) + 1e-9,
                f"{me['objective']:.4g} vs {best['scorer']} {best['objective']:.4g}",
                paired_ratio(mine, theirs) if mine and theirs else None)
        _family_goals(policy, family_name, me, base, add)
        if family_name in WAVE1_FAMILIES[policy] and nodes in WAVE1_NODES:
            _wave1_goals(policy, family_name, me, base, add)
    return checks


def _family_goals(policy, family_name, me, base, add) -> None:
    if policy == "EE" and family_name == "hardware" and base("efficient-first"):
        ef = base("efficient-first")
        add("energy <= 1.05 x efficient-first", me["mean_power_watts"] <= 1.05 * ef["mean_power_watts"],
            f"{me['mean_power_watts']:.0f} W vs {ef['mean_power_watts']:.0f} W")
    if policy == "EE" and family_name == "hardware-unknown" and base("most-allocated"):
        most = base("most-allocated")
        add("energy <= most-allocated (power unknown)", me["mean_power_watts"] <= most["mean_power_watts"] * 1.001,
            f"{me['mean_power_watts']:.0f} W vs {most['mean_power_watts']:.0f} W")
    if policy == "EE" and family_name == "fragmentation" and base("most-allocated"):
        most = base("most-allocated")
        add("unschedulable <= most-allocated", me["unschedulable"] <= most["unschedulable"] + 1e-9,
            f"{me['unschedulable']:.2f} vs {most['unschedulable']:.2f} per run")
    if policy == "LB" and family_name == "usage-skew" and base("least-utilized"):
        lu = base("least-utilized")
        add("hot-node time <= 1.1 x least-utilized", me["hot_node_share"] <= 1.1 * lu["hot_node_share"] + 1e-3,
            f"{me['hot_node_share']:.4f} vs {lu['hot_node_share']:.4f}")
    if policy == "EL" and family_name == "scarce-near":
        add("hard violations near zero (<= 1% of pods with limits)", me["hard_violation_rate"] <= 0.01,
            f"{me['hard_violation_rate']:.4f} (latency-pack {base('latency-pack')['hard_violation_rate']:.4f})"
            if base("latency-pack") else f"{me['hard_violation_rate']:.4f}")


def _wave1_goals(policy, family_name, me, base, add) -> None:
    if policy == "EE":
        most, default = base("most-allocated"), base("default-scheduler")
        add("active <= 1.05 x most-allocated", me["mean_active_nodes"] <= 1.05 * most["mean_active_nodes"] + 1e-9,
            f"{me['mean_active_nodes']:.2f} vs {most['mean_active_nodes']:.2f}")
        if family_name in EE_HALF_OF_DEFAULT_FAMILIES:
            add("active <= 0.5 x default-scheduler",
                me["mean_active_nodes"] <= 0.5 * default["mean_active_nodes"] + 1e-9,
                f"{me['mean_active_nodes']:.2f} vs {default['mean_active_nodes']:.2f}")
    elif policy == "LB":
        least = base("least-allocated")
        add("cpu share CV <= 1.1 x least-allocated", me["cpu_share_cv"] <= 1.1 * least["cpu_share_cv"] + 1e-9,
            f"{me['cpu_share_cv']:.3f} vs {least['cpu_share_cv']:.3f}")
    else:
        greedy, default = base("latency-greedy"), base("default-scheduler")
        add("no avoidable hard-limit violation", me["hard_violations_avoidable"] == 0,
            f"{me['hard_violations_avoidable']:.1f} per run")
        add("soft-limit rate >= latency-greedy", me["soft_rate"] >= greedy["soft_rate"] - 1e-9,
            f"{me['soft_rate']:.3f} vs {greedy['soft_rate']:.3f}")
        add("active <= 0.6 x default-scheduler", me["mean_active_nodes"] <= 0.6 * default["mean_active_nodes"] + 1e-9,
            f"{me['mean_active_nodes']:.2f} vs {default['mean_active_nodes']:.2f}")
        if not np.isnan(me["post_shift_best_tier_rate"]):
            add("after a latency shift, best tier >= latency-greedy",
                me["post_shift_best_tier_rate"] >= greedy["post_shift_best_tier_rate"] - 1e-9,
                f"{me['post_shift_best_tier_rate']:.3f} vs {greedy['post_shift_best_tier_rate']:.3f}")
