"""Rewards on hand-built states: the outcome reward of each policy, its shaping, and the named
variants kept for comparison (the stepwise per-decision rewards, the thesis's)."""

import numpy as np
import pytest

from agent.learn.env import SchedulingEnv
from agent.learn.rewards import (
    EL_WORSE_TIER_PENALTY,
    energy_latency_reward,
    energy_reward,
    load_balance_reward,
    thesis_reward,
)
from agent.sim.outcomes import Ledger, OutcomeReward, Units, cost
from agent.sim.simulator import Simulation
from agent.sim.world import LARGE, SMALL, NodeSpec, PodClass, SimPod, World
from rlscore.core.objectives import EL_ENERGY_WEIGHT, EL_HARD_WEIGHT, EL_SOFT_WEIGHT, LB_HOT_WEIGHT
from rlscore.core.state import PodRequest
from tests.conftest import make_nodes

POD = PodRequest(1000, 1000 * 2**20)
EL_POD = PodRequest(1000, 1000 * 2**20, 20.0, 30.0)
UNITS = Units(reference_power_watts=200.0, interarrival_s=2.0, pod_lifetime_s=100.0)


# --- outcome -----------------------------------------------------------------------------------

def test_ee_cost_is_energy_in_reference_node_intervals_plus_stranded_pods():
    # 400 J = 200 W for 2 s: one unit; a pod that found no node costs lifetime / interarrival units
    assert cost("EE", Ledger(energy_j=400.0), UNITS) == pytest.approx(1.0)
    assert cost("EE", Ledger(unschedulable=1), UNITS) == pytest.approx(50.0)


def test_lb_cost_weighs_hot_node_time_over_imbalance():
    hot = cost("LB", Ledger(hot_share_s=2.0), UNITS)  # all nodes hot for one interarrival time
    imbalanced = cost("LB", Ledger(request_cv_s=2.0), UNITS)  # CV 1 for one interarrival time
    assert hot == pytest.approx(LB_HOT_WEIGHT) and imbalanced == pytest.approx(1.0)


def test_el_cost_puts_violations_before_energy():
    assert cost("EL", Ledger(hard_violations=1, soft_violations=1), UNITS) == EL_HARD_WEIGHT + EL_SOFT_WEIGHT
    assert cost("EL", Ledger(energy_j=400.0), UNITS) == pytest.approx(EL_ENERGY_WEIGHT)
    # switching on a 200 W node for 50 interarrivals costs less than one hard violation
    assert cost("EL", Ledger(energy_j=200.0 * 100.0), UNITS) < EL_HARD_WEIGHT


def test_shaping_adds_gamma_phi_next_minus_phi():
    plain, shaped = OutcomeReward("EE", 0.9, shaping=False), OutcomeReward("EE", 0.9, shaping=True)
    delta = Ledger(energy_j=400.0)
    assert plain(delta, UNITS, -10.0, -12.0) == pytest.approx(-1.0)
    # the decision that raised the committed cost from 10 to 12 units pays for it now
    assert shaped(delta, UNITS, -10.0, -12.0) == pytest.approx(-1.0 + 0.9 * -12.0 + 10.0)
    assert shaped(delta, UNITS, -10.0, -10.0) > shaped(delta, UNITS, -10.0, -12.0)


def test_shaping_gamma_sets_the_factor_on_phi_next_and_one_charges_exactly_the_commitment_added():
    delta = Ledger(energy_j=400.0)  # one unit burned while the commitment went from 10 to 12 units
    undiscounted = OutcomeReward("EE", 0.9, shaping=True, shaping_gamma=1.0)
    assert undiscounted(delta, UNITS, -10.0, -12.0) == pytest.approx(-1.0 - 12.0 + 10.0)
    # the discount's own shaping pays (1 - gamma) x the commitment left on top, whatever the placement
    discounted = OutcomeReward("EE", 0.9, shaping=True)
    assert discounted(delta, UNITS, -10.0, -12.0) - undiscounted(delta, UNITS, -10.0, -12.0) == pytest.approx(0.1 * 12.0)


