"""Sim-to-real of a served policy: run a workload live, calibrate a profile from that run alone,
replay its recorded pods in the simulator with the model that placed them, and compare what each
measured: hot-node share, mean active nodes and, for EL, the share of the pods with latency limits
placed beyond their hard limit.

    eval "$(local-cluster/cluster.sh env)"
    python -m agent.live.sim_to_real --policy EE --pods 300 --runs 3 --usage-scale 3

The model replayed must be the one the suggestion server serves for the policy (checked through
`POST /suggest`); the local cluster's server serves `$RLSCORE_LOCAL_DIR/models`. A run's pods are
Deployments in --namespace (emptied before each run, and Prometheus's 1-minute rate window let run
out), so no earlier load reaches into the window. Every pod lives at least --min-lifetime-s: what
Prometheus does not record, the replay cannot place, and at 4x a pod of 2 s slips between scrapes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
import numpy as np
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.config import ConfigException
from prometheus_api_client import PrometheusConnect

from rlscore.core.model import LoadedModel, ModelValidationError, load_model
from agent.live import calibrate
from agent.live.history import History, arrival_order, controller_name, hot_node_share, read_history
from agent.live.loadgen import LiveCluster, RunResult, replay
from agent.live.trace_replay import follow_live, replay_history, replay_spread, with_watched_times
from rlscore.core.scoring import ModelScorer
from rlscore.core.profile import ClusterProfile

# Prometheus's rate window on the local cluster (cluster.sh's cpu query): an earlier run's cpu is in
# it for this long after its pods went
RATE_WINDOW_S = 60.0


# draws of the record's times replayed per run (replay_spread): their mean's own spread is about a
# third of one draw's
REPLAYS = 12
MEASURES = ("hot_node_share", "mean_active_nodes", "hard_violation_rate")


@dataclass
class LiveSource:
    """Where a run's history is read: Prometheus, its node-cpu query and the nodes to measure."""

    prometheus: PrometheusConnect
    core: client.CoreV1Api
    cpu_query: str
    nodes: list[str]
    metrics_interval_s: float  # how often the serving scorer's metrics refresh (the simulated scorer's too)


def read_run_window(source: LiveSource, start: float, end: float) -> History:
    """Everything Prometheus holds of the window, read as calibration reads it, after the run's last
    scrapes are in."""
    time.sleep(3)
    return read_history(source.core, source.prometheus, start, end, 1.0, {"node_cpu_busy": source.cpu_query})


def compare_run(source: LiveSource, result: RunResult, start: float, end: float, model: LoadedModel,
                policy: str, window: History | None = None, replays: int = REPLAYS) -> dict:
    """One live run's recorded pods replayed, in a profile calibrated from that run alone, by the
    model that placed them: hot-node share, mean active nodes and (EL) hard violations, live and
    simulated. The simulated figure is the mean over `replays` draws of the pods' times within the
    record's resolution (`replay_spread`), with their range; where the run watched its pods
    (`replay(..., watch_pods=True)`), one more replay with the watched times (`watched_times`).
    `window` is `read_run_window`'s history when the caller has read it already (it is not changed)."""
    window = read_run_window(source, start, end) if window is None else window
    history = replace(window, pods=[p for p in window.pods if p.name.startswith(f"{result.run}-")])
    if not history.pods:
        raise RuntimeError(f"Prometheus recorded none of run {result.run}'s pods between {start:.0f} and {end:.0f}")
    profile, _ = calibrate.build_profile(history, f"sim-to-real-{result.run}",
                                         metrics_interval_s=source.metrics_interval_s)
    scorer = ModelScorer(model)
    draws = replay_spread(profile, history, scorer, policy, replays)
    # the replay ends at its last arrival: pods created in the last scrapes before `end` have no
    # series yet, so live time after that arrival has load the replay never saw
    replayed_until = max(p.created for p in history.pods)
    live_hot = hot_node_share(source.prometheus, source.cpu_query, source.nodes, start, replayed_until)
    measured = {"hot_node_share": _measure([r.hot_node_share for r, _ in draws], live_hot),
                "mean_active_nodes": _measure([float(np.mean(t.active_nodes)) for _, t in draws],
                                              float(np.mean(result.active_nodes)))}
    # per pod with latency limits, as the simulator counts them: the node's latency when it was placed.
    # Only for EL: EE and LB never see the limits, and which of equal nodes they fill is a tie broken
    # at random (an e2e run: 26% live against 100% simulated, on the same active-node count)
    limits = {controller_name(p.name): p.latency_limits_ms for p in history.pods if p.latency_limits_ms}
    limited = [(p.latency_ms, limits[p.deployment][1]) for p in result.placements
               if p.deployment in limits and p.latency_ms is not None]
    if policy == "EL" and limited:
        measured["hard_violation_rate"] = _measure([r.hard_violation_rate for r, _ in draws],
                                                   sum(latency > hard for latency, hard in limited) / len(limited))
    record = {"run": result.run, "pods_played": len(result.placements), "pods_recorded": len(history.pods),
              "pods_without_usage": sum(p.usage is None for p in history.pods),  # replayed at DEFAULT_USAGE
              "background_cpu": profile.dynamics.background_cpu,
              "usage_onset_s": profile.dynamics.usage_onset_s, "usage_linger_s": profile.dynamics.usage_linger_s,
              "replays": replays, **measured}
    if result.pod_times:
        record["watched_times"] = _watched_replay(profile, history, result, scorer, policy, measured)
    return record


