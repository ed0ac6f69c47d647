import json

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.numpy import save

from rlscore.core.features import (FEATURE_SPEC_VERSION, NODE_FEATURES, NODE_FEATURES_OF_VERSION, NUM_NODE_FEATURES,
                                   node_features)
from rlscore.core.model import ModelValidationError, load_model, sidecar_path
from agent.learn.model_io import save_model, torch_network
from agent.learn.network import NodeScorer
from rlscore.core.state import PodRequest
from tests.conftest import make_nodes


@pytest.fixture
def saved(tmp_path):
    torch.manual_seed(0)
    net = NodeScorer((16, 16))
    path = save_model(tmp_path / "ee.safetensors", net, "EE", {"training": {"steps": 1}})
    return path, net


def _torch_values(net, nodes, pod):
    """The torch network's values of every node as candidates (-inf where it ranks none)."""
    feats, pod_vec = node_features(nodes, pod)
    with torch.no_grad():
        return net(torch.from_numpy(feats)[None], torch.from_numpy(pod_vec)[None],
                   torch.ones(1, len(feats), dtype=torch.bool))[0].numpy()


def test_round_trip_gives_the_same_q_values_and_records_metadata(saved):
    path, net = saved
    model = load_model(path, expected_policy="EE")
    nodes = make_nodes([4000, 8000, 16000], cpu_req=[1000, 0, 500], latency=[5, 15, 40])
    pod = PodRequest(250, 64 * 2**20)
    np.testing.assert_allclose(model.q_values(nodes, pod), _torch_values(net, nodes, pod), rtol=1e-6)
    assert model.version.startswith("ee-") and model.metadata["training"]["steps"] == 1
    assert model.metadata["feature_spec_version"] == FEATURE_SPEC_VERSION


def test_a_best_tier_scorer_serves_the_networks_values_inside_the_tier_and_ranks_the_rest_below(tmp_path):
    torch.manual_seed(0)
    net = NodeScorer((16, 16), candidates="best-latency-tier")
    path = save_model(tmp_path / "el.safetensors", net, "EL", {})
    model = load_model(path, expected_policy="EL")
    assert model.architecture.candidates == "best-latency-tier" and model.export()["candidates"] == "best-latency-tier"
    # soft limit 10 ms, hard 30: nodes 1 and 3 within the soft limit, node 0 within the hard one, node 2 beyond
    nodes = make_nodes([4000, 8000, 16000, 4000], cpu_req=[1000, 0, 500, 0], latency=[25, 8, 90, 10])
    pod = PodRequest(250, 64 * 2**20, 10.0, 30.0)
    torch_values = _torch_values(net, nodes, pod)
    served = model.q_values(nodes, pod)
    np.testing.assert_allclose(served[[1, 3]], torch_values[[1, 3]], rtol=1e-6)
    assert np.isfinite(served).all() and not np.isfinite(torch_values[[0, 2]]).any()
    spread = abs(served[1] - served[3])
    assert served[0] == pytest.approx(min(served[[1, 3]]) - spread)  # one tier below the soft one
    assert served[2] == pytest.approx(min(served[[1, 3]]) - 2 * spread)
    # a pod without limits: every node is in the one tier, and the network's values are served as they are
    free = PodRequest(250, 64 * 2**20)
    np.testing.assert_allclose(model.q_values(nodes, free), _torch_values(net, nodes, free), rtol=1e-6)
    assert torch_network(model).candidates == "best-latency-tier"


