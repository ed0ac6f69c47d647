"""Saving and validated loading of trained policies.

A model is `<name>.pt` (tensors and a small header, read with `weights_only=True` so a file can never
run code) plus a `<name>.json` sidecar that records how it was trained. A model is handed out only
after it validates: header, policy, feature-spec version, architecture, exact tensor shapes, the
sidecar's checksum, and finite Q-values on probe inputs. Anything else is a ModelValidationError
that says what is wrong.

A model file may hold a rule selector instead of a node scorer (SELECTOR_FORMAT, agent.learn.selector): a network
that picks which hand-written rule scores each pod; it validates the same way, and its rules must be
ones this build serves.

A model file may also name a hand-written scorer instead of holding weights (HEURISTIC_FORMAT): what
the retraining loop hands the server when, on the cluster's own profile, the best heuristic beats
the serving model and no retrained one beats that heuristic (AWARE's fallback while the model is not
good enough). It goes through the same gate, rollout and rollback as a trained model; only the
callers that serve or judge scorers (`allow_heuristic=True`) take it, the ones that need weights
(fine-tuning, export to the plugin) refuse it by name.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agent.features import (FEATURE_SPEC_VERSION, NODE_FEATURES_OF_VERSION, NUM_NODE_FEATURES, NUM_POD_FEATURES,
                            node_features)
from agent.heuristics import HEURISTICS
from agent.kernels import equivariant_layer, relu_column_max_mean
from agent.learn.network import NodeScorer, RuleSelector
from agent.state import POLICIES, NodeState, PodRequest

MODEL_FORMAT = "rlscore-deepsets-scorer"
SELECTOR_FORMAT = "rlscore-rule-selector"
HEURISTIC_FORMAT = "rlscore-heuristic-scorer"
WEIGHTS_FORMAT = "rlscore-deepsets-weights"  # the plain-JSON export an in-process scorer reads
SELECTOR_WEIGHTS_FORMAT = "rlscore-rule-selector-weights"  # the same for a rule selector
MAX_MODEL_BYTES = 64 * 1024 * 1024
MAX_HIDDEN_UNITS = 4096
MAX_SELECTOR_RULES = 32
_NO_EXTRA = np.zeros(0)


class ModelValidationError(ValueError):
    """The file is not a model this build can serve; the message says why."""


class NumpyScorer:
    """The NodeScorer's forward pass in float64 for serving (compiled layers, agent/kernels.py): no
    torch dispatch per call (a request scores one small set), and the float64 torch reference's
    numbers to ~1e-14."""

    def __init__(self, network: NodeScorer):
        self.layers = [_layer_weights(layer) for layer in network.layers]

    def __call__(self, features: np.ndarray, pod_vec: np.ndarray) -> np.ndarray:
        """features [N, F] of N >= 1 candidates, pod_vec [P] -> one value per candidate."""
        return _trunk(self.layers, features, pod_vec)[:, 0]


def _trunk(layers: list[tuple[np.ndarray, ...]], features: np.ndarray, pod_vec: np.ndarray) -> np.ndarray:
    """The equivariant layers in float64. The first sees [node features, pod features]; the pod part is
    the same for every node."""
    lam, bias, gam, delta = layers[0]
    x = equivariant_layer(features.astype(np.float64), pod_vec.astype(np.float64), lam, bias, gam, delta, False)
    for lam, bias, gam, delta in layers[1:]:
        x = equivariant_layer(x, _NO_EXTRA, lam, bias, gam, delta, True)
    return x


def _exported_layers(layers: list[tuple[np.ndarray, ...]]) -> list[dict[str, list]]:
    return [{"lambda": lam.tolist(), "bias": bias.tolist(), "gamma": gam.tolist(), "delta": delta.tolist()}
            for lam, bias, gam, delta in layers]


def _torch_reference(network: NodeScorer | RuleSelector, features: np.ndarray, pod_vec: np.ndarray) -> np.ndarray:
    """The torch network itself in float64 on all candidates: what a fast path must reproduce."""
    network = network.double()
    try:
        with torch.inference_mode():
            x = torch.from_numpy(features.astype(np.float64)).unsqueeze(0)
            p = torch.from_numpy(pod_vec.astype(np.float64)).unsqueeze(0)
            return network(x, p, torch.ones(x.shape[:2], dtype=torch.bool))[0].numpy()
    finally:
        network.float()


def _layer_weights(layer) -> tuple[np.ndarray, ...]:
    """An equivariant layer as the compiled kernel takes it: Lambda, its bias, Gamma, Delta, [in][out]."""
    def weights(linear) -> np.ndarray:
        return linear.weight.detach().double().numpy().T.copy()

    return weights(layer.Lambda), layer.Lambda.bias.detach().double().numpy().copy(), weights(layer.Gamma), \
        weights(layer.Delta)


class NumpySelector:
    """A RuleSelector's forward pass in float64 for serving, as NumpyScorer does for a NodeScorer: the
    trunk, a ReLU, the mean and max over the candidates, then the head's two linear layers."""

    def __init__(self, selector: RuleSelector):
        self.layers = [_layer_weights(layer) for layer in selector.layers]
        first, last = selector.head[0], selector.head[2]
        self.head = [(linear.weight.detach().double().numpy().T.copy(), linear.bias.detach().double().numpy().copy())
                     for linear in (first, last)]

    def __call__(self, features: np.ndarray, pod_vec: np.ndarray) -> np.ndarray:
        """features [N, F] of N >= 1 candidates, pod_vec [P] -> one logit per rule."""
        top, mean = relu_column_max_mean(_trunk(self.layers, features, pod_vec), True)
        (w1, b1), (w2, b2) = self.head
        hidden = np.maximum(np.concatenate([mean, top]) @ w1 + b1, 0.0)
        return hidden @ w2 + b2


