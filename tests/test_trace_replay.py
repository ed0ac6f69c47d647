"""Replaying a recorded history: the draws of its pods' times stay within what the record can tell,
and where an arrival and a departure are closer than that, the replays spread over both orders."""

from __future__ import annotations

import numpy as np
import pytest

from agent.live.calibrate import build_profile
from agent.live.history import History, NodeRecord, PodRecord
from agent.live.trace_replay import jittered, replay_history, replay_spread
from rlscore.core.scoring import HeuristicScorer
from agent.sim.world import GIB


def _pod(i: int, created: float, last_seen: float, alive: bool = False, cpu: float = 1000.0) -> PodRecord:
    return PodRecord("default", f"web-{i}", "web", created, last_seen, alive, cpu, 0.5 * GIB, 0.5,
                     step_s=1.0, scrape_s=2.0)


def _nodes() -> list[NodeRecord]:
    return [NodeRecord(f"n{i}", 1000.0, 4 * GIB, 110, "small", 50.0, 150.0, "labels", 10.0, 0.0, 0.0)
            for i in range(2)]


def test_a_draw_moves_each_time_within_its_resolution_only():
    """Creation within its whole second; an end within its scrape interval; a pod from before the
    window and a pod still alive keep theirs."""
    pods = [_pod(0, -5.0, 30.0), _pod(1, 10.5, 40.0), _pod(2, 20.5, 59.0, alive=True)]
    history = History(0.0, 60.0, 1.0, _nodes(), pods)
    draws = [jittered(history, np.random.default_rng(k)) for k in range(50)]
    created = np.array([[p.created for p in d.pods] for d in draws])
    ended = np.array([[p.ended for p in d.pods] for d in draws])
    assert np.all(created[:, 0] == -5.0) and np.all(ended[:, 2] == np.inf)
    assert np.all(np.abs(created[:, 1:] - [10.5, 20.5]) <= 0.5)
    assert np.all(np.abs(ended[:, :2] - [pods[0].ended, pods[1].ended]) <= 1.0)  # +- half the 2 s scrape
    assert created[:, 1].std() > 0.2 and ended[:, 0].std() > 0.4  # spread over the interval, not pinned
    assert [p.created for p in history.pods] == [-5.0, 10.5, 20.5]  # the history itself is not changed


def test_replays_spread_over_the_orders_the_record_cannot_tell_apart():
    """Two 1-core nodes; a 1-core pod ends (to a 2 s scrape) about when the next 1-core pod is
    created (to a second). If it went first, the new pod finds an empty cluster and one node is
    active; if not, two are. One replay picks one; the draws hold both."""
    pods = [_pod(0, 0.5, 10.0), _pod(1, 9.5, 59.5, alive=True)]
    history = History(0.0, 60.0, 1.0, _nodes(), pods)
    profile, _ = build_profile(history, "two-nodes", metrics_interval_s=2.0)
    scorer = HeuristicScorer("most-allocated", np.random.default_rng(0))
    _, single = replay_history(profile, history, scorer, "EE")
    assert single.active_nodes in ([1, 1], [1, 2])
    draws = replay_spread(profile, history, scorer, "EE", 12)
    assert sorted({tuple(trace.active_nodes) for _, trace in draws}) == [(1, 1), (1, 2)]
    with pytest.raises(ValueError, match="replays"):
        replay_spread(profile, history, scorer, "EE", 0)


def test_the_runs_summary_compares_sums_and_counts_live_figures_inside_their_replays_range():
    from agent.live.sim_to_real import _measure, _summary

    runs = [_measure([0.10, 0.20], 0.16), _measure([0.30, 0.40], 0.45), _measure([0.2, 0.2], 0.0)]
    assert runs[0]["simulated"] == pytest.approx(0.15) and runs[0]["gap"] == pytest.approx(-0.0625)
    assert runs[0]["simulated_range"] == [0.10, 0.20] and runs[2]["gap"] is None  # nothing measured live
    summary = _summary(runs)
    assert summary["ratio"] == pytest.approx((0.15 + 0.35 + 0.2) / (0.16 + 0.45 + 0.0), abs=1e-4)
    assert summary["live_within_range"] == 1  # 0.16 in [0.1, 0.2]; 0.45 above 0.4; 0.0 below 0.2
    assert summary["live_range"] == [0.0, 0.45]
    assert (summary["min_gap"], summary["max_gap"]) == (pytest.approx(-0.2222, abs=1e-4), pytest.approx(-0.0625))
    # a watched replay is one replay: no range to be within
    watched = _summary([{"live": 0.0, "simulated": 0.1, "gap": None}])
    assert watched["ratio"] is None and "live_within_range" not in watched


