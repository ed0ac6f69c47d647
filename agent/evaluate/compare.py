"""Run scorers side by side on the same seeded worlds and measure what they lead to.

Every scorer of a (family, nodes, seed) cell meets the identical world: same cluster, arrivals,
departures, latency changes, metric noise. Evaluation seeds live in their own range
(>= EVAL_SEED_BASE), which training never draws from. A run measures a fixed number of *arrivals*
(placed or not), so a scorer that strands pods is not rewarded with a shorter run, after a burn-in
that fills the world once.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field

import numpy as np
from tqdm import tqdm

from rlscore.core.state import latency_tiers
from rlscore.core.rules import RULES
from agent.parallel import shared, worker_pool
from rlscore.core.scoring import HeuristicScorer, Scorer, choose
from agent.sim.families import family
from agent.sim.outcomes import cost
from agent.sim.simulator import EventsExhausted, Simulation
from rlscore.core.state import POLICIES

EVAL_SEED_BASE = 2**40
# Hold-out seeds: a second range training never draws from. The evaluation seeds above have been
# used to choose between training recipes and candidates (agent.evaluate.shipped pick), so their
# figures flatter the shipped models; these are only ever measured, never chosen on, and give the
# unbiased estimate (agent.evaluate.shipped holdout).
HOLDOUT_SEED_BASE = 2**39
# Processes an evaluation's worlds run on by default (evaluate's `workers`): this machine's 2 cores.
EVAL_WORKERS = max(1, min(2, os.cpu_count() or 1))

# The baselines each policy is judged against: every hand-written scorer that aims at its objective,
# kube-scheduler's own scoring, and chance.
BASELINES = {
    "EE": ("default-scheduler", "most-allocated", "best-fit", "tetris", "efficient-first",
           "target-load-packing", "balanced-allocation", "one-step-ee", "random"),
    "LB": ("default-scheduler", "least-allocated", "least-utilized", "load-variation-risk-balancing",
           "balanced-allocation", "target-load-packing", "one-step-lb", "headroom-balance", "headroom-informed",
           "random"),
    "EL": ("default-scheduler", "latency-greedy", "latency-pack", "latency-fit", "latency-fit-running",
           "most-allocated", "efficient-first", "one-step-el", "random"),
}
for _names in BASELINES.values():
    assert all(name in RULES for name in _names), _names


def baselines_for(policy: str) -> tuple[str, ...]:
    return BASELINES[policy]


@dataclass
class Trace:
    """What one scorer did in one run, step by step (for plots)."""

    active_nodes: list[int] = field(default_factory=list)
    chosen_latency: list[float] = field(default_factory=list)
    power_watts: list[float] = field(default_factory=list)
    hot_nodes: list[int] = field(default_factory=list)
    pods_per_node: list[np.ndarray] = field(default_factory=list)
    shifts: list[int] = field(default_factory=list)
    pod_ids: list[int] = field(default_factory=list)  # the pod each step placed
    # pods per node after each placement count asked for (`pods_at`), counted from the run's first
    # placement, burn-in included
    pods_at: dict[int, np.ndarray] = field(default_factory=dict)


@dataclass
class RunResult:
    scorer: str
    family: str
    nodes: int
    seed: int
    arrivals: int
    objective: float  # the evaluated policy's cost per arrival (lower is better)
    mean_power_watts: float
    energy_kwh: float
    unschedulable: int
    unschedulable_large: int
    hot_node_share: float  # share of node-time above 85% measured cpu
    request_cv: float  # time-mean coefficient of variation of cpu request shares
    hard_violations: int  # pods placed over their hard latency limit
    soft_violations: int
    hard_violation_rate: float  # per pod with limits
    # per-decision measures, for the per-decision goals (goals.py)
    mean_active_nodes: float
    cpu_share_cv: float
    hard_violations_avoidable: int
    # hard violations where no node of the cluster was seen within the limit / nodes were, none with room
    hard_violations_unreachable: int
    hard_violations_crowded: int
    soft_rate: float
    best_tier_rate: float
    post_shift_best_tier_rate: float
    mean_chosen_latency_ms: float
    decision_ms: float


def run(scorer: Scorer, family_name: str, seed: int, policy: str, nodes: int | None = None,
        arrivals: int = 300, keep_trace: bool = False, burn_in: int | None = None,
        pods_at: tuple[int, ...] = (), ties: int | None = None) -> tuple[RunResult, Trace]:
    """One scorer on one world. The first `burn_in` arrivals (default: one fill of the world) are
    scheduled by the scorer but not measured, so what is measured is the steady state the scorer's
    own placements lead to; then `arrivals` more, at least one fill, are measured. `ties` seeds the
    stream that breaks ties between equally scored nodes (default: the world's seed)."""
    sim = Simulation.of_family(family_name, seed, nodes, limits=policy == "EL")
    return measure(scorer, sim, seed if ties is None else ties, policy, arrivals, keep_trace, burn_in, family_name,
                   pods_at)


def measure(scorer: Scorer, sim: Simulation, seed: int, policy: str, arrivals: int = 300,
            keep_trace: bool = False, burn_in: int | None = None, family_name: str | None = None,
            pods_at: tuple[int, ...] = ()) -> tuple[RunResult, Trace]:
    """Run `scorer` on a fresh simulation (see `run`); `seed` breaks ties."""
    family_name = family_name or sim.world.family
    tie_rng = np.random.default_rng(seed)
    trace = Trace()
    cvs, latencies, tiers_ok, soft, after_shift = [], [], [], [], []
    spent, decisions = 0.0, 0
    wanted = frozenset(pods_at)

    def note_pods() -> None:
        if sim.ledger.placed in wanted:
            trace.pods_at[sim.ledger.placed] = _pods_per_node(sim.cluster)

    burn = int(np.ceil(sim.world.pods_alive)) if burn_in is None else burn_in
    while sim.ledger.arrivals < burn:
        sim.next_decision()
        sim.place(choose(scorer.values(*sim.candidate_state(policy)), tie_rng))
        note_pods()
    start, shifts_before = sim.ledger.copy(), len(sim.latency_shifts)
    arrivals = max(arrivals, burn)
    while sim.ledger.arrivals - start.arrivals < arrivals:
        try:
            sim.next_decision()
        except EventsExhausted:  # a recorded stream whose last pods wait to the end (pods_wait)
            break
        state, pod = sim.candidate_state(policy)
        t0 = time.perf_counter()
        candidate = choose(scorer.values(state, pod), tie_rng)
        spent += time.perf_counter() - t0
        tiers = latency_tiers(state, pod)
        pod_id = sim.pod.id
        sim.place(candidate)
        note_pods()
        decisions += 1

        cluster = sim.cluster
        present = cluster.present
        share = cluster.cpu_requested[present] / cluster.cpu_capacity[present]
        cvs.append(float(share.std() / share.mean()) if share.mean() > 0 else 0.0)
        latencies.append(float(state.latency_ms[candidate]))
        if pod.has_latency_limits:
            best = tiers.max()
            tiers_ok.append(tiers[candidate] == best)
            soft.append(tiers[candidate] == 2)
            if sim.latency_shifts:
                after_shift.append(tiers[candidate] == best)
        trace.active_nodes.append(int(np.sum(cluster.active())))
        trace.pod_ids.append(pod_id)
        trace.chosen_latency.append(latencies[-1])
        if keep_trace:
            util = cluster.cpu_utilization()
            trace.power_watts.append(float(cluster.power(util).sum()))
            trace.hot_nodes.append(int(np.sum(cluster.active() & (util > 0.85))))
            trace.pods_per_node.append(_pods_per_node(cluster))
    trace.shifts = [s - shifts_before for s in sim.latency_shifts[shifts_before:]]
    ledger, nan = sim.ledger.minus(start), float("nan")
    result = RunResult(
        scorer=scorer.name, family=family_name, nodes=len(sim.cluster), seed=seed, arrivals=ledger.arrivals,
        objective=cost(policy, ledger, sim.units) / max(ledger.arrivals, 1),
        mean_power_watts=ledger.energy_j / max(ledger.time_s, 1e-9),
        energy_kwh=ledger.energy_j / 3.6e6,
        unschedulable=ledger.unschedulable, unschedulable_large=ledger.unschedulable_large,
        hot_node_share=ledger.hot_share_s / max(ledger.time_s, 1e-9),
        request_cv=ledger.request_cv_s / max(ledger.time_s, 1e-9),
        hard_violations=ledger.hard_violations, soft_violations=ledger.soft_violations,
        hard_violation_rate=ledger.hard_violations / ledger.limited if ledger.limited else nan,
        mean_active_nodes=float(np.mean(trace.active_nodes)),
        cpu_share_cv=float(np.mean(cvs)),
        hard_violations_avoidable=ledger.avoidable_hard_violations,
        hard_violations_unreachable=ledger.unreachable_hard_violations,
        hard_violations_crowded=ledger.crowded_hard_violations,
        soft_rate=float(np.mean(soft)) if soft else nan,
        best_tier_rate=float(np.mean(tiers_ok)) if tiers_ok else nan,
        post_shift_best_tier_rate=float(np.mean(after_shift)) if after_shift else nan,
        mean_chosen_latency_ms=float(np.mean(latencies)),
        decision_ms=1000.0 * spent / max(decisions, 1),
    )
    return result, trace


def _pods_per_node(cluster) -> np.ndarray:
    """Pods on every node, 0 on nodes that are down (a new array)."""
    return np.where(cluster.present, cluster.pods, 0)


METRICS = ("objective", "mean_power_watts", "energy_kwh", "unschedulable", "unschedulable_large",
           "hot_node_share", "request_cv", "hard_violations", "soft_violations", "hard_violation_rate",
           "mean_active_nodes", "cpu_share_cv", "hard_violations_avoidable", "hard_violations_unreachable",
           "hard_violations_crowded", "soft_rate", "best_tier_rate",
           "post_shift_best_tier_rate", "mean_chosen_latency_ms", "decision_ms")


def summarize(results: list[RunResult]) -> list[dict]:
    """Mean over seeds per (family, nodes, scorer); `nodes` is "random" for families whose size is
    drawn per seed."""
    groups: dict[tuple, list[RunResult]] = {}
    for r in results:
        groups.setdefault(cell_of(r), []).append(r)
    rows = []
    for (family_name, nodes, scorer), runs in groups.items():
        row = {"family": family_name, "nodes": nodes, "scorer": scorer, "seeds": len(runs)}
        for metric in METRICS:
            values = np.array([getattr(r, metric) for r in runs], dtype=float)
            row[metric] = float(np.nanmean(values)) if not np.all(np.isnan(values)) else float("nan")
        rows.append(row)
    return rows


def cell_of(result: RunResult) -> tuple[str, int | str, str]:
    """(family, nodes, scorer) of a summary row the run belongs to (see summarize)."""
    return result.family, result.nodes if family(result.family).eval_nodes else "random", result.scorer


def simulation_of_run(family_name: str, seed: int, nodes: int, policy: str) -> Simulation:
    """The world a run of a runs.csv (family, seed, node count) was measured on, fresh. A family
    without fixed evaluation sizes is drawn at a size of its own (`cells`), and drawing it at a given
    size draws another world altogether; so the size is passed on only where the family fixes it or
    the run's size is not the drawn one (an evaluation with --nodes)."""
    limits = policy == "EL"
    if not family(family_name).eval_nodes:
        sim = Simulation.of_family(family_name, seed, None, limits=limits)
        if len(sim.cluster) == nodes:
            return sim
    return Simulation.of_family(family_name, seed, nodes, limits=limits)


def values_by_seed(results: list[RunResult], metric: str = "objective") -> dict[tuple, dict[int, float]]:
    """Each summary row's per-seed values of `metric`, for comparisons paired by seed."""
    out: dict[tuple, dict[int, float]] = {}
    for r in results:
        out.setdefault(cell_of(r), {})[r.seed] = getattr(r, metric)
    return out


def cells(family_names: tuple[str, ...], seeds: int, node_counts: tuple[int, ...] | None = None,
          seed_base: int = EVAL_SEED_BASE) -> list[tuple[str, int | None, int]]:
    """(family, nodes or None, seed) per run: families with fixed evaluation sizes run at those (or
    at `node_counts`), the others at a size drawn per seed."""
    out = []
    for name in family_names:
        sizes = node_counts or family(name).eval_nodes or (None,)
        for nodes in sizes:
            for k in range(seeds):
                out.append((name, nodes, seed_base + k))
    return out


def evaluate(policy: str, scorers: list[Scorer], family_names: tuple[str, ...], seeds: int = 3,
             arrivals: int = 300, baselines: tuple[str, ...] | None = None, node_counts: tuple[int, ...] | None = None,
             progress: bool = True, traces_for: tuple[str, int | None] | None = None,
             seed_base: int = EVAL_SEED_BASE, workers: int = 1) -> tuple[list[RunResult], dict[str, Trace]]:
    """Run the given scorers (models) and every baseline on the same seeded worlds. With `workers` > 1
    the worlds run on that many forked processes (or on Ray: agent.parallel.use_ray); every run is
    seeded by its world alone, so the results are the same, in the same order (only `decision_ms` is
    timed). Fork only from a process without other threads at work: a CLI or a training run, not the
    server."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}")
    names = list(baselines if baselines is not None else baselines_for(policy))
    jobs = cells(family_names, seeds, node_counts, seed_base)
    setup = (policy, scorers, names, arrivals, traces_for, seed_base)
    results: list[RunResult] = []
    traces: dict[str, Trace] = {}
    with worker_pool(workers if len(jobs) > 1 else 1, shared=setup) as pool:
        for world_results, world_traces in tqdm(pool.map(_run_world, jobs), total=len(jobs), desc=f"eval {policy}",
                                                disable=not progress, file=sys.stderr):
            results += world_results
            traces.update(world_traces)
    return results, traces


def _run_world(job: tuple[str, int | None, int]) -> tuple[list[RunResult], dict[str, Trace]]:
    """Every scorer and baseline of one evaluation world (see evaluate); the scorers come with the pool
    (agent.parallel.shared), inherited by forked workers rather than pickled per world."""
    policy, scorers, names, arrivals, traces_for, seed_base = shared()
    name, nodes, seed = job
    results, traces = [], {}
    for scorer in [*scorers, *(HeuristicScorer(b, np.random.default_rng(seed)) for b in names)]:
        keep = traces_for == (name, nodes) and seed == seed_base
        result, trace = run(scorer, name, seed, policy, nodes, arrivals, keep)
        results.append(result)
        if keep:
            traces[scorer.name] = trace
    return results, traces


def best_baseline(rows: list[dict], family_name: str, nodes, exclude: str) -> dict:
    """The baseline row with the lowest objective in a (family, nodes) cell."""
    candidates = [r for r in rows if r["family"] == family_name and r["nodes"] == nodes
                  and r["scorer"] != exclude and not r["scorer"].startswith("rl-")]
    return min(candidates, key=lambda r: r["objective"])

