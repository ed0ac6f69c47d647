"""The arrows between the rooms, and what serving installs.

- import-linter's contracts (pyproject.toml): the core imports neither serving nor training; the server
  and the probe stand on the core only; training never imports the server; training's rooms point one way.
- `pip install '.[serve]'` (the venv `make serve-venv` builds, as the server image does) has no torch,
  no training stack, and serves the shipped models: a real `rlscore-server` from that venv answers
  POST /suggest with `source: model` for every policy.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.helpers.processes import free_port, wait_for

ROOT = Path(__file__).resolve().parents[1]
SERVE_VENV = ROOT / ".venv-serve"
TRAINING_STACK = ("torch", "gymnasium", "optuna", "tensorboard", "matplotlib", "scipy", "ray")


def test_import_contracts_hold():
    result = subprocess.run([str(Path(sys.executable).parent / "lint-imports"), "--no-cache"], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "broken" in result.stdout and " 0 broken" in result.stdout


def test_the_server_imports_nothing_of_training_even_where_it_is_installed():
    # numba imports SciPy by itself wherever SciPy is installed; the serve install has none (below)
    stack = tuple(m for m in TRAINING_STACK if m != "scipy") + ("agent",)
    code = ("import sys, suggestion_server.app, suggestion_server.cli, latency_probe.probe\n"
            f"print(sorted(m for m in {stack!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.fixture(scope="module")
def serve_python() -> Path:
    python = SERVE_VENV / "bin" / "python"
    assert python.exists(), "the serve-only venv is missing: make serve-venv (make test builds it)"
    return python


def test_the_serve_install_has_no_training_stack(serve_python):
    code = ("import importlib.util as u\n"
            f"print([m for m in {TRAINING_STACK!r} if u.find_spec(m)])")
    out = subprocess.run([str(serve_python), "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", f"installed with rlscore[serve]: {out.stdout.strip()}"


def test_the_serve_install_serves_the_shipped_models(serve_python, tmp_path):
    port = free_port()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("RLSCORE_")}, "RLSCORE_KUBERNETES": "off",
           "RLSCORE_MODEL_DIR": str(ROOT / "models"), "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    server = subprocess.Popen([str(SERVE_VENV / "bin" / "rlscore-server"), "--host", "127.0.0.1", "--port", str(port)],
                              env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: server.poll() is None and httpx.get(f"{url}/readyz", timeout=2).status_code == 200, 120,
                 "the serve-only server ready")
        nodes = [{"name": "a", "cpu_capacity_millicores": 4000, "cpu_requested_millicores": 1000, "pods": 2,
                  "latency_ms": 5.0},
                 {"name": "b", "cpu_capacity_millicores": 8000, "latency_ms": 40.0}]
        for policy in ("EE", "LB", "EL"):
            body = {"pod": {"name": "p", "namespace": "default", "cpu_request_millicores": 250}, "nodes": nodes,
                    "policy": policy}
            answer = httpx.post(f"{url}/suggest", json=body, timeout=10).json()
            assert answer["source"] == "model" and answer["model_version"].startswith(policy.lower()), answer
            assert set(answer["scores"]) == {"a", "b"}
    finally:
        server.terminate()
        output = server.communicate(timeout=30)[0]
    assert "Traceback" not in output, output[-3000:]