@dataclass
class LoadedModel:
    policy: str
    version: str
    network: NodeScorer
    path: Path
    metadata: dict[str, Any] = field(default_factory=dict)
    fast: NumpyScorer | None = field(default=None, repr=False)
    heuristic = None  # a trained network, not a named hand-written scorer (HeuristicModel)

    def __post_init__(self) -> None:
        if self.fast is None:
            self.fast = NumpyScorer(self.network)

    def q_values(self, nodes: NodeState, pod: PodRequest) -> np.ndarray:
        """Score of placing `pod` on each of `nodes` (all of them candidates): Q-values for DQN,
        policy logits for the actor-critic trainers; higher is better either way."""
        features, pod_vec = node_features(nodes, pod)
        return self.q_values_from_features(features, pod_vec)

    def decide(self, nodes: NodeState, pod: PodRequest) -> tuple[np.ndarray, str | None]:
        """The values and the hand-written rule behind them: none for a network that scores the nodes."""
        return self.q_values(nodes, pod), None

    def q_values_from_features(self, features: np.ndarray, pod_vec: np.ndarray) -> np.ndarray:
        if len(features) == 0:
            return np.zeros(0)
        return self.fast(features, pod_vec)

    def export(self) -> dict[str, Any]:
        """The served forward pass as plain JSON (what `NumpyScorer` computes): per layer Lambda
        [in][out], its bias [out], Gamma and Delta [in][out]. The scheduler plugin's in-process
        scorer reads this; `lambda` rows 0..node_features-1 take the node features, the rest the
        pod features."""
        return {"format": WEIGHTS_FORMAT, "feature_spec_version": FEATURE_SPEC_VERSION, "policy": self.policy,
                "version": self.version, "node_features": NUM_NODE_FEATURES, "pod_features": NUM_POD_FEATURES,
                "layers": _exported_layers(self.fast.layers)}

    def reference_q_values(self, features: np.ndarray, pod_vec: np.ndarray) -> np.ndarray:
        return _torch_reference(self.network, features, pod_vec)