def test_with_shaping_gamma_one_an_ee_decision_costs_the_energy_it_adds_until_the_pods_leave():
    """Summed over a run, the undiscounted shaped rewards are minus the energy burned plus what the run
    left committed minus what it found committed: each decision pays what it adds and nothing else."""
    env = SchedulingEnv("EE", max_nodes=6, min_nodes=6, reward="outcome", families=("poisson",), shaping_gamma=1.0,
                        episode_decisions=60)
    obs, _ = env.reset(seed=3)
    start, burned, total = env._potential, 0.0, 0.0
    for _ in range(60):
        before = env.sim.ledger.copy()
        obs, reward, terminated, truncated, _ = env.step(int(np.flatnonzero(obs["action_mask"])[0]))
        burned += cost("EE", env.sim.ledger.minus(before), env.sim.units)
        total += reward
        if terminated or truncated:
            break
    assert total == pytest.approx(-burned + env._potential - start, rel=1e-9)


def test_the_rate_potential_charges_opening_a_node_its_idle_draw_as_if_it_lasted():
    """With energy_potential "rate", a state's potential is its draw now / (1 - gamma): switching a node on
    costs the same whatever the pod's lifetime, which the features do not show."""
    world = World("hand-built", (NodeSpec(LARGE, 5.0), NodeSpec(LARGE, 5.0)), (PodClass("nginx", 1.0, (250.0,)),),
                  arrivals="test2", latency_drift=False)
    sim = Simulation(world, seed=0)
    sim.next_decision()
    assert sim.potential("EE", 0.9, "rate") == pytest.approx(-sim.cost_rate("EE") / 0.1)
    before = sim.potential("EE", 0.9, "rate")
    sim.place(0)
    sim.next_decision()
    idle = LARGE.power_idle_watts / sim.units.reference_power_watts
    assert before - sim.potential("EE", 0.9, "rate") > idle / 0.1  # at least the idle draw, as if it lasted
    assert sim.potential("EE", 0.9, "rate") != pytest.approx(sim.potential("EE", 0.9))


def test_ee_shaping_charges_a_placement_the_energy_it_commits_to():
    """Same pod, two nodes: the one that must be switched on (idle draw for the pod's lifetime)
    gets the lower shaped reward at once, not a thousand decisions later."""
    world = World("hand-built", (NodeSpec(LARGE, 5.0), NodeSpec(LARGE, 5.0)), (PodClass("nginx", 1.0, (250.0,)),),
                  arrivals="test2", latency_drift=False)
    rewards = []
    for second_on in (0, 1):
        env = SchedulingEnv("EE", max_nodes=2, min_nodes=2, reward="outcome")
        env.reset(seed=0)
        env.sim = Simulation(world, seed=0)
        env.sim.next_decision()
        env._observe()
        env.step(0)  # the first pod switches node 0 on
        rewards.append(_decide(env, env.sim.pod, second_on))
    assert rewards[0] - rewards[1] > LARGE.power_idle_watts * 50 / (world.reference_power_watts * 4.0)


def _two_node_world(classes, **kw):
    return World("hand-built", (NodeSpec(SMALL, 5.0), NodeSpec(LARGE, 40.0)), classes, arrivals="test2",
                 latency_drift=False, **kw)


def test_outcome_reward_of_a_step_is_minus_the_cost_the_ledger_accumulated():
    env = SchedulingEnv("EE", max_nodes=2, min_nodes=2, reward="outcome", shaping=False)
    env.reset(seed=0)
    env.sim = Simulation(_two_node_world((PodClass("nginx", 1.0, (250.0,)),)), seed=0)
    env.sim.next_decision()
    env._observe()
    before = env.sim.ledger.copy()
    _, r, _, _, _ = env.step(0)
    assert r == pytest.approx(-cost("EE", env.sim.ledger.minus(before), env.sim.units))
    assert r < 0  # a node is on and draws power


def _decide(env: SchedulingEnv, pod: SimPod, node: int) -> float:
    """Offer `pod` (instead of the world's next one) and place it on cluster node `node`."""
    env.sim.pod, env.sim.candidates = pod, env.sim.cluster.feasible(pod)
    env._observe()
    return env.step(int(np.flatnonzero(env.sim.candidates == node)[0]))[1]


