"""Short real training runs: the trainers learn what the outcome reward asks for."""

from pathlib import Path

import numpy as np
import pytest

from agent.evaluate.compare import evaluate, summarize
from rlscore.core.model import load_model
from agent.learn.train import config_for, run, save_trained
from rlscore.core.scoring import ModelScorer
from agent.sim import families
from agent.sim.families import Family
from agent.sim.world import GIB, LARGE, Hardware, NodeSpec, PodClass, World


# One near node with room for four strict pods, two big far ones. Strict pods (half the cpu) meet
# their limit only near; loose ones anywhere. A loose pod on the near node blocks it for the strict
# pods that arrive during its lifetime.
NEAR = Hardware("near", 1000.0, 4.0 * GIB, 110, 30.0, 80.0, 50.0 * GIB)


def _tiny_scarce_near(rng, n, limits, training):
    nodes = (NodeSpec(NEAR, 3.0), NodeSpec(LARGE, 40.0), NodeSpec(LARGE, 45.0))
    strict = PodClass("strict", 2.0, (250.0,), (0.5, 1.0), (0.5, 0.5), ((10.0, 15.0),))
    loose = PodClass("loose", 1.0, (1000.0,), (0.5, 1.0), (0.5, 0.5), ((100.0, 150.0),))
    order = tuple(nodes[i] for i in rng.permutation(3))
    return World("tiny-scarce-near", order, (strict, loose), load=0.05, mean_lifetime_s=20.0,
                 metrics_interval_s=0.0, latency_drift=False)


@pytest.fixture
def tiny_family(monkeypatch):
    monkeypatch.setitem(families.FAMILIES, "tiny-scarce-near",
                        Family("tiny-scarce-near", ("EL",), "test world", _tiny_scarce_near, eval_nodes=(3,)))
    return "tiny-scarce-near"


def test_ppo_from_scratch_learns_to_keep_the_near_node_free_for_strict_pods(tiny_family, tmp_path):
    """From the outcome reward alone (no teacher): measured 0.074 hard violations per limited pod
    against latency-pack's 0.16 (latency-fit, the hand-written answer, also 0.074)."""
    cfg = config_for("ppo", policy="EL", total_timesteps=32_768, seed=2, families=(tiny_family,), min_nodes=3,
                     max_nodes=3, log_dir="", progress=False, out=str(tmp_path), kickstart=0.0,
                     learning_rate=1e-3, gamma=0.95, gae_lambda=0.9, env_workers=1)
    network, record = run(cfg, "ppo")
    model = load_model(save_trained(cfg, network, record), expected_policy="EL")

    results, _ = evaluate("EL", [ModelScorer(model)], (tiny_family,), seeds=3, arrivals=300, progress=False,
                          baselines=("latency-pack", "latency-fit"))
    rows = {r["scorer"]: r for r in summarize(results)}
    learned, pack = rows["rl-el"], rows["latency-pack"]
    # "best tier, then pack" fills the near node with loose pods and strands strict ones ...
    assert pack["hard_violation_rate"] > 0.1
    # ... the policy learned from outcomes leaves it for them
    assert learned["hard_violation_rate"] < 0.6 * pack["hard_violation_rate"], (learned, pack)
    assert learned["objective"] < 0.7 * pack["objective"]
    assert np.isfinite(model.q_values(*_probe())).all()


def test_every_algorithm_trains_and_saves_a_servable_model(tmp_path):
    for algo in ("dqn", "a2c", "ppo"):
        cfg = config_for(algo, policy="LB", total_timesteps=1500, seed=1, families=("test2",), log_dir="",
                         progress=False, out=str(tmp_path), **({"learning_starts": 300} if algo == "dqn" else {}))
        network, record = run(cfg, algo)
        path = save_trained(cfg, network, record, tmp_path / f"lb-{algo}.safetensors")
        model = load_model(path, expected_policy="LB")
        assert model.metadata["training"]["algorithm"].lower().startswith({"dqn": "double dqn", "a2c": "a2c",
                                                                            "ppo": "ppo"}[algo])
        assert np.isfinite(model.q_values(*_probe())).all()


def _probe():
    from agent.sim.simulator import Simulation
    sim = Simulation.of_family("poisson", seed=0, nodes=7)
    sim.next_decision()
    return sim.candidate_state()


