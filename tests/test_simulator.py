import itertools

import numpy as np

from agent.sim import scenarios
from agent.sim.scenarios import LatencyLimits, make_scenario
from agent.sim.simulator import Cluster, Simulation
from agent.scoring import HeuristicScorer, choose


def _take(events, n):
    return list(itertools.islice(events, n))


def test_test1_creates_30_pods_3s_apart_then_deletes_them_all():
    events = _take(scenarios.test1(np.random.default_rng(0), LatencyLimits()), 61)
    arrivals, departures = events[:30], events[30:60]
    assert all(e.kind == "arrive" for e in arrivals)
    assert np.allclose(np.diff([e.time for e in arrivals]), 3.0)
    assert all(e.kind == "depart" for e in departures)
    assert {e.pod_id for e in departures} == {e.pod.id for e in arrivals}
    assert events[60].kind == "arrive" and events[60].time == departures[0].time + 5.0
    assert arrivals[0].pod.cpu_millicores == 250 and arrivals[0].pod.latency_soft_ms is None


def test_test2_keeps_about_30_alive_and_deletes_the_oldest():
    events = _take(scenarios.test2(np.random.default_rng(0), LatencyLimits(enabled=True)), 200)
    alive, order = set(), []
    for e in events:
        if e.kind == "arrive":
            alive.add(e.pod.id)
            order.append(e.pod.id)
            assert (e.pod.latency_soft_ms, e.pod.latency_hard_ms) == (20.0, 30.0)
        else:
            assert e.pod_id == min(alive)  # oldest first
            alive.remove(e.pod_id)
        assert len(alive) <= 30


def test_latency_shift_changes_the_best_node_twice():
    sim = Simulation("latency-shift", 5, seed=7, limits=LatencyLimits(enabled=True))
    best = []
    for _ in range(300):
        sim.next_decision()
        best.append(int(np.argmin(sim.cluster.latency_ms)))
        sim.place(0)
    assert len(sim.latency_shifts) == 2
    assert len(set(best)) >= 2


def test_same_seed_same_world_whatever_the_decisions():
    def arrivals(scorer_name):
        sim = Simulation("latency-shift", 10, seed=11)
        scorer = HeuristicScorer(scorer_name, np.random.default_rng(0))
        seen = []
        for _ in range(200):
            sim.next_decision()
            state, pod = sim.candidate_state()
            seen.append((sim.pod.id, sim.time, tuple(sim.cluster.latency_ms)))
            sim.place(choose(scorer.values(state, pod), np.random.default_rng(0)))
        return seen, sim.unschedulable

    a, b = arrivals("most-allocated"), arrivals("least-allocated")
    assert a == b


def test_node_down_evicts_its_pods_for_recreation_and_never_removes_the_last_node():
    cluster = Cluster.random(2, np.random.default_rng(0))
    sim = Simulation("test1", 2, seed=1)
    sim.next_decision()
    pod = sim.pod
    node = sim.place(0)
    evicted = sim.cluster.node_down(node)
    assert [p.id for p in evicted] == [pod.id]
    assert sim.cluster.pods[node] == 0 and not sim.cluster.present[node]
    assert sim.cluster.node_down(1 - node) == [] and sim.cluster.present[1 - node]
    assert len(cluster) == 2


def test_utilization_follows_requests_and_latency_drifts_within_bounds():
    sim = Simulation("test2", 3, seed=2)
    for _ in range(30):
        sim.next_decision()
        sim.place(0)
    state = sim.cluster.state()
    busy = state.pods > 0
    assert (state.cpu_utilization[busy] > sim.cluster.background_cpu[busy]).all()
    assert (state.cpu_utilization <= 1).all() and (state.latency_ms >= 1).all()


def test_scenario_rejects_unknown_names():
    import pytest
    with pytest.raises(ValueError, match="unknown scenario"):
        make_scenario("nope", np.random.default_rng(0), LatencyLimits(), 1000.0, 3)
