import numpy as np
import pytest

from rlscore.core.rules import (balanced_allocation, default_scheduler, latency_fit, latency_fit_running,
                              latency_greedy, latency_pack, least_allocated, most_allocated)
from rlscore.core.scoring import choose, reference_node_scores, to_node_scores
from rlscore.core.state import PodRequest
from tests.conftest import make_nodes

RNG = np.random.default_rng(0)
MIB = 2**20


def test_kube_scheduler_formulas_on_hand_computed_values():
    # cpu 4000m with 1000m requested; memory 8Gi with 2Gi requested; pod 500m / 1Gi
    nodes = make_nodes([4000], cpu_req=[1000], mem_cap=[8192 * MIB], mem_req=[2048 * MIB])
    pod = PodRequest(500, 1024 * MIB)
    # LeastAllocated: cpu (4000-1500)*100/4000 = 62, mem (8192-3072)*100/8192 = 62 -> 62
    assert least_allocated(nodes, pod, RNG)[0] == 62
    # MostAllocated: cpu 1500*100/4000 = 37, mem 3072*100/8192 = 37 -> 37
    assert most_allocated(nodes, pod, RNG)[0] == 37
    # Balanced: fractions 0.375 and 0.375 -> std 0 -> 100
    assert balanced_allocation(nodes, pod, RNG)[0] == 100
    unbalanced = make_nodes([4000], cpu_req=[3000], mem_cap=[8192 * MIB], mem_req=[0])
    # fractions 0.875 / 0.125 -> std 0.375 -> int(62.5) = 62
    assert balanced_allocation(unbalanced, pod, RNG)[0] == 62
    assert default_scheduler(nodes, pod, RNG)[0] == 162


def test_pod_without_requests_is_scored_with_the_non_zero_defaults():
    nodes = make_nodes([1000], mem_cap=[1000 * MIB])
    # 100m of 1000m -> 90; 200Mi of 1000Mi -> 80; mean 85
    assert least_allocated(nodes, PodRequest(0, 0), RNG)[0] == 85


def test_latency_scorers():
    nodes = make_nodes([8000] * 3, cpu_req=[4000, 0, 1000], latency=[25.0, 8.0, np.nan])
    pod = PodRequest(250, 64 * MIB, 20.0, 30.0)
    assert int(np.argmax(latency_greedy(nodes, pod, RNG))) == 1
    assert latency_greedy(nodes, pod, RNG)[2] < latency_greedy(nodes, pod, RNG)[0]  # unknown last
    packed = make_nodes([8000] * 3, cpu_req=[4000, 0, 1000], latency=[12.0, 8.0, 50.0])
    assert int(np.argmax(latency_pack(packed, pod, RNG))) == 0  # soft tier, fullest


# nodes: latency (ms) and pods already on each; the pod's limits (soft, hard) or none
@pytest.mark.parametrize("latency, pods, limits, fit, fit_running", [
    # soft tier {4, 9, 15}: latency-fit the farthest (15, empty), latency-fit-running the farthest running (9)
    ([4.0, 9.0, 15.0, 60.0], [1, 2, 0, 3], (20.0, 30.0), 2, 1),
    # no node of the soft tier runs: both the farthest in it
    ([4.0, 9.0, 15.0, 60.0], [0, 0, 0, 3], (20.0, 30.0), 2, 2),
    # a running node outside the best tier (60 ms) never beats an empty one inside it
    ([4.0, 25.0, 60.0], [0, 0, 5], (20.0, 30.0), 0, 0),
    # only the hard tier (25 ms) and beyond: the running node there first
    ([25.0, 28.0, 60.0], [3, 0, 5], (20.0, 30.0), 1, 0),
    # no limits: every known node in the soft tier; unknown latency last even when running
    ([4.0, 60.0, np.nan], [1, 0, 4], None, 1, 0),
    # within LATENCY_EDGE_MS (1 ms) of the soft limit: latency-fit takes it, latency-fit-running the next
    ([4.0, 9.0, 19.5], [0, 0, 0], (20.0, 30.0), 2, 1),
    # an empty node of the tier beats a running one at its edge
    ([4.0, 19.5], [0, 3], (20.0, 30.0), 1, 0),
    # every node of the tier at its edge: the nearest of them
    ([19.2, 19.6, 60.0], [0, 0, 0], (20.0, 30.0), 1, 0),
    # the hard limit's edge counts for the hard tier
    ([25.0, 29.5, 60.0], [0, 0, 0], (20.0, 30.0), 1, 0),
    # a node at the edge of the best tier still beats a running node of a worse one
    ([19.5, 40.0], [0, 5], (20.0, 30.0), 0, 0),
])
def test_latency_fit_running_packs_running_nodes_first_inside_latency_fits_best_tier_away_from_its_edge(
        latency, pods, limits, fit, fit_running):
    nodes = make_nodes([8000] * len(latency), cpu_req=[500 * p for p in pods], pods=pods, latency=latency)
    pod = PodRequest(250, 64 * MIB, *(limits or ()))
    assert int(np.argmax(latency_fit(nodes, pod, RNG))) == fit
    assert int(np.argmax(latency_fit_running(nodes, pod, RNG))) == fit_running


