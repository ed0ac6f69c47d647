"""The models in models/ are what the server ships: check them for real, on held-out seeds."""

import json
from pathlib import Path

import numpy as np
import pytest

from agent.evaluate.compare import evaluate, summarize
from agent.evaluate.report import markdown_table
from agent.features import FEATURE_SPEC_VERSION
from agent.learn.model_io import load_model, sha256_of, sidecar_path
from agent.scoring import ModelScorer
from agent.sim.families import families_for
from agent.sim.simulator import Simulation

MODELS = Path(__file__).resolve().parent.parent / "models"

# The goals the "why" named that each shipped model meets, whatever else it records: EE's
# energy on hardware of two generations, LB's hot-node time when usage differs from requests, EL's
# hard violations with scarce near capacity.
HEADLINE_GOALS = {
    "EE": ("energy <= 1.05 x efficient-first",),
    "LB": ("hot-node time <= 1.1 x least-utilized",),
    "EL": ("hard violations near zero (<= 1% of pods with limits)",),
}


def _row(table: list[str], family: str, scorer: str) -> dict[str, str]:
    columns = [c.strip() for c in table[0].strip("|").split("|")]
    for line in table[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] == family and cells[2] == scorer:
            return dict(zip(columns, cells))
    raise AssertionError(f"no row for {scorer} on {family}")


def _meta(policy: str) -> dict:
    return json.loads(sidecar_path(MODELS / f"{policy.lower()}.pt").read_text())


@pytest.mark.parametrize("policy", ["EE", "LB", "EL"])
def test_shipped_evaluation_reproduces_its_sidecar(policy):
    """The model's rows in the sidecar's table (and the README) are what it really does on those
    seeds; the baselines' rows come from the same seeded worlds and are not re-run here."""
    evaluation = _meta(policy)["evaluation"]
    model = load_model(MODELS / f"{policy.lower()}.pt", expected_policy=policy)
    results, _ = evaluate(policy, [ModelScorer(model)], families_for(policy), evaluation["seeds"],
                          evaluation["arrivals"], baselines=(), progress=False)
    rl = f"| rl-{policy.lower()} |"
    mine = [line for line in markdown_table(policy, summarize(results)).splitlines() if rl in line]
    assert mine and mine == [line for line in evaluation["table"] if rl in line]
    headline = [g for g in evaluation["goals"] if g["goal"] in HEADLINE_GOALS[policy]]
    assert len(headline) == len(HEADLINE_GOALS[policy])
    assert all(g["ok"] for g in headline), headline
    if policy == "EL":  # scarce near capacity: fewer broken hard limits than "best tier, then pack"
        table = evaluation["table"]
        rl, pack = _row(table, "scarce-near", "rl-el"), _row(table, "scarce-near", "latency-pack")
        assert float(rl["hard viol."]) < 0.75 * float(pack["hard viol."]), (rl, pack)


@pytest.mark.parametrize("policy", ["EE", "LB", "EL"])
def test_shipped_model_is_small_reproducible_and_runs_at_5000_nodes(policy):
    path = MODELS / f"{policy.lower()}.pt"
    assert path.stat().st_size < 1_000_000
    meta = _meta(policy)
    assert meta["sha256"] == sha256_of(path)
    assert meta["feature_spec_version"] == FEATURE_SPEC_VERSION
    training = meta["training"]
    for key in ("steps", "seed", "seconds", "hyperparameters", "git_commit", "command", "algorithm"):
        assert key in training, key
    assert training["wall_seconds"] < 15 * 60  # trained within 15 minutes on the 2-core machine
    # the trainers were compared and the sidecar says which one shipped
    assert sum(c["shipped"] for c in meta["candidates"]) == 1
    assert {c["algorithm"].split(",")[0].split()[0].lower() for c in meta["candidates"]} >= {"ppo", "double"}

    model = load_model(path)
    sim = Simulation.of_family("poisson", seed=5, nodes=5000)
    sim.next_decision()
    state, pod = sim.candidate_state()
    q = model.q_values(state, pod)
    assert q.shape == (len(state),) and np.isfinite(q).all()
