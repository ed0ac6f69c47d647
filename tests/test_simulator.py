import itertools

import numpy as np
import pytest

from rlscore.core.scoring import HeuristicScorer, choose
from agent.sim import scenarios
from agent.sim.families import FAMILIES, JITTERED_LIMITS, evaluation_families_for, family, families_for
from rlscore.core.objectives import HOT_UTILIZATION
from agent.sim.scenarios import PodSampler, _EventMaker
from agent.sim.simulator import Cluster, EventsExhausted, Simulation
from agent.sim.world import GEN_NEW, GEN_OLD, GIB, LARGE, SMALL, Hardware, NodeSpec, PodClass, SimPod, World

NGINX = (PodClass("nginx", 1.0, (250.0,), (0.25, 0.25), (0.6, 0.6)),)


def _take(events, n):
    return list(itertools.islice(events, n))


def _sampler(classes=NGINX, seed=0):
    return PodSampler(classes, np.random.default_rng(seed))


def test_test1_creates_30_pods_3s_apart_then_deletes_them_all():
    events = _take(scenarios.test1(_EventMaker(), _sampler()), 61)
    arrivals, departures = events[:30], events[30:60]
    assert all(e.kind == "arrive" for e in arrivals)
    assert np.allclose(np.diff([e.time for e in arrivals]), 3.0)
    assert all(e.kind == "depart" for e in departures)
    assert {e.pod_id for e in departures} == {e.pod.id for e in arrivals}
    assert events[60].kind == "arrive" and events[60].time == departures[0].time + 5.0
    assert arrivals[0].pod.cpu_millicores == 250 and arrivals[0].pod.latency_soft_ms is None


def test_test2_keeps_about_30_alive_and_deletes_the_oldest():
    limited = (PodClass("nginx", 1.0, (250.0,), latency_limits=((20.0, 30.0),)),)
    alive = set()
    for e in _take(scenarios.test2(_EventMaker(), _sampler(limited)), 200):
        if e.kind == "arrive":
            alive.add(e.pod.id)
            assert (e.pod.latency_soft_ms, e.pod.latency_hard_ms) == (20.0, 30.0)
        else:
            assert e.pod_id == min(alive)  # oldest first
            alive.remove(e.pod_id)
        assert len(alive) <= 30


