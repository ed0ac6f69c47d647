"""Which nodes each scorer keeps busy, along the evaluation's own runs in the simulator."""

from pathlib import Path

import numpy as np
import pytest

from agent.evaluate.compare import EVAL_SEED_BASE, run
from agent.evaluate.occupancy import main, occupancy, scorer_factory
from rlscore.core.scoring import HeuristicScorer
from agent.sim.simulator import Simulation

MODELS = Path(__file__).resolve().parent.parent / "models"


def test_the_pods_shown_are_the_evaluation_runs_own():
    """After the burn-in, the evaluation's trace records the pods per node at every placement; the
    occupancy at the same counts is the same, so it follows the very run whose objective it prints."""
    make = scorer_factory("most-allocated", "EE")
    burn = int(np.ceil(Simulation.of_family("poisson", EVAL_SEED_BASE, 10).world.pods_alive))
    at = (burn + 1, burn + 40, burn + 120)
    found = occupancy(lambda: make(EVAL_SEED_BASE), "poisson", 10, EVAL_SEED_BASE, "EE", at)
    result, trace = run(HeuristicScorer("most-allocated", np.random.default_rng(EVAL_SEED_BASE)), "poisson",
                        EVAL_SEED_BASE, "EE", 10, 300, keep_trace=True)
    assert found.objective == result.objective
    assert found.pods == [tuple(int(p) for p in trace.pods_per_node[k - burn - 1]) for k in at]


def test_one_step_ee_drains_the_small_node_that_most_allocated_keeps_on():
    """docs/training.md's finding on test2 at 3 nodes (8, 16 and 4 cores on the first evaluation
    seed): both rules fill the 4-core node first and put the rest on the 8-core one; then
    one-step-ee moves every replaced pod to the 8-core node and the 4-core one empties, while
    MostAllocated keeps refilling it, at a higher cost."""
    seed = EVAL_SEED_BASE
    assert list(Simulation.of_family("test2", seed, 3).cluster.cpu_capacity) == [8000.0, 16000.0, 4000.0]
    runs = {name: occupancy(lambda name=name: scorer_factory(name, "EE")(seed), "test2", 3, seed, "EE", (30, 330))
            for name in ("one-step-ee", "most-allocated")}
    assert runs["one-step-ee"].pods[0] == runs["most-allocated"].pods[0] == (14, 0, 16)
    assert runs["one-step-ee"].pods[1] == (30, 0, 0)
    assert runs["most-allocated"].pods[1] == (14, 0, 16)
    assert runs["one-step-ee"].objective < 0.8 * runs["most-allocated"].objective


def test_the_cli_prints_each_worlds_nodes_and_every_scorer(capsys):
    assert main([str(MODELS / "ee.safetensors"), "most-allocated", "--family", "test2", "--nodes", "3", "--seeds", "2",
                 "--at", "30,60"]) == 0
    out = capsys.readouterr().out
    assert "pods per node after 30, 60 placements" in out
    assert "seed 0: 3 nodes of 8, 16, 4 cores" in out and "seed 1: 3 nodes of" in out
    rows = [line.split()[0] for line in out.splitlines() if line.startswith("  ")]
    assert rows == [str(MODELS / "ee.safetensors"), "most-allocated"] * 2
    assert "mean objective: " in out


@pytest.mark.parametrize("args, message", [
    (["nope", "--family", "test1", "--policy", "EE"], "unknown heuristic 'nope'"),
    (["most-allocated", "--family", "nope", "--policy", "EE"], "unknown scenario family 'nope'"),
    (["most-allocated", "--family", "test1"], "--policy is needed"),
    (["most-allocated", "--family", "test1", "--policy", "EE", "--at", "0,30"], "must be positive"),
    (["most-allocated", "--family", "test1", "--policy", "EE", "--at", "many"], "must be positive"),
])
def test_the_cli_names_what_is_wrong(args, message, capsys):
    assert main(args) == 2
    assert message in capsys.readouterr().err


def test_the_cli_refuses_a_model_of_another_policy(capsys):
    assert main([str(MODELS / "lb.safetensors"), "--family", "test1", "--policy", "EE", "--seeds", "1"]) == 2
    err = capsys.readouterr().err
    assert "lb.safetensors" in err and "holds policy LB, expected EE" in err


def test_the_cli_refuses_a_broken_model_file(tmp_path, capsys):
    broken = tmp_path / "ee.safetensors"
    broken.write_bytes((MODELS / "ee.safetensors").read_bytes()[:100])
    assert main([str(broken), "most-allocated", "--family", "test1"]) == 2
    assert broken.name in capsys.readouterr().err