def test_el_outcome_charges_the_violation_a_loose_pod_causes_later():
    """A loose pod on the only near node leaves no room for the strict pod behind it; the return of
    the two decisions is what shows it."""
    loose = SimPod(1001, 3500.0, 64 * 2**20, 100.0, 150.0)
    strict = SimPod(1002, 1000.0, 64 * 2**20, 10.0, 15.0)

    def two_decisions(loose_on: int) -> float:
        env = SchedulingEnv("EL", max_nodes=2, min_nodes=2, reward="outcome", shaping=False)
        env.reset(seed=0)
        env.sim = Simulation(_two_node_world((PodClass("nginx", 1.0, (250.0,)),)), seed=0)
        env.sim.next_decision()
        r1 = _decide(env, loose, loose_on)
        far_or_near = 0 if env.sim.cluster.feasible(strict).tolist() != [1] else 1
        r2 = _decide(env, strict, far_or_near)
        return r1 + r2

    took_near, left_it_free = two_decisions(0), two_decisions(1)
    assert left_it_free - took_near > EL_HARD_WEIGHT / 2  # the later violation is in the return


# --- stepwise -----------------------------------------------------------------------------------

def test_stepwise_ee_prefers_joining_a_running_node_and_the_fullest_one():
    nodes = make_nodes([8000, 8000, 8000], cpu_req=[4000, 1000, 0])
    r = [energy_reward(nodes, POD, i) for i in range(3)]
    assert r[0] > r[1] > r[2]
    assert r[0] == pytest.approx(0.5 * 5000 / 8000)
    assert r[2] == pytest.approx(-1.0 + 0.5 + 0.5 * 1000 / 8000)


def test_stepwise_lb_rewards_the_least_loaded_and_punishes_the_most_loaded():
    nodes = make_nodes([8000, 8000, 8000], cpu_req=[6000, 3000, 0])
    assert load_balance_reward(nodes, POD, 2) == pytest.approx(1.0)
    assert load_balance_reward(nodes, POD, 0) == pytest.approx(-1.0)
    assert load_balance_reward(nodes, POD, 1) == pytest.approx(-0.5)


def test_stepwise_el_latency_tiers_come_before_energy():
    nodes = make_nodes([8000] * 3, cpu_req=[6000, 0, 2000], latency=[45.0, 10.0, 25.0])
    r = [energy_latency_reward(nodes, EL_POD, i) for i in range(3)]
    assert r[1] > r[2] > r[0]
    assert r[0] < -EL_WORSE_TIER_PENALTY + 0.5


# --- thesis ------------------------------------------------------------------------------------

def test_thesis_ee_rewards_unused_nodes_and_ends_on_a_less_loaded_choice():
    nodes = make_nodes([8000] * 3, cpu_req=[1000, 0, 0], pods=[2, 0, 0])
    assert thesis_reward("EE", nodes, POD, 0) == (10.0 * 2 // 2, False)  # 2 of 3 unused -> int(10 * 2/2)
    reward, ended = thesis_reward("EE", nodes, POD, 1)
    assert reward == 0.0 and ended


def test_thesis_lb_plus_ten_least_minus_one_and_end_on_the_most_loaded():
    nodes = make_nodes([8000] * 3, cpu_req=[3000, 1000, 0], pods=[3, 1, 0])
    assert thesis_reward("LB", nodes, POD, 2) == (10.0, False)
    assert thesis_reward("LB", nodes, POD, 1) == (0.0, False)
    assert thesis_reward("LB", nodes, POD, 0) == (-1.0, True)


def test_thesis_el_adds_unused_share_packing_and_latency_tier_and_ends_on_a_hard_violation():
    nodes = make_nodes([8000] * 2, cpu_req=[1000, 0], pods=[1, 0], latency=[10.0, 45.0])
    reward, ended = thesis_reward("EL", nodes, EL_POD, 0)
    assert reward == pytest.approx(1 / 2 + (2 / 1) / 50 + 1.0) and not ended
    reward, ended = thesis_reward("EL", nodes, EL_POD, 1)
    assert reward == pytest.approx(0 / 2 + (2 / 2) / 50 + 0.0) and ended


@pytest.mark.parametrize("variant", ["outcome", "stepwise", "thesis"])
def test_every_variant_runs_in_the_env(variant):
    env = SchedulingEnv("EL", max_nodes=8, min_nodes=2, reward=variant)
    obs, _ = env.reset(seed=1)
    for _ in range(50):
        obs, r, terminated, truncated, _ = env.step(int(np.flatnonzero(obs["action_mask"])[0]))
        assert np.isfinite(r)
        if terminated or truncated:
            obs, _ = env.reset()
