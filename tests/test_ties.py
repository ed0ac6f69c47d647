"""agent.evaluate.ties: a rule against itself with other tie-breaks, the resolution of an evaluation."""

import numpy as np
import pytest

from agent.evaluate.compare import EVAL_SEED_BASE, run
from agent.evaluate.ties import OTHER_TIES, SecondPickOnce, main, measure_ties, run_with_ties
from rlscore.core.scoring import HeuristicScorer


def test_its_own_tie_stream_is_the_evaluations_run_and_another_lands_elsewhere():
    seed = EVAL_SEED_BASE + 1
    evaluated, _ = run(HeuristicScorer("headroom-balance", np.random.default_rng(seed)), "mixed", seed, "LB")
    assert run_with_ties("LB", "headroom-balance", "mixed", None, seed, seed, 300) == evaluated.objective
    assert run_with_ties("LB", "headroom-balance", "mixed", None, seed, seed + OTHER_TIES, 300) != evaluated.objective


def test_one_other_pick_moves_a_rule_that_never_ties():
    seed = EVAL_SEED_BASE + 2
    own = run_with_ties("EL", "latency-fit", "mixed", None, seed, seed, 300)
    assert run_with_ties("EL", "latency-fit", "mixed", None, seed, seed + OTHER_TIES, 300) == own
    assert run_with_ties("EL", "latency-fit", "mixed", None, seed, seed, 300, other_pick=True) != own


def test_the_other_pick_is_the_second_best_node_once():
    class Fixed:
        name = "fixed"

        def values(self, nodes, pod):
            return np.array([0.2, 0.9, 0.5])

    nudged = SecondPickOnce(Fixed())
    first = nudged.values(None, None)
    assert int(np.argmax(first)) == 2 and first[0] == 0.2
    assert int(np.argmax(nudged.values(None, None))) == 1
    single = SecondPickOnce(Fixed())
    single.scorer.values = lambda nodes, pod: np.array([0.4])
    assert single.values(None, None).tolist() == [0.4] and not single.done


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
    with pytest.raises(ValueError, match="other must be one of ties, pick"):
        measure_ties("LB", "headroom-balance", ("mixed",), 2, other="swap")
