"""Ray as the execution backend, on a real Ray cluster started on this machine: a head node and a
worker node as separate processes on loopback, run from .venv-ray (.venv plus Ray, `make ray-venv`).
The commands themselves run in .venv-ray too; .venv, which runs the rest of the suite, has no Ray."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import threading
from pathlib import Path

import pytest

from tests.helpers.processes import wait_for
from tests.helpers.ray_nodes import ENV, RAY_PY, RayNodes

ROOT = Path(__file__).resolve().parents[1]

# the evaluation every test compares: a few small worlds, ~1 s each
EVAL = ["--policy", "EE", "--families", "poisson,two-d", "--seeds", "3", "--arrivals", "120", "--nodes", "6",
        "--no-model"]

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if not RAY_PY.exists():
        pytest.fail(f"{RAY_PY} missing: run `make ray-venv` (make py-test builds it)")
    nodes = RayNodes(Path("/tmp") / f"ray-{os.getpid()}")  # Ray's socket paths must stay short
    try:
        nodes.start("head", head=True)
        nodes.start("worker")
        yield nodes
    finally:
        nodes.stop()


def rlscore(module: str, *args: str, python: Path = RAY_PY, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), "-m", module, *args], env=ENV, capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def table(out: Path) -> tuple[str, list[dict]]:
    """The evaluation's outputs without the one timed column."""
    rows = list(csv.DictReader(io.StringIO((out / "runs.csv").read_text())))
    for row in rows:
        row.pop("decision_ms")
    return (out / "summary.md").read_text(), rows


def test_an_evaluation_on_ray_gives_the_same_table_as_on_this_machine(cluster, tmp_path):
    local = rlscore("agent.evaluate.cli", *EVAL, "--out", str(tmp_path / "local"), "--no-progress",
                    python=ROOT / ".venv" / "bin" / "python")
    assert local.returncode == 0, local.stderr[-2000:]
    on_ray = rlscore("agent.evaluate.cli", *EVAL, "--out", str(tmp_path / "ray"), "--no-progress",
                     "--ray-address", cluster.address)
    assert on_ray.returncode == 0, on_ray.stderr[-2000:]
    assert table(tmp_path / "ray") == table(tmp_path / "local")
    assert on_ray.stdout.replace(str(tmp_path / "ray"), "OUT") == local.stdout.replace(str(tmp_path / "local"), "OUT")


def test_the_dqn_learner_takes_its_interaction_from_environment_actors_on_ray(cluster, tmp_path):
    """With prioritized replay: the actors' transitions feed a prioritized replay on the learner (the
    profile test below plays on a uniform one)."""
    run = rlscore("agent.learn.train", "--policy", "LB", "--families", "poisson", "--total-timesteps", "1024",
                  "--demo-worlds", "2", "--demo-decisions", "32", "--pretrain-steps", "10", "--batch-size", "32",
                  "--burn-in", "10", "--max-nodes", "8", "--actors", "2", "--no-eval", "--log-dir", "",
                  "--prioritized", "0.6", "--no-progress", "--out", str(tmp_path), "--ray-address", cluster.address)
    assert run.returncode == 0, run.stderr[-2000:]
    training = json.loads((tmp_path / "lb.json").read_text())["training"]
    assert training["hyperparameters"]["prioritized"] == 0.6
    assert training["environment_actors"] == 2
    assert training["interaction_steps"] == 1024
    # one gradient step per train_frequency (4) environment steps, once the replay holds a batch
    assert 1024 // 4 - 32 <= training["gradient_steps"] - 10 <= 1024 // 4
    from rlscore.core.model import load_model
    assert load_model(tmp_path / "lb.safetensors", expected_policy="LB") is not None


PROFILE = ROOT / "examples" / "cluster-profiles" / "local-usage-3x-4n.yaml"


def test_the_runs_of_a_distilled_recipe_go_side_by_side_on_ray_and_give_the_same_models(cluster, tmp_path):
    args = ["--policy", "LB", "--families", "poisson", "--members", "2", "--total-timesteps", "64", "--demo-worlds", "2",
            "--demo-decisions", "24", "--pretrain-steps", "10", "--batch-size", "16", "--burn-in", "10",
            "--max-nodes", "6", "--num-envs", "2", "--workers", "1", "--torch-threads", "1", "--distil-worlds", "3",
            "--distil-decisions", "16", "--distil-steps", "10", "--no-eval", "--log-dir", "", "--no-progress"]
    local = rlscore("agent.learn.train", *args, "--out", str(tmp_path / "local"), python=ROOT / ".venv" / "bin" / "python")
    assert local.returncode == 0, local.stderr[-2000:]
    on_ray = rlscore("agent.learn.train", *args, "--out", str(tmp_path / "ray"), "--ray-address", cluster.address)
    assert on_ray.returncode == 0, on_ray.stderr[-2000:]
    assert "side by side on Ray" in on_ray.stderr and "one after another" in local.stderr

    from rlscore.core.model import load_model

    # the same weights, so the same files (model files are the same bytes in every process)
    for name in ("lb-members/lb-seed1", "lb-members/lb-seed2", "lb"):
        here, there = (load_model(tmp_path / side / f"{name}.safetensors").weights for side in ("local", "ray"))
        assert here.keys() == there.keys() and all((here[k] == there[k]).all() for k in here), name
        assert (tmp_path / "local" / f"{name}.safetensors").read_bytes() == \
            (tmp_path / "ray" / f"{name}.safetensors").read_bytes(), name
    assert json.loads((tmp_path / "ray" / "lb.json").read_text())["training"]["runs_side_by_side_on_ray"] is True