def test_a_running_first_scorer_serves_the_networks_values_on_the_running_nodes_and_ranks_the_empty_below(tmp_path):
    torch.manual_seed(0)
    net = NodeScorer((16, 16), candidates="running-first")
    path = save_model(tmp_path / "ee.safetensors", net, "EE", {})
    model = load_model(path, expected_policy="EE")
    assert model.architecture.candidates == "running-first" and model.export()["candidates"] == "running-first"
    nodes = make_nodes([4000, 8000, 16000, 4000], cpu_req=[1000, 0, 500, 0])  # nodes 0 and 2 run a pod
    pod = PodRequest(250, 64 * 2**20)
    torch_values = _torch_values(net, nodes, pod)
    served = model.q_values(nodes, pod)
    np.testing.assert_allclose(served[[0, 2]], torch_values[[0, 2]], rtol=1e-5, atol=1e-7)
    assert not np.isfinite(torch_values[[1, 3]]).any()
    spread = abs(served[0] - served[2])
    np.testing.assert_allclose(served[[1, 3]], min(served[[0, 2]]) - spread)
    # nothing runs yet: every node is ranked, with the network's own values
    empty = make_nodes([4000, 8000, 16000, 4000])
    np.testing.assert_allclose(model.q_values(empty, pod), _torch_values(net, empty, pod), rtol=1e-5, atol=1e-7)
    assert torch_network(model).candidates == "running-first"


def test_a_tier_running_scorer_ranks_the_tiers_first_then_the_running_nodes_in_each(tmp_path):
    torch.manual_seed(0)
    net = NodeScorer((16, 16), candidates="best-latency-tier-running-first")
    model = load_model(save_model(tmp_path / "el.safetensors", net, "EL", {}), expected_policy="EL")
    # soft limit 10 ms, hard 30: nodes 0, 1 within the soft limit (node 0 runs), nodes 2, 3 within the
    # hard one (node 2 runs), node 4 beyond it
    nodes = make_nodes([4000, 8000, 16000, 4000, 4000], cpu_req=[1000, 0, 500, 0, 0], latency=[5, 8, 20, 25, 90])
    pod = PodRequest(250, 64 * 2**20, 10.0, 30.0)
    served = model.q_values(nodes, pod)
    np.testing.assert_allclose(served[0], _torch_values(net, nodes, pod)[0], rtol=1e-5, atol=1e-7)
    # levels 2 x tier + running: 5, 4, 3, 2, 0; one inside value, so the gap per level is 1
    np.testing.assert_allclose(served, served[0] - np.array([0, 1, 2, 3, 5]))


def test_a_model_naming_unknown_candidates_is_refused(tmp_path):
    torch.manual_seed(0)
    path = save_model(tmp_path / "ee.safetensors", NodeScorer((16, 16)), "EE", {})
    _rewrite(path, lambda h, t: h["architecture"].update(candidates="nearest"))
    with pytest.raises(ModelValidationError, match="candidates"):
        load_model(path)


def test_a_selector_naming_candidates_is_refused(tmp_path):
    from agent.learn.network import RuleSelector
    torch.manual_seed(0)
    path = save_model(tmp_path / "el.safetensors", RuleSelector(("latency-fit", "latency-pack"), (8,)), "EL", {})
    _rewrite(path, lambda h, t: h["architecture"].update(candidates="best-latency-tier"))
    with pytest.raises(ModelValidationError, match="a selector's candidates are its rules' own"):
        load_model(path)


WRITE_IN_A_FRESH_PROCESS = """
import sys, torch
from agent.learn.model_io import save_model
from agent.learn.network import NodeScorer
torch.manual_seed(0)
save_model(sys.argv[1], NodeScorer((16, 16)), "EE", {"training": {"steps": 1}})
"""


def test_the_same_weights_make_the_same_file_in_every_process(saved, tmp_path):
    """safetensors orders its metadata as a hash map does, which changes between processes; a model's
    checksum must not (a retrained model that did not change is not a new model)."""
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    files = []
    for k in range(3):
        out = tmp_path / f"again{k}" / "ee.safetensors"
        out.parent.mkdir()
        subprocess.run([sys.executable, "-c", WRITE_IN_A_FRESH_PROCESS, str(out)], cwd=root, check=True)
        files.append(out.read_bytes())
    assert files[0] == files[1] == files[2] == saved[0].read_bytes()
    header_size = int.from_bytes(files[0][:8], "little")
    assert header_size % 8 == 0
    load_model(saved[0], expected_policy="EE")