@dataclass
class LoadedSelector:
    """A validated rule selector: per pod, its network picks one of `rules` and that rule's values are the
    answer (the node scores follow from them as from any model's)."""

    policy: str
    version: str
    network: RuleSelector
    path: Path
    metadata: dict[str, Any] = field(default_factory=dict)
    fast: NumpySelector | None = field(default=None, repr=False)
    heuristic = None  # a trained network, not a named hand-written scorer

    def __post_init__(self) -> None:
        if self.fast is None:
            self.fast = NumpySelector(self.network)
        self._rng = np.random.default_rng(0)  # the servable rules are deterministic; this is a formality

    @property
    def rules(self) -> tuple[str, ...]:
        return self.network.rules

    def rule_for(self, nodes: NodeState, pod: PodRequest) -> str:
        """The rule the selector picks for this pod on these candidates (the first on equal logits)."""
        features, pod_vec = node_features(nodes, pod)
        return self.rules[int(np.argmax(self.fast(features, pod_vec)))]

    def decide(self, nodes: NodeState, pod: PodRequest) -> tuple[np.ndarray, str | None]:
        """The picked rule's values (higher is better, ties are the rule's own) and its name."""
        if len(nodes) == 0:
            return np.zeros(0), None
        rule = self.rule_for(nodes, pod)
        return self.rule_values(rule, nodes, pod), rule

    def rule_values(self, rule: str, nodes: NodeState, pod: PodRequest) -> np.ndarray:
        """One of the servable rules' values, as the selector serves them when it picks that rule."""
        return np.asarray(HEURISTICS[rule](nodes, pod, self._rng), dtype=np.float64)

    def q_values(self, nodes: NodeState, pod: PodRequest) -> np.ndarray:
        return self.decide(nodes, pod)[0]

    def export(self) -> dict[str, Any]:
        """The selector as plain JSON for the plugin's in-process scorer: the trunk's layers as a node
        scorer's export has them, the head's two linear layers ([in][out] and bias) and the rules."""
        return {"format": SELECTOR_WEIGHTS_FORMAT, "feature_spec_version": FEATURE_SPEC_VERSION, "policy": self.policy,
                "version": self.version, "node_features": NUM_NODE_FEATURES, "pod_features": NUM_POD_FEATURES,
                "rules": list(self.rules),
                "layers": _exported_layers(self.fast.layers),
                "head": [{"weight": w.tolist(), "bias": b.tolist()} for w, b in self.fast.head]}

    def reference_logits(self, features: np.ndarray, pod_vec: np.ndarray) -> np.ndarray:
        return _torch_reference(self.network, features, pod_vec)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def sidecar_path(path: Path) -> Path:
    return Path(path).with_suffix(".json")


def save_model(path: str | Path, network: NodeScorer | RuleSelector, policy: str, metadata: dict[str, Any]) -> Path:
    """Write the model (a node scorer or a rule selector) and its sidecar; the sidecar gets the model's
    checksum."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    model_format = SELECTOR_FORMAT if isinstance(network, RuleSelector) else MODEL_FORMAT
    payload = {
        "format": model_format,
        "feature_spec_version": FEATURE_SPEC_VERSION,
        "policy": policy,
        "architecture": network.architecture(),
        "state_dict": {k: v.detach().cpu().clone() for k, v in network.state_dict().items()},
    }
    tmp = path.with_suffix(".pt.tmp")
    torch.save(payload, tmp)
    tmp.replace(path)
    sidecar = {"policy": policy, "feature_spec_version": FEATURE_SPEC_VERSION,
               "format": model_format, "sha256": sha256_of(path), **metadata}
    sidecar_path(path).write_text(json.dumps(sidecar, indent=2, sort_keys=False) + "\n")
    return path


def _require(condition: bool, path: Path, message: str) -> None:
    if not condition:
        raise ModelValidationError(f"{path}: {message}")


@dataclass
class HeuristicModel:
    """A hand-written scorer (agent.heuristics) in a model file's place: served, gated, rolled out
    and rolled back like a trained model; it has no weights to export or fine-tune."""

    policy: str
    version: str
    heuristic: str
    path: Path
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._fn = HEURISTICS[self.heuristic]
        self._rng = np.random.default_rng(0)  # the served heuristics are deterministic; this is a formality

    def q_values(self, nodes: NodeState, pod: PodRequest) -> np.ndarray:
        if len(nodes) == 0:
            return np.zeros(0)
        return np.asarray(self._fn(nodes, pod, self._rng), dtype=np.float64)

    def decide(self, nodes: NodeState, pod: PodRequest) -> tuple[np.ndarray, str | None]:
        """The named heuristic's values, and its name."""
        return self.q_values(nodes, pod), self.heuristic


def servable_heuristics() -> tuple[str, ...]:
    """The heuristics a model file may name: every hand-written scorer but the random one."""
    return tuple(name for name in HEURISTICS if name != "random")


def save_heuristic_model(path: str | Path, heuristic: str, policy: str, metadata: dict[str, Any]) -> Path:
    """Write a model file that serves `heuristic` for `policy`, and its sidecar (checksum included)."""
    if heuristic not in servable_heuristics():
        raise ValueError(f"unknown heuristic {heuristic!r}: expected one of {', '.join(servable_heuristics())}")
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}: expected one of {', '.join(POLICIES)}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save({"format": HEURISTIC_FORMAT, "policy": policy, "heuristic": heuristic}, buffer)
    write_atomically(path, buffer.getvalue())
    meta = {**metadata, "policy": policy, "heuristic": heuristic, "sha256": sha256_of(path)}
    write_atomically(sidecar_path(path), (json.dumps(meta, indent=2) + "\n").encode())
    return path


