"""overlays/ray's RayCluster against a real kube-apiserver that knows KubeRay's RayCluster CRD (v1.5.0,
from the Go module proxy: make build/crds/ray.io_rayclusters.yaml): the API server accepts what we
ship and refuses a broken one, so the overlay fits the operator it is written for. (No Ray pods run:
the local cluster has no KubeRay operator, and KWOK's pods run nothing.)"""

from __future__ import annotations

import copy
import subprocess

import pytest
import yaml

from tests.helpers.crds import KUBECTL, ROOT, install_ray_crd


def kubectl(cluster, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(KUBECTL), "--kubeconfig", cluster.kubeconfig, *args], input=stdin,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def ray_objects(cluster):
    install_ray_crd(cluster.kubeconfig)
    kubectl(cluster, "create", "namespace", "rlscore-system")  # may exist already
    rendered = subprocess.run([str(KUBECTL), "kustomize", str(ROOT / "deploy" / "overlays" / "ray")],
                              capture_output=True, text=True, check=True).stdout
    objects = [o for o in yaml.safe_load_all(rendered) if o and o["metadata"]["name"] == "rlscore-ray"]
    assert {o["kind"] for o in objects} == {"ServiceAccount", "RayCluster", "NetworkPolicy"}
    yield objects
    # what it made, not the namespace: the overlay and chart tests dry-run into that one too
    kubectl(cluster, "delete", "--ignore-not-found", "-f", "-", stdin=yaml.safe_dump_all(objects))


def test_the_api_server_accepts_the_ray_cluster_we_ship(cluster, ray_objects):
    created = kubectl(cluster, "apply", "-f", "-", stdin=yaml.safe_dump_all(ray_objects))
    assert created.returncode == 0, created.stderr
    got = kubectl(cluster, "-n", "rlscore-system", "get", "raycluster", "rlscore-ray", "-o", "yaml")
    stored = yaml.safe_load(got.stdout)
    # nothing we wrote was pruned as unknown to the schema
    ours = next(o for o in ray_objects if o["kind"] == "RayCluster")
    assert stored["spec"]["workerGroupSpecs"][0]["template"]["spec"]["securityContext"] == \
        ours["spec"]["workerGroupSpecs"][0]["template"]["spec"]["securityContext"]
    assert stored["spec"]["headGroupSpec"]["rayStartParams"] == ours["spec"]["headGroupSpec"]["rayStartParams"]


def test_the_api_server_refuses_a_broken_ray_cluster(cluster, ray_objects):
    broken = copy.deepcopy(next(o for o in ray_objects if o["kind"] == "RayCluster"))
    broken["metadata"]["name"] = "rlscore-ray-broken"
    broken["spec"]["workerGroupSpecs"][0]["replicas"] = "two"
    refused = kubectl(cluster, "apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(broken))
    assert refused.returncode != 0 and "replicas" in refused.stderr, refused.stderr