def test_refuses_truncated_or_foreign_files(saved, tmp_path):
    path, _ = saved
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelValidationError, match="not a readable model file"):
        load_model(path)
    garbage = tmp_path / "x.safetensors"
    garbage.write_bytes(b"\x00not a model" * 10)
    with pytest.raises(ModelValidationError, match="not a readable model file"):
        load_model(garbage)
    with pytest.raises(ModelValidationError, match="no such model file"):
        load_model(tmp_path / "missing.safetensors")


def _read(path):
    """(header, tensors) of a model file."""
    with safe_open(str(path), framework="numpy") as f:
        return dict(f.metadata()), {k: f.get_tensor(k) for k in f.keys()}


def _rewrite(path, mutate):
    header, tensors = _read(path)
    header["architecture"] = json.loads(header.get("architecture", "{}"))
    mutate(header, tensors)
    if not isinstance(header["architecture"], str):
        header["architecture"] = json.dumps(header["architecture"])
    path.write_bytes(save(tensors, metadata={k: str(v) for k, v in header.items()}))
    sidecar_path(path).unlink()  # the checksum would (rightly) fail first otherwise


@pytest.mark.parametrize("mutate, message", [
    (lambda h, t: h.update(feature_spec_version=FEATURE_SPEC_VERSION + 1), "feature spec version"),
    (lambda h, t: h.update(format="something-else"), "format"),
    (lambda h, t: h.update(policy="XX"), "policy is 'XX'"),
    (lambda h, t: h["architecture"].update(hidden=[16, 32]), "tensor layers.1"),
    (lambda h, t: h["architecture"].update(node_features=3), "features"),
    (lambda h, t: h["architecture"].update(hidden=[4096] * 8), "parameters, over the limit"),
    (lambda h, t: h.update(architecture="[" * 2000), "nested 2000 levels deep"),
    (lambda h, t: h.update(architecture="[" * 5000), "header field is over 4096 bytes"),
    (lambda h, t: t.pop("layers.0.Lambda.weight"), "tensor names do not match"),
    (lambda h, t: t["layers.0.Lambda.weight"].fill(np.nan), "NaN or infinity"),
    (lambda h, t: h["architecture"].update(candidates="nearest"), "candidates"),
])
def test_refuses_mismatched_models(saved, mutate, message):
    path, _ = saved
    _rewrite(path, mutate)
    with pytest.raises(ModelValidationError, match=message):
        load_model(path)


def test_a_version_2_model_reads_the_current_features_and_decides_as_it_did(tmp_path):
    """A model trained before `recent_peak_to_come` and the rule standings existed: its first layer is 31
    node columns wide. It loads with zero weight on the new columns, so what they say changes nothing."""
    torch.manual_seed(1)
    old_width = NODE_FEATURES_OF_VERSION[2]
    old = NodeScorer((16, 16), node_features=old_width)
    path = tmp_path / "lb.safetensors"
    weights = {k: v.numpy() for k, v in old.state_dict().items()}
    header = {"format": "rlscore-deepsets-scorer", "policy": "LB", "feature_spec_version": "2",
              "architecture": json.dumps(old.architecture())}
    path.write_bytes(save(weights, metadata=header))
    model = load_model(path)

    nodes = make_nodes([4000, 8000, 16000, 4000], cpu_req=[1000, 0, 500, 3000], latency=[5, 15, 40, 8])
    pod = PodRequest(250, 64 * 2**20)
    feats, pod_vec = node_features(nodes, pod)
    column = NODE_FEATURES.index("recent_peak_to_come")
    assert column == old_width and len(set(feats[:, column])) > 1  # the new column says something here
    with torch.no_grad():
        before = old(torch.from_numpy(feats[:, :old_width])[None], torch.from_numpy(pod_vec)[None],
                     torch.ones(1, 4, dtype=torch.bool))[0].numpy()
    np.testing.assert_allclose(model.q_values(nodes, pod), before, rtol=1e-6)
    assert torch_network(model).blind_columns() == list(range(column, NUM_NODE_FEATURES))

    path.write_bytes(save(weights, metadata={**header, "feature_spec_version": "1"}))
    with pytest.raises(ModelValidationError, match="feature spec version 1, this build serves version 5 and reads 2, 3, 4, 5"):
        load_model(path)


