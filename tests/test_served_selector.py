"""A served rule selector (rlscore.core.model.LoadedSelector; selectors shipped before the DQN did, and
an operator's model directory may hold one): its forward pass against torch, the exactness of what it
serves (the picked rule's own values), its validation and its export."""

import json

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.numpy import save

from rlscore.core.features import node_features
from rlscore.core.rules import RULES
from rlscore.core.model import LoadedSelector, ModelValidationError, load_model, sidecar_path
from agent.learn.model_io import reference_values, save_model
from agent.learn.network import RuleSelector
from rlscore.core.state import NodeState, PodRequest
from tests.server.test_exactness import random_state

MIB = 2**20
LB_RULES = ("load-variation-risk-balancing", "one-step-lb")


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
