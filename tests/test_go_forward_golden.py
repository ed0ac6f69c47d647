"""The forward pass Go's own tests check without Python (plugin-go/pkg/rlscore/testdata/forward_golden.json).

tests/test_go_scorer_parity.py compares Go with Python on the shipped models, but only when Python
writes the cases; `go test` alone once passed with a weight index of the forward pass changed. The
golden file gives Go a fixed case: a small network with numpy-drawn weights (widths 12 and 9, so the
forward pass's eight-wide register blocks have tails) and random features, with the Q-values
Python's served forward pass gives. This test keeps the file true: it rebuilds it and compares.

    .venv/bin/python -m tests.test_go_forward_golden   # rewrite the file (after a feature spec change)
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch

from rlscore.core.features import NUM_NODE_FEATURES, NUM_POD_FEATURES
from rlscore.core.model import load_model
from agent.learn.model_io import save_model
from agent.learn.network import NodeScorer

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "plugin-go" / "pkg" / "rlscore" / "testdata" / "forward_golden.json"
HIDDEN = (12, 9)
NODES = (1, 2, 9, 40)


def build_golden() -> dict:
    rng = np.random.default_rng(24)
    network = NodeScorer(HIDDEN)
    with torch.no_grad():
        for parameter in network.parameters():
            parameter.copy_(torch.from_numpy(rng.normal(0.0, 0.4, tuple(parameter.shape)).astype(np.float32)))
    with tempfile.TemporaryDirectory() as tmp:
        model = load_model(save_model(Path(tmp) / "golden.safetensors", network, "EE", {"note": "forward golden"}))
    cases = []
    for n in NODES:
        features = rng.uniform(-1.0, 2.0, (n, NUM_NODE_FEATURES)).astype(np.float32)
        pod = rng.uniform(0.0, 1.0, NUM_POD_FEATURES).astype(np.float32)
        q = model.q_values_from_features(features, pod)
        cases.append({"features": features.astype(np.float64).ravel().tolist(),
                      "pod_features": pod.astype(np.float64).tolist(), "q": np.asarray(q, np.float64).tolist()})
    model_json = model.export()
    model_json["version"] = "forward-golden"  # the file hash would change with torch's serialization
    return {"model": model_json, "cases": cases}


def test_the_golden_file_is_what_python_computes():
    built = build_golden()
    stored = json.loads(GOLDEN.read_text())
    assert stored["model"] == built["model"], "weights differ: rewrite with python -m tests.test_go_forward_golden"
    for got, want in zip(stored["cases"], built["cases"], strict=True):
        assert got["features"] == want["features"] and got["pod_features"] == want["pod_features"]
        assert got["q"] == pytest.approx(want["q"], rel=1e-12, abs=1e-12)
    assert len({round(v, 6) for case in built["cases"] for v in case["q"]}) > 40, "a degenerate case checks nothing"


if __name__ == "__main__":
    GOLDEN.write_text(json.dumps(build_golden()) + "\n")
    print(f"wrote {GOLDEN}")