def test_refuses_wrong_policy_and_tampered_file(saved):
    path, _ = saved
    with pytest.raises(ModelValidationError, match="expected LB"):
        load_model(path, expected_policy="LB")
    meta = json.loads(sidecar_path(path).read_text())
    meta["sha256"] = "0" * 64
    sidecar_path(path).write_text(json.dumps(meta))
    with pytest.raises(ModelValidationError, match="sha256"):
        load_model(path)
    sidecar_path(path).write_text("{not json")
    with pytest.raises(ModelValidationError, match="sidecar is not valid JSON"):
        load_model(path)


def test_refuses_a_pickle_that_would_run_code(tmp_path):
    """A torch file (a pickle) where a model file should be is not read as one: nothing in it runs."""
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    path = tmp_path / "evil.safetensors"
    torch.save({"format": Evil()}, path)
    with pytest.raises(ModelValidationError, match="not a readable model file"):
        load_model(path)


# --- a model file that names a heuristic (the retraining loop's fallback) -------------------------

def test_a_heuristic_model_scores_as_its_heuristic_and_only_where_allowed(tmp_path):
    from rlscore.core.rules import RULES
    from rlscore.core.model import write_heuristic_model

    path = write_heuristic_model(tmp_path / "ee.safetensors", "best-fit", "EE", {"note": "test"})
    model = load_model(path, expected_policy="EE", allow_heuristic=True)
    assert model.heuristic == "best-fit" and model.version.startswith("ee-best-fit-")
    assert model.metadata["note"] == "test" and model.metadata["heuristic"] == "best-fit"
    nodes = make_nodes([4000, 8000, 16000], cpu_req=[1000, 0, 3500], latency=[5, 15, 40])
    pod = PodRequest(500, 256 * 2**20)
    expected = RULES["best-fit"](nodes, pod, np.random.default_rng(1))
    np.testing.assert_array_equal(model.q_values(nodes, pod), expected)
    # the callers that need weights (fine-tuning, export) refuse it by name
    with pytest.raises(ModelValidationError, match="holds the rule best-fit, not a trained network"):
        load_model(path)
    with pytest.raises(ModelValidationError, match="holds policy EE, expected LB"):
        load_model(path, expected_policy="LB", allow_heuristic=True)


@pytest.mark.parametrize("payload, message", [
    ({"heuristic": "random"}, "names rule 'random'"),  # not a scorer anyone should serve
    ({"heuristic": "fastest"}, "names rule 'fastest'"),
    ({"heuristic": "3"}, "names rule '3'"),
    ({"heuristic": "best-fit", "policy": "XX"}, "policy is 'XX'"),
])
def test_a_heuristic_model_naming_no_servable_heuristic_is_refused(tmp_path, payload, message):
    from rlscore.core.model import HEURISTIC_FORMAT

    path = tmp_path / "ee.safetensors"
    path.write_bytes(save({}, metadata={"format": HEURISTIC_FORMAT, "policy": "EE", **payload}))
    with pytest.raises(ModelValidationError, match=message):
        load_model(path, allow_heuristic=True)


