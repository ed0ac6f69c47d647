"""The live replay draws its arrivals from the simulator's families (the e2e tests and `make demo`
replay them on the local cluster); these checks need no cluster."""

import itertools

import numpy as np
import pytest

from agent.live.loadgen import SCENARIOS, live_events, with_min_lifetime


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


def test_min_lifetime_keeps_every_pod_long_enough_to_be_recorded_and_nothing_else_changes():
    def prefix(stream, arrivals):
        out, seen = [], 0
        for e in stream:
            if e.kind == "arrive":
                if seen == arrivals:
                    return out
                seen += 1
            out.append(e)

    original = prefix(live_events("poisson", np.random.default_rng(5), 32_000.0, 4), 300)
    clamped = with_min_lifetime(live_events("poisson", np.random.default_rng(5), 32_000.0, 4), 300, 24.0)
    arrive = {e.pod.id: e.time for e in original if e.kind == "arrive"}
    before = {e.pod_id: e.time for e in original if e.kind == "depart"}
    after = {e.pod_id: e.time for e in clamped if e.kind == "depart"}
    assert sum(e.kind == "arrive" for e in clamped) == 300
    assert [(e.pod.id, e.time) for e in clamped if e.kind == "arrive"] == sorted(arrive.items(), key=lambda x: x[1])
    assert [(e.time, e.seq) for e in clamped] == sorted((e.time, e.seq) for e in clamped)
    assert set(after) == set(before)
    short = [i for i in before if before[i] - arrive[i] < 24.0]
    assert short, "the stream has short-lived pods to clamp"
    assert all(after[i] == pytest.approx(arrive[i] + 24.0) for i in short)
    assert all(after[i] == before[i] for i in before if i not in short)