def test_the_gate_judges_a_cluster_profile_on_ray_as_on_this_machine(cluster, tmp_path):
    """A profile is a scenario family registered in the driver; Ray's workers are fresh processes and
    get it handed over (agent.parallel.carry_to_workers), or every world fails as an unknown family."""
    for suffix in (".safetensors", ".json"):
        (tmp_path / f"candidate{suffix}").write_bytes((ROOT / "models" / f"ee{suffix}").read_bytes())
    args = ["--policy", "EE", "--candidate", str(tmp_path / "candidate.safetensors"), "--serving",
            str(ROOT / "models" / "ee.safetensors"), "--profile", str(PROFILE), "--seeds", "4", "--arrivals", "120",
            "--no-progress"]
    local = rlscore("agent.evaluate.gate", *args, python=ROOT / ".venv" / "bin" / "python")
    on_ray = rlscore("agent.evaluate.gate", *args, "--ray-address", cluster.address)
    assert on_ray.returncode == local.returncode, on_ray.stderr[-2000:]
    assert "over 4 seeds" in local.stdout + local.stderr, local.stdout + local.stderr[-2000:]
    assert on_ray.stdout == local.stdout


def test_fine_tuning_on_a_profile_plays_on_ray_actors(cluster, tmp_path):
    """With two critics (--trust-heads): the actors play the served network and the critics, whose
    weights go with it, and the model written is the served network."""
    run = rlscore("agent.learn.train", "--policy", "LB", "--profile", str(PROFILE), "--init",
                  str(ROOT / "models" / "lb.safetensors"), "--total-timesteps", "256", "--demo-worlds", "2",
                  "--demo-decisions", "16", "--pretrain-steps", "5", "--batch-size", "16", "--burn-in", "10",
                  "--trust-heads", "2", "--actors", "2", "--no-eval", "--log-dir", "", "--no-progress",
                  "--out", str(tmp_path), "--ray-address", cluster.address)
    assert run.returncode == 0, run.stderr[-2000:]
    training = json.loads((tmp_path / "lb.json").read_text())["training"]
    assert training["environment_actors"] == 2 and training["interaction_steps"] == 256
    assert training["hyperparameters"]["trust_heads"] == 2
    from rlscore.core.model import load_model
    weights = load_model(tmp_path / "lb.safetensors", expected_policy="LB").weights
    last = max(int(k.split(".")[1]) for k in weights)
    assert weights[f"layers.{last}.Lambda.bias"].shape == (1,)  # one value per node: no critic was written


def test_a_worker_node_killed_mid_evaluation_costs_time_not_results(cluster, tmp_path):
    local = rlscore("agent.evaluate.cli", *EVAL, "--out", str(tmp_path / "local"), "--no-progress",
                    python=ROOT / ".venv" / "bin" / "python")
    assert local.returncode == 0, local.stderr[-2000:]
    cluster.start("doomed")
    run = subprocess.Popen([str(RAY_PY), "-m", "agent.evaluate.cli", *EVAL, "--out", str(tmp_path / "ray"),
                            "--ray-address", cluster.address], env=ENV, cwd=ROOT, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
    stderr: list[str] = []
    reader = threading.Thread(target=lambda: stderr.extend(iter(lambda: run.stderr.read(64), "")), daemon=True)
    reader.start()
    # the progress bar shows the first world done: the others are spread over the three nodes
    wait_for(lambda: re.search(r"eval EE:.*\| *[1-9]\d*/\d+", "".join(stderr)), 300, "the first world")
    assert run.poll() is None, "the evaluation ended before the node could be killed"
    cluster.kill("doomed")
    run.wait(timeout=600)
    reader.join(timeout=10)  # reads stderr to its end
    assert run.returncode == 0, "".join(stderr)[-2000:]
    assert table(tmp_path / "ray") == table(tmp_path / "local")
    # the head notices the loss on its own clock (three missed health checks): the run may end before
    wait_for(lambda: cluster.alive() == 2, 60, "the head to declare the killed node dead", interval_s=1.0)


def test_without_ray_installed_the_commands_work_and_ray_address_says_what_is_missing(tmp_path):
    python = ROOT / ".venv" / "bin" / "python"
    assert subprocess.run([str(python), "-c", "import ray"], capture_output=True).returncode != 0, \
        ".venv must not have Ray: the suite checks that every command works without it"
    run = rlscore("agent.evaluate.cli", *EVAL, "--out", str(tmp_path / "out"), "--ray-address", "auto",
                  python=python)
    assert run.returncode != 0
    assert "Ray is not installed" in run.stderr and "rlscore[distributed]" in run.stderr
    assert not (tmp_path / "out").exists()


def test_a_run_that_loses_its_cluster_exits_non_zero_and_writes_nothing(tmp_path):
    nodes = RayNodes(Path("/tmp") / f"ray-lost-{os.getpid()}")
    try:
        nodes.start("head", head=True)
        run = subprocess.Popen([str(RAY_PY), "-m", "agent.evaluate.cli", *EVAL, "--seeds", "8",
                                "--out", str(tmp_path / "out"), "--ray-address", nodes.address],
                               env=ENV, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        stderr: list[str] = []
        reader = threading.Thread(target=lambda: stderr.extend(iter(lambda: run.stderr.read(64), "")), daemon=True)
        reader.start()
        wait_for(lambda: re.search(r"eval EE:.*\| *[1-9]\d*/\d+", "".join(stderr)), 300, "the first world")
        nodes.kill("head")
        run.wait(timeout=180)
        reader.join(timeout=10)
    finally:
        nodes.stop()
    assert run.returncode != 0, "".join(stderr)[-2000:]
    said = "".join(stderr)
    assert "Ray cluster" in said or "GCS" in said, said[-2000:]  # ours (ClusterLost) or Ray's own last word
    assert not (tmp_path / "out").exists()
