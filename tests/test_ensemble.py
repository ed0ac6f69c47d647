"""An ensemble is one NodeScorer whose values are the mean of its members' values, on any candidate
set, and it is saved, validated and served as any trained model."""

import json

import numpy as np
import pytest
import torch

from agent.learn.ensemble import main, mean_network
from agent.learn.model_io import load_model, save_model, sidecar_path
from agent.learn.network import NodeScorer
from agent.state import PodRequest
from tests.conftest import make_nodes


def _members(seed: int, widths=((16, 8), (12, 8), (16, 8))) -> list[NodeScorer]:
    torch.manual_seed(seed)
    return [NodeScorer(w).eval() for w in widths]


@pytest.mark.parametrize("nodes", [1, 3, 17])
def test_the_ensemble_gives_the_mean_of_its_members_values(nodes):
    members = _members(nodes)
    combined = mean_network(members)
    assert combined.hidden == (44, 24)
    g = torch.Generator().manual_seed(nodes)
    x = torch.rand(2, nodes + 2, members[0].node_features, generator=g) * 4
    pod = torch.rand(2, members[0].pod_features, generator=g)
    mask = torch.ones(2, nodes + 2, dtype=torch.bool)
    mask[0, -2:] = False  # padding must not leak into any member's pools
    with torch.no_grad():
        expected = torch.stack([m(x, pod, mask) for m in members]).mean(dim=0)
        got = combined(x, pod, mask)
    assert torch.equal(torch.isinf(got), torch.isinf(expected))
    finite = torch.isfinite(expected)
    torch.testing.assert_close(got[finite], expected[finite], rtol=1e-5, atol=1e-5)


def test_members_of_different_depth_are_refused():
    with pytest.raises(ValueError, match="differ in depth"):
        mean_network([NodeScorer((8, 8)), NodeScorer((8, 8, 8))])
    with pytest.raises(ValueError, match="at least one"):
        mean_network([])


def test_the_cli_writes_a_servable_model_recording_each_members_training(tmp_path, capsys):
    paths = []
    for i, member in enumerate(_members(5, ((16, 8), (16, 8)))):
        meta = {"training": {"algorithm": f"clone {i}", "command": f"rlscore-train --seed {i}", "seconds": 10.0 + i,
                             "wall_seconds": 20.0 + i, "steps": 100, "seed": i, "hyperparameters": {"s": i},
                             "git_commit": "abc"}}
        paths.append(save_model(tmp_path / f"lb-{i}.pt", member, "LB", meta))
    out = tmp_path / "lb.pt"
    assert main([str(out), *map(str, paths)]) == 0
    assert "2 members, 41 s of training" in capsys.readouterr().out
    model = load_model(out, expected_policy="LB")
    training = json.loads(sidecar_path(out).read_text())["training"]
    assert training["wall_seconds"] == 41.0 and training["seed"] == [0, 1]
    assert [m["file"] for m in training["members"]] == ["lb-0.pt", "lb-1.pt"]
    assert training["command"].endswith(f"python -m agent.learn.ensemble {out} {paths[0]} {paths[1]}")

    nodes, pod = make_nodes([4000, 8000, 16000], cpu_req=[1000, 0, 500]), PodRequest(250, 2**26)
    values = [load_model(p).q_values(nodes, pod) for p in paths]
    np.testing.assert_allclose(model.q_values(nodes, pod), np.mean(values, axis=0), rtol=1e-5, atol=1e-6)

    assert main([str(paths[0]), str(paths[0]), str(paths[1])]) == 2  # would overwrite a member
    ee = save_model(tmp_path / "ee.pt", NodeScorer((16, 8)), "EE", {})
    assert main([str(tmp_path / "mixed.pt"), str(paths[0]), str(ee)]) == 2
    assert "different policies" in capsys.readouterr().err
    assert not (tmp_path / "mixed.pt").exists()
