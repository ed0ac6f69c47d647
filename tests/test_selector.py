"""The rule selector (agent/learn/selector.py): its loss and agreement on hand-built states, the
serving forward pass against torch, the exactness of what it serves (the picked rule's own values),
its validation, and a short real training run through `rlscore-train --algo selector`."""

import json

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.numpy import save

from rlscore.core.features import node_features
from rlscore.core.rules import RULES
from agent.learn.imitation import rule_agreement
from rlscore.core.model import LoadedSelector, ModelValidationError, load_model, sidecar_path
from agent.learn.model_io import reference_values, save_model
from agent.learn.network import RuleSelector
from agent.learn.selector import agreement_loss, selector_rules
from agent.learn.train import main as train_main
from rlscore.core.state import NodeState, PodRequest
from tests.conftest import make_nodes
from tests.server.test_exactness import random_state

MIB = 2**20
LB_RULES = ("load-variation-risk-balancing", "one-step-lb")


def test_agreement_of_each_rule_with_the_teachers_choice():
    # MostAllocated fills the busy node, LeastAllocated the empty one; the teacher (MostAllocated)
    # chose the busy node
    nodes = make_nodes([4000, 4000], cpu_req=[2000, 0])
    pod = PodRequest(250, 64 * MIB)
    teacher_best = np.array([True, False])
    shares = rule_agreement(("most-allocated", "least-allocated"), nodes, pod, teacher_best, np.random.default_rng(0))
    assert shares.tolist() == [1.0, 0.0]
    # two identical empty nodes: every rule ties them, and a tie over two of which the teacher took one
    # agrees half the time
    alike = make_nodes([4000, 4000], cpu_req=[0, 0])
    shares = rule_agreement(("most-allocated", "least-allocated"), alike, pod, np.array([True, False]),
                            np.random.default_rng(0))
    assert shares.tolist() == [0.5, 0.5]


@pytest.mark.parametrize("logits, agreement, teacher, low", [
    ([5.0, -5.0], [1.0, 0.0], 0, True),   # all on the agreeing rule
    ([-5.0, 5.0], [1.0, 0.0], 0, False),  # all on the one that places elsewhere
    ([-5.0, 5.0], [1.0, 1.0], 0, True),   # both place as the teacher did: either is right (only the prior pulls)
])
def test_the_loss_charges_only_picks_that_place_elsewhere(logits, agreement, teacher, low):
    loss = agreement_loss(torch.tensor([logits]), torch.tensor([agreement]), torch.tensor([teacher]), 0.0)
    assert (float(loss[0]) < 0.01) == low


def test_selector_rules_are_the_teachers_rules():
    teachers = {"test1": "one-step-lb", "usage-skew": "load-variation-risk-balancing",
                "test2": [[5, "one-step-lb"], [64, "least-allocated"]]}
    assert selector_rules(teachers) == ("least-allocated", "load-variation-risk-balancing", "one-step-lb")


@pytest.fixture
def saved_selector(tmp_path):
    torch.manual_seed(0)
    selector = RuleSelector(LB_RULES, (16, 8))
    path = save_model(tmp_path / "lb.safetensors", selector, "LB", {"training": {"algorithm": "selector"}})
    return path, selector


@pytest.mark.parametrize("n", [1, 2, 7, 100, 5000])
def test_serving_forward_pass_equals_torch_and_serves_the_picked_rule_exactly(saved_selector, n):
    path, _ = saved_selector
    model = load_model(path, expected_policy="LB")
    assert isinstance(model, LoadedSelector) and model.rules == LB_RULES
    rng = np.random.default_rng(n)
    for _ in range(3):
        nodes = NodeState(names=[f"n{i}" for i in range(n)], **random_state(n, rng))
        pod = PodRequest(float(rng.choice([100, 500, 2000])), 256 * MIB)
        features, pod_vec = node_features(nodes, pod)
        np.testing.assert_allclose(model.logits(features, pod_vec), reference_values(model, features, pod_vec),
                                   rtol=1e-12, atol=1e-12)
        values, rule = model.decide(nodes, pod)
        assert rule == model.rules[int(np.argmax(reference_values(model, features, pod_vec)))]
        # exactly the rule's values: the selector places as the rule does, ties and all
        assert np.array_equal(values, RULES[rule](nodes, pod, np.random.default_rng(0)))


