"""The shared feature function on hand-built states: every column means what NODE_FEATURES says."""

import numpy as np
import pytest

from rlscore.core.features import (FEATURE_CLIP, FEATURE_SPEC_VERSION, NODE_FEATURES, NUM_NODE_FEATURES,
                            NUM_POD_FEATURES, POD_FEATURES, node_features, reference_node_features)
from rlscore.core.state import NODE_ARRAYS, NodeState, PodRequest
from tests.conftest import make_nodes

GIB = 2**30


def col(features, name):
    return features[:, NODE_FEATURES.index(name)]


def test_spec_version_5_and_shapes():
    assert FEATURE_SPEC_VERSION == 5
    f, p = node_features(make_nodes([4000, 8000]), PodRequest(500, GIB))
    assert f.shape == (2, NUM_NODE_FEATURES) and p.shape == (NUM_POD_FEATURES,)
    assert f.dtype == np.float32 and (f >= 0).all() and (f <= FEATURE_CLIP).all()
    assert len(set(NODE_FEATURES)) == NUM_NODE_FEATURES and len(POD_FEATURES) == NUM_POD_FEATURES


def test_packing_columns():
    nodes = make_nodes([4000, 16000], cpu_req=[1000, 4000])
    f, _ = node_features(nodes, PodRequest(1000, 1000 * 2**20))
    assert col(f, "cpu_share").tolist() == pytest.approx([0.25, 0.25])
    assert col(f, "cpu_share_after").tolist() == pytest.approx([0.5, 0.3125])
    # free after placement, as a share of the largest node: 2000m and 11000m of 16000m
    assert col(f, "free_cpu_after").tolist() == pytest.approx([2000 / 16000, 11000 / 16000])
    assert col(f, "relative_cpu_capacity").tolist() == pytest.approx([0.25, 1.0])
    # Tetris alignment: pod share x free share, cpu + memory (memory mirrors cpu in make_nodes)
    assert col(f, "alignment")[0] == pytest.approx(2 * 0.25 * 0.75)


def test_utilization_known_or_standing_in():
    nodes = make_nodes([4000, 4000], cpu_req=[2000, 1000])
    nodes.cpu_utilization = np.array([0.9, np.nan])
    f, _ = node_features(nodes, PodRequest(100, 0))
    assert col(f, "cpu_utilization").tolist() == pytest.approx([0.9, 0.25])
    assert col(f, "utilization_known").tolist() == [1.0, 0.0]


def test_latency_columns_and_pod_context():
    nodes = make_nodes([4000] * 4, latency=[5.0, 25.0, 40.0, np.nan])
    f, p = node_features(nodes, PodRequest(100, 0, 20.0, 30.0))
    assert col(f, "meets_soft").tolist() == [1, 0, 0, 0] and col(f, "meets_hard").tolist() == [1, 1, 0, 0]
    assert col(f, "latency_over_hard")[:3].tolist() == pytest.approx([5 / 30, 25 / 30, 40 / 30])
    assert col(f, "latency_rank").tolist() == pytest.approx([0.0, 0.25, 0.5, 1.0])  # unknown ranks last
    assert p.tolist() == pytest.approx([1.0, 0.5, 0.25])  # has limits, share meeting hard, soft
    _, p = node_features(nodes, PodRequest(100, 0))
    assert p.tolist() == [0.0, 1.0, 1.0]


def test_power_columns_and_unknown_power_is_a_known_state():
    nodes = make_nodes([16000, 16000, 4000])
    nodes.power_idle_watts = np.array([200.0, 60.0, np.nan])
    nodes.power_max_watts = np.array([400.0, 220.0, 130.0])  # the third has only half a model
    f, _ = node_features(nodes, PodRequest(100, 0))
    assert col(f, "power_known").tolist() == [1, 1, 0]
    assert col(f, "idle_power_relative").tolist() == pytest.approx([1.0, 0.3, 0.0])
    assert col(f, "efficiency").tolist() == pytest.approx([220 / 400, 1.0, 0.0])
    assert col(f, "dynamic_efficiency").tolist() == pytest.approx([160 / 200, 1.0, 0.0])


