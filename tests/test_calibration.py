"""The estimators behind rlscore-calibrate, on histories whose truth is known. (Reading a live
cluster's history through the API server and Prometheus: tests/e2e/test_calibration.py.)"""

from __future__ import annotations

import numpy as np
import pytest

from agent.live.calibrate import build_profile, hourly_shape, main, mean_lifetime, parse_duration
from agent.live.history import (History, NodeRecord, PodRecord, cpu_seconds_rate, scrape_interval, usage_onset,
                                workload_name)
from rlscore.core.profile import load_profile, save_profile
from agent.sim.cluster_profile import profile_world
from agent.sim.world import GIB


@pytest.mark.parametrize("pod, app, kind, owner, expected", [
    ("web-7f8d46bf79-hxvx8", "shop", "ReplicaSet", "web-7f8d46bf79", "shop"),  # the app label wins
    ("web-7f8d46bf79-hxvx8", None, "ReplicaSet", "web-7f8d46bf79", "web"),  # a Deployment's pods
    ("db-0", None, "StatefulSet", "db", "db"),
    ("backup-28735140-x7k2p", None, "Job", "backup-28735140", "backup-28735140"),
    ("web-7f8d46bf79-hxvx8", None, None, None, "web"),  # no owner series: the suffixes go
    ("agent-q8z2m", None, "<none>", "<none>", "agent"),
    ("standalone", None, None, None, "standalone"),
])
def test_workload_name(pod, app, kind, owner, expected):
    assert workload_name(pod, app, kind, owner) == expected


def test_cpu_seconds_rate_reads_scrapes_not_repeated_samples_and_survives_a_restart():
    # scraped every 2 s, read at 1 s steps: every value twice; 0.125 cores
    times = np.arange(8.0)
    values = np.repeat([0.0, 0.25, 0.5, 0.75], 2)
    assert cpu_seconds_rate(times, values) == pytest.approx(0.125)
    # a container restart: the counter drops to what it counted since
    assert cpu_seconds_rate(np.array([0.0, 2.0, 4.0, 6.0]), np.array([10.0, 11.0, 0.5, 1.5])) == pytest.approx(2.5 / 6)
    assert cpu_seconds_rate(np.array([0.0, 1.0]), np.array([3.0, 3.0])) is None  # one scrape only


@pytest.mark.parametrize("created, times, values, expected", [
    # scraped every 2 s from 3 s, read at 1 s steps: the counter first rose at the scrape of 5 s,
    # first read at the step of 5 s (half a step after the scrape on average)
    (1.5, np.arange(3.0, 10.0), np.array([0.1, 0.1, 0.5, 0.5, 0.9, 0.9, 1.3]), 3.0),
    (1.5, np.arange(3.0, 10.0), np.array([0.0, 0.0, 0.0, 0.0, 0.4, 0.4, 0.8]), 5.0),  # idle at first
    (1.5, np.arange(3.0, 6.0), np.array([0.2, 0.2, 0.2]), None),  # never rose: not known
    (-5.0, np.arange(3.0, 10.0), np.array([0.1, 0.1, 0.5, 0.5, 0.9, 0.9, 1.3]), None),  # before the window
    (5.8, np.array([5.0, 6.0]), np.array([0.0, 1.0]), 0.0),  # never negative
])
def test_usage_onset_is_when_a_rate_first_shows_the_pod(created, times, values, expected):
    assert usage_onset(created, times, values, start=0.0, step_s=1.0) == (None if expected is None else pytest.approx(expected))


def test_scrape_interval_is_the_time_between_counter_changes():
    every_2s = (np.arange(0.0, 12.0), np.repeat(np.arange(6.0), 2))
    every_3s = (np.arange(0.0, 12.0), np.repeat(np.arange(4.0), 3))
    assert scrape_interval([every_2s, every_2s, every_3s]) == 2.0
    assert scrape_interval([(np.array([0.0, 1.0]), np.array([1.0, 1.0]))]) == 0.0  # no change: not known


@pytest.mark.parametrize("last_seen, step, scrape, alive, expected", [
    (20.0, 1.0, 2.0, False, 19.5),  # series ended at the scrape ~20.5 s; it went between 18.5 and 20.5
    (20.0, 1.0, 0.0, False, 20.5),  # scrape interval unknown: half a step after its last sample
    (20.0, 5.0, 30.0, False, 10.0),  # never before it was created
    (20.0, 1.0, 2.0, True, float("inf")),  # still there
])
def test_a_pod_ended_between_the_last_scrape_that_saw_it_and_the_next(last_seen, step, scrape, alive, expected):
    pod = PodRecord("default", "web-0", "web", 10.0, last_seen, alive, 250.0, 2**20, step_s=step, scrape_s=scrape)
    assert pod.ended == expected


def _pod(i, created, last_seen, alive=False, cpu=250.0, workload="web", usage=0.5, memory=0.5 * GIB, limits=None):
    return PodRecord("default", f"{workload}-{i}", workload, created, last_seen, alive, cpu, memory * cpu / 1000,
                     usage, limits)


