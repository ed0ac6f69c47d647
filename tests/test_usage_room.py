"""The usage scorers on a hand-built world: an idle pod goes where idling is cheap, where
efficient-first picks the node cheapest at full load."""

from dataclasses import replace

import numpy as np
import pytest

from agent.evaluate.usage_room import UsageScorer, main
from agent.sim.scenarios import Event
from agent.sim.simulator import Simulation
from agent.sim.world import LARGE, NodeSpec, PodClass, SimPod, World
from rlscore.core.rules import efficiency_rank, efficient_first

# 16 cores each: node 0 idles at 10 W/core and adds 10 at full load (20 W/core), node 1 idles at 2 and
# adds 20 (22 W/core). At 10% usage node 0 draws 11 W/core, node 1 4.
THRIFTY_AT_FULL = replace(LARGE, name="thrifty-at-full", power_idle_watts=160.0, power_max_watts=320.0)
THRIFTY_AT_IDLE = replace(LARGE, name="thrifty-at-idle", power_idle_watts=32.0, power_max_watts=352.0)


def _one_pod(usage: float, expected: float | None) -> Simulation:
    world = World("hand-built", (NodeSpec(THRIFTY_AT_FULL, 5.0), NodeSpec(THRIFTY_AT_IDLE, 5.0)),
                  (PodClass("nginx", 1.0, (250.0,)),), arrivals="test2", latency_drift=False)
    pod = SimPod(0, 1000.0, 2.0**30, usage=usage, expected_usage=expected, depart_at=100.0)
    sim = Simulation(world, seed=0, events=iter([Event(0.0, 0, "arrive", pod=pod), Event(100.0, 1, "depart", pod_id=0)]))
    sim.next_decision()
    return sim


@pytest.mark.parametrize(("usage", "expected", "informed", "oracle"), [
    (0.1, 0.1, 1, 1),  # an idler that says so: both go where idling is cheap
    (0.1, None, 0, 1),  # an idler without the annotation: only the oracle knows
    (1.0, 1.0, 0, 0),  # a busy pod: efficient-first's order
    (3.0, 3.0, 0, 0),  # a hog is throttled at the node's full draw: efficient-first's order again
])
def test_the_scorers_order_nodes_by_what_the_pod_would_draw(usage, expected, informed, oracle):
    sim = _one_pod(usage, expected)
    state, pod = sim.candidate_state("EE")
    rng = np.random.default_rng(0)
    assert int(np.argmax(efficient_first(state, pod, rng))) == 0
    assert int(np.argmax(UsageScorer(sim, "informed", rng).values(state, pod))) == informed
    assert int(np.argmax(UsageScorer(sim, "oracle", rng).values(state, pod))) == oracle


def test_the_key_at_a_usage_below_one_and_unknown_power_sorts_last():
    sim = _one_pod(1.0, 1.0)
    state, _ = sim.candidate_state("EE")
    np.testing.assert_allclose(efficiency_rank(state, 1.0), [-20.0, -22.0])
    state.power_idle_watts[1] = np.nan
    assert list(efficiency_rank(state, 0.1)) == [-11.0, -1e6]
    state.power_idle_watts[0] = np.nan
    assert list(efficiency_rank(state, 0.1)) == [0.0, 0.0]


def test_an_unknown_mode_is_named_and_the_cli_refuses_too_few_seeds(capsys):
    with pytest.raises(ValueError, match="unknown usage scorer 'psychic'"):
        UsageScorer(_one_pod(0.1, 0.1), "psychic", np.random.default_rng(0))
    with pytest.raises(SystemExit):
        main(["--seeds", "1"])
    assert "--seeds must be >= 2" in capsys.readouterr().err


def test_the_cli_prints_each_scorer_against_efficient_first(capsys):
    assert main(["--seeds", "2", "--family", "hardware"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("efficient-first: ")
    for mode in ("informed", "oracle"):
        assert f"\n{mode}: " in out
    assert out.count("of efficient-first's") == 2
