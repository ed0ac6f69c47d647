"""The lifetime oracles on a hand-built world: they read the departures efficient-first cannot."""

from dataclasses import replace

import numpy as np
import pytest

from agent.evaluate.lifetime_room import LifetimeOracle, main
from agent.sim.scenarios import Event
from agent.sim.simulator import Simulation
from agent.sim.world import LARGE, NodeSpec, PodClass, SimPod, World
from rlscore.core.rules import efficient_first


def _two_nodes() -> Simulation:
    """Node 0 draws more per core than node 1. A long pod arrives first and stays until t=100; a short
    one arrives at t=1 and leaves at t=10."""
    hungry = replace(LARGE, name="hungry", power_max_watts=500.0)
    world = World("hand-built", (NodeSpec(hungry, 5.0), NodeSpec(LARGE, 5.0)), (PodClass("nginx", 1.0, (250.0,)),),
                  arrivals="test2", latency_drift=False)
    long_pod = SimPod(0, 1000.0, 2.0**30, depart_at=100.0)
    short_pod = SimPod(1, 1000.0, 2.0**30, depart_at=10.0)
    events = [Event(0.0, 0, "arrive", pod=long_pod), Event(1.0, 1, "arrive", pod=short_pod),
              Event(10.0, 2, "depart", pod_id=1), Event(100.0, 3, "depart", pod_id=0)]
    return Simulation(world, seed=0, events=iter(events))


@pytest.mark.parametrize("mode", ["committed", "outlived"])
def test_a_short_pod_joins_the_running_node_that_outlives_it_where_efficient_first_switches_one_on(mode):
    sim = _two_nodes()
    sim.next_decision()
    sim.place(0)  # the long pod on the hungry node
    sim.next_decision()
    state, pod = sim.candidate_state("EE")
    rng = np.random.default_rng(0)
    assert int(np.argmax(efficient_first(state, pod, rng))) == 1  # the efficient node, empty
    assert int(np.argmax(LifetimeOracle(sim, mode, rng).values(state, pod))) == 0


def test_the_oracle_names_an_unknown_mode_and_the_cli_refuses_too_few_seeds(capsys):
    with pytest.raises(ValueError, match="unknown lifetime oracle 'psychic'"):
        LifetimeOracle(_two_nodes(), "psychic", np.random.default_rng(0))
    with pytest.raises(SystemExit):
        main(["--seeds", "1"])
    assert "--seeds must be >= 2" in capsys.readouterr().err


def test_the_cli_prints_each_oracle_against_efficient_first(capsys):
    assert main(["--seeds", "2", "--family", "hardware"]) == 0
    out = capsys.readouterr().out
    assert "efficient-first:" in out
    for mode in ("committed", "outlived"):
        assert f"\n{mode}: " in out
    assert out.count("of efficient-first's") == 2
