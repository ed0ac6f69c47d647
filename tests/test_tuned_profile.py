"""kube-scheduler's weighted score sum in the simulator (agent/tune/kube_scores.py) against the real
scheduler framework, and the rl-tuned KubeSchedulerConfiguration against kube-scheduler's loader.

Python draws score configurations (every strategy, random resource and plugin weights, random
RequestedToCapacityRatio shapes, BalancedAllocation off and on) and node states, writes each
configuration as rlscore-tune writes it, and runs plugin-go's TestTunedProfileScoresMatchPython: the
framework, built from the loaded file with the in-tree plugins, must give every node the score Python
computed.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from rlscore.core.rules import default_scheduler, least_allocated, most_allocated
from rlscore.core.state import NodeState, PodRequest
from agent.tune.kube_scores import DEFAULT, STRATEGIES, ScoreConfig, node_scores
from agent.tune.scheduler_config import kube_scheduler_configuration

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "plugin-go"
GO = os.environ.get("GO", "go")
MIB = 2**20


def _random_config(rng: np.random.Generator) -> ScoreConfig:
    strategy = STRATEGIES[int(rng.integers(len(STRATEGIES)))]
    shape = ()
    if strategy == "RequestedToCapacityRatio":
        points = int(rng.integers(1, 5))
        utils = np.sort(rng.choice(np.arange(0, 101), size=points, replace=False))
        shape = tuple((int(u), int(rng.integers(0, 11))) for u in utils)
    return ScoreConfig(strategy, int(rng.integers(1, 101)), int(rng.integers(1, 101)), shape,
                       int(rng.integers(1, 11)), int(rng.integers(0, 4)))


def _random_state(rng: np.random.Generator) -> tuple[NodeState, PodRequest]:
    n = int(rng.integers(1, 9))
    cpu = rng.choice([2000, 4000, 8000, 16000, 3500], n).astype(float)
    mem = rng.choice([4, 8, 16, 32, 64], n) * 1024.0 * MIB + rng.integers(0, 1000, n) * MIB
    cpu_req = np.floor(cpu * rng.uniform(0, 1.05, n))  # a little over capacity now and then
    mem_req = np.floor(mem * rng.uniform(0, 1.05, n))
    cpu_req[rng.random(n) < 0.2] = 0.0
    state = NodeState([f"node-{i}" for i in range(n)], cpu, mem, np.full(n, 110.0), cpu_req, mem_req, np.ones(n))
    pod = PodRequest(float(rng.choice([100, 250, 500, 1000, 3000])), float(rng.choice([64, 256, 1024, 4096]) * MIB))
    return state, pod


def test_default_config_equals_the_default_heuristic():
    """With kube-scheduler's default weights the weighted sum is the scorer evaluation has always
    used for the default profile (rlscore.core.rules.default_scheduler)."""
    rng = np.random.default_rng(3)
    tie = np.random.default_rng(0)
    for _ in range(300):
        state, pod = _random_state(rng)
        assert np.array_equal(node_scores(DEFAULT, state, pod), default_scheduler(state, pod, tie))
        most = ScoreConfig("MostAllocated", balanced_weight=0)
        assert np.array_equal(node_scores(most, state, pod), most_allocated(state, pod, tie))
        least = ScoreConfig("LeastAllocated", balanced_weight=0)
        assert np.array_equal(node_scores(least, state, pod), least_allocated(state, pod, tie))


@pytest.mark.parametrize("bad, message", [
    (dict(strategy="Packed"), "strategy"),
    (dict(cpu_weight=0), "cpu_weight"),
    (dict(memory_weight=101), "memory_weight"),
    (dict(fit_weight=0), "fit_weight"),
    (dict(balanced_weight=-1), "balanced_weight"),
    (dict(strategy="RequestedToCapacityRatio"), "at least one shape point"),
    (dict(strategy="RequestedToCapacityRatio", shape=((50, 5), (50, 6))), "increase"),
    (dict(strategy="RequestedToCapacityRatio", shape=((0, 11),)), "scores"),
    (dict(shape=((0, 1),)), "only applies"),
    (dict(rlscore_weight=2), "rlscore_policy"),
])
def test_invalid_score_configs_are_refused(bad, message):
    with pytest.raises(ValueError, match=message):
        ScoreConfig(**bad)


def test_rlscore_weight_needs_rlscore_scores():
    state, pod = _random_state(np.random.default_rng(1))
    config = ScoreConfig(rlscore_weight=5, rlscore_policy="EE")
    with pytest.raises(ValueError, match="RLScore"):
        node_scores(config, state, pod)
    rl = np.arange(len(state)) % 101
    assert np.array_equal(node_scores(config, state, pod, rl), node_scores(DEFAULT, state, pod) + 5 * rl)


def test_framework_scores_equal_the_simulator(tmp_path):
    rng = np.random.default_rng(11)
    configs = [DEFAULT, ScoreConfig("MostAllocated", 3, 1, (), 2, 0),
               ScoreConfig("RequestedToCapacityRatio", 1, 1, ((0, 0), (60, 10), (100, 2)), 1, 1),
               ScoreConfig("RequestedToCapacityRatio", 2, 5, ((0, 10), (100, 0)), 3, 0),
               *(_random_config(rng) for _ in range(16))]
    cases = []
    for k, config in enumerate(configs):
        path = tmp_path / f"rl-tuned-{k}.yaml"
        path.write_text(kube_scheduler_configuration(config, comment=config.label))
        for _ in range(15):
            state, pod = _random_state(rng)
            expected = node_scores(config, state, pod)
            cases.append({
                "config": str(path),
                "nodes": [{"name": name, "cpu_milli": int(state.cpu_capacity[i]),
                           "memory_bytes": int(state.memory_capacity[i]),
                           "requested_cpu_milli": int(state.cpu_requested[i]),
                           "requested_memory_bytes": int(state.memory_requested[i])}
                          for i, name in enumerate(state.names)],
                "pod": {"cpu_milli": int(pod.cpu_millicores), "memory_bytes": int(pod.memory_bytes)},
                "expected": {name: int(expected[i]) for i, name in enumerate(state.names)},
            })
    parity = tmp_path / "cases.json"
    parity.write_text(json.dumps(cases))
    test = "TestTunedProfileScoresMatchPython"
    result = subprocess.run([GO, "test", "-count=1", "-run", f"^{test}$", "-v", "./pkg/rlscore/"], cwd=PLUGIN,
                            env={**os.environ, "RLSCORE_TUNED_PARITY_FILE": str(parity)},
                            capture_output=True, text=True, timeout=900)
    print("\n".join(line for line in result.stdout.splitlines() if "tuned_test.go" in line or "---" in line))
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-3000:]
    assert f"--- PASS: {test}" in result.stdout, "the Go test did not run (skipped?)"
    assert f"{len(cases)} cases" in result.stdout
