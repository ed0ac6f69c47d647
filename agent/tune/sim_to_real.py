"""Sim-to-real check of a tuned profile: tune on a profile of a live cluster, run the tuned profile
in a real kube-scheduler on that cluster, replay the same workload, and compare the objective the
live placements lead to with the one the simulator predicted.

    eval "$(local-cluster/cluster.sh env)"
    python -m agent.tune.sim_to_real --policy EE --out eval/sim-to-real

1. The live nodes (allocatable cpu and memory, pod limit, the power curve and latency annotations)
   and a workload (poisson arrivals of mixed sizes at --load) become a cluster profile.
2. `rlscore-tune`'s RL tuner picks the weights on that profile; the simulator predicts the objective.
3. A second kube-scheduler (bin/kube-scheduler) starts with only the `rl-tuned` profile; the replay
   creates each arriving pod as a Deployment with `schedulerName: rl-tuned` and deletes it when the
   scenario says, time compressed by --speed, waiting for each placement and, before each arrival,
   for the departed pods to be gone (so each pod meets the nodes the simulator's timeline has).
4. The live placements are accounted on the simulator's timeline with its usage and power model
   (the local cluster's KWOK nodes draw no real power): the measured objective is what the *real
   scheduler's* placements lead to, the prediction what the simulated scheduler's lead to.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml
from kubernetes.utils.quantity import parse_quantity

from agent.evaluate.compare import measure
from agent.live.loadgen import LATENCY_ANNOTATION, LiveCluster, drive
from agent.sim import scenarios
from rlscore.core.profile import ClusterProfile, Dynamics, NodeGroup, NodeType, PodClassProfile, Workload
from agent.sim.cluster_profile import profile_world
from agent.sim.families import POISSON_CPU, POISSON_WEIGHTS
from agent.sim.simulator import Simulation
from rlscore.core.state import NodeState, PodRequest
from agent.tune.kube_scores import DEFAULT, ScoreConfig
from agent.tune.rl_tuner import RLTuner
from agent.tune.scheduler_config import PROFILE_NAME, profile as tuned_profile
from agent.tune.trials import TRIAL_ARRIVALS, TuningTask

ROOT = Path(__file__).resolve().parents[2]
POWER_IDLE = "metrics.rlscore.io/power-idle-watts"
POWER_MAX = "metrics.rlscore.io/power-max-watts"


def live_profile(cluster: LiveCluster, load: float, name: str = "local-cluster") -> tuple[ClusterProfile, list[str]]:
    """A profile of the live nodes (sorted by name; returned too) with a poisson workload of mixed sizes."""
    nodes = sorted(cluster.core.list_node().items, key=lambda n: n.metadata.name)
    if not nodes:
        raise RuntimeError("the cluster has no nodes")
    types: dict[tuple, NodeType] = {}
    groups: list[NodeGroup] = []
    for node in nodes:
        alloc = node.status.allocatable or {}
        notes = node.metadata.annotations or {}
        try:
            idle, peak = float(notes.get(POWER_IDLE, "nan")), float(notes.get(POWER_MAX, "nan"))
        except ValueError:
            idle = peak = float("nan")
        if not (np.isfinite(idle) and np.isfinite(peak)):
            raise RuntimeError(f"node {node.metadata.name} has no power curve ({POWER_IDLE}, {POWER_MAX})")
        key = (float(parse_quantity(alloc.get("cpu", "0"))) * 1000.0, float(parse_quantity(alloc.get("memory", "0"))),
               int(parse_quantity(alloc.get("pods", "110"))), idle, peak)
        if key not in types:
            types[key] = NodeType(name=f"type-{len(types)}", cpuMillicores=key[0], memoryBytes=key[1], maxPods=key[2],
                                  powerIdleWatts=idle, powerMaxWatts=peak)
        try:
            latency = float(notes.get(LATENCY_ANNOTATION, "20"))
        except ValueError:
            latency = 20.0
        groups.append(NodeGroup(type=types[key].name, latencyMs=[latency]))
    classes = [PodClassProfile(name=f"cpu-{int(c)}m", weight=w, cpuMillicores=[c], memoryPerCpuGiB=[0.5, 2.0])
               for c, w in zip(POISSON_CPU, POISSON_WEIGHTS)]
    profile = ClusterProfile(name=name, family="local-cluster", nodeTypes=list(types.values()), nodes=groups,
                             workload=Workload(arrivals="poisson", load=load, podClasses=classes),
                             dynamics=Dynamics(latencyDrift=False))
    return profile, [n.metadata.name for n in nodes]


def wait_nodes_empty(cluster: LiveCluster, nodes: list[str], timeout_s: float = 90.0) -> None:
    """The profile starts from empty nodes, so the replay must too: wait for pods still on them to
    go, and refuse with their names if they stay."""
    deadline = time.monotonic() + timeout_s
    while True:
        busy = [f"{p.metadata.namespace}/{p.metadata.name} on {p.spec.node_name}"
                for p in cluster.core.list_pod_for_all_namespaces(field_selector="spec.nodeName!=").items
                if p.spec.node_name in nodes and p.status.phase not in ("Succeeded", "Failed")]
        if not busy:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the nodes still run {len(busy)} pod(s) after {timeout_s:.0f} s; the replay "
                               f"needs them empty: {', '.join(busy[:5])}")
        time.sleep(1.0)


class TunedScheduler:
    """A second kube-scheduler serving only the rl-tuned profile (the cluster's own keeps the rest)."""

    def __init__(self, config: ScoreConfig, kubeconfig: str, workdir: Path, binary: Path = ROOT / "bin" / "kube-scheduler"):
        if not binary.exists():
            raise RuntimeError(f"{binary} not found: run make local-bin")
        doc = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
               "leaderElection": {"leaderElect": False},
               "clientConnection": {"kubeconfig": kubeconfig, "qps": 200, "burst": 200},
               "profiles": [tuned_profile(config)]}
        self.config_path = workdir / "rl-tuned-scheduler.yaml"
        self.config_path.write_text(yaml.safe_dump(doc, sort_keys=False))
        self.log_path = workdir / "rl-tuned-scheduler.log"
        self.binary = binary

    def __enter__(self) -> TunedScheduler:
        self._log = open(self.log_path, "w")
        self.process = subprocess.Popen([str(self.binary), f"--config={self.config_path}", "--secure-port=0", "-v=1"],
                                        stdout=self._log, stderr=subprocess.STDOUT)
        time.sleep(3.0)
        if self.process.poll() is not None:
            raise RuntimeError(f"the rl-tuned scheduler exited: see {self.log_path}")
        return self

    def __exit__(self, *exc) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self._log.close()