def test_mean_lifetime_counts_pods_still_alive_as_censored():
    pods = [_pod(0, 0.0, 10.0), _pod(1, 5.0, 25.0), _pod(2, 10.0, 0.0, alive=True)]
    # observed: 10 + 20 + (100 - 10) within [0, 100], two ended
    assert mean_lifetime(pods, 0.0, 100.0) == (pytest.approx(60.0), 2)
    # a pod created before the window counts from the window's start (lifetimes are memoryless)
    assert mean_lifetime([_pod(0, -50.0, 10.0)], 0.0, 100.0) == (pytest.approx(10.0), 1)


def test_exponential_lifetimes_are_recovered_under_censoring():
    rng = np.random.default_rng(3)
    created = np.sort(rng.uniform(0, 3000, 3000))
    ends = created + rng.exponential(120.0, created.size)
    pods = [_pod(i, c, e, alive=e > 3000) for i, (c, e) in enumerate(zip(created, ends))]
    estimate, ended = mean_lifetime(pods, 0.0, 3000.0)
    assert ended < len(pods)
    assert estimate == pytest.approx(120.0, rel=0.06)


def test_hourly_shape_follows_the_arrivals_by_hour():
    day = 86400.0 * 20000
    # three hours from 09:00: 10 pods, then 30, then 20 (mean 20)
    pods = [_pod(i, day + 9 * 3600 + h * 3600 + k, day + 9 * 3600 + h * 3600 + k + 60)
            for i, (h, k) in enumerate((h, k) for h, n in enumerate((10, 30, 20)) for k in range(n))]
    history = History(day + 9 * 3600, day + 12 * 3600, 5.0, [], pods)
    shape, start_hour = hourly_shape(history)
    assert start_hour == 9.0
    assert shape[9:12] == [0.5, 1.5, 1.0]
    assert shape[:9] == [1.0] * 9 and shape[12:] == [1.0] * 12  # hours not seen: flat
    short = History(day, day + 3600, 5.0, [], pods)
    assert hourly_shape(short)[0] == []  # under two hours: no shape


def _history() -> History:
    nodes = [NodeRecord("n0", 8000.0, 16 * GIB, 110, "m5.2xlarge", 70.0, 220.0, "labels", 12.0, 0.1),
             NodeRecord("n1", 8000.0, 16 * GIB, 110, "m5.2xlarge", 70.0, 220.0, "labels", 40.0, 5.0),
             NodeRecord("n2", 16000.0, 32 * GIB, 110, None, None, None, None, None)]
    rng = np.random.default_rng(1)
    pods = []
    for i in range(200):
        created = float(rng.uniform(0, 3600))
        big = i % 4 == 0
        life = float(rng.exponential(600.0 if big else 200.0))
        pods.append(_pod(i, created, created + life, alive=created + life > 3600, cpu=1000.0 if big else 250.0,
                         workload="batch" if big else "web", usage=float(rng.uniform(1.5, 2.5) if big else 0.4),
                         limits=(20.0, 30.0) if not big else None))
    return History(0.0, 3600.0, 5.0, nodes, pods, notes=["one series missing"])


def test_build_profile_describes_the_history(tmp_path):
    history = _history()
    profile, notes = build_profile(history, "Shop Prod/EU")
    assert profile.name == "shop-prod-eu"
    # nodes: one type per size and power curve, named after the instance type where known
    assert [t.name for t in profile.node_types] == ["m5-2xlarge", "16cpu-32gi"]
    assert [(g.type, g.names) for g in profile.nodes] == [("m5-2xlarge", ["n0", "n1"]), ("16cpu-32gi", ["n2"])]
    assert [g.latency_ms for g in profile.nodes] == [[12.0, 40.0], [0.0]]
    assert not profile.dynamics.power_visible  # one node's power is a guess
    assert profile.dynamics.latency_drift  # n1 wandered by 5 ms
    assert any("without a power curve" in n for n in notes) and any("without a latency" in n for n in notes)
    assert "one series missing" in notes
    # the mix: a class per workload and size, weighted by arrivals, usage as observed
    classes = {c.name: c for c in profile.workload.pod_classes}
    assert set(classes) == {"batch-1000m", "web-250m"}
    assert classes["batch-1000m"].weight == 50 and classes["web-250m"].weight == 150
    assert classes["web-250m"].usage == [0.4, 0.4] and 1.5 <= classes["batch-1000m"].usage[0] < 2.0
    assert classes["web-250m"].latency_limits_ms == [[20.0, 30.0]] and classes["batch-1000m"].latency_limits_ms == []
    assert classes["web-250m"].memory_per_cpu_gib == [0.5, 0.5]
    # batch pods live ~3x longer than web pods
    assert 2.0 < classes["batch-1000m"].lifetime_scale / classes["web-250m"].lifetime_scale < 4.5
    # the simulator replays the arrival rate that was observed
    world = profile_world(profile)
    assert world.arrival_rate == pytest.approx(200 / 3600.0, rel=1e-4)
    # and the file round-trips through the validated schema
    path = save_profile(profile, tmp_path / "cluster.yaml")
    assert load_profile(path) == profile