def load_model(path: str | Path, expected_policy: str | None = None,
               allow_heuristic: bool = False) -> LoadedModel | LoadedSelector | HeuristicModel:
    """The validated model at `path`. A file naming a heuristic is taken only with `allow_heuristic`
    (by the callers that score with it), otherwise refused with the heuristic named."""
    path = Path(path)
    _require(path.is_file(), path, "no such model file")
    size = path.stat().st_size
    _require(size <= MAX_MODEL_BYTES, path, f"file is {size} bytes, over the {MAX_MODEL_BYTES} limit")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for truncated or foreign files
        raise ModelValidationError(f"{path}: not a readable model file ({type(exc).__name__}: {exc})") from exc

    _require(isinstance(payload, dict), path, "model file does not hold a dictionary")
    if payload.get("format") == HEURISTIC_FORMAT:
        return _load_heuristic(path, payload, expected_policy, allow_heuristic)
    model_format = payload.get("format")
    _require(model_format in (MODEL_FORMAT, SELECTOR_FORMAT), path,
             f"format is {model_format!r}, expected {MODEL_FORMAT!r} or {SELECTOR_FORMAT!r}")
    spec = payload.get("feature_spec_version")
    _require(isinstance(spec, int) and spec in NODE_FEATURES_OF_VERSION, path,
             f"trained on feature spec version {spec!r}, this build serves version {FEATURE_SPEC_VERSION} and "
             f"reads {', '.join(map(str, NODE_FEATURES_OF_VERSION))}")
    policy = payload.get("policy")
    _require(policy in POLICIES, path, f"policy is {policy!r}, expected one of {', '.join(POLICIES)}")
    if expected_policy is not None:
        _require(policy == expected_policy, path, f"holds policy {policy}, expected {expected_policy}")

    arch = payload.get("architecture")
    _require(isinstance(arch, dict), path, "missing architecture")
    hidden = arch.get("hidden")
    _require(isinstance(hidden, list) and 1 <= len(hidden) <= 8
             and all(isinstance(h, int) and 1 <= h <= MAX_HIDDEN_UNITS for h in hidden), path,
             f"architecture.hidden must be 1..8 layer sizes in 1..{MAX_HIDDEN_UNITS}, got {hidden!r}")
    width = NODE_FEATURES_OF_VERSION[spec]
    _require(arch.get("node_features") == width and arch.get("pod_features") == NUM_POD_FEATURES,
             path, f"expects {arch.get('node_features')}+{arch.get('pod_features')} features, feature spec "
                   f"version {spec} has {width}+{NUM_POD_FEATURES}")
    if model_format == SELECTOR_FORMAT:
        rules = arch.get("rules")
        _require(isinstance(rules, list) and 1 <= len(rules) <= MAX_SELECTOR_RULES
                 and all(isinstance(r, str) and r in servable_heuristics() for r in rules)
                 and len(set(rules)) == len(rules), path,
                 f"architecture.rules must be 1..{MAX_SELECTOR_RULES} distinct rules of "
                 f"{', '.join(servable_heuristics())}, got {rules!r}")
        _require(spec == FEATURE_SPEC_VERSION, path, f"a rule selector of feature spec version {spec}: this build "
                                                     f"serves version {FEATURE_SPEC_VERSION}")
        network = RuleSelector(tuple(rules), tuple(hidden))
    else:
        network = NodeScorer(tuple(hidden))
    state_dict = payload.get("state_dict")
    _require(isinstance(state_dict, dict), path, "missing state_dict")
    try:
        if model_format == MODEL_FORMAT:
            state_dict = upgrade_state_dict(state_dict, width)
        network.load_state_dict(state_dict, strict=True)
    except RuntimeError as exc:
        raise ModelValidationError(f"{path}: weights do not match the architecture: {exc}") from exc
    network.eval()

    digest = sha256_of(path)
    metadata = _sidecar(path, digest, policy)
    loaded = LoadedSelector if model_format == SELECTOR_FORMAT else LoadedModel
    model = loaded(policy=policy, version=f"{policy.lower()}-{digest[:7]}", network=network, path=path,
                   metadata=metadata)
    _probe(model, path)
    return model