def test_a_heuristic_model_changed_after_its_sidecar_is_refused(tmp_path):
    from rlscore.core.model import HEURISTIC_FORMAT, write_heuristic_model

    path = write_heuristic_model(tmp_path / "ee.safetensors", "best-fit", "EE", {})
    path.write_bytes(save({}, metadata={"format": HEURISTIC_FORMAT, "policy": "EE", "heuristic": "least-allocated"}))
    with pytest.raises(ModelValidationError, match="sha256 does not match"):
        load_model(path, allow_heuristic=True)
    with pytest.raises(ValueError, match="unknown rule 'random'"):
        write_heuristic_model(tmp_path / "x.safetensors", "random", "EE", {})


# --- a node scorer anchored on a rule selector ------------------------------------------------------

ANCHOR_RULES = ("efficient-first", "most-allocated", "one-step-ee")


@pytest.fixture
def anchored(tmp_path):
    from agent.learn.anchor import SelectorAnchor
    from agent.learn.network import RuleSelector

    torch.manual_seed(1)
    selector = save_model(tmp_path / "selector.safetensors", RuleSelector(ANCHOR_RULES, (8,)), "EE", {})
    torch.manual_seed(2)
    net = NodeScorer((16, 16))
    anchor = SelectorAnchor(selector, "EE", 2.5, "standing")
    return save_model(tmp_path / "ee.safetensors", net, "EE", {}, anchor), net, load_model(selector)


@pytest.mark.parametrize("on", ["standing", "best"])
def test_an_anchored_scorer_serves_the_networks_values_plus_the_weight_on_the_picked_rules_standing(anchored, on):
    path, net, selector = anchored
    if on == "best":
        _rewrite(path, lambda h, t: h["architecture"]["anchor"].update(on="best"))
    model = load_model(path, expected_policy="EE")
    nodes = make_nodes([4000, 8000, 16000, 8000], cpu_req=[1000, 0, 500, 6000], latency=[5, 15, 40, 5])
    for pod in (PodRequest(250, 64 * 2**20), PodRequest(3000, 2**30)):
        rule = selector.rule_for(nodes, pod)
        feats, _ = node_features(nodes, pod)
        standing = feats[:, NODE_FEATURES.index(f"rule:{rule}")].astype(np.float64)
        if on == "best":
            standing = (standing == 1.0).astype(np.float64)
        np.testing.assert_allclose(model.q_values(nodes, pod), _torch_values(net, nodes, pod) + 2.5 * standing,
                                   rtol=1e-6)
    export = model.export()
    assert export["format"] == "rlscore-anchored-weights" and export["anchor"]["rules"] == list(ANCHOR_RULES)
    assert export["anchor"]["weight"] == 2.5 and export["anchor"]["on"] == on
    assert torch_network(model).architecture() == net.architecture()  # its network alone, to fine-tune


@pytest.mark.parametrize("mutate, message", [
    (lambda h, t: h["architecture"]["anchor"].update(weight=-1.0), "anchor.weight"),
    (lambda h, t: h["architecture"]["anchor"].update(weight=5000.0), "anchor.weight"),
    (lambda h, t: h["architecture"]["anchor"].update(on="rank"), "anchor.on"),
    (lambda h, t: h["architecture"]["anchor"].update(rules=["tetris", "most-allocated", "one-step-ee"]),
     "an anchor's rules must be distinct rules with a standing column"),
    (lambda h, t: h["architecture"]["anchor"].update(rules=["most-allocated", "most-allocated", "one-step-ee"]),
     "an anchor's rules must be distinct"),
    (lambda h, t: h["architecture"]["anchor"].update(hidden=[8, 8]), "tensor names do not match the architecture"),
    (lambda h, t: t.pop("anchor.head.2.bias"), "tensor names do not match the architecture"),
    (lambda h, t: h["architecture"].update(candidates="best-latency-tier"), "an anchored scorer ranks every candidate"),
])
def test_an_anchored_scorer_that_does_not_hold_together_is_refused_by_name(anchored, mutate, message):
    path = anchored[0]
    _rewrite(path, mutate)
    with pytest.raises(ModelValidationError, match=message):
        load_model(path)
