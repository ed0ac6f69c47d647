"""The console scripts, run as a user runs them."""

import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent


def run(*args, cwd=None):
    return subprocess.run([str(BIN / args[0]), *args[1:]], capture_output=True, text=True, cwd=cwd,
                          timeout=600)


def test_train_then_eval_end_to_end(tmp_path):
    out = run("rlscore-train", "--policy", "lb", "--timesteps", "1200", "--out", str(tmp_path),
              "--log-dir", str(tmp_path / "tb"), "--no-eval", "--no-progress")
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "lb.pt").is_file() and (tmp_path / "lb.json").is_file()
    assert any((tmp_path / "tb").rglob("events.out.tfevents.*"))  # TensorBoard logs

    ev = run("rlscore-eval", "--policy", "LB", "--model", str(tmp_path / "lb.pt"), "--scenario", "test2",
             "--nodes", "3,5", "--seeds", "1", "--decisions", "60", "--out", str(tmp_path / "ev"),
             "--no-progress")
    assert ev.returncode == 0, ev.stderr
    for name in ("summary.md", "summary.csv", "runs.csv", "pods_per_node.png", "active_nodes.png",
                 "latency.png"):
        assert (tmp_path / "ev" / name).stat().st_size > 0, name
    assert "rl-lb" in (tmp_path / "ev" / "summary.md").read_text()


def test_clear_errors_on_bad_input(tmp_path):
    bad = tmp_path / "el.pt"
    bad.write_bytes(b"garbage")
    ev = run("rlscore-eval", "--policy", "EL", "--model", str(bad))
    assert ev.returncode == 2 and "not a readable model file" in ev.stderr
    ev = run("rlscore-eval", "--policy", "EL", "--nodes", "0,3")
    assert ev.returncode == 2 and "node counts must be >= 1" in ev.stderr
    ev = run("rlscore-eval", "--policy", "EL", "--scenario", "test9")
    assert ev.returncode == 2 and "unknown scenario" in ev.stderr
    tr = run("rlscore-train", "--policy", "XX")
    assert tr.returncode == 2 and "invalid choice" in tr.stderr
    tr = run("rlscore-train", "--policy", "EE", "--timesteps", "0")
    assert tr.returncode == 2 and "--timesteps must be >= 1" in tr.stderr
