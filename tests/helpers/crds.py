"""KubeRay's RayCluster CRD on a test cluster: overlays/ray and the chart's Ray values name its kind."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.helpers.processes import wait_for

ROOT = Path(__file__).resolve().parents[2]
KUBECTL = ROOT / "bin" / "kubectl"
RAY_CRD = ROOT / "build" / "crds" / "ray.io_rayclusters.yaml"


def install_ray_crd(kubeconfig: str, timeout_s: float = 60.0) -> None:
    """Apply the CRD (server-side: it is too large for the last-applied annotation) and wait until the
    API server serves it; `kubectl wait --for=condition=Established` errors out while a new CRD has no
    conditions yet, so this polls."""
    if not RAY_CRD.exists():
        pytest.fail(f"{RAY_CRD} missing: run `make build/crds/ray.io_rayclusters.yaml` (make e2e fetches it)")
    kubectl = [str(KUBECTL), "--kubeconfig", kubeconfig]
    applied = subprocess.run([*kubectl, "apply", "--server-side", "-f", str(RAY_CRD)], capture_output=True,
                             text=True, timeout=120)
    assert applied.returncode == 0, applied.stderr
    jsonpath = '{.status.conditions[?(@.type=="Established")].status}'

    def established() -> bool:
        got = subprocess.run([*kubectl, "get", "crd", "rayclusters.ray.io", "-o", f"jsonpath={jsonpath}"],
                             capture_output=True, text=True, timeout=30)
        return got.returncode == 0 and got.stdout.strip() == "True"

    wait_for(established, timeout_s, "CRD rayclusters.ray.io Established", interval_s=0.5)
