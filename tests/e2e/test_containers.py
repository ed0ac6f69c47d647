"""The images on the local cluster: the suggestion server and kube-scheduler run from the images `make
images` built (cluster.sh with CONTAINERS=1: podman, host network, read-only root filesystems), and EE
pods are packed by RLScore's in-process scores, which the scheduler container counts."""

from __future__ import annotations

import math
from collections import Counter

import httpx
import pytest

from tests.e2e.conftest import started_cluster
from tests.e2e.test_local_cluster import place
from tests.helpers.metrics import counter
from tests.helpers.processes import wait_for


@pytest.fixture(scope="module")
def cluster():
    yield from started_cluster("rlscore-e2e-containers", CONTAINERS="1")


def test_the_images_schedule_ee_pods_onto_the_fewest_nodes(cluster):
    policies = httpx.get(f"{cluster.server_url}/policies", timeout=10).json()["policies"]
    assert {p["policy"]: p["serving"] for p in policies} == {"EE": "model", "LB": "model", "EL": "model"}
    metrics_url = cluster.values["RLSCORE_LOCAL_SCHEDULER_METRICS_URL"]
    # the in-process scorer holds a copy of the server's state before the pods come (until then it
    # rightly leaves a pod to the server: one of 12 in one CI run)
    wait_for(lambda: counter(httpx.get(metrics_url, verify=False, timeout=10).text,
                             "rlscore_in_process_last_refresh_timestamp_seconds") > 0, 60, "the scorer's first copy")
    before = counter(httpx.get(metrics_url, verify=False, timeout=10).text, "rlscore_in_process_decisions_total",
                     result="scored")
    placed = place(cluster, 12, "EE")
    assert len(set(placed.values())) == math.ceil(12 * 250 / 8000), Counter(placed.values())
    after = counter(httpx.get(metrics_url, verify=False, timeout=10).text, "rlscore_in_process_decisions_total",
                    result="scored")
    assert after - before >= 12, (before, after)  # scored in the scheduler container, from the server container's model