def test_extra_metrics_relative_and_known():
    nodes = make_nodes([4000, 4000])
    nodes.network_receive_bytes_per_s = np.array([1e6, 4e6])
    nodes.tcp_established = np.array([10.0, 40.0])
    nodes.disk_utilization = np.array([0.5, np.nan])
    f, _ = node_features(nodes, PodRequest(100, 0))
    assert col(f, "network_receive_relative").tolist() == pytest.approx([0.25, 1.0])
    assert col(f, "tcp_established_relative").tolist() == pytest.approx([0.25, 1.0])
    assert col(f, "disk_utilization").tolist() == pytest.approx([0.5, 0.0])
    assert col(f, "extra_metrics_known").tolist() == [1, 0]


def test_recent_peak_to_come_is_the_part_of_the_recent_peak_not_bound_now():
    nodes = make_nodes([4000, 8000, 16000], cpu_req=[0, 0, 0])
    pod = PodRequest(250, GIB)
    # no history: the pod alone
    assert col(node_features(nodes, pod)[0], "recent_peak_to_come").tolist() == pytest.approx([250 / 4000, 250 / 8000,
                                                                                              250 / 16000])
    # an empty cluster that carried 7.5 cores minutes ago: they fit the big node only
    nodes.recent_peak_cpu_requested = 7500.0
    assert col(node_features(nodes, pod)[0], "recent_peak_to_come").tolist() == pytest.approx([7500 / 4000, 7500 / 8000,
                                                                                              7500 / 16000])
    # 4 of them are back on a node that is full now, so no candidate: 3.5 cores to come fit the middle one
    nodes.cluster_cpu_requested = 4000.0
    got = col(node_features(nodes, pod)[0], "recent_peak_to_come")
    assert got.tolist() == pytest.approx([3500 / 4000, 3500 / 8000, 3500 / 16000])
    assert got.tolist() == col(reference_node_features(nodes, pod)[0], "recent_peak_to_come").tolist()
    # the cluster's own sum unknown: the candidates' stands in; a peak below it counts for nothing
    busy = make_nodes([4000, 16000], cpu_req=[3000, 8000])
    busy.recent_peak_cpu_requested = 6000.0
    assert col(node_features(busy, pod)[0], "recent_peak_to_come").tolist() == pytest.approx([250 / 4000, 250 / 16000])


@pytest.mark.parametrize("field", ["cluster_cpu_requested", "recent_peak_cpu_requested"])
@pytest.mark.parametrize("value", [-1.0, np.inf, "6000", None])
def test_cluster_sums_that_are_not_a_load_are_refused(field, value):
    with pytest.raises(ValueError, match=f"{field} must be a number of millicores"):
        NodeState(["a"], cpu_capacity=[1.0], memory_capacity=[1.0], max_pods=[1.0], cpu_requested=[0.0],
                  memory_requested=[0.0], pods=[0.0], **{field: value})


def test_degenerate_inputs_stay_in_range():
    nodes = NodeState(["a", "b"], cpu_capacity=np.array([0.0, 4000.0]), memory_capacity=np.array([GIB, 0.0]),
                      max_pods=np.array([0.0, 110.0]), cpu_requested=np.array([5000.0, 0.0]),
                      memory_requested=np.zeros(2), pods=np.zeros(2))
    f, _ = node_features(nodes, PodRequest(1e9, 1e15))
    assert np.isfinite(f).all() and (f >= 0).all() and (f <= FEATURE_CLIP).all()
    f, p = node_features(make_nodes([]), PodRequest(1, 1))
    assert f.shape == (0, NUM_NODE_FEATURES) and p.shape == (NUM_POD_FEATURES,)


