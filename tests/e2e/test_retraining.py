"""The closed loop on the local cluster: a workload runs, its profile is calibrated (and its recorded
pods replayed in the calibrated simulator match what was measured live), the workload
shifts (pods use 3x their requests) and the server flags drift; rlscore-retrain calibrates,
fine-tunes and gates a candidate (nothing serves before the rollout says so) and hands over the
retrained model if the gate passes it, else the best heuristic, which the stale model is far behind;
the candidate goes shadow -> canary -> serving while the real kube-scheduler keeps scheduling every
pod, improving the live objective over the stale model it replaces; the simulator reproduces the
live hot-node time of the shifted workload."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import torch
from kubernetes import client
from prometheus_api_client import PrometheusConnect

from rlscore.core.features import NODE_FEATURES
from rlscore.core.model import load_model, sidecar_path
from agent.learn.model_io import save_model
from agent.learn.network import NodeScorer
from agent.live import calibrate, retrain
from agent.live.loadgen import replay
from agent.live.sim_to_real import LiveSource, compare_run, read_run_window
from rlscore.core.profile import save_profile
from tests.e2e.conftest import ROOT, E2ECluster, cleanup

SPEED = 4.0
REFRESH_S = 1.0  # how often the test's server refreshes its node metrics: how stale the scorer's are


class Server:
    """A suggestion server in place of the cluster's own (same port, so the scheduler asks it)."""

    def __init__(self, cluster: E2ECluster, workdir: Path, **settings: str):
        self.url = cluster.server_url
        port = self.url.rsplit(":", 1)[1]
        # the local cluster's cpu and traffic queries (its node counters go backwards under churn)
        env = {**os.environ, "RLSCORE_KUBERNETES": "kubeconfig", "RLSCORE_KUBECONFIG": cluster.kubeconfig,
               "RLSCORE_PROMETHEUS_URL": cluster.prometheus_url, "RLSCORE_REFRESH_INTERVAL_S": str(REFRESH_S),
               "RLSCORE_CPU_QUERY": cluster.values["RLSCORE_LOCAL_CPU_QUERY"],
               "RLSCORE_NETWORK_QUERY": cluster.values["RLSCORE_LOCAL_NETWORK_QUERY"],
               "RLSCORE_USAGE_ONSET_S": cluster.values["RLSCORE_LOCAL_USAGE_ONSET_S"],
               "RLSCORE_USAGE_LINGER_S": cluster.values["RLSCORE_LOCAL_USAGE_LINGER_S"],
               **{f"RLSCORE_{k.upper()}": v for k, v in settings.items()}}
        self.log_path = workdir / "server.log"
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([str(Path(sys.executable).parent / "rlscore-server"), "--host", "127.0.0.1",
                                      "--port", port], env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            assert self.proc.poll() is None and time.monotonic() < deadline, self.log_path.read_text()[-3000:]
            time.sleep(0.3)

    def policies(self) -> dict:
        return httpx.get(f"{self.url}/policies", timeout=10).json()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(15)
        self.log.close()


def stale_model(path: Path) -> Path:
    """The model serving before the loop: one that spreads pods (its score is each node's standing
    under least-allocated, as a model taught another objective would), so that a candidate can be seen
    to pack better. An untrained network was used before; its live placements follow small feature
    differences, and in one run it packed as well as the rule that replaced it."""
    net = NodeScorer((4, 4))
    column = NODE_FEATURES.index("rule:least-allocated")
    with torch.no_grad():
        for layer in net.layers:
            for linear in (layer.Lambda, layer.Gamma, layer.Delta):
                linear.weight.zero_()
            layer.Lambda.bias.zero_()
        net.layers[0].Lambda.weight[0, column] = 1.0
        net.layers[1].Lambda.weight[0, 0] = 1.0
        net.layers[2].Lambda.weight[0, 0] = 10.0
    return save_model(path, net, "EE", {"training": {"steps": 0, "note": "e2e stale model: spreads (least-allocated)"}})


def local_busy(cluster: E2ECluster) -> dict[str, str]:
    """Calibration reads node cpu as the local cluster's server does (its node counters go backwards
    under pod churn; cluster.sh): the background it measures is then what KWOK nodes have, none."""
    return {"node_cpu_busy": cluster.values["RLSCORE_LOCAL_CPU_QUERY"]}


def live_source(cluster: E2ECluster) -> LiveSource:
    return LiveSource(PrometheusConnect(cluster.prometheus_url, disable_ssl=True),
                      client.CoreV1Api(cluster.live.core.api_client), cluster.values["RLSCORE_LOCAL_CPU_QUERY"],
                      [f"kwok-node-{i}" for i in range(4)],
                      REFRESH_S)  # the simulated scorer's metrics as stale as the live one's were


def shifted_sim_to_real(cluster: E2ECluster, result, start: float, end: float, model: Path) -> dict:
    """A run's recorded pods replayed in a profile calibrated from that run alone, by the model that
    placed them (agent.live.sim_to_real, as `make sim-to-real` runs it): hot-node share and active
    nodes, live and simulated."""
    out = compare_run(live_source(cluster), result, start, end, load_model(model, allow_heuristic=True), "EE")
    print(json.dumps(out, indent=2))
    return out


def wait_for(check, timeout_s: float, what: str, interval_s: float = 1.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(interval_s)
    raise AssertionError(f"{what}: not within {timeout_s:.0f} s")


def test_drift_retrain_gate_and_staged_rollout_while_scheduling(cluster, tmp_path):
    live = cluster.live
    figures: dict = {"phase_seconds": {}}
    clock = [time.monotonic()]

    def phase(name: str) -> None:  # printed with the figures: where the test's minutes go
        now = time.monotonic()
        figures["phase_seconds"][name] = round(now - clock[0], 1)
        clock[0] = now

    # 1. the workload the profile describes, placed by rl-scheduler (the shipped EL model, in process:
    #    latency limits, then packing, so both active nodes and violations depend on its choices)
    cluster.wait_idle([f"kwok-node-{i}" for i in range(4)])
    start = time.time()
    baseline = replay(live, "poisson", 60, "rl-scheduler", "EL", SPEED, seed=1, run="base", progress=False,
                      watch_pods=True)
    end = time.time()
    assert all(p.node for p in baseline.placements)
    source = live_source(cluster)
    history = read_run_window(source, start, end)  # calibration's read of the window
    calibrated, _ = calibrate.build_profile(history, "e2e-baseline")
    profile = save_profile(calibrated, tmp_path / "cluster.yaml")
    cleanup(cluster)
    phase("baseline replay and calibration")

    # sim-to-real: the recorded pods replayed in the calibrated simulator by the same model
    # (agent.live.sim_to_real, as `make sim-to-real` runs it)
    figures["sim_to_real"] = out = compare_run(source, baseline, start, end, load_model(ROOT / "models" / "el.safetensors"),
                                               "EL", history)
    print(json.dumps(out, indent=2))
    active, hard = out["mean_active_nodes"], out["hard_violation_rate"]
    # the goal is 10% (measured 7-8% in clean runs); a test on 60 pods and 1-3 active nodes allows 15%
    assert abs(active["simulated"] - active["live"]) <= 0.15 * active["live"], out
    assert abs(hard["simulated"] - hard["live"]) <= 0.10, out
    # the same replay with the times the run's pod watch saw (to the millisecond; the record has
    # seconds and scrapes), every pod placed where it went live: the model, given the simulator's
    # state, makes the live scheduler's decision again. A few may part where a departure and the
    # scheduling cycle overlap within milliseconds, or a pod's usage was not recorded. (A free replay's
    # count of pods on their live node is printed, not asserted: one parted decision moves the pods
    # after it, 55 of 56 in one run and 51 of 58 in another.) Pods Prometheus did not record are
    # missing from both replays.
    watched = out["watched_times"]
    assert len(baseline.pod_times) >= len(baseline.placements)
    assert all(seen <= gone for seen, gone in baseline.pod_times.values() if gone is not None)
    assert watched["pods_watched"] == out["pods_recorded"], out
    assert watched["choices"] >= 0.9 * out["pods_recorded"], out
    assert watched["same_choice"] >= 0.9 * watched["choices"], out
    phase("sim-to-real")

    # 2. our server: a stale EE model, the profile as the drift reference, candidates staged by themselves
    models = tmp_path / "models"
    models.mkdir()
    for name in ("lb", "el"):
        for suffix in (".safetensors", ".json"):
            shutil.copy(ROOT / "models" / f"{name}{suffix}", models / f"{name}{suffix}")
    stale_model(models / "ee.safetensors")
    stale_version = load_model(models / "ee.safetensors").version
    cluster.sh("server-stop")
    server = None
    try:
        server = Server(cluster, tmp_path, model_dir=str(models), drift_profile=str(profile), drift_interval_s="3",
                        model_watch_interval_s="1", shadow_decisions="10", canary_decisions="20",
                        # the stages, not the cost verdict (tests/server/test_rollout.py), are under test
                        # here: 20-30 one-step costs of an untrained model can come out lower by chance
                        rollout_tolerance="1")

        # 3. the workload shifts: every pod uses 3x what it did; the server flags drift
        shifted_at, stale_start = time.monotonic(), time.time()
        with ThreadPoolExecutor(1) as pool:  # the shifted workload runs while the server is watched
            running = pool.submit(replay, live, "poisson", 40, "rl-scheduler-http", "EE", SPEED, seed=2, run="stale",
                                  progress=False, usage_scale=3.0)
            # flagged on usage in the direction of the shift. Before the server counted a request only
            # once its cpu could show (RLSCORE_USAGE_ONSET_S), a burst of new pods read low first: in
            # one CI run the median of the first checks read x0.64 and flagged before the shift's x2-3
            # did. Now none may flag against it (the lowest reading is printed: x3.18 in the first run).
            against: list[float] = []
            readings: list[float] = []

            def flagged_on_the_shift():
                d = server.policies()["drift"]["policies"]["EE"]
                usage = d["signals"].get("usage")  # none before the first check
                if usage is not None and usage["value"] is not None:
                    readings.append(usage["value"])
                if usage is None or not (d["flagged"] and usage["over"]) or usage["value"] is None:
                    return None
                if usage["value"] < 1.0:
                    against.append(usage["value"])
                return usage["value"] > 1.5 and d

            drift = wait_for(flagged_on_the_shift, 300, "drift flagged on usage above the profile", interval_s=0.5)
            figures["drift_flagged_after_s"] = round(time.monotonic() - shifted_at, 1)
            figures["flags_against_the_shift"] = sorted(set(against))
            figures["lowest_usage_reading"] = min(readings)
            assert not against, figures
            stale = running.result()
        stale_end = time.time()
        assert all(p.node for p in stale.placements), "pods not scheduled while the stale model served"
        figures["usage_ratio_at_flag"] = drift["signals"]["usage"]["value"]
        cleanup(cluster)

        # sim-to-real for hot-node time: the shifted run's pods (3x usage: nodes run hot) replayed in
        # a profile calibrated from that run, by the same model, against the share of node-time above
        # 85% cpu that Prometheus measured live
        figures["sim_to_real_shifted"] = {"stale": shifted_sim_to_real(cluster, stale, stale_start, stale_end,
                                                                       models / "ee.safetensors")}
        phase("server start, shifted replay, drift, sim-to-real")

        # 4. retraining on the cluster's history: nothing serves before the rollout says so
        before = (models / "ee.safetensors").read_bytes()
        work = tmp_path / "retrain"
        code = retrain.main(["--policy", "EE", "--prometheus", cluster.prometheus_url, "--kubeconfig",
                             cluster.kubeconfig, "--window", f"{time.time() - start:.3f}s", "--model-dir", str(models),
                             "--work", str(work), "--timesteps", "3000", "--seeds", "12",
                             "--start-from", str(ROOT / "models" / "ee.safetensors"),
                             "--query", f"node_cpu_busy={local_busy(cluster)['node_cpu_busy']}",
                             "--metrics-interval", str(REFRESH_S)])
        outcome = json.loads((work / "retrain.json").read_text())
        phase("retrain")
        figures["retrain_seconds"] = outcome["seconds"]
        figures["retrain_start"] = outcome["init"]
        figures["gate"] = outcome["gate"]["reason"]
        # the stale (untrained) model is far behind every packing rule on this profile, so something
        # is handed over: the retrained model when the gate finds it better than the best rule (on
        # four like nodes that is a tie at best: README), else the shipped model it started from if
        # that is, else that rule in the stale model's place
        assert code == 0, outcome
        # the stale serving model is not where fine-tuning starts: the shipped one fits the profile better
        assert outcome["init"]["chosen"] == str(ROOT / "models" / "ee.safetensors"), outcome["init"]
        assert (models / "ee.safetensors").read_bytes() == before  # nothing serves before the rollout says so
        figures["start_fallback"] = outcome.get("start_fallback", {}).get("reason")
        figures["fallback"] = outcome.get("fallback", {}).get("reason")
        target = models / "candidates" / "ee.safetensors"
        assert json.loads(sidecar_path(target).read_text())["gate"]["promote"]
        figures["candidate"] = outcome["handed_over"]
        # shadow -> canary -> serving by itself
        candidate_version = load_model(target, allow_heuristic=True).version
        wait_for(lambda: server.policies()["rollout"]["policies"]["EE"]["stage"] == "shadow", 30, "candidate staged")
        # through the in-process profile: its scorer learns of the rollout at its next refresh (every 2 s)
        # and leaves EE's pods to the server, where both models score them; without that the stages
        # would never see a pod
        time.sleep(3)
        rollout = replay(live, "poisson", 40, "rl-scheduler", "EE", SPEED, seed=3, run="roll", progress=False,
                         usage_scale=3.0)
        assert all(p.node for p in rollout.placements), "pods not scheduled during the rollout"
        status = server.policies()["rollout"]["policies"]["EE"]
        stages = [h["to"] for h in status["history"]]
        assert stages[-3:] == ["shadow", "canary", "serving"], status["history"]
        canary = status["history"][-1]
        figures["rollout"] = {h["to"]: {"after": h["compared"], "agreement": h["agreement"]} for h in status["history"]}
        assert canary["compared"] >= 20
        cleanup(cluster)
        phase("rollout replay")

        # 6. the promoted model serves; the same shifted workload as under the stale one, measured live
        assert httpx.post(f"{server.url}/suggest", json={"pod": {"name": "p"}, "nodes": ["kwok-node-0"],
                                                         "policy": "EE"}).json()["model_version"] == candidate_version
        promoted_start = time.time()
        promoted = replay(live, "poisson", 40, "rl-scheduler-http", "EE", SPEED, seed=2, run="new", progress=False,
                          usage_scale=3.0)
        promoted_end = time.time()
        assert all(p.node for p in promoted.placements)
        hot = shifted_sim_to_real(cluster, promoted, promoted_start, promoted_end, models / "ee.safetensors")
        figures["sim_to_real_shifted"]["promoted"] = hot
        # hot-node time of a trained model's placements, live against the simulator: the goal is 10%
        # (with usage onset and linger calibrated, measured 3-13% over five runs; the rest is where
        # the replay's placements part from the live ones); 40 pods and a share near 0.2 allow 25%
        # here. The broken node counters it guards against read 2.5-12x off. (The stale run's share
        # is only printed: an untrained network's placements follow the small differences between
        # live and simulated features.)
        live_hot, sim_hot = hot["hot_node_share"]["live"], hot["hot_node_share"]["simulated"]
        assert live_hot > 0.05 and abs(sim_hot - live_hot) <= 0.25 * max(live_hot, sim_hot) + 0.02, hot
        figures["mean_active_nodes"] = {"stale": float(np.mean(stale.active_nodes)),
                                        "promoted": float(np.mean(promoted.active_nodes))}
        figures["stale_version"], figures["promoted_version"] = stale_version, candidate_version
        phase("promoted replay and sim-to-real")
        print(json.dumps(figures, indent=2))
        assert np.mean(promoted.active_nodes) <= 0.9 * np.mean(stale.active_nodes), figures
    finally:
        if server is not None:
            server.stop()
        cluster.sh("server-start")


def test_drift_makes_a_job_from_the_retraining_cronjob(cluster):
    """In a cluster, drift starts retraining as a Job made from the CronJob (owned by it, the policy
    and reason in its environment), through the real API server."""
    from suggestion_server.lifecycle.drift import job_from_cronjob

    batch = client.BatchV1Api(cluster.live.core.api_client)
    ns = cluster.live.namespace
    cron = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "retrain"},
            "spec": {"schedule": "17 3 * * *", "suspend": True, "jobTemplate": {"spec": {
                "backoffLimit": 0, "suspend": True,  # never runs here: only its making is checked
                "template": {"spec": {"restartPolicy": "Never", "containers": [
                    {"name": "retrain", "image": "rlscore/suggestion-server:0.1.0", "command": ["rlscore-retrain"],
                     "env": [{"name": "HOME", "value": "/tmp"}]}]}}}}}}
    batch.create_namespaced_cron_job(ns, cron)
    try:
        name = job_from_cronjob(cluster.live.core.api_client, f"{ns}/retrain", "LB", "usage: pods use x3.0")
        job = batch.read_namespaced_job(name, ns)
        assert name.startswith("retrain-drift-")
        owner = job.metadata.owner_references[0]
        assert (owner.kind, owner.name) == ("CronJob", "retrain")
        assert job.metadata.labels["rlscore.io/drift-policy"] == "LB"
        env = {e.name: e.value for e in job.spec.template.spec.containers[0].env}
        assert env == {"HOME": "/tmp", "RLSCORE_DRIFT_POLICY": "LB", "RLSCORE_DRIFT_REASON": "usage: pods use x3.0"}
        try:
            job_from_cronjob(cluster.live.core.api_client, f"{ns}/missing", "LB", "x")
            raise AssertionError("a missing CronJob made a Job")
        except client.ApiException as exc:
            assert exc.status == 404
    finally:
        batch.delete_collection_namespaced_job(ns, propagation_policy="Background")
        batch.delete_namespaced_cron_job("retrain", ns, propagation_policy="Background")