def test_poisson_rate_matches_the_requested_load():
    world = family("poisson").world(np.random.default_rng(3), nodes=20)
    sim = Simulation(world, seed=1)
    shares = []
    while sim.ledger.arrivals < 4 * world.pods_alive:
        sim.next_decision()
        sim.place(0)
        shares.append(sim.cluster.cpu_requested.sum() / sim.cluster.cpu_capacity.sum())
    steady = np.mean(shares[len(shares) // 2:])
    assert steady == pytest.approx(world.load, rel=0.2)


def test_every_family_draws_worlds_that_run_and_respects_a_fixed_size():
    for name, fam in FAMILIES.items():
        for nodes in (None, 5):
            sim = Simulation.of_family(name, seed=4, nodes=nodes, limits="EL" in fam.policies)
            if nodes:
                assert len(sim.cluster) == nodes
            for _ in range(50):
                sim.next_decision()
                state, pod = sim.candidate_state()
                assert len(state) == len(sim.candidates) > 0
                sim.place(int(np.argmax(state.cpu_capacity)))
            assert sim.ledger.placed == 50 and sim.ledger.time_s > 0


def test_latency_shift_changes_the_best_node_twice():
    sim = Simulation.of_family("latency-shift", seed=7, nodes=5, limits=True)
    best = []
    while sim.time < 700:
        sim.next_decision()
        best.append(int(np.argmin(sim.cluster.latency_ms)))
        sim.place(0)
    assert len(sim.latency_shifts) == 2
    assert len(set(best)) >= 2


def test_same_seed_same_world_whatever_the_decisions():
    def world_seen(scorer_name):
        sim = Simulation.of_family("churn", seed=11, nodes=10)
        scorer = HeuristicScorer(scorer_name, np.random.default_rng(0))
        seen = {}
        for _ in range(300):
            sim.next_decision()
            state, pod = sim.candidate_state()
            seen.setdefault(sim.pod.id, (round(sim.time, 9), tuple(sim.cluster.latency_ms), tuple(sim.cluster.present)))
            sim.place(choose(scorer.values(state, pod), np.random.default_rng(0)))
        return seen

    a, b = world_seen("most-allocated"), world_seen("least-allocated")
    both = a.keys() & b.keys()  # a pod that found no node under one scorer is not a decision there
    assert len(both) >= 250
    assert all(a[k] == b[k] for k in both)


def test_world_draws_are_seeded_and_training_jitters_the_limits():
    a = family("scarce-near").world(np.random.default_rng(1), limits=True)
    b = family("scarce-near").world(np.random.default_rng(1), limits=True)
    assert a == b and 2 <= a.size <= 64
    near = [n for n in a.nodes if n.latency_ms < 10]
    assert 1 <= len(near) <= 3 and all(n.hardware is SMALL for n in near)
    test2 = family("test2").world(np.random.default_rng(1), nodes=3, limits=True, training=True)
    assert test2.pod_classes[0].latency_limits == JITTERED_LIMITS
    assert family("test2").world(np.random.default_rng(1), nodes=3).pod_classes[0].latency_limits == ()
    assert set(families_for("EL")) >= {"scarce-near", "latency-shift"}
    with pytest.raises(ValueError, match="unknown scenario family"):
        family("nope")


def test_one_pool_is_judged_on_but_never_trained_on():
    """An evaluation-only family: every policy is judged on one node pool with power known for some
    nodes only; training and tuning draw their own pool worlds (POOL_SHARE) and never this family."""
    for policy in ("EE", "LB", "EL"):
        assert "one-pool" in evaluation_families_for(policy) and "one-pool" not in families_for(policy)
        assert set(families_for(policy)) < set(evaluation_families_for(policy))
    kinds, hidden_shares = set(), []
    for seed in range(20):
        world = family("one-pool").world(np.random.default_rng(seed), nodes=12)
        assert len({node.hardware for node in world.nodes}) == 1 and world.power_visible
        kinds.add(world.nodes[0].hardware.name)
        hidden_shares.append(np.mean(world.power_hidden))
    assert kinds == {"small", "medium", "large"}
    assert min(hidden_shares) < 0.2 and max(hidden_shares) > 0.4
    sim = Simulation.of_family("one-pool", seed=3, nodes=8)
    sim.next_decision()
    state, _ = sim.candidate_state()
    hidden = np.asarray(sim.world.power_hidden)[sim.candidates]
    assert hidden.any() and not hidden.all()
    assert np.isnan(state.power_idle_watts[hidden]).all() and np.isfinite(state.power_idle_watts[~hidden]).all()


def _world(nodes, classes=NGINX, **kw):
    return World("test", tuple(nodes), classes, **{"latency_drift": False, **kw})


def test_energy_counts_idle_plus_dynamic_power_of_active_nodes_only():
    world = _world([NodeSpec(GEN_OLD, 10.0), NodeSpec(GEN_NEW, 10.0)], arrivals="test2")
    sim = Simulation(world, seed=0)
    sim.cluster.background_cpu[:] = 0.0
    sim.next_decision()
    sim.place(1)  # one nginx pod (250m at 0.6) on the efficient node
    start = sim.ledger.copy()
    sim._advance(sim.time + 10.0)
    energy = sim.ledger.energy_j - start.energy_j
    util = 250 * sim.cluster.placement[next(iter(sim.cluster.placement))][1].usage / 16000
    assert energy == pytest.approx(10.0 * (60 + (220 - 60) * util))  # gen-old is empty: off


def test_committed_energy_is_idle_until_the_last_pod_leaves_plus_each_pods_dynamic_draw():
    world = _world([NodeSpec(GEN_NEW, 10.0), NodeSpec(GEN_OLD, 10.0)], arrivals="test2")
    cluster = Cluster(world, np.random.default_rng(0))
    cluster.background_cpu[:] = 0.0
    short = SimPod(1, 1000.0, 2**20, usage=0.5, depart_at=100.0)
    long = SimPod(2, 2000.0, 2**20, usage=0.5, depart_at=300.0)
    cluster.bind(short, 0)
    cluster.bind(long, 0)
    slope = (220.0 - 60.0) / 16000.0
    expected = 60.0 * 300.0 + slope * (500.0 * 100.0 + 1000.0 * 300.0)
    assert cluster.committed_energy_j(0.0) == pytest.approx(expected)
    cluster.unbind(2)
    assert cluster.last_departure[0] == 100.0
    assert cluster.committed_energy_j(50.0) == pytest.approx(60.0 * 50.0 + slope * 500.0 * 50.0)
    cluster.unbind(1)
    assert cluster.committed_energy_j(50.0) == 0.0  # empty: off


def test_hot_nodes_and_pods_that_find_no_node_are_counted():
    hog = (PodClass("hog", 1.0, (2000.0,), (0.5, 0.5), (3.0, 3.0)),)
    sim = Simulation(_world([NodeSpec(SMALL, 5.0), NodeSpec(SMALL, 5.0)], hog, load=0.9), seed=0)
    sim.next_decision()
    sim.place(0)  # 2000m x 3.0 = 6 cores used on 4: throttled at 1.0, hot
    start = sim.ledger.copy()
    sim._advance(sim.time + 4.0)
    assert sim.cluster.cpu_utilization()[0] == 1.0 > HOT_UTILIZATION
    assert sim.ledger.hot_node_s - start.hot_node_s == pytest.approx(4.0)
    assert sim.ledger.hot_share_s - start.hot_share_s == pytest.approx(2.0)  # 1 of 2 nodes
    while sim.ledger.unschedulable == 0:
        sim.next_decision()
        sim.place(int(np.argmin(sim.cluster.cpu_requested[sim.candidates])))
    assert sim.ledger.arrivals == sim.ledger.placed + sim.ledger.unschedulable


def test_usage_shows_after_its_onset_and_lingers_after_the_pod_went():
    """Requests count from binding to leaving; the usage the metrics show begins usage_onset_s after
    binding and ends usage_linger_s after leaving (a pod gone before its onset never shows)."""
    busy = SimPod(0, 1000.0, 2**20, usage=1.0)
    brief = SimPod(1, 500.0, 2**20, usage=1.0)
    events = [scenarios.Event(0.0, 0, "arrive", pod=busy), scenarios.Event(10.0, 1, "depart", pod_id=0),
              scenarios.Event(20.0, 2, "arrive", pod=brief), scenarios.Event(21.0, 3, "depart", pod_id=1),
              scenarios.Event(40.0, 4, "arrive", pod=SimPod(2, 100.0, 2**20))]
    sim = Simulation(_world([NodeSpec(SMALL, 5.0)], usage_onset_s=3.0, usage_linger_s=1.0), seed=0, events=events)
    sim.cluster.background_cpu[:] = 0.0
    c = sim.cluster
    sim.next_decision()
    sim.place(0)
    assert c.cpu_requested[0] == 1000.0 and c.cpu_utilization()[0] == 0.0
    sim._advance(2.9)
    assert c.cpu_utilization()[0] == 0.0
    sim._advance(3.1)
    assert c.cpu_utilization()[0] == pytest.approx(0.25)
    assert sim._next_arrival() is None  # the departure at 10 s: requests freed, usage still shows
    assert c.cpu_requested[0] == 0.0 and c.cpu_utilization()[0] == pytest.approx(0.25)
    sim._advance(11.1)
    assert c.cpu_utilization()[0] == 0.0
    sim.next_decision()
    sim.place(0)  # the brief pod: gone at 21 s, before its usage would show at 23 s
    sim.next_decision()  # the last arrival, at 40 s
    assert c.cpu_requested[0] == 0.0 and c.cpu_used[0] == 0.0 and not c.starting and not c.lingering
    # hot (above 85%) never; utilization integrated: 0.25 from 3 s to 10 s on the active node
    assert sim.ledger.hot_node_s == 0.0


def test_without_onset_and_linger_usage_follows_the_pod_exactly():
    pod = SimPod(0, 4000.0, 2**20, usage=1.0)
    events = [scenarios.Event(0.0, 0, "arrive", pod=pod), scenarios.Event(10.0, 1, "depart", pod_id=0),
              scenarios.Event(20.0, 2, "arrive", pod=SimPod(1, 100.0, 2**20))]
    sim = Simulation(_world([NodeSpec(SMALL, 5.0)]), seed=0, events=events)
    sim.next_decision()
    sim.place(0)
    sim.next_decision()
    assert sim.ledger.hot_node_s == pytest.approx(10.0)  # hot the whole time it ran
    delayed = Simulation(_world([NodeSpec(SMALL, 5.0)], usage_onset_s=4.0, usage_linger_s=2.0), seed=0,
                         events=[scenarios.Event(0.0, 0, "arrive", pod=SimPod(0, 4000.0, 2**20, usage=1.0)),
                                 scenarios.Event(10.0, 1, "depart", pod_id=0),
                                 scenarios.Event(20.0, 2, "arrive", pod=SimPod(1, 100.0, 2**20))])
    delayed.next_decision()
    delayed.place(0)
    delayed.next_decision()
    # hot from its onset until it left; the lingering usage is on a node without pods (off)
    assert delayed.ledger.hot_node_s == pytest.approx(6.0)


@pytest.mark.parametrize("limits, policy, seen", [
    ((10.0, 15.0), "EE", (None, None)),  # EE and LB are served pods without limits
    ((10.0, 15.0), "LB", (None, None)),
    ((10.0, 15.0), "EL", (10.0, 15.0)),
    (None, "EL", (None, None)),  # a pod without limits has none under EL either, as the server serves it
    ((10.0, 15.0), None, (10.0, 15.0)),  # no policy: the pod as it is
])
def test_scorers_see_the_pod_as_the_server_serves_it_to_their_policy(limits, policy, seen):
    soft, hard = limits or (None, None)
    pod = SimPod(0, 250.0, 2**20, soft, hard)
    events = [scenarios.Event(0.0, 0, "arrive", pod=pod), scenarios.Event(1.0, 1, "arrive", pod=SimPod(1, 250.0, 2**20))]
    sim = Simulation(_world([NodeSpec(SMALL, 40.0)]), seed=0, events=events)
    sim.next_decision()
    _, request = sim.candidate_state(policy)
    assert (request.latency_soft_ms, request.latency_hard_ms) == seen
    sim.place(0)
    # what the pod was really asked for is what the ledger judges, whatever the scorer saw
    assert sim.ledger.hard_violations == (1 if limits else 0)


def test_violations_use_the_real_latency_at_placement_and_know_when_they_were_avoidable():
    strict = (PodClass("strict", 1.0, (250.0,), latency_limits=((10.0, 15.0),)),)
    sim = Simulation(_world([NodeSpec(SMALL, 5.0), NodeSpec(LARGE, 40.0)], strict, arrivals="test2"), seed=0)
    sim.next_decision()
    sim.place(int(np.flatnonzero(sim.candidates == 1)[0]))  # far node: avoidable hard violation
    assert (sim.ledger.hard_violations, sim.ledger.soft_violations, sim.ledger.avoidable_hard_violations) == (1, 1, 1)
    sim.next_decision()
    sim.place(int(np.flatnonzero(sim.candidates == 0)[0]))
    assert sim.ledger.hard_violations == 1 and sim.ledger.limited == 2


def test_a_violation_no_placement_could_have_kept_says_why():
    """Crowded: the near node is seen within the limit but full; unreachable: no node is seen within it."""
    strict = (PodClass("strict", 1.0, (1000.0,), latency_limits=((10.0, 15.0),)),)
    sim = Simulation(_world([NodeSpec(SMALL, 5.0), NodeSpec(LARGE, 40.0)], strict, arrivals="test2"), seed=0)
    while True:
        sim.next_decision()
        if 0 not in sim.candidates:
            break
        sim.place(int(np.flatnonzero(sim.candidates == 0)[0]))
    assert (sim.ledger.hard_violations, sim.ledger.crowded_hard_violations) == (0, 0)
    sim.place(0)  # only the far node has room
    ledger = sim.ledger
    assert (ledger.hard_violations, ledger.crowded_hard_violations, ledger.unreachable_hard_violations,
            ledger.avoidable_hard_violations) == (1, 1, 0, 0)
    far_only = Simulation(_world([NodeSpec(LARGE, 40.0)], strict, arrivals="test2"), seed=0)
    far_only.next_decision()
    far_only.place(0)
    ledger = far_only.ledger
    assert (ledger.hard_violations, ledger.crowded_hard_violations, ledger.unreachable_hard_violations) == (1, 0, 1)


def test_metrics_are_as_old_as_the_last_scrape():
    world = _world([NodeSpec(SMALL, 5.0)], arrivals="test2", metrics_interval_s=60.0)
    sim = Simulation(world, seed=0)
    for _ in range(5):  # 2 s apart: all before the first scrape at 60 s
        sim.next_decision()
        sim.place(0)
    sim.next_decision()
    state, _ = sim.candidate_state()
    assert state.cpu_requested[0] == 5 * 250  # requests are live
    assert state.cpu_utilization[0] == pytest.approx(sim.cluster.background_cpu[0], abs=0.05)  # metrics are not
    live = Simulation(_world([NodeSpec(SMALL, 5.0)], arrivals="test2"), seed=0)
    for _ in range(5):
        live.next_decision()
        live.place(0)
    live.next_decision()
    assert live.candidate_state()[0].cpu_utilization[0] > live.cluster.background_cpu[0] + 0.1


def test_the_scrape_phase_moves_the_scrapes_among_the_arrivals():
    """With arrivals 2 s apart and a scrape every 60 s, a phase of 0.95 takes the second scrape at
    3 s instead of 60 s: the later pods see the first ones' usage."""
    def utilization_seen(phase):
        sim = Simulation(_world([NodeSpec(SMALL, 5.0)], arrivals="test2", metrics_interval_s=60.0), seed=0,
                         scrape_phase=phase)
        for _ in range(5):
            sim.next_decision()
            sim.place(0)
        sim.next_decision()
        return sim.candidate_state()[0].cpu_utilization[0] - sim.cluster.background_cpu[0]
    assert utilization_seen(0.0) == pytest.approx(0.0, abs=0.05)
    assert utilization_seen(0.95) > 0.05
    for phase in (-0.1, 1.0):
        with pytest.raises(ValueError, match="scrape_phase"):
            Simulation(_world([NodeSpec(SMALL, 5.0)]), seed=0, scrape_phase=phase)


def test_with_pods_wait_a_pod_that_fits_nowhere_waits_for_a_departure():
    """One 1-core node. b arrives while a fills it: b waits and is placed when a goes, at 5 s; c
    arrives and is deleted while waiting, so it is never placed; then the stream ends."""
    a, b, c = (SimPod(i, 1000.0, 2**20) for i in range(3))
    events = [scenarios.Event(0.0, 0, "arrive", pod=a), scenarios.Event(1.0, 1, "arrive", pod=b),
              scenarios.Event(2.0, 2, "arrive", pod=c), scenarios.Event(3.0, 3, "depart", pod_id=2),
              scenarios.Event(5.0, 4, "depart", pod_id=0)]
    node = NodeSpec(Hardware("one-core", 1000.0, 4 * GIB, 110, 50.0, 100.0), 5.0)
    sim = Simulation(_world([node]), seed=0, events=list(events), pods_wait=True)
    sim.next_decision()
    assert sim.pod is a
    sim.place(0)
    sim.next_decision()
    assert sim.pod is b and sim.time == 5.0 and not sim.waiting
    assert (sim.ledger.arrivals, sim.ledger.unschedulable) == (3, 0)
    sim.place(0)
    with pytest.raises(EventsExhausted):
        sim.next_decision()
    # without waiting, b and c are unschedulable on arrival and dropped
    dropping = Simulation(_world([node]), seed=0, events=list(events))
    dropping.next_decision()
    dropping.place(0)
    with pytest.raises(EventsExhausted):
        dropping.next_decision()
    assert (dropping.ledger.arrivals, dropping.ledger.unschedulable) == (3, 2)


def test_power_is_hidden_when_the_world_does_not_know_it():
    sim = Simulation.of_family("hardware-unknown", seed=2, nodes=4)
    sim.next_decision()
    assert np.isnan(sim.candidate_state()[0].power_idle_watts).all()
    sim = Simulation.of_family("hardware", seed=2, nodes=4)
    sim.next_decision()
    assert np.isfinite(sim.candidate_state()[0].power_max_watts).all()


def test_training_worlds_include_one_node_pool_and_partly_known_power_and_evaluation_worlds_never():
    def draws(training):
        worlds = [family("poisson").world(np.random.default_rng(s), nodes=8, training=training) for s in range(400)]
        pools = np.mean([len({n.hardware.name for n in w.nodes}) == 1 for w in worlds])
        partial = np.mean([any(w.power_hidden) for w in worlds])
        return pools, partial

    pools, partial = draws(True)
    assert 0.25 <= pools <= 0.4 and 0.18 <= partial <= 0.32  # POOL_SHARE (+ chance), PARTIAL_POWER_SHARE
    pools, partial = draws(False)
    assert pools < 0.01 and partial == 0  # 3 sizes, 8 nodes: (1/3)^7 by chance
    # hidden power: unknown to the scorer, still drawn by the node (the energy objective)
    world = next(w for s in range(100) if any((w := family("hardware").world(
        np.random.default_rng(s), nodes=6, training=True)).power_hidden) and not all(w.power_hidden))
    sim = Simulation(world, seed=0)
    sim.next_decision()
    state, _ = sim.candidate_state()
    hidden = np.asarray(world.power_hidden)[sim.candidates]
    assert np.isnan(state.power_max_watts[hidden]).all() and np.isfinite(state.power_max_watts[~hidden]).all()
    assert np.isfinite(sim.cluster.power_max).all()


def test_node_down_evicts_its_pods_for_recreation_and_never_removes_the_last_node():
    sim = Simulation(_world([NodeSpec(SMALL, 5.0), NodeSpec(SMALL, 6.0)], arrivals="test1"), seed=1)
    sim.next_decision()
    pod = sim.pod
    node = sim.place(0)
    evicted = sim.cluster.node_down(node)
    assert [p.id for p in evicted] == [pod.id]
    assert sim.cluster.pods[node] == 0 and not sim.cluster.present[node]
    assert sim.cluster.node_down(1 - node) == [] and sim.cluster.present[1 - node]


def test_cluster_needs_a_node():
    with pytest.raises(ValueError, match="at least one node"):
        Cluster(_world([]), np.random.default_rng(0))


def test_the_recent_peak_is_the_last_cycles_load_once_the_cluster_emptied():
    """test1 empties the cluster every 115 s: at the next cycle's first pod the nodes are empty, and
    the recent peak is the 30 pods of the cycle before; 600 s later that cycle is forgotten."""
    from rlscore.core.features import RECENT_PEAK_WINDOW_S

    sim = Simulation(_world([NodeSpec(LARGE, 5.0)], arrivals="test1"), seed=0)
    peaks = []
    for _ in range(31):
        sim.next_decision()
        state, _ = sim.candidate_state()
        peaks.append(state.recent_peak_cpu_requested)
        sim.place(0)
    assert peaks[:30] == [250.0 * k for k in range(30)]  # while filling, the peak is what is bound
    assert state.cpu_requested[0] == 0.0 and state.cluster_cpu_requested == 0.0 and peaks[30] == 30 * 250.0
    sim.cluster.cpu_requested[:] = 0.0  # the history alone: after the window nothing is left of it
    sim.time += RECENT_PEAK_WINDOW_S + 1.0
    assert sim.recent_peak_cpu_requested() == 0.0


def test_a_pod_tells_the_scorer_what_its_workload_uses_not_what_it_will():
    """The scorer sees its class's mean usage per request (what the workload's history shows), never
    the pod's own draw."""
    from agent.evaluate.compare import EVAL_SEED_BASE

    sim = Simulation.of_family("mixed", EVAL_SEED_BASE, None)
    means = {c.name: 0.5 * (c.usage[0] + c.usage[1]) for c in sim.world.pod_classes}
    told = []
    for _ in range(50):
        sim.next_decision()
        _, pod = sim.candidate_state("LB")
        assert pod.cpu_usage_ratio == means[sim.pod.kind]
        told.append(pod.cpu_usage_ratio != sim.pod.usage)
        sim.place(0)
    assert all(told)
