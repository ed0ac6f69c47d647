"""The limits oracles on hand-built worlds: they read the limits of the world's pod classes, which the
rules cannot."""

import numpy as np
import pytest

from agent.evaluate.limits_room import LimitsOracle, main
from agent.sim.scenarios import Event
from agent.sim.simulator import Simulation
from agent.sim.world import LARGE, SMALL, NodeSpec, PodClass, SimPod, World
from rlscore.core.rules import latency_fit_running

CLASSES = (PodClass("strict", 1.0, (250.0,), latency_limits=((10.0, 15.0),)),
           PodClass("medium", 1.0, (250.0,), latency_limits=((30.0, 50.0),)), PodClass("batch", 1.0, (250.0,)))


def _near_and_far(second: SimPod, far_ms: float = 40.0) -> tuple[Simulation, object, object]:
    """A near node (5 ms) that runs one pod, an empty far node, and `second` to place."""
    world = World("hand-built", (NodeSpec(SMALL, 5.0), NodeSpec(LARGE, far_ms)), CLASSES, arrivals="test2",
                  latency_drift=False)
    events = [Event(0.0, 0, "arrive", pod=SimPod(0, 250.0, 2.0**28, 10.0, 15.0, depart_at=100.0)),
              Event(1.0, 1, "arrive", pod=second)]
    sim = Simulation(world, seed=0, events=iter(events))
    sim.next_decision()
    sim.place(int(np.flatnonzero(sim.candidates == 0)[0]))
    sim.next_decision()
    state, pod = sim.candidate_state("EL")
    return sim, state, pod


def _pick(values, sim) -> int:
    return int(sim.candidates[int(np.argmax(values))])


MEDIUM = SimPod(1, 250.0, 2.0**28, 30.0, 50.0, depart_at=50.0)


@pytest.mark.parametrize("second, far_ms, mode", [
    (SimPod(1, 250.0, 2.0**28, depart_at=50.0), 40.0, "unlimited-far"),  # no limits: the farthest node
    (SimPod(1, 250.0, 2.0**28, depart_at=50.0), 40.0, "unlimited-beyond-limits"),  # near: within strict's limit
    (MEDIUM, 25.0, "beyond-stricter-limits"),  # both within its soft limit; near: within strict's
    (MEDIUM, 40.0, "reserve"),  # only the near node within its soft limit: a soft violation keeps it free
])
def test_the_oracles_leave_the_running_near_node_that_latency_fit_running_joins(second, far_ms, mode):
    sim, state, pod = _near_and_far(second, far_ms)
    rng = np.random.default_rng(0)
    assert _pick(latency_fit_running(state, pod, rng), sim) == 0
    assert _pick(LimitsOracle(sim, mode, rng).values(state, pod), sim) == 1


def test_a_strict_pod_still_joins_the_running_near_node():
    sim, state, pod = _near_and_far(SimPod(1, 250.0, 2.0**28, 10.0, 15.0, depart_at=50.0))
    for mode in ("beyond-stricter-limits", "reserve"):
        assert _pick(LimitsOracle(sim, mode, np.random.default_rng(0)).values(state, pod), sim) == 0


def test_the_oracle_names_an_unknown_mode_and_the_cli_prints_each_against_both_rules(capsys):
    sim, _, _ = _near_and_far(SimPod(1, 250.0, 2.0**28, depart_at=50.0))
    with pytest.raises(ValueError, match="unknown limits oracle 'psychic'"):
        LimitsOracle(sim, "psychic", np.random.default_rng(0))
    assert main(["--seeds", "2"]) == 0
    out = capsys.readouterr().out
    for mode in ("unlimited-far", "unlimited-beyond-limits", "beyond-stricter-limits", "reserve"):
        line = next(x for x in out.splitlines() if x.startswith(f"{mode}: "))
        assert "of latency-fit-running's" in line and "of latency-fit's" in line and "crowded" in line