def test_fine_tuning_on_a_cluster_profile_records_it_and_evaluates_on_it(tmp_path, capsys):
    """rlscore-train --profile --init: the serving model fine-tuned on one cluster; the sidecar keeps
    the profile (the server's drift reference) and the evaluation of that cluster."""
    from agent.learn.train import main
    from rlscore.core.profile import ClusterProfile, save_profile
    from agent.sim.cluster_profile import profile_world, world_profile

    world = _tiny_scarce_near(np.random.default_rng(0), 3, True, False)
    profile = save_profile(world_profile(world, "tiny-shop"), tmp_path / "cluster.yaml")
    shipped = __import__("pathlib").Path(__file__).resolve().parents[1] / "models" / "el.safetensors"
    args = ["--policy", "EL", "--profile", str(profile), "--init", str(shipped), "--timesteps", "600",
            "--out", str(tmp_path), "--name", "el-shop.safetensors", "--log-dir", "", "--no-progress"]
    assert main(args) == 0
    model = load_model(tmp_path / "el-shop.safetensors", expected_policy="EL")
    meta = model.metadata
    assert meta["training_profile"]["name"] == "tiny-shop"
    assert profile_world(ClusterProfile.model_validate(meta["training_profile"])).nodes == world.nodes
    assert meta["training"]["hyperparameters"]["profile"] == str(profile)
    assert meta["training"]["hyperparameters"]["init"] == str(shipped)
    assert meta["training"]["hyperparameters"]["kickstart"] == 0.0  # no teacher when fine-tuning
    assert meta["evaluation"]["families"] == ["profile:tiny-shop"]
    assert any(g["goal"].startswith("objective <= best baseline") for g in meta["evaluation"]["goals"])


def test_lb_clones_its_teacher_on_a_cluster_profile(tmp_path):
    """LB's default teachers override the usage-skew family, which a profile run does not have: that
    override is left out instead of refusing to start."""
    from agent.learn.train import main
    from rlscore.core.profile import save_profile
    from agent.sim.cluster_profile import world_profile
    from agent.sim.families import family

    world = family("usage-skew").world(np.random.default_rng(0), 4)
    profile = save_profile(world_profile(world, "skewed-4"), tmp_path / "cluster.yaml")
    assert main(["--policy", "LB", "--profile", str(profile), "--kickstart", "1", "--timesteps", "0",
                 "--imitation-steps", "50", "--out", str(tmp_path), "--name", "lb.safetensors", "--log-dir", "",
                 "--no-eval", "--no-progress"]) == 0
    teachers = load_model(tmp_path / "lb.safetensors", expected_policy="LB").metadata["training"]["teachers"]
    assert list(teachers) == ["profile:skewed-4"]


@pytest.mark.parametrize("extra, message", [
    (["--families", "poisson"], "--profile and --families exclude each other"),
    ([], "invalid cluster profile"),
])
def test_profile_training_refuses_bad_input(tmp_path, capsys, extra, message):
    from agent.learn.train import main

    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: ClusterProfile\nname: x\n")
    assert main(["--policy", "EE", "--profile", str(bad), "--out", str(tmp_path), *extra]) == 2
    assert message in capsys.readouterr().err


def test_hidden_widths_reach_the_saved_model(tmp_path):
    """--hidden sets the actor's layer widths; the loader rebuilds that architecture and it serves."""
    from agent.learn.train import main

    assert main(["--policy", "LB", "--algo", "ppo", "--families", "test2", "--hidden", "32,16,8", "--timesteps", "256",
                 "--kickstart", "0", "--out", str(tmp_path), "--log-dir", "", "--no-eval", "--no-progress"]) == 0
    model = load_model(tmp_path / "lb.safetensors", expected_policy="LB")
    assert tuple(model.architecture.hidden) == (32, 16, 8)
    assert model.metadata["training"]["hyperparameters"]["hidden"] == [32, 16, 8]
    assert np.isfinite(model.q_values(*_probe())).all()


@pytest.mark.parametrize("widths, message", [
    ("0,64", "expected comma-separated layer widths"),
    ("64,x", "expected comma-separated layer widths"),
    ("5000", "each 1-4096"),
    (",".join(["8"] * 9), "at most 8 layers"),
])
def test_hidden_refuses_bad_widths(widths, message, tmp_path, capsys):
    from agent.learn.train import main

    with pytest.raises(SystemExit):
        main(["--policy", "LB", "--hidden", widths, "--out", str(tmp_path)])
    assert message in capsys.readouterr().err


def test_hidden_and_init_exclude_each_other(tmp_path, capsys):
    from agent.learn.train import main

    shipped = Path(__file__).resolve().parents[1] / "models" / "lb.safetensors"
    assert main(["--policy", "LB", "--hidden", "128,128", "--init", str(shipped), "--out", str(tmp_path)]) == 2
    assert "--hidden and --init exclude each other" in capsys.readouterr().err