def _watched_replay(profile: ClusterProfile, history: History, result: RunResult, scorer: ModelScorer, policy: str,
                    measured: dict) -> dict:
    """One replay with the pods' times as the run's pod watch saw them (to the millisecond, where
    the record has seconds): how many pods the simulator places on the node they went to live
    (nodes told apart by their latency), and the measures against live; then the same times with
    every pod placed where it went live (`follow_live`): how many of those decisions the model
    makes too in the simulator (`same_choice` of `choices`)."""
    exact = with_watched_times(history, result.pod_times)
    simulated, trace = replay_history(profile, exact, scorer, policy)
    figures = {"hot_node_share": simulated.hot_node_share, "mean_active_nodes": float(np.mean(trace.active_nodes)),
               "hard_violation_rate": simulated.hard_violation_rate}
    out = {"pods_watched": sum(p.name in result.pod_times for p in history.pods),
           **{k: {"live": m["live"], "simulated": figures[k], "gap": _gap(figures[k], m["live"])}
              for k, m in measured.items()}}
    live = {p.deployment: p.latency_ms for p in result.placements}
    arrived = arrival_order(exact)
    out["same_node"] = sum(live.get(controller_name(arrived[i].name)) == latency
                           for i, latency in zip(trace.pod_ids, trace.chosen_latency))
    out["choices"], out["same_choice"] = follow_live(profile, exact, scorer, policy, live)
    return out


def _measure(simulated: list[float], live: float) -> dict:
    """The replays' mean against the live figure, with the replays' range."""
    mean = float(np.mean(simulated))
    return {"live": live, "simulated": mean, "simulated_range": [float(min(simulated)), float(max(simulated))],
            "gap": _gap(mean, live)}


def _gap(simulated: float, live: float) -> float | None:
    """(simulated - live) / live; None when nothing was measured live."""
    return round((simulated - live) / live, 4) if live > 0 else None


