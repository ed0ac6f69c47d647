"""The models in models/ are what the server ships: check them for real, on held-out seeds."""

import json
from pathlib import Path

import numpy as np
import pytest

from agent.evaluate.compare import GOAL_NODES, GOAL_SCENARIOS, check_goals, evaluate, summarize
from agent.features import FEATURE_SPEC_VERSION
from agent.learn.model_io import load_model, sha256_of
from agent.scoring import ModelScorer
from agent.sim.simulator import Simulation

MODELS = Path(__file__).resolve().parent.parent / "models"


@pytest.mark.parametrize("policy", ["EE", "LB", "EL"])
def test_shipped_model_meets_its_goals(policy):
    model = load_model(MODELS / f"{policy.lower()}.pt", expected_policy=policy)
    # the same seeds and length as the evaluation recorded in the sidecar
    results, _ = evaluate(policy, ModelScorer(model), GOAL_SCENARIOS[policy], GOAL_NODES, seeds=3,
                          decisions=300, progress=False)
    checks = check_goals(policy, summarize(results))
    assert len(checks) >= len(GOAL_SCENARIOS[policy]) * len(GOAL_NODES)
    failed = [f"{c.scenario}@{c.nodes}: {c.goal} ({c.detail})" for c in checks if not c.ok]
    assert not failed, failed


@pytest.mark.parametrize("policy", ["ee", "lb", "el"])
def test_shipped_model_is_small_reproducible_and_runs_at_1000_nodes(policy):
    path = MODELS / f"{policy}.pt"
    assert path.stat().st_size < 1_000_000
    meta = json.loads(path.with_suffix(".json").read_text())
    assert meta["sha256"] == sha256_of(path)
    assert meta["feature_spec_version"] == FEATURE_SPEC_VERSION
    training = meta["training"]
    for key in ("steps", "seed", "seconds", "hyperparameters", "git_commit", "command"):
        assert key in training, key
    assert training["seconds"] < 600  # trained within 10 minutes on the 2-core machine
    assert meta["evaluation"]["all_goals_met"] is True

    model = load_model(path)
    sim = Simulation("poisson", 1000, seed=5)
    sim.next_decision()
    state, pod = sim.candidate_state()
    q = model.q_values(state, pod)
    assert q.shape == (len(state),) and np.isfinite(q).all()
