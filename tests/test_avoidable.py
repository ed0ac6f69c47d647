"""agent.evaluate.avoidable: an EL scorer's avoidable hard-limit violations and the best-tier ranking."""

import numpy as np
import pytest

from agent.evaluate.avoidable import BestTierOnly, _violations, is_avoidable, main, measure
from agent.evaluate.compare import EVAL_SEED_BASE, run
from agent.sim.simulator import Simulation
from rlscore.core.objectives import EL_HARD_WEIGHT
from rlscore.core.scoring import HeuristicScorer
from rlscore.core.state import latency_tiers


def test_the_violations_looked_into_are_the_evaluated_runs_avoidable_ones():
    seed = EVAL_SEED_BASE
    evaluated, _ = run(HeuristicScorer("efficient-first", np.random.default_rng(seed)), "mixed", seed, "EL",
                       arrivals=120)
    rows = _violations(("efficient-first", "mixed", seed, 120, 20))
    assert evaluated.hard_violations_avoidable > 0
    assert len(rows) == evaluated.hard_violations_avoidable
    # a violation costs its decision 10 (hard) + 3 (soft) before shaping: never the higher reward here
    assert all(mine < theirs for mine, theirs, _, _ in rows)


def test_ranked_inside_the_best_tier_it_breaks_no_limit_it_could_keep():
    sim = Simulation.of_family("mixed", EVAL_SEED_BASE + 3, None, limits=True)
    guarded = BestTierOnly(HeuristicScorer("efficient-first", np.random.default_rng(0)))
    checked = 0
    for _ in range(200):
        sim.next_decision()
        state, pod = sim.candidate_state("EL")
        values = guarded.values(state, pod)
        tiers = latency_tiers(state, pod)
        assert np.all(np.isinf(values[tiers < tiers.max()])) and np.all(np.isfinite(values[tiers == tiers.max()]))
        pick = int(np.argmax(values))
        assert not is_avoidable(state, pod, pick)
        checked += pod.has_latency_limits and tiers.max() > tiers.min()
        sim.place(pick)
    assert checked > 0
    result = measure("efficient-first", "mixed", 2, 0, arrivals=100)
    assert result["scorers"]["efficient-first"]["avoidable"] > 0
    assert result["scorers"]["efficient-first+best-tier"]["avoidable"] == 0
    assert result["violations"] is None


def test_clear_errors(capsys, tmp_path):
    assert main(["--model", str(tmp_path / "missing.safetensors"), "--seeds", "2", "--window-seeds", "0"]) == 2
    assert "missing.safetensors" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--model", "efficient-first", "--family", "mixed,churn"])
    assert "--family takes one family" in capsys.readouterr().err


def test_its_one_step_reward_charges_a_violation_at_once():
    """The reward training gives (agent.sim.outcomes.OutcomeReward) rates a node over the pod's hard
    limit about one hard violation below a node within it, in the very decision that picks it."""
    from agent.evaluate.avoidable import one_step_reward
    from agent.sim.futures import branchable

    sim = branchable(Simulation.of_family("mixed", EVAL_SEED_BASE + 1, None, limits=True))
    for _ in range(300):
        sim.next_decision()
        state, pod = sim.candidate_state("EL")
        tiers = latency_tiers(state, pod)
        if pod.has_latency_limits and (tiers == 0).any() and (tiers > 0).any():
            over, within = int(np.flatnonzero(tiers == 0)[0]), int(np.flatnonzero(tiers > 0)[0])
            assert one_step_reward(sim, over) < one_step_reward(sim, within) - EL_HARD_WEIGHT / 2
            return
        sim.place(0)
    pytest.fail("no decision with nodes on both sides of a hard limit in 300 decisions")
