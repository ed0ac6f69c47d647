"""agent.evaluate.ensemble and rlscore-eval --ensemble: several models scored as one."""

import csv
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from agent.evaluate.ensemble import EnsembleScorer, load_ensemble
from agent.sim.simulator import Simulation
from rlscore.core.features import node_features
from rlscore.core.model import ModelValidationError, load_model

ROOT = Path(__file__).parents[1]
LB, EE, EL = (ROOT / "models" / f"{p}.safetensors" for p in ("lb", "ee", "el"))
BIN = Path(sys.executable).parent


def test_the_ensemble_is_the_mean_of_each_models_standardized_values():
    lb, el = load_model(LB), load_model(EL)
    twice = EnsembleScorer([lb, lb])
    sim = Simulation.of_family("mixed", 7, nodes=12)
    for _ in range(20):
        sim.next_decision()
        state, pod = sim.candidate_state("LB")
        q = lb.q_values(state, pod)
        values = twice.values(state, pod)
        if q.std() > 0:
            np.testing.assert_allclose(values, (q - q.mean()) / q.std(), atol=1e-9)
            assert int(np.argmax(values)) == int(np.argmax(q))
        else:
            assert not values.any()
        sim.place(int(np.argmax(values)))
    with pytest.raises(ValueError, match="models of several policies"):
        EnsembleScorer([lb, el])
    with pytest.raises(ValueError, match="at least two models"):
        EnsembleScorer([lb])
    assert len(twice.values(state, pod)) == len(node_features(state, pod)[0])


@pytest.mark.parametrize("files, policy, message", [
    (f"{LB}", "LB", "at least two models"),
    (f"{LB},{EE}", "LB", "EE"),
    (f"{EE},{EE}", "EE", "rule selector"),
    (f"{LB},{ROOT / 'no-such.safetensors'}", "LB", "no-such.safetensors"),
])
def test_an_ensemble_that_cannot_be_built_is_named(files, policy, message):
    with pytest.raises((ValueError, ModelValidationError)) as e:
        load_ensemble(files, policy, "rl-ensemble-1")
    assert message in str(e.value)


def test_rlscore_eval_scores_an_ensemble_beside_the_model(tmp_path):
    out = tmp_path / "ev"
    ev = subprocess.run([str(BIN / "rlscore-eval"), "--policy", "LB", "--model", str(LB), "--ensemble", f"{LB},{LB}",
                         "--families", "usage-skew", "--nodes", "3", "--seeds", "2", "--arrivals", "60", "--workers",
                         "1", "--out", str(out), "--no-progress", "--compare", "rl-ensemble-1:rl-lb"],
                        capture_output=True, text=True, timeout=600, check=False)
    assert ev.returncode == 0, ev.stderr
    with open(out / "runs.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["scorer"] == "rl-ensemble-1"]
    assert len(rows) == 2 and all(math.isfinite(float(r["objective"])) for r in rows)
    assert any(line.startswith("compare usage-skew @ ") and "objective of rl-ensemble-1 / rl-lb: x" in line
               for line in ev.stdout.splitlines()), ev.stdout
    bad = subprocess.run([str(BIN / "rlscore-eval"), "--policy", "LB", "--ensemble", f"{LB}", "--seeds", "1"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert bad.returncode == 2 and "--ensemble" in bad.stderr and "at least two models" in bad.stderr
