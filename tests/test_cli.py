"""The console scripts, run as a user runs them."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agent.evaluate.cli import main as eval_main
from agent.evaluate.compare import baselines_for
from agent.learn.train import main as train_main

BIN = Path(sys.executable).parent


def run(*args, cwd=None):
    return subprocess.run([str(BIN / args[0]), *args[1:]], capture_output=True, text=True, cwd=cwd,
                          timeout=600)


def test_train_then_eval_end_to_end(tmp_path):
    """rlscore-train (a short DQN run, TensorBoard logs on) and rlscore-eval on what it wrote."""
    out = run("rlscore-train", "--policy", "lb", "--families", "test2,usage-skew", "--demo-worlds", "2",
              "--demo-decisions", "32", "--burn-in", "10", "--pretrain-steps", "100", "--total-timesteps", "200",
              "--num-envs", "2", "--episode-decisions", "40", "--workers", "1", "--out", str(tmp_path),
              "--name", "lb-dqn.safetensors", "--log-dir", str(tmp_path / "tb"), "--no-eval", "--no-progress",
              "--teacher", "usage-skew=least-utilized", "--rollout-every", "8", "--rollout-horizon", "10",
              "--advantage-weight", "0.5")
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "lb-dqn.safetensors").is_file() and (tmp_path / "lb-dqn.json").is_file()
    training = json.loads((tmp_path / "lb-dqn.json").read_text())["training"]
    assert training["demonstrations"]["teachers"]["usage-skew"] == {"least-utilized": 1}
    assert training["demonstrations"]["rollout_labels"]["decisions"] == 2 * 32 // 8
    assert training["hyperparameters"]["advantage_weight"] == 0.5 and training["final_losses"]["advantage"] >= 0
    # the TensorBoard run: the losses every 100 gradient steps, the margin's weight, episodes and exploration
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    [run_dir] = (tmp_path / "tb").iterdir()
    assert run_dir.name.startswith("lb-dqn-seed1-"), run_dir.name
    logged = EventAccumulator(str(run_dir)).Reload()
    for tag in ("loss/td", "loss/margin", "loss/advantage", "schedule/margin_weight"):
        assert [e.step for e in logged.Scalars(tag)] == [100], tag
    assert logged.Scalars("schedule/margin_weight")[0].value == 1.0  # still pre-training at step 100
    returns = [e.value for e in logged.Scalars("episode/return")]  # two environments, 40 decisions an episode
    assert len(returns) == 4 and training["final_mean_episode_return"] == pytest.approx(sum(returns) / 4, rel=1e-5)
    assert {e.step for e in logged.Scalars("schedule/epsilon")} == {e.step for e in logged.Scalars("episode/return")}
    ev = run("rlscore-eval", "--policy", "LB", "--model", str(tmp_path / "lb-dqn.safetensors"), "--families", "test2,usage-skew",
             "--nodes", "3,5", "--seeds", "1", "--arrivals", "60", "--out", str(tmp_path / "ev"), "--no-progress")
    assert ev.returncode == 0, ev.stderr
    for name in ("summary.md", "summary.csv", "runs.csv", "objectives.png", "pods_per_node.png",
                 "active_nodes.png", "power.png", "latency.png"):
        assert (tmp_path / "ev" / name).stat().st_size > 0, name
    # each goal's verdict and measure (the best rule's name may differ where rules tie)
    goals = [line.split(" (")[0] for line in ev.stdout.splitlines() if line.startswith(("PASS ", "FAIL "))]
    assert goals
    # every rule named (in another order) is every rule: the goals are checked as without --rules
    every = run("rlscore-eval", "--policy", "LB", "--model", str(tmp_path / "lb-dqn.safetensors"), "--families",
                "test2,usage-skew", "--nodes", "3,5", "--seeds", "1", "--arrivals", "60", "--out",
                str(tmp_path / "ev-every"), "--no-progress", "--rules", ",".join(reversed(baselines_for("LB"))))
    assert every.returncode == 0, every.stderr
    assert [line.split(" (")[0] for line in every.stdout.splitlines() if line.startswith(("PASS ", "FAIL "))] == goals
    summary = (tmp_path / "ev" / "summary.md").read_text()
    assert "rl-lb" in summary and "least-utilized" in summary and "usage-skew" in summary
    # two models on the hold-out seeds, beside two of the rules: each paired by seed with the best of them
    # and with the first model
    two = run("rlscore-eval", "--policy", "LB", "--model", str(tmp_path / "lb-dqn.safetensors"), "--model",
              "models/lb.safetensors", "--families", "usage-skew", "--nodes", "3", "--seeds", "2", "--arrivals", "60",
              "--holdout", "--out", str(tmp_path / "ev2"), "--no-progress", "--rules", "headroom-informed,least-utilized",
              "--compare",
              f"rl-{tmp_path.name}/lb-dqn:headroom-informed", cwd=Path(__file__).parents[1])
    assert two.returncode == 0, two.stderr
    paired = [line for line in two.stdout.splitlines() if line.startswith("paired usage-skew @ ")]
    assert len(paired) == 2 and "of rl-" not in paired[0] and f"of rl-{tmp_path.name}/lb-dqn (" in paired[1]
    # --compare: the objective and the goals' metric of A over B, each its own line
    compared = [line for line in two.stdout.splitlines() if line.startswith("compare usage-skew @ ")]
    assert [line.split(": ")[1].split(" of ")[0] for line in compared] == ["objective", "hot_node_share"]
    assert all(f"of rl-{tmp_path.name}/lb-dqn / headroom-informed: x" in line for line in compared)
    scorers = {line.split(",")[0] for line in (tmp_path / "ev2" / "runs.csv").read_text().splitlines()[1:]}
    assert scorers == {f"rl-{tmp_path.name}/lb-dqn", "rl-models/lb", "headroom-informed", "least-utilized"}
    holdout_seeds = {line.split(",")[3] for line in (tmp_path / "ev2" / "runs.csv").read_text().splitlines()[1:]}
    evaluation_seeds = {line.split(",")[3] for line in (tmp_path / "ev" / "runs.csv").read_text().splitlines()[1:]}
    assert holdout_seeds and not holdout_seeds & evaluation_seeds


def test_the_twin_does_not_take_the_dqns_file(tmp_path):
    """--demonstrations-only without --name writes <policy>-demonstrations.safetensors, so a twin trained
    beside its DQN (or into models/) never replaces it."""
    (tmp_path / "lb.safetensors").write_bytes(b"the DQN")
    out = run("rlscore-train", "--policy", "LB", "--families", "test2", "--demo-worlds", "2", "--demo-decisions", "16",
              "--pretrain-steps", "10", "--total-timesteps", "200", "--batch-size", "32", "--demonstrations-only",
              "--workers", "1", "--out", str(tmp_path),
              "--log-dir=", "--no-eval", "--no-progress")
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "lb.safetensors").read_bytes() == b"the DQN"
    assert f"wrote {tmp_path / 'lb-demonstrations.safetensors'}" in out.stdout
    sidecar = json.loads((tmp_path / "lb-demonstrations.json").read_text())
    assert sidecar["training"]["hyperparameters"]["demonstrations_only"] is True


BAD_INPUT = [  # (command, arguments, what the error must say); {bad} is a file that is not a model
    ("rlscore-eval", ["--policy", "EL", "--model", "{bad}"], "not a readable model file"),
    ("rlscore-eval", ["--policy", "EL", "--nodes", "0,3"], "node counts must be >= 1"),
    ("rlscore-eval", ["--policy", "EL", "--families", "test9"], "unknown family"),
    ("rlscore-eval", ["--policy", "LB", "--no-model", "--compare", "headroom-balance"],
     "expected two scorer names as A:B"),
    ("rlscore-eval", ["--policy", "LB", "--no-model", "--compare", "latency-fit:headroom-balance"],
     "--compare: no scorer latency-fit in this evaluation"),
    ("rlscore-eval", ["--policy", "LB", "--no-model", "--rules", "least-utilized,latency-fit"],
     "--rules: latency-fit: expected rules of LB from"),
    ("rlscore-train", ["--policy", "XX"], "invalid choice"),
    ("rlscore-train", ["--policy", "EE", "--total-timesteps", "-1"], "--total-timesteps must be >= 0"),
    ("rlscore-train", ["--policy", "LB", "--blind-to", "latency,speed"], "--blind-to: unknown input 'speed'"),
    ("rlscore-train", ["--policy", "LB", "--teacher", "mixd=headroom-balance"],
     "--teacher 'mixd=headroom-balance': unknown scenario family 'mixd'"),
    ("rlscore-train", ["--policy", "LB", "--teacher", "mixed=nothing"], "expected FAMILY=RULE"),
    ("rlscore-train", ["--policy", "LB", "--rollout-every", "-1"], "--rollout-every must be >= 0"),
    ("rlscore-train", ["--policy", "LB", "--advantage-weight", "1"], "--advantage-weight needs --rollout-every"),
    ("rlscore-train", ["--policy", "EL", "--rollout-every", "2", "--rollout-confidence", "2"],
     "--rollout-confidence needs --rollout-futures >= 2"),
    ("rlscore-train", ["--policy", "EE", "--init", "{bad}"], "not a readable model file"),
]


@pytest.mark.parametrize(("command", "arguments", "message"), BAD_INPUT,
                         ids=[f"{c} {' '.join(a)}" for c, a, _ in BAD_INPUT])
def test_clear_errors_on_bad_input(command, arguments, message, tmp_path, capsys):
    """Each refusal exits 2 and names the problem; run in process (the console scripts' own main), the
    way a user's shell runs it is checked once below."""
    bad = tmp_path / "el.safetensors"
    bad.write_bytes(b"garbage")
    main = {"rlscore-eval": eval_main, "rlscore-train": train_main}[command]
    try:
        code = main([a.format(bad=bad) for a in arguments])
    except SystemExit as stop:  # argparse's refusals
        code = stop.code
    assert code == 2 and message in capsys.readouterr().err


def test_a_console_script_refuses_bad_input_with_exit_code_2(tmp_path):
    bad = tmp_path / "el.safetensors"
    bad.write_bytes(b"garbage")
    tr = run("rlscore-train", "--policy", "EE", "--init", str(bad))
    assert tr.returncode == 2 and "--init" in tr.stderr and "not a readable model file" in tr.stderr


def test_sim_to_real_refuses_before_any_run(tmp_path, monkeypatch, capsys):
    """Without the local cluster's settings, with no model, or with nothing to run, it says what is
    wrong and creates nothing."""
    from agent.live import sim_to_real

    for name in ("KUBECONFIG", "RLSCORE_LOCAL_PROMETHEUS_URL", "RLSCORE_LOCAL_SERVER_URL", "RLSCORE_LOCAL_CPU_QUERY",
                 "RLSCORE_LOCAL_REFRESH_INTERVAL_S", "RLSCORE_LOCAL_DIR"):
        monkeypatch.delenv(name, raising=False)
    out = tmp_path / "runs.json"
    assert sim_to_real.main(["--out", str(out)]) == 2
    assert "RLSCORE_LOCAL_PROMETHEUS_URL" in capsys.readouterr().err
    for bad in (["--runs", "0"], ["--replays", "0"]):
        assert sim_to_real.main([*bad, "--out", str(out)]) == 2
        assert "--runs, --pods and --replays must be >= 1" in capsys.readouterr().err
    for name in ("KUBECONFIG", "RLSCORE_LOCAL_PROMETHEUS_URL", "RLSCORE_LOCAL_SERVER_URL", "RLSCORE_LOCAL_CPU_QUERY"):
        monkeypatch.setenv(name, "x")
    monkeypatch.setenv("RLSCORE_LOCAL_REFRESH_INTERVAL_S", "2")
    monkeypatch.setenv("RLSCORE_LOCAL_DIR", str(tmp_path))
    assert sim_to_real.main(["--out", str(out)]) == 2
    assert "no such model file" in capsys.readouterr().err
    assert not out.exists()
