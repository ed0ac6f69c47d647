"""Another future of the same world (agent.sim.futures.redraw_future): the pods already there leave as
they would have, every pod still to come is drawn afresh from the world's arrival process."""

import copy

import numpy as np
import pytest

from agent.evaluate.rollout_bound import finish, main
from agent.sim.futures import branchable, redraw_future
from agent.sim.simulator import Simulation


def _events(sim: Simulation, count: int) -> list:
    return [next(sim.events) for _ in range(count)]


def _at_a_decision(seed: int) -> Simulation:
    """A mixed world (Poisson arrivals) some way into its day, at a decision."""
    sim = branchable(Simulation.of_family("mixed", seed))
    sim.next_decision()
    finish(sim, "one-step-lb", "LB", 3, 60)
    return sim


def test_a_redrawn_future_keeps_the_departures_of_the_pods_already_there_and_draws_new_arrivals():
    sim = _at_a_decision(2**40 + 11)
    there = set(sim.cluster.placement) | {sim.pod.id} | {p.id for p in sim.waiting}
    own = _events(copy.deepcopy(sim), 400)
    redrawn = _events(redraw_future(copy.deepcopy(sim), np.random.default_rng(1)), 400)
    assert all(e.time >= sim.time for e in redrawn)
    assert [e.time for e in redrawn] == sorted(e.time for e in redrawn)

    def departures_of_those_there(events):
        return [(e.time, e.pod_id) for e in events if e.kind == "depart" and e.pod_id in there]

    def arrivals(events):
        return [(round(e.time, 6), e.pod.cpu_millicores) for e in events if e.kind == "arrive"]

    horizon = min(own[-1].time, redrawn[-1].time)
    kept = departures_of_those_there([e for e in own if e.time <= horizon])
    assert kept and kept == departures_of_those_there([e for e in redrawn if e.time <= horizon])
    new = [e for e in redrawn if e.kind == "arrive"]
    assert new and min(e.pod.id for e in new) == 1 + max(there | set(sim.cluster.lingering))
    # only the departures of those there and of the new pods: none of pods gone before
    assert {e.pod_id for e in redrawn if e.kind == "depart"} <= there | {e.pod.id for e in new}
    assert arrivals(own) != arrivals(redrawn)
    # the new pods leave too, and one seed draws one future
    assert any(e.kind == "depart" and e.pod_id > max(there) for e in redrawn)
    again = _events(redraw_future(copy.deepcopy(sim), np.random.default_rng(1)), 400)
    assert arrivals(again) == arrivals(redrawn)
    # a redrawn future branches as the world's own does, and the original is untouched
    assert _events(copy.deepcopy(sim), 400) == own


def test_a_redrawn_future_runs_a_world_as_its_own_does():
    sim = redraw_future(_at_a_decision(2**40 + 12), np.random.default_rng(2))
    before = sim.ledger.arrivals
    finish(sim, "one-step-lb", "LB", 3, sim.decisions + 200)
    assert sim.ledger.arrivals - before >= 200 and len(sim.cluster.placement) > 0


def test_a_world_made_branchable_after_it_ran_keeps_the_departures_of_the_pods_that_came_before():
    """Training makes a world branchable after its warm start: the wrapped stream has seen none of the
    pods already there. The redrawn future takes them from the simulation (a small scarce-near world
    whose pods all came before once scanned its endless own stream for departures it had already met)."""
    sim = Simulation.of_family("scarce-near", 2**40 + 14, nodes=3)
    sim.next_decision()
    finish(sim, "one-step-el", "EL", 3, 40)
    there = set(sim.cluster.placement) | {sim.pod.id}
    assert len(there) > 1
    sim = branchable(sim)
    redrawn = redraw_future(copy.deepcopy(sim), np.random.default_rng(3))
    events = _events(copy.deepcopy(redrawn), 300)
    new = {e.pod.id for e in events if e.kind == "arrive"}
    assert new and min(new) > max(there)  # numbered past every pod there
    left = {e.pod_id for e in events if e.kind == "depart" and e.pod_id not in new}
    assert left == there  # each pod there leaves, and only those
    finish(redrawn, "one-step-el", "EL", 3, redrawn.decisions + 200)  # it runs on: the scan ends


def test_only_a_poisson_worlds_future_is_redrawn():
    sim = branchable(Simulation.of_family("test2", 2**40 + 13, nodes=4))
    sim.next_decision()
    with pytest.raises(ValueError, match="only a Poisson world's arrivals can be drawn afresh"):
        redraw_future(sim, np.random.default_rng(0))


def test_the_bound_on_redrawn_futures_runs_and_refuses_a_negative_count(tmp_path, capsys):
    out = tmp_path / "bound.json"
    assert main(["--policy", "LB", "--worlds", "1", "--decisions", "3", "--tail", "10", "--futures", "2",
                 "--confidence", "1", "--workers", "1", "--json", str(out)]) == 0
    assert "LB on mixed: rollout / best rule" in capsys.readouterr().out and out.stat().st_size > 0
    with pytest.raises(SystemExit) as exc:
        main(["--policy", "LB", "--futures", "-1"])
    assert exc.value.code == 2 and "--futures must be >= 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--policy", "LB", "--confidence", "2"])
    assert "needs --futures >= 2" in capsys.readouterr().err


def test_a_confident_pick_departs_only_on_a_gain_beyond_noise():
    from agent.evaluate.rollout_bound import confident_pick

    own, steady, noisy = 0, 1, 2
    costs = {own: np.array([10.0, 12.0, 11.0, 13.0]), steady: np.array([9.0, 11.0, 10.0, 12.0]),
             noisy: np.array([1.0, 19.0, 0.0, 20.0])}
    assert confident_pick(costs, own, 0.0) == noisy  # cheapest on average
    assert confident_pick(costs, own, 2.0) == own  # ... but its gain is noise
    del costs[noisy]
    assert confident_pick(costs, own, 2.0) == steady  # one less every time: beyond noise


@pytest.mark.reproduction  # two LB worlds, 16 futures per decision (~2 min): make verify
def test_on_lb_mixed_worlds_the_room_past_the_best_rule_is_foresight():
    """docs/training.md, "Room without foresight": the rollout that knows its world's future gains over
    the best rule; the one that compares placements on futures drawn afresh, departing only on a gain
    beyond noise, does not."""
    from agent.evaluate.compare import EVAL_SEED_BASE
    from agent.evaluate.rollout_bound import run_world

    for seed in (EVAL_SEED_BASE, EVAL_SEED_BASE + 1):
        seeing = run_world(("LB", seed, 40, 100, "mixed", 0, 0.0, ""))
        blind = run_world(("LB", seed, 40, 100, "mixed", 16, 2.0, ""))
        assert seeing.ratio < 0.95 and blind.ratio > 0.99, (seeing, blind)
