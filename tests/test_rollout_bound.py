"""The rollout bound (agent.evaluate.rollout_bound): branches of a simulation meet the same future,
and one step of policy improvement by rollouts is never worse than its base rule."""

import copy

import pytest

from agent.evaluate.rollout_bound import CANDIDATES, base_choice, branch_cost, finish, main, run_world
from agent.sim.futures import branchable
from agent.sim.outcomes import cost
from agent.sim.simulator import Simulation


def test_a_branch_replays_exactly_what_the_simulation_then_does():
    sim = branchable(Simulation.of_family("mixed", 2**40 + 3))
    sim.next_decision()
    finish(sim, "one-step-lb", "LB", 3, 40)
    end = sim.decisions + 60
    own = base_choice("one-step-lb", sim, "LB", 3)
    other = (own + 1) % len(sim.candidates)
    predicted = branch_cost(sim, own, "one-step-lb", "LB", 3, end)
    elsewhere = branch_cost(sim, other, "one-step-lb", "LB", 3, end)
    untouched = copy.deepcopy(sim)
    start = sim.ledger.copy()
    sim.place(own)
    sim.next_decision()
    finish(sim, "one-step-lb", "LB", 3, end)
    assert cost("LB", sim.ledger.minus(start), sim.units) == predicted
    assert predicted != elsewhere  # a branch is its own world: the other placement costs otherwise
    assert branch_cost(untouched, own, "one-step-lb", "LB", 3, end) == predicted  # and copying left it alone


@pytest.mark.parametrize("policy", ["LB", "EE", "EL"])
def test_the_rollout_is_never_worse_than_its_base_rule(policy):
    bound = run_world((policy, 2**40 + 5, 12, 20, "mixed", 0, 0.0, ""))
    assert bound.base_rule == min(bound.rule_objectives, key=bound.rule_objectives.get)
    assert bound.rollout_objective <= bound.rule_objectives[bound.base_rule] + 1e-9


def test_the_rollout_departs_where_another_rules_choice_costs_less():
    """On this LB world the branches find cheaper placements than the best rule's, and taking them
    gains: a rollout that only ever took the base rule's choice would pass the test above."""
    bound = run_world(("LB", 2**40 + 5, 12, 20, "mixed", 0, 0.0, ""))
    assert bound.departures > 0 and bound.mean_gain > 0
    assert bound.rollout_objective < bound.rule_objectives[bound.base_rule]


def test_a_named_base_rule_is_improved_on_instead_of_the_worlds_best():
    """latency-greedy, not a candidate of EL's rollout, is its base when named: measured beside the
    candidates, and never beaten by its own rollout."""
    assert "latency-greedy" not in CANDIDATES["EL"]
    bound = run_world(("EL", 2**40 + 5, 12, 20, "mixed", 0, 0.0, "latency-greedy"))
    assert bound.base_rule == "latency-greedy" and "latency-greedy" in bound.rule_objectives
    assert bound.rollout_objective <= bound.rule_objectives["latency-greedy"] + 1e-9


def test_the_command_refuses_a_bad_count(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--policy", "LB", "--worlds", "0"])
    assert exc.value.code == 2
    assert "--worlds must be >= 1" in capsys.readouterr().err
