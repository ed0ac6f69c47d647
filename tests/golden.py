"""The golden fixtures of the Go scorer: what Python's core (the reference) computes on random states,
committed as plugin-go/pkg/rlscore/testdata/golden.json.gz so that `go test` alone checks the plugin's
port of every feature column, every servable rule, each shipped model's forward pass (a node scorer's
Q-values, a selector's logits and pick) and the integer scores.

    .venv/bin/python -m tests.golden          # rewrite the fixtures (make golden)

tests/test_golden.py fails when the committed file differs from what the code computes now, so a
change to the Python reference that is not carried into the fixtures (and then into Go) is caught.
"""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

import numpy as np
import orjson
from threadpoolctl import threadpool_limits

from rlscore.core.features import NODE_FEATURES, node_features
from rlscore.core.model import LoadedSelector, load_model, servable_rules
from rlscore.core.rules import RULES
from rlscore.core.scoring import to_node_scores
from rlscore.core.state import NODE_ARRAYS, POLICIES, NodeState, PodRequest

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "plugin-go" / "pkg" / "rlscore" / "testdata" / "golden.json.gz"
MODELS = ROOT / "models"
FIXTURE_MODELS = ROOT / "tests" / "models"
SIZES = (1, 2, 3, 7, 40, 300)
MIB = 2**20


def _list(values) -> list[float | None]:
    return [None if not np.isfinite(v) else float(v) for v in np.asarray(values, dtype=np.float64).tolist()]


def random_state(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A cluster as a live one looks: mixed sizes, requests, measured load and latency, power known for
    some nodes, and unknown values (no metrics yet, no probe) here and there."""
    cpu = rng.choice([2000.0, 4000.0, 8000.0, 16000.0, 32000.0], n)
    requested = cpu * rng.uniform(0, 0.95, n)
    known = rng.random(n) < 0.6
    state = {
        "cpu_capacity": cpu, "memory_capacity": cpu * rng.choice([1.0, 2.0, 4.0], n) * MIB,
        "max_pods": rng.choice([30.0, 110.0], n), "cpu_requested": requested,
        "memory_requested": requested * rng.uniform(0.5, 3.0, n) * MIB,
        "pods": np.floor(requested / 250.0),
        "cpu_utilization": np.clip(requested / cpu * rng.uniform(0.2, 1.6, n), 0, 1),
        "memory_utilization": rng.uniform(0, 0.9, n), "latency_ms": rng.uniform(1, 80, n),
        "power_idle_watts": np.where(known, cpu / 1000 * rng.uniform(3, 13, n), np.nan),
        "power_max_watts": np.where(known, cpu / 1000 * rng.uniform(14, 35, n), np.nan),
        "network_receive_bytes_per_s": rng.uniform(0, 1e7, n), "tcp_established": rng.integers(0, 500, n) * 1.0,
        "disk_utilization": rng.uniform(0, 1, n),
        "cpu_requested_since_metrics": np.where(rng.random(n) < 0.3, rng.uniform(0, 2000, n), 0.0),
        "cpu_utilization_stddev": np.where(rng.random(n) < 0.3, np.nan, rng.uniform(0, 0.3, n)),
    }
    for key, share in (("cpu_utilization", 0.2), ("memory_utilization", 0.2), ("latency_ms", 0.2),
                       ("network_receive_bytes_per_s", 0.1), ("tcp_established", 0.1), ("disk_utilization", 0.1)):
        state[key] = np.where(rng.random(n) < share, np.nan, state[key])
    # ties: some nodes equal to another in everything a rule reads
    if n >= 4:
        for key in state:
            state[key][1] = state[key][0]
    return state


def pods(rng: np.random.Generator) -> list[PodRequest]:
    cpu = [float(rng.choice([0, 100, 500, 2000])) for _ in range(5)]
    return [PodRequest(cpu[0], float(rng.choice([0, 64, 256, 4096])) * MIB),
            PodRequest(cpu[1], 256 * MIB, 20.0, 40.0, 0.3), PodRequest(cpu[2], 64 * MIB, 10.0, None),
            PodRequest(cpu[3], 128 * MIB, None, 30.0, 3.0), PodRequest(cpu[4], 0.0, 50.0, 50.0)]


def fixture_models() -> dict[str, object]:
    """The shipped models, and the test fixtures that exercise what they do not (tests/models)."""
    models = {p: load_model(MODELS / f"{p.lower()}.safetensors") for p in POLICIES}
    for path in sorted(FIXTURE_MODELS.glob("*.safetensors")):
        models[path.stem] = load_model(path)
    return models


def cases(models: dict) -> list[dict]:
    rng = np.random.default_rng(2026)
    out = []
    for n in SIZES:
        for _ in range(2):
            arrays = random_state(n, rng)
            held = float(np.nansum(arrays["cpu_requested"]))
            now, peak = (float(rng.choice([np.nan, 1.0, 1.2, 1.5])) * held for _ in range(2))
            nodes = NodeState(names=[f"n{i}" for i in range(n)], cluster_cpu_requested=now,
                              recent_peak_cpu_requested=peak, **arrays)
            for request in pods(rng)[: 2 if n >= 300 else 5]:
                features, pod_vec = node_features(nodes, request)
                case = {"nodes": {k: _list(getattr(nodes, k)) for k in NODE_ARRAYS},
                        "cluster_requested": _list([nodes.cluster_cpu_requested])[0],
                        "recent_peak": _list([nodes.recent_peak_cpu_requested])[0],
                        "pod": {"cpu": request.cpu_millicores, "memory": request.memory_bytes,
                                "soft": request.latency_soft_ms or 0.0, "hard": request.latency_hard_ms or 0.0,
                                "usage": request.cpu_usage_ratio or 0.0},
                        "features": features.astype(np.float64).ravel().tolist(),
                        "pod_features": pod_vec.astype(np.float64).tolist(),
                        "rules": {name: _list(RULES[name](nodes, request, np.random.default_rng(0)))
                                  for name in servable_rules()},
                        "models": {}}
                for name, model in models.items():
                    if isinstance(model, LoadedSelector):
                        values, rule = model.decide(nodes, request)
                        answer = {"rule": rule, "logits": model.logits(features, pod_vec).tolist()}
                    else:
                        values, answer = model.q_values_from_features(features, pod_vec), {}
                    case["models"][name] = {**answer, "values": _list(values),
                                            "scores": to_node_scores(values).tolist()}
                out.append(case)
    return out


def build() -> bytes:
    """The fixtures, computed with one BLAS thread as the server computes them: a product over a few hundred
    nodes sums in another order with more threads (the last bits differ), and a test process that started
    a server before (threadpool_limits in its lifespan) is left at one thread."""
    with threadpool_limits(1):
        return _build()


def _build() -> bytes:
    models = fixture_models()
    payload = {"note": "generated by `python -m tests.golden` (make golden); do not edit",
               "node_features": list(NODE_FEATURES),
               "models": {name: m.export() for name, m in models.items()}, "cases": cases(models)}
    return orjson.dumps(payload)


def main() -> int:
    data = build()
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN.write_bytes(gzip.compress(data, compresslevel=9, mtime=0))
    print(f"wrote {GOLDEN.relative_to(ROOT)} ({GOLDEN.stat().st_size} bytes, {len(data)} uncompressed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
