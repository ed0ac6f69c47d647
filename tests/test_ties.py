"""agent.evaluate.ties: a rule against itself with other tie-breaks, the resolution of an evaluation."""

import numpy as np
import pytest

from agent.evaluate.compare import EVAL_SEED_BASE, run
from agent.evaluate.ties import OTHER_TIES, main, measure_ties, run_with_ties
from rlscore.core.scoring import HeuristicScorer


def test_its_own_tie_stream_is_the_evaluations_run_and_another_lands_elsewhere():
    seed = EVAL_SEED_BASE + 1
    evaluated, _ = run(HeuristicScorer("headroom-balance", np.random.default_rng(seed)), "mixed", seed, "LB")
    assert run_with_ties("LB", "headroom-balance", "mixed", None, seed, seed, 300) == evaluated.objective
    assert run_with_ties("LB", "headroom-balance", "mixed", None, seed, seed + OTHER_TIES, 300) != evaluated.objective


def test_the_pairs_are_read_per_cell():
    rows = measure_ties("LB", "headroom-balance", ("mixed", "test1"), 3, node_counts=None)
    assert [(r["family"], r["nodes"]) for r in rows] == [("mixed", None), ("test1", 3), ("test1", 10), ("test1", 100)]
    mixed = rows[0]
    assert mixed["seeds"] == 3 and mixed["differ"] >= 1 and mixed["log_ratio_sd"] > 0
    low, high = mixed["paired"]["ci95"]
    assert low <= mixed["paired"]["ratio"] <= high


def test_clear_errors(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--policy", "LB", "--rule", "latency-fit"])
    assert e.value.code == 2 and "not a baseline of LB" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--policy", "LB", "--rule", "headroom-balance", "--seeds", "1"])
    assert "--seeds must be >= 2" in capsys.readouterr().err
