"""The server's per-node table grows while writers hold references into it."""

from __future__ import annotations

import numpy as np
import pytest

from suggestion_server.node_state.node_table import COLUMNS, NodeTable


def test_metrics_and_usage_for_more_nodes_than_the_table_holds():
    table = NodeTable(capacity=2)
    names = [f"n{i}" for i in range(600)]
    table.replace_usage({n: (float(i), 2.0 * i, 1.0) for i, n in enumerate(names)})
    table.replace_metrics({n: {"cpu_utilization": i / 1000, "latency_ms": 5.0} for i, n in enumerate(names[::-1])})
    table.replace_metrics({f"m{i}": {"cpu_utilization": 0.5} for i in range(300)})  # new rows during a refresh
    with table.reading() as data:  # as a request reads it: a row per column, a column per node
        rows = table.rows(names + ["m299", "never-reported"])
        got = {key: data[i, rows] for i, key in enumerate(COLUMNS)}
    assert np.array_equal(got["cpu_requested"][:600], np.arange(600.0))
    assert np.array_equal(got["memory_requested"][:600], 2.0 * np.arange(600))
    assert np.isnan(got["cpu_utilization"][:600]).all()  # the last refresh did not mention them
    assert got["cpu_utilization"][600] == 0.5
    assert np.isnan(got["cpu_utilization"][601]) and np.isnan(got["cpu_capacity"][601])
    assert len(table) == 900


def test_the_recent_peak_of_requests_is_unknown_until_the_watch_reports_pods_then_remembers_the_top():
    table = NodeTable()
    assert np.isnan(table.cluster_cpu_requested()).all()  # no watch: the features fall back to the candidates
    table.replace_usage({"a": (1000.0, 0.0, 1.0), "b": (500.0, 0.0, 1.0)})
    assert table.cluster_cpu_requested() == (1500.0, 1500.0)
    table.add_usage("a", 2000.0, 0.0, 1.0)
    table.add_usage("a", -3000.0, 0.0, -2.0)
    table.add_usage("b", -500.0, 0.0, -1.0)  # the cluster emptied: its recent past did not
    assert table.cluster_cpu_requested() == (0.0, 3500.0)


def test_the_recent_peak_forgets_what_left_the_window():
    from rlscore.core.recent_peak import RecentPeak

    peak = RecentPeak(window_s=100.0)
    for when, total in ((0.0, 5.0), (10.0, 9.0), (20.0, 4.0), (50.0, 7.0), (60.0, 1.0)):
        peak.record(when, total)
    assert peak.peak(60.0, 1.0) == 9.0
    assert peak.peak(115.0, 1.0) == 7.0  # 9 was recorded at 10 s, 105 s ago
    assert peak.peak(155.0, 2.0) == 2.0  # all of it left: what is bound now
    with pytest.raises(ValueError, match="window"):
        RecentPeak(window_s=0.0)


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.mark.parametrize("onset, linger", [(30.0, 15.0), (5.0, 10.0)])
def test_requests_count_as_showing_from_their_onset_until_their_linger_ends(onset, linger):
    clock = Clock()
    table = NodeTable(usage_onset_s=onset, usage_linger_s=linger, clock=clock)
    table.replace_usage({"a": (1000.0, 0.0, 1.0)})  # a relist: those pods' use shows already

    def showing() -> tuple[float, float]:
        table.replace_metrics({"a": {"cpu_utilization": 0.1}})
        names, col = table.snapshot(("requested_at", "requested_showing"))
        return float(col["requested_at"][0]), float(col["requested_showing"][0])

    start = clock.t
    table.add_usage("a", 500.0, 0.0, 1, bound_at=start)  # bound now
    assert showing() == (1500.0, 1000.0)
    clock.t = start + onset - 0.1
    assert showing() == (1500.0, 1000.0)
    clock.t = start + onset
    assert showing() == (1500.0, 1500.0)  # its use shows from here
    table.add_usage("a", -500.0, 0.0, -1, bound_at=start)  # gone: its use lingers
    left = clock.t
    assert showing() == (1000.0, 1500.0)
    clock.t = left + linger - 0.1
    assert showing() == (1000.0, 1500.0)
    clock.t = left + linger + 0.1
    assert showing() == (1000.0, 1000.0)
    # a pod gone before its use showed never counts; one from a relist lingers on departure
    quick = clock.t
    table.add_usage("a", 200.0, 0.0, 1, bound_at=quick)
    clock.t = quick + 1.0
    table.add_usage("a", -200.0, 0.0, -1, bound_at=quick)
    table.add_usage("a", -1000.0, 0.0, -1, bound_at=float("-inf"))
    assert showing() == (0.0, 1000.0)
    for later in (quick + onset + 0.5, quick + max(onset, linger) + 1.5):
        clock.t = later
        assert showing()[1] == (1000.0 if later < quick + 1.0 + linger else 0.0)
    # a change without a bind time (a resize) shows at once
    table.add_usage("a", 300.0, 0.0, 0)
    assert showing() == (300.0, 300.0)


def test_usage_lags_must_not_be_negative():
    with pytest.raises(ValueError, match="onset and linger"):
        NodeTable(usage_onset_s=-1.0)


def test_the_bind_log_keeps_only_what_the_lags_cover_even_without_metrics():
    clock = Clock()
    table = NodeTable(usage_onset_s=30.0, usage_linger_s=15.0, clock=clock)
    for i in range(1000):  # a bind a second for 1000 s, and no metrics refresh
        clock.t += 1.0
        table.add_usage("a", 100.0, 0.0, 1, bound_at=clock.t)
    assert len(table._binds) <= 31
    table.replace_metrics({"a": {"cpu_utilization": 0.5}})
    _, col = table.snapshot(("cpu_requested", "requested_showing"))
    assert col["cpu_requested"][0] == 100_000.0 and col["requested_showing"][0] == 100_000.0 - 30 * 100.0