def served_version(server_url: str, policy: str, node: str) -> str:
    response = httpx.post(f"{server_url}/suggest", json={"pod": {"name": "sim-to-real-probe"}, "nodes": [node],
                                                         "policy": policy}, timeout=10)
    response.raise_for_status()
    return response.json()["model_version"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m agent.live.sim_to_real", description=__doc__.splitlines()[0])
    parser.add_argument("--policy", type=str.upper, choices=("EE", "LB", "EL"), default="EE")
    parser.add_argument("--model", type=Path, default=None,
                        help="the served model's file (default $RLSCORE_LOCAL_DIR/models/<policy>.safetensors)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--pods", type=int, default=300, help="arrivals per run")
    parser.add_argument("--speed", type=float, default=4.0, help="scenario seconds per real second")
    parser.add_argument("--usage-scale", type=float, default=3.0,
                        help="x the cpu each pod uses (3: nodes run hot, so hot-node time is measurable)")
    parser.add_argument("--min-lifetime-s", type=float, default=8.0,
                        help="real seconds every pod lives at least: Prometheus (2 s scrapes) records a shorter "
                             "pod and its usage late or never, so the replay would miss load the cluster carried")
    parser.add_argument("--replays", type=int, default=REPLAYS,
                        help="draws of the recorded pods' times (within the record's resolution) replayed per run")
    parser.add_argument("--scheduler", default="rl-scheduler", help="spec.schedulerName of the pods")
    parser.add_argument("--seed", type=int, default=100, help="run k replays the poisson stream of seed + k")
    parser.add_argument("--same-workload", action="store_true",
                        help="every run replays seed's stream: how far the live cluster reproduces itself")
    parser.add_argument("--namespace", default="rlscore-sim-to-real")
    parser.add_argument("--out", type=Path, default=Path("eval/sim-to-real/runs.json"))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if (args.runs < 1 or args.pods < 1 or args.replays < 1 or args.speed <= 0 or not 0 < args.usage_scale <= 100
            or not 0 <= args.min_lifetime_s <= 600):
        print("sim_to_real: --runs, --pods and --replays must be >= 1, --speed > 0, --usage-scale within (0, 100], "
              "--min-lifetime-s within [0, 600]", file=sys.stderr)
        return 2
    needed = ("KUBECONFIG", "RLSCORE_LOCAL_PROMETHEUS_URL", "RLSCORE_LOCAL_SERVER_URL", "RLSCORE_LOCAL_CPU_QUERY",
              "RLSCORE_LOCAL_REFRESH_INTERVAL_S", "RLSCORE_LOCAL_DIR")
    missing = [k for k in needed if not os.environ.get(k)]
    if missing:
        print(f"sim_to_real: {', '.join(missing)} not set: run `eval \"$(local-cluster/cluster.sh env)\"` first",
              file=sys.stderr)
        return 2
    env = os.environ
    model_path = args.model or Path(env["RLSCORE_LOCAL_DIR"]) / "models" / f"{args.policy.lower()}.safetensors"
    try:
        model = load_model(model_path, allow_heuristic=True)
        cluster = LiveCluster(env["KUBECONFIG"], args.namespace)
        nodes = sorted(cluster.node_latencies())
        serving = served_version(env["RLSCORE_LOCAL_SERVER_URL"], args.policy, nodes[0])
    except (ModelValidationError, OSError, httpx.HTTPError, ApiException, ConfigException, IndexError, KeyError) as exc:
        print(f"sim_to_real: {exc or type(exc).__name__}", file=sys.stderr)
        return 2
    if model.policy != args.policy or serving != model.version:
        print(f"sim_to_real: the server serves {args.policy} model {serving}, not {model_path} ({model.policy} "
              f"{model.version}): the replay would not use the scorer that placed the pods", file=sys.stderr)
        return 2
    cluster.ensure_namespace()
    source = LiveSource(PrometheusConnect(env["RLSCORE_LOCAL_PROMETHEUS_URL"], disable_ssl=True),
                        client.CoreV1Api(cluster.core.api_client), env["RLSCORE_LOCAL_CPU_QUERY"], nodes,
                        float(env["RLSCORE_LOCAL_REFRESH_INTERVAL_S"]))
    records = []
    for k in range(args.runs):
        _empty(cluster)
        others = pods_elsewhere(cluster, nodes)
        if others:
            print(f"sim_to_real: {len(others)} pod(s) of other namespaces run on the nodes (e.g. {others[0]}): "
                  "their requests are not replayed and their load is only a background estimate", file=sys.stderr)
        seed = args.seed if args.same_workload else args.seed + k
        print(f"run {k + 1}/{args.runs}: {args.pods} poisson arrivals (seed {seed}, usage x{args.usage_scale}) "
              f"placed by {args.scheduler} ...", file=sys.stderr)
        start = time.time()
        result = replay(cluster, "poisson", args.pods, args.scheduler, args.policy, args.speed, seed=seed,
                        run=f"s2r-{seed}-{k}" if args.same_workload else f"s2r-{seed}", progress=False,
                        usage_scale=args.usage_scale, min_lifetime_s=args.min_lifetime_s, watch_pods=True)
        record = compare_run(source, result, start, time.time(), model, args.policy, replays=args.replays)
        records.append(record)
        _write(args, model.version, records)  # an interrupted series keeps the runs it finished
        print("  " + "; ".join(f"{name.replace('_', ' ')} {m['simulated']:.3f} simulated "
                               f"({m['simulated_range'][0]:.3f}..{m['simulated_range'][1]:.3f}) vs {m['live']:.3f} "
                               f"live ({_pct(m['gap'])})" for name, m in record.items() if name in MEASURES),
              file=sys.stderr)
        if watched := record.get("watched_times"):
            gaps = "; ".join(f"{name.replace('_', ' ')} {m['simulated']:.3f} ({_pct(m['gap'])})"
                             for name, m in watched.items() if name in MEASURES)
            print(f"  with the pod watch's times: {watched['same_node']} of {watched['pods_watched']} pods "
                  f"on the live node; {watched['same_choice']} of {watched['choices']} live decisions made "
                  f"again when each pod follows the live placements; {gaps}", file=sys.stderr)
    _empty(cluster, settle=False)
    summary = _write(args, model.version, records)
    for name, s in summary.items():
        if name in MEASURES:
            print(f"{name}: simulated/live {_ratio(s['ratio'])} over the {len(records)} runs; single runs "
                  f"{_pct(s['min_gap'])} .. {_pct(s['max_gap'])}; {s['live_within_range']} of {len(records)} live "
                  "figures within their replays' range")
    if watched := summary.get("watched_times"):
        print(f"with the pod watch's times: {watched['same_node'][0]} of {watched['same_node'][1]} pods on the live "
              f"node; {watched['same_choice'][0]} of {watched['same_choice'][1]} live decisions made again; "
              + "; ".join(f"{name} simulated/live {_ratio(s['ratio'])}" for name, s in watched.items()
                                   if name in MEASURES))
    print(f"wrote {args.out}")
    return 0


def _write(args: argparse.Namespace, version: str, records: list[dict]) -> dict:
    summary = {k: _summary([r[k] for r in records if k in r]) for k in MEASURES if any(k in r for r in records)}
    watched = [r["watched_times"] for r in records if "watched_times" in r]
    if watched:
        summary["watched_times"] = {k: _summary([w[k] for w in watched if k in w]) for k in MEASURES
                                    if any(k in w for w in watched)}
        summary["watched_times"]["same_node"] = [sum(w["same_node"] for w in watched),
                                                 sum(w["pods_watched"] for w in watched)]
        summary["watched_times"]["same_choice"] = [sum(w["same_choice"] for w in watched),
                                                   sum(w["choices"] for w in watched)]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"policy": args.policy, "model": version, "pods": args.pods, "speed": args.speed,
                                    "seed": args.seed, "same_workload": args.same_workload,
                                    "usage_scale": args.usage_scale, "min_lifetime_s": args.min_lifetime_s,
                                    "runs": records, "summary": summary},
                                   indent=2) + "\n")
    return summary