def upgrade_state_dict(state_dict: dict[str, Any], node_features: int) -> dict[str, Any]:
    """A NodeScorer's weights trained on the first `node_features` columns (an earlier feature spec
    version), widened to this version's with zero weight on the columns added since (they sit
    between the old node columns and the pod columns): the network reads the new inputs and decides
    exactly as it did."""
    added = NUM_NODE_FEATURES - node_features
    if added == 0:
        return state_dict
    upgraded = dict(state_dict)
    for name in ("Lambda", "Gamma", "Delta"):
        key = f"layers.0.{name}.weight"
        weight = state_dict.get(key)
        if not isinstance(weight, torch.Tensor) or weight.dim() != 2 or weight.shape[1] < node_features:
            continue  # load_state_dict names the mismatch
        zeros = weight.new_zeros(weight.shape[0], added)
        upgraded[key] = torch.cat([weight[:, :node_features], zeros, weight[:, node_features:]], dim=1)
    return upgraded


def _sidecar(path: Path, digest: str, policy: str) -> dict[str, Any]:
    """The sidecar's record (empty when there is none), checked against the file it describes."""
    side = sidecar_path(path)
    if not side.is_file():
        return {}
    try:
        metadata = json.loads(side.read_text())
    except (OSError, ValueError) as exc:
        raise ModelValidationError(f"{side}: unreadable sidecar: {exc}") from exc
    _require(isinstance(metadata, dict), side, "sidecar is not a JSON object")
    _require(metadata.get("sha256") in (None, digest), side,
             "sha256 does not match the model file (file changed after training?)")
    _require(metadata.get("policy") in (None, policy), side,
             f"sidecar says policy {metadata.get('policy')!r}, model holds {policy}")
    return metadata


def _load_heuristic(path: Path, payload: dict, expected_policy: str | None, allow: bool) -> HeuristicModel:
    name = payload.get("heuristic")
    _require(isinstance(name, str) and name in servable_heuristics(), path,
             f"names heuristic {name!r}, expected one of {', '.join(servable_heuristics())}")
    _require(allow, path, f"holds the heuristic {name}, not a trained network (nothing to fine-tune or export)")
    policy = payload.get("policy")
    _require(policy in POLICIES, path, f"policy is {policy!r}, expected one of {', '.join(POLICIES)}")
    if expected_policy is not None:
        _require(policy == expected_policy, path, f"holds policy {policy}, expected {expected_policy}")
    digest = sha256_of(path)
    model = HeuristicModel(policy=policy, version=f"{policy.lower()}-{name}-{digest[:7]}", heuristic=name, path=path,
                           metadata=_sidecar(path, digest, policy))
    _probe(model, path)
    return model


def _probe(model: LoadedModel | LoadedSelector | HeuristicModel, path: Path) -> None:
    """Finite weights, and finite Q-values on a few synthetic clusters of different sizes."""
    for p in (model.network.parameters() if model.heuristic is None else ()):
        _require(bool(torch.isfinite(p).all()), path, "weights contain NaN or infinity")
    rng = np.random.default_rng(0)
    for n in (1, 3, 64):
        cap = rng.choice([4000.0, 8000.0, 16000.0], n)
        idle = rng.uniform(40, 200, n)
        nodes = NodeState(
            names=[f"probe-{i}" for i in range(n)], cpu_capacity=cap, memory_capacity=cap * 2**21,
            max_pods=np.full(n, 110.0), cpu_requested=cap * rng.uniform(0, 0.8, n),
            memory_requested=cap * 2**21 * rng.uniform(0, 0.8, n), pods=rng.integers(0, 20, n),
            cpu_utilization=rng.uniform(0, 1, n), latency_ms=rng.uniform(1, 80, n),
            power_idle_watts=np.where(rng.random(n) < 0.5, idle, np.nan), power_max_watts=idle * 2.5)
        for pod in (PodRequest(250, 64 * 2**20), PodRequest(1000, 2**30, 20.0, 30.0)):
            q = model.q_values(nodes, pod)
            _require(q.shape == (n,) and bool(np.all(np.isfinite(q))), path,
                     f"non-finite Q-values on a {n}-node probe input")


def write_atomically(path: Path, data: bytes) -> None:
    """Replace `path` with `data` by a rename: a reader sees the old file or the new one, never half."""
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", delete=False) as tmp:
        tmp.write(data)
        tmp.flush()
        os.fsync(tmp.fileno())
    os.replace(tmp.name, path)


def install_model(source: Path, target: Path) -> None:
    """Copy a model and its sidecar to `target`: the sidecar first, then the model, each atomically.
    A reader (the server's model watch) sees the old pair, or the new sidecar beside the old model
    (which the loader refuses on its checksum, keeping what it serves), or the new pair."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if sidecar_path(source).exists():
        write_atomically(sidecar_path(target), sidecar_path(source).read_bytes())
    write_atomically(target, Path(source).read_bytes())