def test_choose_breaks_ties_at_random_and_to_node_scores_maps_to_0_100():
    rng = np.random.default_rng(1)
    picks = {choose(np.array([1.0, 3.0, 3.0, 0.0]), rng) for _ in range(50)}
    assert picks == {1, 2}
    assert to_node_scores(np.array([-2.0, 0.0, 2.0])).tolist() == [0, 50, 100]
    assert to_node_scores(np.array([5.0, 5.0])).tolist() == [100, 100]
    assert to_node_scores(np.array([np.nan, 1.0, -np.inf, 3.0])).tolist() == [0, 0, 0, 100]
    assert to_node_scores(np.array([np.nan])).tolist() == [0]
    assert to_node_scores(np.array([0.0, 0.5, 1.5, 2.5, 200.0])).tolist() == [0, 0, 1, 1, 100]  # half to even
    # only the best and its ties score 100, so the scheduler picks among the nodes `choose` picks among
    assert to_node_scores(np.array([0.0, 99.9, 100.0])).tolist() == [0, 99, 100]
    assert to_node_scores(np.array([0.0, 100.0 - 1e-10, 100.0])).tolist() == [0, 100, 100]
    near = np.array([-50.0, 3.0, 3.0 + 1e-6, 2.9999])
    assert {int(i) for i in np.flatnonzero(to_node_scores(near) == 100)} == {choose(near, rng) for _ in range(50)}


def test_the_compiled_scores_equal_the_numpy_reference():
    rng = np.random.default_rng(3)
    for n in (1, 2, 5, 100, 5000):
        for _ in range(50):
            values = rng.normal(0, 10 ** rng.uniform(-14, 6), n)
            if rng.random() < 0.5:  # ties, halves, near-ties of the best, non-finite values
                top = np.nanmax(values)
                values[rng.random(n) < 0.3] = rng.choice([np.nan, np.inf, -np.inf, values[0], values[0] + 0.5,
                                                          top - 1e-10, top - 1e-8])
            assert to_node_scores(values).tolist() == reference_node_scores(values).tolist(), values


def test_pod_request_validation():
    with pytest.raises(ValueError, match="cpu_millicores"):
        PodRequest(-1, 0)
    with pytest.raises(ValueError, match="memory_bytes"):
        PodRequest(1, float("nan"))
    with pytest.raises(ValueError, match="must not exceed"):
        PodRequest(1, 1, 40.0, 30.0)


def _cv(shares):
    shares = np.asarray(shares, float)
    return shares.std() / shares.mean()


def test_one_step_lb_is_the_change_in_request_imbalance_and_avoids_hot_nodes():
    from rlscore.core.rules import one_step_lb

    # shares 0.5 / 0.25 / 0; a 1000m pod adds 0.25 to the node it lands on
    nodes = make_nodes([4000] * 3, cpu_req=[2000, 1000, 0])
    pod = PodRequest(1000, 64 * MIB)
    before = _cv([0.5, 0.25, 0.0])
    expected = [-(_cv([0.75, 0.25, 0.0]) - before), -(_cv([0.5, 0.5, 0.0]) - before), -(_cv([0.5, 0.25, 0.25]) - before)]
    np.testing.assert_allclose(one_step_lb(nodes, pod, RNG), expected, atol=1e-12)
    assert int(np.argmax(one_step_lb(nodes, pod, RNG))) == 2
    # the empty-request node measured at 80% cpu would turn hot (> 85%): 10 / 3 nodes on top
    nodes.cpu_utilization = np.array([0.3, 0.2, 0.8])
    np.testing.assert_allclose(one_step_lb(nodes, pod, RNG)[2], expected[2] - 10.0 / 3, atol=1e-12)
    assert int(np.argmax(one_step_lb(nodes, pod, RNG))) == 1
    # equal shares, different sizes: the big node's share grows least
    mixed = make_nodes([4000, 16000], cpu_req=[1000, 4000])
    assert int(np.argmax(one_step_lb(mixed, PodRequest(2000, 64 * MIB), RNG))) == 1