def _awkward_state(n: int, rng: np.random.Generator) -> NodeState:
    """Plausible values mixed with what broken metrics and objects produce: NaN, inf, zero, negative."""
    columns = {}
    for name in NODE_ARRAYS:
        if rng.random() < 0.3:
            values = rng.choice([0.0, 5e-324, 1e-300, 1.0, 250.0, 4000.0, 8e9, 1e308, np.nan, np.inf, -np.inf, -1.0], n)
        else:
            values = rng.uniform(0, 100, n) * rng.choice([1.0, 1e3, 1e9])
        values[rng.random(n) < rng.random() * 0.3] = np.nan
        columns[name] = values
    now, peak = (float(rng.choice([np.nan, 0.0, 1.0, 4000.0, 1e6, 1e308])) for _ in range(2))
    return NodeState(names=[f"n{i}" for i in range(n)], cluster_cpu_requested=now, recent_peak_cpu_requested=peak,
                     **columns)


LIMITS = [(None, None), (20.0, 30.0), (None, 30.0), (25.0, None), (30.0, 30.0)]


@pytest.mark.parametrize("n", [1, 2, 3, 7, 64, 100, 1000, 5000])
def test_the_compiled_features_equal_the_reference_bit_for_bit(n):
    rng = np.random.default_rng(n)
    for trial in range(60 if n <= 100 else 6):
        nodes = _awkward_state(n, rng)
        pod = PodRequest(float(rng.choice([0.0, 250.0, 1e4])), float(rng.choice([0.0, GIB])), *LIMITS[trial % 5],
                         cpu_usage_ratio=[None, 0.3, 3.0][trial % 3])
        compiled, compiled_pod = node_features(nodes, pod)
        reference, reference_pod = reference_node_features(nodes, pod)
        assert compiled.dtype == reference.dtype == np.float32 and compiled.shape == reference.shape
        # as bits: -0.0 and 0.0 differ there, and NaN would not equal itself
        assert np.array_equal(compiled.view(np.uint32), reference.view(np.uint32)), \
            np.argwhere(compiled.view(np.uint32) != reference.view(np.uint32))[:5]
        assert np.array_equal(compiled_pod.view(np.uint32), reference_pod.view(np.uint32))


def test_the_headroom_informed_column_reads_what_the_pods_workload_uses():
    # the state of test_headroom_informed_keeps_room_for_what_the_pods_workload_is_known_to_use: the rule's
    # best node is b without a ratio, c for an idle workload and a for a hog; the column follows it
    nodes = make_nodes([4000] * 3, cpu_req=[2000, 1000, 0])
    nodes.cpu_utilization = np.array([0.1, 0.2, 0.6])
    for ratio, best in ((None, 1), (0.3, 2), (3.5, 0)):
        f, _ = node_features(nodes, PodRequest(500, 64 * 2**20, cpu_usage_ratio=ratio))
        informed = col(f, "rule:headroom-informed")
        assert informed[best] == 1.0 and (np.delete(informed, best) < 1.0).all(), (ratio, informed)
        if ratio is None:
            assert informed.tolist() == col(f, "rule:headroom-balance").tolist()


def test_the_compiled_features_take_any_numeric_arrays():
    nodes = make_nodes([4000, 8000], cpu_req=[1000, 0])
    strided = NodeState.trusted(nodes.names, **{name: np.repeat(getattr(nodes, name), 2)[::2]
                                                for name in NODE_ARRAYS})  # views, not contiguous
    pod = PodRequest(500, GIB, 20.0, 30.0)
    assert np.array_equal(node_features(strided, pod)[0], reference_node_features(nodes, pod)[0])


def test_input_groups_name_columns_of_the_network_input():
    from rlscore.core.features import INPUT_GROUPS, NODE_FEATURES, POD_FEATURES, input_columns

    inputs = NODE_FEATURES + POD_FEATURES
    for group, members in INPUT_GROUPS.items():
        assert [inputs[c] for c in input_columns((group,))] == sorted(members, key=inputs.index)
    # pod features come after the node features; a name given twice is one column
    assert input_columns(("has_latency_limits", "cpu_share", "cpu_share")) == [0, len(NODE_FEATURES)]
    with pytest.raises(ValueError, match="unknown input 'speed'"):
        input_columns(("latency", "speed"))