def test_the_pick_does_not_depend_on_node_order(saved_selector):
    path, _ = saved_selector
    model = load_model(path)
    rng = np.random.default_rng(3)
    state = random_state(20, rng)
    order = rng.permutation(20)
    pod = PodRequest(500, 256 * MIB)
    nodes = NodeState(names=[f"n{i}" for i in range(20)], **state)
    shuffled = NodeState(names=[f"n{i}" for i in order], **{k: v[order] for k, v in state.items()})
    f1, p1 = node_features(nodes, pod)
    f2, p2 = node_features(shuffled, pod)
    np.testing.assert_allclose(model.logits(f1, p1), model.logits(f2, p2), rtol=1e-12)
    np.testing.assert_array_equal(model.q_values(nodes, pod)[order], model.q_values(shuffled, pod))


def _rewrite(path, mutate):
    with safe_open(str(path), framework="numpy") as f:
        header, tensors = dict(f.metadata()), {k: f.get_tensor(k) for k in f.keys()}
    architecture = json.loads(header["architecture"])
    mutate(architecture, tensors)
    path.write_bytes(save(tensors, metadata={**header, "architecture": json.dumps(architecture)}))
    sidecar_path(path).unlink()


def _nan_weights(architecture, tensors):
    tensors["head.2.bias"][0] = np.nan


@pytest.mark.parametrize("mutate, message", [
    (lambda a, t: a.update(rules=["one-step-lb", "no-such-rule"]), "rules must be"),
    (lambda a, t: a.update(rules=["one-step-lb", "one-step-lb"]), "rules must be"),
    (lambda a, t: a.update(rules=["random", "one-step-lb"]), "rules must be"),
    (lambda a, t: a.update(rules=[]), "rules must be"),
    (lambda a, t: a.update(rules=["one-step-lb"]), "tensor head.2"),
    (lambda a, t: a.update(hidden=[16, 16]), "the architecture needs float"),
    (_nan_weights, "NaN or infinity"),
])
def test_refuses_a_selector_it_cannot_serve(saved_selector, mutate, message):
    path, _ = saved_selector
    _rewrite(path, mutate)
    with pytest.raises(ModelValidationError, match=message):
        load_model(path)


def test_export_holds_the_trunk_the_head_and_the_rules(saved_selector):
    path, selector = saved_selector
    exported = load_model(path).export()
    assert exported["format"] == "rlscore-rule-selector-weights" and exported["rules"] == list(LB_RULES)
    assert [len(layer["bias"]) for layer in exported["layers"]] == [16, 8]
    assert [len(h["bias"]) for h in exported["head"]] == [8, 2] and len(exported["head"][0]["weight"]) == 16
    assert np.allclose(np.array(exported["head"][1]["weight"]).T, selector.head[2].weight.detach().numpy())


def test_a_short_training_run_writes_a_selector_that_serves_its_teachers_rules(tmp_path):
    code = train_main(["--policy", "LB", "--algo", "selector", "--families", "test1,usage-skew", "--imitation-worlds",
                       "1", "--imitation-steps", "40", "--node-draw", "log-uniform", "--out", str(tmp_path),
                       "--log-dir", "", "--no-eval", "--no-progress"])
    assert code == 0
    model = load_model(tmp_path / "lb.safetensors", expected_policy="LB")
    side = json.loads(sidecar_path(tmp_path / "lb.safetensors").read_text())
    assert isinstance(model, LoadedSelector)
    assert side["format"] == "rlscore-rule-selector" and side["training"]["algorithm"] == "selector"
    assert side["training"]["rules"] == list(model.rules)
    # the picking names each family's best rule on training seeds; the selector chooses among them
    assert set(model.rules) == {t["teacher"] for t in side["training"]["teachers"].values()}
    imitation = side["training"]["imitation"]
    assert imitation["demonstrations"] == 2 * 256 and 0 <= imitation["held_out_agreement"] <= 1
    assert set(imitation["held_out_rule_share"]) == set(model.rules)


@pytest.mark.parametrize("extra, message", [
    (["--kickstart", "1"], "--kickstart"),
    (["--timesteps", "100"], "--timesteps"),
    (["--dagger-rounds", "1"], "--dagger-rounds"),
    (["--blind-to", "power"], "--blind-to"),
    (["--imitation-steps", "0"], "--imitation-steps must be >= 1"),
])
def test_refuses_options_a_selector_has_no_use_for(tmp_path, capsys, extra, message):
    code = train_main(["--policy", "LB", "--algo", "selector", "--out", str(tmp_path), "--no-eval", *extra])
    assert code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "lb.safetensors").exists()


def test_a_selector_is_not_fine_tuned(saved_selector, tmp_path, capsys):
    path, _ = saved_selector
    code = train_main(["--policy", "LB", "--algo", "ppo", "--init", str(path), "--out", str(tmp_path), "--no-eval"])
    assert code == 2 and "is a rule selector" in capsys.readouterr().err
