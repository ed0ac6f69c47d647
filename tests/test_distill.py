"""agent.learn.distill: an ensemble of networks taught to one network of the same size."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from agent.evaluate.ensemble import consensus
from agent.learn import distill
from agent.learn.distill import DistillConfig, agreement, distil, distillation_loss, main
from agent.learn.model_io import save_model, torch_network
from agent.learn.network import NodeScorer
from rlscore.core.model import load_model

LB = Path(__file__).parents[1] / "models" / "lb.safetensors"
WORLDS = {"families": ["test2"], "min_nodes": 3, "max_nodes": 8, "node_draw": "uniform", "mixed_share": 0.0,
          "burn_in": 10, "teachers": {}}


def test_the_consensus_ignores_each_models_scale_and_offset():
    q = np.array([1.0, 3.0, 2.0])
    np.testing.assert_allclose(consensus([q, 10 * q - 4]), (q - 2.0) / q.std())
    # a model indifferent among the candidates adds nothing to the ranking
    np.testing.assert_allclose(consensus([q, np.full(3, 5.0)]), (q - 2.0) / q.std() / 2)


def test_the_distillation_loss_ignores_each_decisions_offset_and_the_padding():
    mask = torch.tensor([[True, True, True, False], [True, True, False, False]])
    target = torch.tensor([[-1.0, 0.0, 1.0, 0.0], [0.5, -0.5, 0.0, 0.0]])
    same = torch.tensor([[6.0, 7.0, 8.0, 123.0], [10.5, 9.5, -7.0, 4.0]])  # the targets plus an offset
    assert torch.allclose(distillation_loss(same.masked_fill(~mask, float("-inf")), target, mask), torch.zeros(2))
    off = torch.tensor([[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    # all-equal values: the gap is the target's own spread, over the candidates only
    assert torch.allclose(distillation_loss(off, target, mask), torch.tensor([2 / 3, 0.25]))


@pytest.mark.parametrize(("student", "expected"), [
    ([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0], [5.0, 0.0, 0.0]], 1.0),    # each pick among the ensemble's best
    ([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]], 0.5),    # first decision missed; the third has no choice
    ([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]], 0.5),    # the second's tie: either best node agrees
    ([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0]], 0.0),    # 1e-3 below the best is not among it
])
def test_agreement_counts_a_pick_among_the_ensembles_best_over_decisions_with_a_choice(student, expected):
    mask = torch.tensor([[True, True, True], [True, True, True], [True, False, False]])
    target = torch.tensor([[0.0, 1.0, 2.0], [3.0, 3.0, 3.0 - 1e-3], [0.0, 9.0, 9.0]])
    q = torch.tensor(student).masked_fill(~mask, float("-inf"))
    data = {"mask": mask, "target": target}
    assert agreement(q, data) == pytest.approx(expected)


def _members(tmp_path, count=2):
    """The shipped LB network, and an untrained one, with small training worlds in their sidecars."""
    shipped = torch_network(load_model(LB))
    torch.manual_seed(100)
    paths = []
    for k, network in enumerate([shipped, NodeScorer(shipped.hidden)][:count]):
        paths.append(str(save_model(tmp_path / f"m{k}.safetensors", network, "LB",
                                    {"training": {"hyperparameters": WORLDS, "seed": k}})))
    return paths


def _config(members, **overrides):
    values = dict(policy="LB", members=tuple(members), worlds=10, decisions=48, steps=600, batch_size=64,
                  learning_rate=3e-3, workers=1, progress=False, validation_share=0.2)
    values.update(overrides)
    return DistillConfig(**values)


def test_the_student_learns_the_ensembles_picks_on_states_it_never_fitted(tmp_path):
    members = _members(tmp_path)
    student, record = distil(_config(members))
    _, before = distil(_config(members, steps=1))
    training = record["training"]
    assert training["held_out"]["agreement"] >= 0.7, training["held_out"]
    assert training["held_out"]["agreement"] > before["training"]["held_out"]["agreement"] + 0.15
    assert training["held_out"]["loss"] < 0.25 * before["training"]["held_out"]["loss"]
    assert training["decisions"]["held_out"] > 0 and training["decisions"]["fitted"] >= 3 * training["decisions"]["held_out"]
    # the worlds are the members' own training worlds
    assert training["world_hyperparameters"]["families"] == ("test2",)
    assert [m["file"] for m in training["members"]] == members
    served = load_model(save_model(tmp_path / "student.safetensors", student, "LB", record))
    assert served.architecture.hidden == list(load_model(LB).architecture.hidden)


def test_distil_refuses_what_it_cannot_average_by_name(tmp_path):
    members = _members(tmp_path)
    with pytest.raises(ValueError, match="at least two models"):
        _config(members[:1])
    other = save_model(tmp_path / "ee.safetensors", NodeScorer((16, 16)), "EE", {})
    with pytest.raises(ValueError, match="ee.safetensors"):
        distil(_config([members[0], str(other)]))
    wide = save_model(tmp_path / "wide.safetensors", NodeScorer((32, 16)), "LB", {})
    with pytest.raises(ValueError, match="several architectures"):
        distil(_config([members[0], str(wide)]))
    with pytest.raises(ValueError, match="epsilon"):
        _config(members, epsilon=1.5)


def test_distil_refuses_states_beyond_its_memory_bound_before_playing(tmp_path, monkeypatch):
    members = _members(tmp_path)
    # 10 worlds x 48 decisions x 8 nodes x (node features + 2) x 4 bytes: about 0.7 MiB
    monkeypatch.setattr(distill, "MAX_STATE_BYTES", 2**19)
    with pytest.raises(ValueError, match=r"10 worlds x 48 decisions at up to 8 nodes .* fewer --worlds"):
        distil(_config(members))
    monkeypatch.setattr(distill, "MAX_STATE_BYTES", 2**30)
    distil(_config(members, steps=1))


def test_the_command_writes_a_servable_student_and_names_a_missing_member(tmp_path, capsys):
    members = _members(tmp_path)
    args = ["--policy", "LB", "--member", members[0], "--member", members[1], "--out", str(tmp_path), "--worlds", "4",
            "--decisions", "16", "--steps", "20", "--workers", "1", "--no-progress"]
    assert main(args) == 0
    sidecar = json.loads((tmp_path / "lb-distilled.json").read_text())
    assert sidecar["training"]["command"].startswith("python -m agent.learn.distill --policy LB")
    load_model(tmp_path / "lb-distilled.safetensors", expected_policy="LB")
    with pytest.raises(SystemExit):
        main(["--policy", "LB", "--member", members[0], "--member", str(tmp_path / "gone.safetensors")])
    assert "gone.safetensors" in capsys.readouterr().err
    assert main(["--policy", "LB", "--member", members[0], "--out", str(tmp_path)]) == 2
    assert "at least two models" in capsys.readouterr().err