@dataclass
class LiveRun:
    placements: dict[int, str | None]  # pod id -> live node (None: still pending)
    arrivals: int
    seconds: float


def replay_live(cluster: LiveCluster, profile: ClusterProfile, seed: int, arrivals: int, speed: float,
                scheduler: str, run: str, progress: bool = True) -> LiveRun:
    """Replay the simulator's event stream for `seed` (the same arrivals, sizes and departures) as
    Deployments scheduled by `scheduler`."""
    world = profile_world(profile)
    scenario_rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(4)[0])  # as Simulation draws it
    placements: dict[int, str | None] = {}
    t0 = time.monotonic()
    for event, name, placed, _ in drive(cluster, scenarios.events(world, scenario_rng), run, scheduler, None,
                                        arrivals, speed, 30.0, await_departures=True):
        placements[event.pod.id] = placed.get(name)
        if progress and len(placements) % 25 == 0:
            print(f"  {len(placements)}/{arrivals} pods placed live", file=sys.stderr)
    return LiveRun(placements, len(placements), time.monotonic() - t0)


@dataclass
class ReplayedPlacements:
    """A scorer that places each pod where the live scheduler put it (by the simulation's pod id)."""

    sim: Simulation
    placements: dict[int, str | None]
    index: dict[str, int]  # live node name -> simulator node name
    name: str = "live"
    missing: int = 0

    def values(self, nodes: NodeState, pod: PodRequest) -> np.ndarray:
        live = self.placements.get(self.sim.pod.id)
        target = f"node-{self.index[live]}" if live in self.index else None
        out = np.zeros(len(nodes))
        if target in nodes.names:
            out[nodes.names.index(target)] = 1.0
        else:
            self.missing += 1  # pending live or infeasible in the simulation: the first candidate
        return out


