"""The images on the local cluster: the suggestion server and kube-scheduler run from the images `make
images` built (cluster.sh with CONTAINERS=1: podman, host network, read-only root filesystems), and EE
pods are packed by RLScore's in-process scores, which the scheduler container counts."""

from __future__ import annotations

import math
import time
from collections import Counter

import httpx
import pytest

from tests.e2e.conftest import started_cluster
from tests.e2e.test_local_cluster import place
from tests.helpers.metrics import by_label, counter
from tests.helpers.processes import wait_for

# the in-process scorer's decisions by result: scored, or why it left a pod to the server
DECISIONS = "rlscore_in_process_decisions_total"


@pytest.fixture(scope="module")
def cluster():
    yield from started_cluster("rlscore-e2e-containers", CONTAINERS="1")


def test_the_images_schedule_ee_pods_onto_the_fewest_nodes(cluster):
    policies = httpx.get(f"{cluster.server_url}/policies", timeout=10).json()["policies"]
    assert {p["policy"]: p["serving"] for p in policies} == {"EE": "model", "LB": "model", "EL": "model"}
    metrics_url = cluster.values["RLSCORE_LOCAL_SCHEDULER_METRICS_URL"]

    def scheduler_metrics() -> str:
        return httpx.get(metrics_url, verify=False, timeout=10).text

    # The in-process scorer leaves a pod to the server until its copy of the server's state holds a
    # snapshot (a copy fetched before the server's first refresh is "stale"): wait for the server's
    # snapshot, then for a copy fetched after it.
    wait_for(lambda: httpx.get(f"{cluster.server_url}/v1/node-metrics", timeout=10).json()["snapshot_age_s"]
             is not None, 60, "the server's first snapshot")
    snapshot_seen = time.time()
    wait_for(lambda: counter(scheduler_metrics(), "rlscore_in_process_last_refresh_timestamp_seconds") > snapshot_seen,
             60, "the scorer's copy of that snapshot")
    before = by_label(scheduler_metrics(), DECISIONS, "result")
    placed = place(cluster, 12, "EE")
    assert len(set(placed.values())) == math.ceil(12 * 250 / 8000), Counter(placed.values())
    after = by_label(scheduler_metrics(), DECISIONS, "result")
    seen = {result: after[result] - before.get(result, 0) for result in after}
    # scored in the scheduler container, from the server container's model; else the reasons it was not
    assert seen.get("scored", 0) >= 12, seen

