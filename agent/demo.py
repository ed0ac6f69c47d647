"""A look at the policies on the thesis's first test pattern, in the simulator: 30 nginx pods
(250m / 64Mi, latency soft 20 ms / hard 30 ms) arrive 3 s apart on 3 nodes; where do they land?"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

from agent.model_io import ModelValidationError, load_model
from agent.scenarios import LatencyLimits
from agent.scoring import HeuristicScorer, ModelScorer, Scorer, choose
from agent.simulator import Simulation

NODES, PODS, SEED = 3, 30, 2**40 + 1


def place_pods(scorer: Scorer) -> Simulation:
    sim = Simulation("test1", NODES, SEED, LatencyLimits(enabled=True))
    rng = np.random.default_rng(SEED)
    for _ in range(PODS):
        sim.next_decision()
        state, pod = sim.candidate_state()
        sim.place(choose(scorer.values(state, pod), rng))
    return sim


def main() -> int:
    torch.set_num_threads(1)
    scorers: list[Scorer] = [HeuristicScorer("default-scheduler", np.random.default_rng(0))]
    for policy in ("ee", "lb", "el"):
        try:
            scorers.append(ModelScorer(load_model(Path("models") / f"{policy}.pt")))
        except ModelValidationError as exc:
            print(f"skipping {policy.upper()}: {exc}", file=sys.stderr)
    reference = Simulation("test1", NODES, SEED).cluster
    header = " | ".join(f"node-{i} ({reference.cpu_capacity[i] / 1000:.0f} cpu, "
                        f"{reference.latency_ms[i]:.0f} ms)" for i in range(NODES))
    print(f"{PODS} pods (250m, 64Mi, soft 20 ms / hard 30 ms) on {NODES} simulated nodes\n")
    print(f"| scorer | {header} | active nodes | mean latency of chosen nodes |")
    print("|---|" + "---|" * NODES + "---|---|")
    for scorer in scorers:
        sim = place_pods(scorer)
        pods = sim.cluster.pods.astype(int)
        chosen = [sim.cluster.latency_ms[n] for n, _ in sim.cluster.placement.values()]
        print(f"| {scorer.name} | " + " | ".join(str(p) for p in pods)
              + f" | {int((pods > 0).sum())} | {np.mean(chosen):.1f} ms |")
    print("\nrl-ee packs, rl-lb spreads, rl-el packs onto nodes within the latency limits;"
          " `make eval` measures them at 3, 10 and 100 nodes.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
