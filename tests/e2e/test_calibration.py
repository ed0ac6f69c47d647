"""rlscore-calibrate against the local cluster: a known workload is played on the real API server
and KWOK nodes, Prometheus scrapes its series, and the profile read back from them has the nodes,
the pod mix, the usage factors and the lifetimes that were played."""

from __future__ import annotations

import time

import numpy as np
from kubernetes import client
from prometheus_api_client import PrometheusConnect

from agent.live import calibrate
from agent.live.calibrate import build_profile, mean_lifetime
from agent.live.history import PodRecord, read_history
from agent.live.loadgen import drive
from rlscore.core.profile import load_profile
from agent.sim.cluster_profile import profile_world
from agent.sim.scenarios import events
from agent.sim.world import GIB, Hardware, NodeSpec, PodClass, World

SPEED = 1.0
ARRIVALS = 50


def played_world() -> World:
    """Two pod sizes with fixed usage factors (0.5x and 2x their request), ~1 arrival/s, 20 s lives."""
    hw = Hardware("e2e", 8000.0, 16 * GIB, 110, 0.0, 0.0)
    classes = (PodClass("small", 0.7, (250.0,), (0.5, 1.0), (0.5, 0.5)),
               PodClass("big", 0.3, (1000.0,), (0.5, 1.0), (2.0, 2.0)))
    return World("e2e", tuple(NodeSpec(hw, 0.0) for _ in range(4)), classes, load=0.3, mean_lifetime_s=20.0)