def test_headroom_balance_balances_requests_only_where_measured_load_leaves_room_for_a_burst():
    from rlscore.core.rules import (HEADROOM_BURST, HEADROOM_LIMIT, HEADROOM_OFFSET, headroom_balance, one_step_lb,
                                  target_load_packing)

    # node 2 has the fewest requests, but its pods use far more than they asked for: 60% measured
    nodes = make_nodes([4000] * 3, cpu_req=[2000, 1000, 0])
    nodes.cpu_utilization = np.array([0.3, 0.2, 0.6])
    pod = PodRequest(500, 64 * MIB)  # 3 x 500m = 37.5% of a node on top of the measured load
    assert 0.2 + HEADROOM_BURST * 0.125 < HEADROOM_LIMIT < 0.6 + HEADROOM_BURST * 0.125
    values = headroom_balance(nodes, pod, RNG)
    assert int(np.argmax(one_step_lb(nodes, pod, RNG))) == 2  # the one-step rule would burst node 2 hot
    assert int(np.argmax(values)) == 1  # the least requested node with room
    # the nodes with room keep the one-step rule's order, those without rank below every one of them
    lb = one_step_lb(nodes, pod, RNG)
    np.testing.assert_allclose(values[:2] - values[:2].min(), lb[:2] - lb[:2].min(), atol=1e-9)
    assert values[2] < values[:2].min()
    # requests bound since the last measurement count at 1.5x: 1000m more on node 1 takes its room away
    nodes.cpu_requested_since_metrics = np.array([0.0, 1000.0, 0.0])
    assert int(np.argmax(headroom_balance(nodes, pod, RNG))) == 0
    # no node has room: TargetLoadPacking's order (beyond its 40% target it spreads on measured load)
    nodes.cpu_utilization = np.array([0.7, 0.65, 0.9])
    nodes.cpu_requested_since_metrics = np.zeros(3)
    packing = target_load_packing(nodes, pod, RNG)
    np.testing.assert_allclose(headroom_balance(nodes, pod, RNG) - packing, -HEADROOM_OFFSET)
    assert int(np.argmax(headroom_balance(nodes, pod, RNG))) == 1
    # a node without capacity has no room; without a measurement the request share stands in
    broken = make_nodes([0, 4000, 4000], cpu_req=[0, 1000, 2000])
    values = headroom_balance(broken, pod, RNG)
    assert values[0] < -900 and values[1] > 900 and values[2] < -900  # 0.25 + 0.375 < 0.8 < 0.5 + 0.375


@pytest.mark.parametrize("ratio, pick", [
    (None, 1),  # unknown: headroom-balance's 3x burst leaves only node 1 room
    (0.3, 2),  # an idle batch pod (0.45x with the margin) fits on the busy node with the fewest requests
    (3.5, 0),  # a known hog (5.25x) has room only on the least loaded node, not on the least requested
])
def test_headroom_informed_keeps_room_for_what_the_pods_workload_is_known_to_use(ratio, pick):
    from rlscore.core.rules import headroom_balance, headroom_informed

    nodes = make_nodes([4000] * 3, cpu_req=[2000, 1000, 0])
    nodes.cpu_utilization = np.array([0.1, 0.2, 0.6])
    pod = PodRequest(500, 64 * MIB, cpu_usage_ratio=ratio)
    assert int(np.argmax(headroom_informed(nodes, pod, RNG))) == pick
    if ratio is None:
        np.testing.assert_array_equal(headroom_informed(nodes, pod, RNG), headroom_balance(nodes, pod, RNG))


