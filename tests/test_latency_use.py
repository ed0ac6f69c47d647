"""agent.evaluate.latency_use: where EL's scorers place pods by latency, and which broken hard limits
the cluster could have met."""

import numpy as np
import pytest

from agent.evaluate.latency_use import IN_REACH, NO_LIMIT, OUT_OF_REACH, depth_in_tier, latency_use, main

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("latency", "tiers", "pick", "depth"), [
    ([5.0, 10.0, 20.0], [2, 2, 2], 0, 0.0),  # the nearest of the tier
    ([5.0, 10.0, 20.0], [2, 2, 2], 2, 1.0),  # the farthest
    ([5.0, 10.0, 20.0], [2, 2, 2], 1, 0.5),
    ([5.0, 10.0, 20.0, 90.0], [2, 2, 1, 0], 1, 1.0),  # only the best tier counts
    ([5.0, 90.0], [2, 1], 0, 0.5),  # a tier of one node leaves no choice
])
def test_depth_in_tier_is_the_picks_place_among_the_best_tiers_nodes_by_latency(latency, tiers, pick, depth):
    assert depth_in_tier(np.array(latency), np.array(tiers), pick) == depth


def test_latency_fit_goes_farthest_in_the_tier_and_breaks_fewer_limits_in_reach_than_latency_pack():
    """On the mixed worlds latency-fit keeps the near nodes for the pods that need them, where
    latency-pack packs onto them; a limit no node of the cluster meets is broken by both."""
    fit, pack = (latency_use(rule, "mixed", seeds=8, decisions=200) for rule in ("latency-fit", "latency-pack"))
    for use in (fit, pack):
        assert sum(use.pods.values()) == 8 * 200
        assert min(use.pods.values()) > 0
        assert use.broken[NO_LIMIT] == 0 and use.broken[OUT_OF_REACH] == use.pods[OUT_OF_REACH]
        assert 0.0 <= use.opens <= 1.0
    assert fit.depth_in_tier > 0.9 > pack.depth_in_tier
    assert fit.broken[IN_REACH] < pack.broken[IN_REACH]


def test_the_command_reads_a_model_and_refuses_what_it_cannot_measure(capsys):
    assert main(["--model", "models/el.safetensors", "--rules", "latency-fit", "--family", "scarce-near",
                 "--seeds", "1", "--decisions", "20"]) == 0
    out = capsys.readouterr().out
    assert "models/el.safetensors: limited pods placed" in out and "latency-fit: limited pods placed" in out
    assert main(["--rules", "no-such-rule"]) == 2
    assert main(["--family", "nowhere"]) == 2
    assert main(["--model", "models/lb.safetensors"]) == 2  # not an EL model
    assert main(["--seeds", "0"]) == 2
    assert "latency_use:" in capsys.readouterr().err
