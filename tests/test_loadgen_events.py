"""The live replay draws its arrivals from the simulator's families (the e2e tests and `make demo`
replay them on the local cluster); these checks need no cluster."""

import itertools

import numpy as np
import pytest

from agent.live.loadgen import SCENARIOS, live_events


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_live_scenarios_replay_the_thesis_pod_with_its_latency_limits(scenario):
    stream = list(itertools.islice(live_events(scenario, np.random.default_rng(0), 16_000.0, 4), 200))
    arrivals = [e for e in stream if e.kind == "arrive"]
    assert arrivals and all(e.kind in ("arrive", "depart", "shift-latency") for e in stream)
    assert [e.time for e in stream] == sorted(e.time for e in stream)
    assert {(e.pod.latency_soft_ms, e.pod.latency_hard_ms) for e in arrivals} == {(20.0, 30.0)}
    if scenario != "poisson":
        assert {(e.pod.cpu_millicores, e.pod.memory_bytes) for e in arrivals} == {(250.0, 64 * 1024**2)}
    departed = {e.pod_id for e in stream if e.kind == "depart"}
    assert departed <= {e.pod.id for e in arrivals}


def test_latency_shift_swaps_latencies_during_the_run():
    stream = list(itertools.islice(live_events("latency-shift", np.random.default_rng(0), 16_000.0, 4), 400))
    assert [e.time for e in stream if e.kind == "shift-latency"] == [300.0, 600.0]


def test_poisson_arrival_rate_follows_the_live_clusters_cpu():
    def rate(cpu):
        stream = itertools.islice(live_events("poisson", np.random.default_rng(3), cpu, 4), 3000)
        times = [e.time for e in stream if e.kind == "arrive"]
        return len(times) / times[-1]
    assert rate(64_000.0) == pytest.approx(4 * rate(16_000.0), rel=0.2)


@pytest.mark.parametrize("bad", [dict(scenario="nope"), dict(nodes=0), dict(cpu=0.0), dict(cpu=float("nan"))])
def test_bad_replay_requests_are_refused_with_the_reason(bad):
    args = dict(scenario="poisson", cpu=16_000.0, nodes=4) | bad
    with pytest.raises(ValueError, match="scenario|cpu"):
        live_events(args["scenario"], np.random.default_rng(0), args["cpu"], args["nodes"])