def test_calibration_reads_back_the_played_workload(cluster, tmp_path):
    world = played_world()
    run = f"cal-{int(time.time()) % 100000}"
    time.sleep(5)  # the series of an earlier test's pods end before the window starts
    # the window's ends are whole seconds, so the command line's --window/--end below name exactly
    # the same window (a start off by a microsecond moved the censored lifetimes and the rate)
    time.sleep(1.0 - time.time() % 1.0)
    start = float(round(time.time()))
    arrivals, departures = {}, {}
    stream = events(world, np.random.default_rng(7))

    def watched():
        for event in stream:
            if event.kind == "arrive":
                arrivals[event.pod.id] = event
            elif event.kind == "depart":
                departures[event.pod_id] = event.time
            yield event

    placed = 0
    for _, name, result, _ in drive(cluster.live, watched(), run, "default-scheduler", None, ARRIVALS, SPEED, 30.0):
        placed += bool(result.get(name))
    assert placed == ARRIVALS
    time.sleep(4)  # two scrapes past the last arrival
    end = float(int(time.time()) + 1)
    # a scrape that started before `end` can be stored after it: wait until every sample in the window
    # is in, so this read and the command line's below see the same data
    time.sleep(end - time.time() + 3)
    # the local cluster's busy cpu is its pods' (its node counters go backwards under churn; cluster.sh)
    busy = {"node_cpu_busy": cluster.values["RLSCORE_LOCAL_CPU_QUERY"]}
    history = read_history(client.CoreV1Api(cluster.live.core.api_client),
                           PrometheusConnect(cluster.prometheus_url, disable_ssl=True), start, end, 1.0, busy)
    everything, _ = build_profile(history, "e2e")  # what the command line writes (every pod in the window)
    # only this run's pods from here on: another pod's series may reach into the window
    foreign = [p.name for p in history.pods if not (p.namespace == cluster.live.namespace and p.name.startswith(run))]
    history.pods = [p for p in history.pods if p.namespace == cluster.live.namespace and p.name.startswith(run)]
    profile, notes = build_profile(history, "e2e")
    print(profile.to_yaml(), notes, "other pods in the window:", foreign)

    # nodes: four 8-cpu nodes with the power curve and latency cluster.sh annotated them with
    nodes = {n.metadata.name: n for n in cluster.live.core.list_node().items}
    assert [t.cpu_millicores for t in profile.node_types] == [8000.0]
    assert sum(len(g.latency_ms) for g in profile.nodes) == 4
    node_type = profile.node_types[0]
    notes_of = nodes["kwok-node-0"].metadata.annotations
    assert node_type.power_idle_watts == float(notes_of["metrics.rlscore.io/power-idle-watts"])
    assert node_type.power_max_watts == float(notes_of["metrics.rlscore.io/power-max-watts"])
    assert [(name, lat) for g in profile.nodes for name, lat in zip(g.names, g.latency_ms)] == [
        (n, float(nodes[n].metadata.annotations["rlscore.io/latency-ms"])) for n in sorted(nodes)]
    assert profile.dynamics.power_visible
    # a KWOK node runs nothing besides its pods: no background cpu (the simulator's generic 2-8% would
    # make every simulated node hotter than the live one)
    assert all(n.background_cpu is not None and n.background_cpu <= 0.02 for n in history.nodes), history.nodes
    assert profile.dynamics.background_cpu[1] <= 0.02
    # a pod's cpu shows seconds after it was created (it starts, then a rate needs two of the 2 s
    # scrapes: measured 2.5-3.0 s) and still shows until the first scrape without it (about 1 s)
    assert {p.scrape_s for p in history.pods} == {2.0}
    assert 1.0 <= profile.dynamics.usage_onset_s <= 6.0, profile.dynamics
    assert 0.0 <= profile.dynamics.usage_linger_s <= 2.0, profile.dynamics

    # the pod mix: one class per size, weighted by how many arrived
    # (a pod that lives less than a scrape interval can slip between two scrapes: only those may be missing)
    index = {int(p.name.split("-")[2]): p for p in history.pods}
    ids = sorted(arrivals)[:ARRIVALS]  # the k-th arrival is deployment {run}-{k:03d}
    missed = [(departures.get(i, np.inf) - arrivals[i].time) / SPEED for k, i in enumerate(ids) if k not in index]
    assert len(missed) <= 3 and all(life < 2.5 for life in missed), f"pods missing, with lifetimes {missed}"
    played = [arrivals[i].pod for k, i in enumerate(ids) if k in index]
    classes = {c.cpu_millicores[0]: c for c in profile.workload.pod_classes}
    assert set(classes) == {250.0, 1000.0}
    for cpu in classes:
        assert classes[cpu].weight == sum(p.cpu_millicores == cpu for p in played)
        ratios = [p.memory_bytes / GIB / (cpu / 1000) for p in played if p.cpu_millicores == cpu]
        assert classes[cpu].memory_per_cpu_gib == [round(min(ratios), 4), round(max(ratios), 4)]
    # usage: what KWOK made each pod use, read back from its cpu-seconds counter
    assert abs(classes[250.0].usage[0] - 0.5) < 0.02 and abs(classes[250.0].usage[1] - 0.5) < 0.02
    assert abs(classes[1000.0].usage[0] - 2.0) < 0.05 and abs(classes[1000.0].usage[1] - 2.0) < 0.05

    # lifetimes: the estimator on the series against the same estimator on the played timeline
    truth = [PodRecord("", str(i), "", created=start + arrivals[i].time / SPEED,
                       last_seen=start + departures.get(i, np.inf) / SPEED, alive=i not in departures,
                       cpu_millicores=1.0, memory_bytes=0.0) for k, i in enumerate(ids) if k in index]
    expected, ended = mean_lifetime(truth, start, end)
    assert ended >= 15
    assert abs(profile.workload.mean_lifetime_s - expected) <= 0.15 * expected, (profile.workload.mean_lifetime_s,
                                                                                 expected)
    # the arrival rate the profile replays is the one played
    played_rate = len(played) / (end - start)
    assert abs(profile_world(profile).arrival_rate - played_rate) <= 0.02 * played_rate

    # the command line writes the same profile from the same window
    out = tmp_path / "cluster.yaml"
    assert calibrate.main(["--prometheus", cluster.prometheus_url, "--kubeconfig", cluster.kubeconfig, "--window",
                           f"{end - start:.0f}s", "--end", repr(end), "--step", "1", "--name", "e2e",
                           "--out", str(out), "--query", f"node_cpu_busy={busy['node_cpu_busy']}"]) == 0
    written = load_profile(out)
    assert written == everything, (written.to_yaml(), everything.to_yaml())


def test_calibration_without_prometheus_says_so(cluster, tmp_path, capsys):
    out = tmp_path / "cluster.yaml"
    assert calibrate.main(["--prometheus", "http://127.0.0.1:1", "--kubeconfig", cluster.kubeconfig,
                           "--window", "5m", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "prometheus: pod_created" in err and "ConnectionError" in err, err
    assert not out.exists()