def _summary(measured: list[dict]) -> dict:
    """Over the runs: simulated/live of the sums, the single runs' gaps, how many live figures fell
    within their replays' range, and the live figures' own range (with --same-workload, how far the
    cluster reproduces itself)."""
    gaps = [m["gap"] for m in measured if m["gap"] is not None]
    live = sum(m["live"] for m in measured)
    summary = {"ratio": round(sum(m["simulated"] for m in measured) / live, 4) if live > 0 else None,
               "min_gap": min(gaps, default=None), "max_gap": max(gaps, default=None),
               "live_range": [min(m["live"] for m in measured), max(m["live"] for m in measured)]}
    if all("simulated_range" in m for m in measured):  # the record's replays; one watched replay has none
        summary["live_within_range"] = sum(m["simulated_range"][0] <= m["live"] <= m["simulated_range"][1]
                                           for m in measured)
    return summary


def _ratio(ratio: float | None) -> str:
    return "n/a" if ratio is None else f"{ratio:.3f}"


def _pct(gap: float | None) -> str:
    return "n/a" if gap is None else f"{gap:+.1%}"


def pods_elsewhere(cluster: LiveCluster, nodes: list[str]) -> list[str]:
    """Pods bound to the nodes from other namespaces (namespace/name)."""
    wanted = set(nodes)
    return [f"{p.metadata.namespace}/{p.metadata.name}" for p in cluster.core.list_pod_for_all_namespaces().items
            if p.spec.node_name in wanted and p.metadata.namespace != cluster.namespace
            and p.status.phase in ("Pending", "Running")]


def _empty(cluster: LiveCluster, settle: bool = True) -> None:
    cluster.cleanup()
    if settle:
        time.sleep(RATE_WINDOW_S + 5)


if __name__ == "__main__":
    sys.exit(main())