def test_the_rules_the_feature_columns_compute_together_equal_each_rule_alone():
    from rlscore.core.features import RULE_FEATURES
    from rlscore.core.rules import RULES, rule_values

    rng = np.random.default_rng(5)
    for ratio in (None, 0.3, 3.0):
        nodes = make_nodes(rng.choice([2000, 4000, 8000], 9).tolist(), cpu_req=rng.uniform(0, 3000, 9).tolist(),
                           latency=rng.uniform(2, 80, 9).tolist())
        nodes.cpu_utilization = rng.uniform(0, 0.9, 9)
        pod = PodRequest(700, 256 * MIB, 20.0, 30.0, cpu_usage_ratio=ratio)
        together = rule_values(RULE_FEATURES, nodes, pod)
        for name in RULE_FEATURES:
            np.testing.assert_array_equal(together[name], RULES[name](nodes, pod, RNG), err_msg=f"{name}, {ratio}")


@pytest.mark.parametrize("ratio", [0.0, -1.0, float("nan"), float("inf")])
def test_a_pod_refuses_a_usage_ratio_that_is_not_a_positive_number(ratio):
    with pytest.raises(ValueError, match="cpu_usage_ratio"):
        PodRequest(500, 64 * MIB, cpu_usage_ratio=ratio)


def test_one_step_ee_charges_an_empty_nodes_idle_draw_and_one_step_el_violations_first():
    from rlscore.core.rules import one_step_ee, one_step_el

    nodes = make_nodes([8000] * 3, cpu_req=[0, 2000, 6000], latency=[5.0, 25.0, 60.0])
    nodes.power_idle_watts = np.array([50.0, 100.0, 100.0])
    nodes.power_max_watts = np.array([150.0, 300.0, 300.0])
    pod = PodRequest(1000, 64 * MIB, 20.0, 30.0)
    # (idle if empty + (max - idle) x 1000/8000) / mean max (250 W)
    expected = -np.array([50.0 + 100.0 / 8, 200.0 / 8, 200.0 / 8]) / 250.0
    np.testing.assert_allclose(one_step_ee(nodes, pod, RNG), expected)
    # EL: node 0 meets the soft limit, node 1 only the hard one (3), node 2 neither (10 + 3); then 0.1 x energy
    np.testing.assert_allclose(one_step_el(nodes, pod, RNG), [0.0, -3.0, -13.0] + 0.1 * expected)
    assert int(np.argmax(one_step_el(nodes, pod, RNG))) == 0


def test_the_coefficient_of_variation_of_shares_whose_mean_underflows_is_zero_not_an_error():
    """Found by the API fuzzer: a node with 2e-16 millicores requested of 3e307 has a share of 5e-324, and
    the mean of it and a 0 underflows to 0."""
    from rlscore.core.objectives import cv
    assert cv(np.array([0.0, 5e-324])) == 0.0
    assert cv(np.array([1.0, 3.0])) == pytest.approx(0.5)


@pytest.mark.filterwarnings("error")
def test_a_capacity_too_small_to_count_in_cores_ranks_as_unknown_power_without_a_warning():
    """Found by the API fuzzer: 5e-324 millicores are 0 cores as a float, and watts over 0 cores is no
    efficiency; efficient-first ranks such a node as one of unknown power, last."""
    from rlscore.core.rules import efficiency_rank

    nodes = make_nodes([5e-324, 4000.0])
    nodes.power_idle_watts = np.array([50.0, 50.0])
    nodes.power_max_watts = np.array([150.0, 150.0])
    np.testing.assert_array_equal(efficiency_rank(nodes), [-1e6, -37.5])


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("requested, least, most", [(0.0, 100.0, 0.0), (2e307, 33.0, 66.0)])
def test_a_capacity_near_the_floats_limit_scores_its_share_not_infinity(requested, least, most):
    """Found by the API fuzzer: 3e307 millicores x 100 overflows; the share is still a score of 0-100."""
    from rlscore.core.rules import _per_resource

    capacity = np.array([3e307, 4000.0])
    np.testing.assert_array_equal(_per_resource(np.array([requested, 1000.0]), capacity, False), [least, 75.0])
    np.testing.assert_array_equal(_per_resource(np.array([requested, 1000.0]), capacity, True), [most, 25.0])
