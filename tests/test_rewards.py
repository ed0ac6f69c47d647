import pytest

from agent.learn.rewards import (EL_WORSE_TIER_PENALTY, energy_latency_reward, energy_reward,
                           load_balance_reward, reward)
from agent.state import PodRequest
from tests.conftest import make_nodes

POD = PodRequest(1000, 1000 * 2**20)
EL_POD = PodRequest(1000, 1000 * 2**20, 20.0, 30.0)


def test_ee_prefers_joining_a_running_node_and_the_fullest_one():
    nodes = make_nodes([8000, 8000, 8000], cpu_req=[4000, 1000, 0])
    r = [energy_reward(nodes, POD, i) for i in range(3)]
    assert r[0] > r[1] > r[2]
    assert r[0] == pytest.approx(0.5 * 5000 / 8000)
    assert r[2] == pytest.approx(-1.0 + 0.5 + 0.5 * 1000 / 8000)  # the only size: half cost


def test_ee_switches_on_the_biggest_node_first():
    nodes = make_nodes([4000, 16000])
    assert energy_reward(nodes, POD, 1) > energy_reward(nodes, POD, 0)


def test_lb_rewards_the_least_loaded_and_punishes_the_most_loaded():
    nodes = make_nodes([8000, 8000, 8000], cpu_req=[6000, 3000, 0])
    assert load_balance_reward(nodes, POD, 2) == pytest.approx(1.0)
    assert load_balance_reward(nodes, POD, 0) == pytest.approx(-1.0)
    assert load_balance_reward(nodes, POD, 1) == pytest.approx(-0.5)
    # on heterogeneous nodes the load after placement decides
    hetero = make_nodes([2000, 16000], cpu_req=[0, 1000])
    assert load_balance_reward(hetero, POD, 1) == pytest.approx(1.0)
    assert load_balance_reward(make_nodes([8000, 8000]), POD, 0) == 1.0  # all equal


def test_el_latency_tiers_come_before_energy():
    # node 0: running, busy, over the hard limit; node 1: empty, within soft; node 2: running, between
    nodes = make_nodes([8000] * 3, cpu_req=[6000, 0, 2000], latency=[45.0, 10.0, 25.0])
    r = [energy_latency_reward(nodes, EL_POD, i) for i in range(3)]
    assert r[1] > r[2] > r[0]
    assert r[0] < -EL_WORSE_TIER_PENALTY + 0.5  # avoidable violation is penalised
    # no penalty when no feasible node can meet the limit: packing decides
    far = make_nodes([8000] * 2, cpu_req=[4000, 0], latency=[50.0, 40.0])
    assert energy_latency_reward(far, EL_POD, 0) > energy_latency_reward(far, EL_POD, 1) > -0.5


def test_el_packs_within_the_same_tier():
    nodes = make_nodes([8000] * 2, cpu_req=[4000, 1000], latency=[12.0, 5.0])
    assert energy_latency_reward(nodes, EL_POD, 0) > energy_latency_reward(nodes, EL_POD, 1)


def test_dispatch_by_policy():
    nodes = make_nodes([8000, 8000], cpu_req=[1000, 0], latency=[10, 10])
    assert reward("EE", nodes, POD, 0) == energy_reward(nodes, POD, 0)
    assert reward("LB", nodes, POD, 1) == load_balance_reward(nodes, POD, 1)
    assert reward("EL", nodes, EL_POD, 0) == energy_latency_reward(nodes, EL_POD, 0)
