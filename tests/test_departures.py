"""Where a scorer departs from a heuristic, on the heuristic's own trajectories in the simulator."""

from pathlib import Path

import numpy as np
import pytest

from agent.evaluate.departures import OPENING, RUNNING, departures, main
from rlscore.core.model import load_model
from rlscore.core.scoring import HeuristicScorer, ModelScorer

MODELS = Path(__file__).resolve().parent.parent / "models"


def test_a_heuristic_never_departs_from_itself():
    found = departures(HeuristicScorer("most-allocated", np.random.default_rng(0)), "most-allocated", "test1", 3,
                       seeds=2, decisions=120)
    assert sum(found.decisions.values()) == 240
    assert found.decisions[OPENING] > 0 and found.decisions[RUNNING] > 0
    assert found.departed == {OPENING: 0, RUNNING: 0} and found.opened_instead == 0


def test_spreading_departs_from_packing_where_packing_places_onto_running_nodes():
    found = departures(HeuristicScorer("least-allocated", np.random.default_rng(0)), "most-allocated", "test1", 3,
                       seeds=2, decisions=120)
    assert found.departed[RUNNING] > 0.3 * found.decisions[RUNNING]
    assert 0 < found.opened_instead <= found.departed[RUNNING]  # spreading opens the empty nodes packing leaves
    assert "depart from the baseline" in found.lines()[0] and "onto an empty node" in found.lines()[-1]


def test_the_shipped_ee_follows_its_poisson_teacher_and_not_a_spreading_rule():
    """The EE clone learned efficient-first on poisson (models/ee.json, world_teachers): asked about
    that rule's states it departs rarely, about LeastAllocated's almost always."""
    model = ModelScorer(load_model(MODELS / "ee.safetensors"))
    teacher = departures(model, "efficient-first", "poisson", 10, seeds=1, decisions=80)
    spreading = departures(model, "least-allocated", "poisson", 10, seeds=1, decisions=80)
    assert sum(teacher.decisions.values()) == sum(spreading.decisions.values()) == 80
    assert sum(teacher.departed.values()) < 8
    assert sum(spreading.departed.values()) > 64


@pytest.mark.parametrize("args, message", [
    (["--baseline", "nope", "--family", "test1"], "unknown heuristic 'nope'"),
    (["--baseline", "most-allocated", "--family", "nope"], "unknown scenario family 'nope'"),
    (["--baseline", "most-allocated", "--family", "test1", "--seeds", "0"], "must be positive"),
])
def test_the_cli_names_what_is_wrong(args, message, capsys):
    assert main([str(MODELS / "ee.safetensors"), *args]) == 2
    assert message in capsys.readouterr().err


def test_the_cli_refuses_a_broken_model_file(tmp_path, capsys):
    broken = tmp_path / "ee.safetensors"
    broken.write_bytes((MODELS / "ee.safetensors").read_bytes()[:100])
    assert main([str(broken), "--baseline", "most-allocated", "--family", "test1"]) == 2
    assert broken.name in capsys.readouterr().err


def test_the_cli_prints_the_split(capsys):
    assert main([str(MODELS / "ee.safetensors"), "--baseline", "most-allocated", "--family", "test1", "--nodes", "3",
                 "--seeds", "1", "--decisions", "60"]) == 0
    out = capsys.readouterr().out
    assert "on test1 at 3 nodes, 1 seeds" in out and f"where the baseline {OPENING}" in out


def test_the_window_prices_the_openings_with_the_training_reward_and_the_cost_that_follows():
    """Spreading against packing on test1: every third opening is priced; switching a node on is charged
    at once by the reward training gives, with either shaping factor."""
    found = departures(HeuristicScorer("least-allocated", np.random.default_rng(0)), "most-allocated", "test1", 3,
                       seeds=2, decisions=120, policy="EE", window=30)
    assert len(found.priced) == found.opened_instead // 3 > 0
    priced = np.array(found.priced)
    assert np.mean(priced[:, 0] < priced[:, 1]) > 0.5 and np.mean(priced[:, 2] < priced[:, 3]) > 0.5
    assert "cost over the next 30 decisions" in found.lines()[-1]


def test_the_returns_price_the_openings_in_what_td_estimates_with_either_continuation():
    """Spreading against packing on test1 under EE: with the rest placed by either rule, training's
    return is lower after switching a node on than after packing on most priced openings."""
    found = departures(HeuristicScorer("least-allocated", np.random.default_rng(0)), "most-allocated", "test1", 3,
                       seeds=2, decisions=120, policy="EE", window=30, returns=40)
    assert len(found.returns) == len(found.priced) > 0
    r = np.array(found.returns)
    assert np.mean(r[:, 0] < r[:, 1]) > 0.5 and np.mean(r[:, 2] < r[:, 3]) > 0.5
    assert "the rest placed by the baseline" in found.lines()[-1]
    assert main([str(MODELS / "ee.safetensors"), "--baseline", "efficient-first", "--family", "test1",
                 "--returns", "5"]) == 2


def test_following_the_model_asks_on_the_states_its_own_placements_lead_to():
    """A spreader against a packer on 3 nodes: on the packer's states most pods could open an empty
    node and the spreader does; on its own states every node soon runs pods, so there is little to open."""
    spreader = HeuristicScorer("least-allocated", np.random.default_rng(0))
    on_baseline = departures(spreader, "most-allocated", "test1", 3, seeds=2, decisions=120, policy="EE")
    on_own = departures(spreader, "most-allocated", "test1", 3, seeds=2, decisions=120, policy="EE",
                        follow_model=True)
    assert sum(on_own.decisions.values()) == sum(on_baseline.decisions.values())
    assert on_own.opened_instead < on_baseline.opened_instead / 4
    # the spreader switches a node on wherever one is empty: on the packer's states, at almost every decision
    assert on_baseline.model_opens >= on_baseline.opened_instead + on_baseline.decisions[OPENING] - \
        on_baseline.departed[OPENING]
    assert on_baseline.model_opens > 0.9 * sum(on_baseline.decisions.values()) > on_own.model_opens
    assert "the model switches an empty node on at" in on_own.lines()[1]


def test_a_second_scorer_shares_the_departures_it_makes_alike():
    """A copy of the scorer departs where it does, to the same node; the baseline itself never departs."""
    spreading = HeuristicScorer("least-allocated", np.random.default_rng(0))
    copy = departures(spreading, "most-allocated", "test1", 3, seeds=2, decisions=120,
                      other=HeuristicScorer("least-allocated", np.random.default_rng(0)))
    assert copy.departed[RUNNING] > 0
    assert copy.other_departed == copy.both_departed == copy.same_node == copy.departed[RUNNING]
    packing = departures(HeuristicScorer("least-allocated", np.random.default_rng(0)), "most-allocated", "test1", 3,
                         seeds=2, decisions=120, other=HeuristicScorer("most-allocated", np.random.default_rng(0)))
    assert packing.other_departed == packing.both_departed == packing.same_node == 0
    assert "both to the same node at 0" in packing.lines()[-1]


def test_the_cli_asks_a_second_model_and_refuses_one_of_another_policy(capsys):
    ee = str(MODELS / "ee.safetensors")
    assert main([ee, "--baseline", "most-allocated", "--family", "test1", "--nodes", "3", "--seeds", "1",
                 "--decisions", "60", "--other", ee]) == 0
    assert "both to the same node" in capsys.readouterr().out
    lb = str(MODELS / "lb.safetensors")
    assert main([ee, "--baseline", "most-allocated", "--family", "test1", "--other", lb]) == 2
    assert "lb.safetensors" in capsys.readouterr().err