@pytest.mark.parametrize("measured, expected, note", [
    ([None, None, None], [0.02, 0.08], "no node's background cpu measured"),  # the generic range, said
    ([0.0, 0.0, None], [0.0, 0.0], None),  # KWOK's nodes: nothing besides the pods
    ([0.05, 0.12, 0.03], [0.03, 0.12], None),
    ([0.05, 0.97, 0.03], [0.03, 0.9], "capped"),
])
def test_the_profile_carries_the_nodes_background_cpu(measured, expected, note):
    history = _history()
    for node, value in zip(history.nodes, measured):
        node.background_cpu = value
    profile, notes = build_profile(history, "bg")
    assert profile.dynamics.background_cpu == expected
    assert profile_world(profile).background_cpu == tuple(expected)  # what the simulator draws each node's from
    assert (note is None) or any(note in n for n in notes), notes


def test_the_simulator_adds_the_profile_background_to_every_node():
    from agent.sim.simulator import Simulation

    history = _history()
    for node in history.nodes:
        node.background_cpu = 0.3
    profile, _ = build_profile(history, "bg")
    sim = Simulation(profile_world(profile), 0)
    assert np.allclose(sim.cluster.cpu_utilization(), 0.3)  # no pod yet: the background alone


@pytest.mark.parametrize("onsets, lingers, onset, linger, note", [
    ([None, None], [None, None], 0.0, 0.0, "no pod's usage onset measured"),  # at once, said
    ([2.0, 3.0, 4.0, None], [1.0, None, 0.0, None], 3.0, 0.5, None),
])
def test_the_profile_carries_how_late_usage_shows_and_how_long_it_lingers(onsets, lingers, onset, linger, note):
    history = _history()
    for pod in history.pods:
        pod.usage_onset_s = pod.usage_linger_s = None
    for pod, o, g in zip(history.pods, onsets, lingers):
        pod.usage_onset_s, pod.usage_linger_s = o, g
    profile, notes = build_profile(history, "onset")
    assert (profile.dynamics.usage_onset_s, profile.dynamics.usage_linger_s) == (onset, linger)
    assert (profile_world(profile).usage_onset_s, profile_world(profile).usage_linger_s) == (onset, linger)  # what the simulator uses
    assert (note is None) or any(note in n for n in notes), notes


def test_a_load_beyond_the_schema_is_capped_and_said():
    history = _history()
    history.nodes = history.nodes[:1]
    history.nodes[0].cpu_millicores = 100.0
    profile, notes = build_profile(history, "tiny")
    assert profile.workload.load == 2.0
    assert any("capped" in n for n in notes)


@pytest.mark.parametrize("text, seconds", [("30m", 1800), ("6h", 21600), ("7d", 604800), ("90s", 90), ("1.5h", 5400)])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("args, message", [
    (["--window", "soon"], "a duration is a number and a unit"),
    (["--window", "0s"], "must be positive"),
    (["--query", "pod_nonsense=up"], "--query takes NAME=PROMQL"),
    (["--query", "no-equals-sign"], "--query takes NAME=PROMQL"),
    (["--prometheus-ca-file", "/nonexistent/ca.pem"], "--prometheus-ca-file /nonexistent/ca.pem: no such file"),
    (["--prometheus-ca-file", __file__, "--prometheus-insecure-skip-verify"], "not both"),
    (["--metrics-interval", "nan"], "--metrics-interval must be 0..3600 seconds"),
    (["--step", "0"], "--step must be a positive number"),
])
def test_cli_refuses_bad_arguments_with_the_reason(args, message, capsys):
    assert main(["--prometheus", "http://127.0.0.1:1", *args]) == 2
    assert message in capsys.readouterr().err


def test_rlscore_retrain_hands_the_prometheus_certificate_settings_to_calibration(tmp_path, capsys):
    from agent.live import retrain

    code = retrain.main(["--policy", "EE", "--prometheus", "https://127.0.0.1:1", "--work", str(tmp_path),
                         "--prometheus-ca-file", str(tmp_path / "missing-ca.pem")])
    assert code == 2
    assert f"--prometheus-ca-file {tmp_path / 'missing-ca.pem'}: no such file" in capsys.readouterr().err


def test_rlscore_retrain_hands_its_queries_to_calibration(tmp_path, capsys):
    """--query reaches rlscore-calibrate, which checks the name before reading anything."""
    from agent.live import retrain

    code = retrain.main(["--policy", "EE", "--prometheus", "http://127.0.0.1:1", "--work", str(tmp_path),
                         "--query", "node_busy=up"])
    assert code == 2
    err = capsys.readouterr().err
    assert "--query takes NAME=PROMQL" in err and "node_busy" in err


def test_rlscore_retrain_hands_the_metrics_interval_to_calibration(tmp_path, capsys):
    """--metrics-interval reaches rlscore-calibrate, which checks it before reading anything."""
    from agent.live import retrain

    code = retrain.main(["--policy", "EE", "--prometheus", "http://127.0.0.1:1", "--work", str(tmp_path),
                         "--metrics-interval", "-1"])
    assert code == 2
    assert "--metrics-interval must be 0..3600 seconds, got -1.0" in capsys.readouterr().err