def test_watched_times_replace_the_records_and_decide_the_order():
    """A pod watch's times win over the record's: the record puts the first pod's end (9.5 s)
    before the second's creation, the watch saw it go 0.1 s after, so the second opens a node."""
    from agent.live.trace_replay import with_watched_times

    pods = [_pod(0, 0.5, 10.0), _pod(1, 9.5, 59.5, alive=True), _pod(2, 30.5, 40.0)]
    history = History(0.0, 60.0, 1.0, _nodes(), pods)
    watched = with_watched_times(history, {"web-0": (0.31, 9.9), "web-1": (9.8, None)})
    assert [(p.created, p.ended) for p in watched.pods] == [(0.31, 9.9), (9.8, np.inf), (30.5, pods[2].ended)]
    assert [p.ended for p in history.pods][:2] == [9.5, np.inf]  # the history itself is not changed
    profile, _ = build_profile(history, "two-nodes", metrics_interval_s=2.0)
    scorer = HeuristicScorer("most-allocated", np.random.default_rng(0))
    assert replay_history(profile, watched, scorer, "EE")[1].active_nodes[:2] == [1, 2]
    assert replay_history(profile, with_watched_times(history, {}), scorer, "EE")[1].active_nodes[:2] == [1, 1]


def test_the_runs_file_sums_up_the_watched_replays_too(tmp_path):
    import argparse
    import json

    from agent.live.sim_to_real import _measure, _write

    def run(live, simulated, same):
        return {"run": "r", "hot_node_share": _measure([simulated, simulated + 0.1], live),
                "watched_times": {"pods_watched": 10, "same_node": same, "choices": 9, "same_choice": same - 1,
                                  "hot_node_share": {"live": live, "simulated": simulated, "gap": None}}}

    out = tmp_path / "runs.json"
    args = argparse.Namespace(policy="EL", pods=10, speed=4.0, seed=1, same_workload=False, usage_scale=3.0,
                              min_lifetime_s=8.0, out=out)
    summary = _write(args, "el-x", [run(0.5, 0.4, 10), run(0.5, 0.5, 9)])
    assert summary["watched_times"]["same_node"] == [19, 20]
    assert summary["watched_times"]["same_choice"] == [17, 18]
    assert summary["watched_times"]["hot_node_share"]["ratio"] == pytest.approx(0.9)
    hot = summary["hot_node_share"]
    assert hot["ratio"] == pytest.approx(1.0) and hot["live_within_range"] == 2
    assert json.loads(out.read_text())["summary"] == json.loads(json.dumps(summary))


def test_following_the_live_placements_judges_each_decision_on_the_live_past():
    """Two 1-core nodes told apart by latency, four half-core pods, each its own Deployment, placed by
    MostAllocated. Live, the second pod went to the empty node, where MostAllocated fills the half-full
    one: that decision parts. Following the live placements, the third and fourth pods then meet the
    cluster as it was live (one half-full node each, a tie, then the one left) and agree; a free replay
    would have packed the second pod and placed the rest elsewhere."""
    from agent.live.trace_replay import follow_live

    nodes = [NodeRecord(f"n{i}", 1000.0, 4 * GIB, 110, "small", 50.0, 150.0, "labels", latency)
             for i, latency in enumerate((10.0, 20.0))]
    pods = [PodRecord("default", f"app{i}-5d8f9c7b6-ab{i}cd", f"app{i}", 0.5 + 10 * i, 59.5, True, 500.0,
                      0.25 * GIB, 0.5, step_s=1.0, scrape_s=2.0) for i in range(4)]
    history = History(0.0, 60.0, 1.0, nodes, pods)
    profile, _ = build_profile(history, "two-nodes", metrics_interval_s=2.0)
    scorer = HeuristicScorer("most-allocated", np.random.default_rng(0))
    assert follow_live(profile, history, scorer, "EE", {"app0": 10.0, "app1": 20.0, "app2": 10.0,
                                                        "app3": 20.0}) == (4, 3)
    # as MostAllocated places them: every decision made again
    assert follow_live(profile, history, scorer, "EE", {"app0": 10.0, "app1": 10.0, "app2": 20.0,
                                                        "app3": 20.0}) == (4, 4)
    # a pod whose node is not known is placed by the scorer and not judged; one whose live node has no
    # room in the simulator (a third pod on a full node) parts
    assert follow_live(profile, history, scorer, "EE", {"app0": 10.0, "app1": 10.0, "app3": 10.0}) == (3, 2)