def account(world, seed: int, policy: str, arrivals: int, live: LiveRun, index: dict[str, int]) -> tuple[float, int]:
    """The objective the live placements lead to, on the simulator's timeline; and how many
    decisions had no live placement to follow."""
    sim = Simulation(world, seed)
    replayed = ReplayedPlacements(sim, live.placements, index)
    result, _ = measure(replayed, sim, seed, policy, arrivals)
    return result.objective, replayed.missing


def main(argv: list[str] | None = None) -> int:
    try:
        return _run(argv)
    except RuntimeError as exc:  # no tuner binary, busy nodes, a scheduler that would not start
        print(f"sim_to_real: {exc}", file=sys.stderr)
        return 2


def _run(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agent.tune.sim_to_real", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--policy", default="EE", type=str.upper, choices=("EE", "LB"))
    parser.add_argument("--load", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=7, help="the replay (arrivals, sizes, lifetimes, usage)")
    parser.add_argument("--arrivals", type=int, default=TRIAL_ARRIVALS, help="measured arrivals (after a burn-in)")
    parser.add_argument("--speed", type=float, default=20.0, help="scenario seconds per real second")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--tuner", type=Path, default=ROOT / "models" / "tuner.pt")
    parser.add_argument("--default-too", action="store_true",
                        help="also replay with the cluster's default-scheduler profile and measure it")
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    parser.add_argument("--out", type=Path, default=Path("eval/sim-to-real"))
    args = parser.parse_args(argv)
    if not args.kubeconfig:
        parser.error("no kubeconfig: pass --kubeconfig or eval \"$(local-cluster/cluster.sh env)\"")
    if args.speed <= 0 or args.arrivals < 1 or not 0 < args.load <= 2:
        parser.error("--speed > 0, --arrivals >= 1 and 0 < --load <= 2 required")
    cluster = LiveCluster(args.kubeconfig, "rlscore-sim-to-real")
    profile, live_names = live_profile(cluster, args.load)
    world = profile_world(profile)
    index = {name: i for i, name in enumerate(live_names)}
    task = TuningTask(world, args.policy, args.seed, args.arrivals, profile.name)
    log = RLTuner.load(args.tuner).tune(task, args.trials)
    config, improvement = log.best
    live_seed = (args.seed,)  # the trials' first replay, the one played live
    predicted, default_predicted = task.objective(config, live_seed), task.objective(DEFAULT, live_seed)
    print(f"tuned {config.label}: predicted objective {predicted:.4f} on the replayed seed "
          f"(default {default_predicted:.4f}; {improvement:+.1%} over the trials' replays)", file=sys.stderr)
    burn = int(np.ceil(world.pods_alive))
    total = burn + max(args.arrivals, burn) + 10  # what `measure` consumes, plus a margin for the last departures
    args.out.mkdir(parents=True, exist_ok=True)
    run = f"s2r-{int(time.time())}"
    wait_nodes_empty(cluster, live_names)
    with tempfile.TemporaryDirectory() as tmp, TunedScheduler(config, args.kubeconfig, Path(tmp)):
        try:
            live = replay_live(cluster, profile, args.seed, total, args.speed, PROFILE_NAME, run)
        finally:
            cluster.cleanup(run)
    measured, missing = account(world, args.seed, args.policy, args.arrivals, live, index)
    gap = (measured - predicted) / predicted
    default_measured = None
    if args.default_too:  # the default profile of the cluster's own scheduler, same replay
        run = f"s2r-default-{int(time.time())}"
        wait_nodes_empty(cluster, live_names)
        try:
            live_default = replay_live(cluster, profile, args.seed, total, args.speed, "default-scheduler", run)
        finally:
            cluster.cleanup(run)
        default_measured, _ = account(world, args.seed, args.policy, args.arrivals, live_default, index)
    record = {"policy": args.policy, "profile": profile.name, "nodes": world.size, "seed": args.seed,
              "chosen": config.label, "default_objective": default_predicted, "predicted_objective": predicted,
              "measured_objective": measured, "relative_gap": gap, "live_pods": live.arrivals,
              "live_seconds": round(live.seconds, 1), "placements_not_replayable": missing,
              "pending_live": sum(v is None for v in live.placements.values()),
              "default_measured_objective": default_measured,
              "measured_improvement": (default_measured - measured) / default_measured if default_measured else None}
    (args.out / "result.json").write_text(json.dumps(record, indent=2) + "\n")
    (args.out / "cluster.yaml").write_text(profile.to_yaml())
    print(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
