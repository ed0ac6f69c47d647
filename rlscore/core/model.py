"""Trained policies on disk: the file format, its validation, and the forward pass in numpy.

A model is `<policy>.safetensors` (the weights, with a small header in the file's metadata: format,
policy, feature-spec version, architecture) plus a `<policy>.json` sidecar that records how it was
trained. Serving reads it with numpy alone; the trainers write it from torch (agent.learn.model_io).

A model is handed out only after it validates, in an order that never allocates what a file merely
declares: the file's size; the header (format, policy, feature-spec version, architecture) against
limits; every tensor's name, dtype and shape as the header states them, against the shapes the
architecture implies and a total parameter budget; only then the tensors themselves (finite); the
sidecar, read within bounds and checked as a schema, whose checksum, policy, format and feature
version must agree with the file; and finite values on probe inputs. Anything else is a
ModelValidationError that names the problem in one line, without file contents.

Three kinds of file share the format:
- a node scorer (MODEL_FORMAT): a DeepSets network that gives each candidate node a value (the
  Q-values of the DQN); the server scores the nodes from them. An anchored one (its architecture's
  `anchor`) also holds a rule selector's tensors (prefixed `anchor.`), and its values are the network's
  plus `weight` x each node's standing under the rule that selector picks (agent/learn/anchor.py);
- a rule selector (SELECTOR_FORMAT): a DeepSets network that picks which hand-written rule
  (rlscore.core.rules) scores each pod;
- a named hand-written rule (HEURISTIC_FORMAT, no tensors): what the retraining loop hands the
  server when the best rule beats every retrained model; it is gated, rolled out and rolled back like
  a trained model, and only the callers that score with it (`allow_heuristic=True`) take it.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rlscore.core import bounded_json
from rlscore.core.features import FEATURE_SPEC_VERSION, NODE_FEATURES_OF_VERSION, NUM_NODE_FEATURES, \
    NUM_POD_FEATURES, NUM_STATE_FEATURES, RULE_FEATURES, node_features, rank_outside_set_below
from rlscore.core.kernels import equivariant_layer, relu_column_max_mean
from rlscore.core.rules import RULES
from rlscore.core.state import POLICIES, NodeState, PodRequest

MODEL_SUFFIX = ".safetensors"
MODEL_FORMAT = "rlscore-deepsets-scorer"
SELECTOR_FORMAT = "rlscore-rule-selector"
HEURISTIC_FORMAT = "rlscore-heuristic-scorer"
FORMATS = (MODEL_FORMAT, SELECTOR_FORMAT, HEURISTIC_FORMAT)
WEIGHTS_FORMAT = "rlscore-deepsets-weights"  # the plain-JSON export the plugin's in-process scorer reads
ANCHORED_WEIGHTS_FORMAT = "rlscore-anchored-weights"  # the same for an anchored node scorer
SELECTOR_WEIGHTS_FORMAT = "rlscore-rule-selector-weights"  # the same for a rule selector
MAX_MODEL_BYTES = 16 * 1024 * 1024
MAX_SIDECAR_BYTES = 4 * 1024 * 1024
MAX_HEADER_FIELD_BYTES = 4096  # one metadata value of the model file (the architecture is the longest)
MAX_PARAMETERS = 2_000_000  # 8 MB of float32: ~100x the shipped networks
MAX_LAYERS = 8
MAX_HIDDEN_UNITS = 4096
MAX_SELECTOR_RULES = 32
_NO_EXTRA = np.zeros(0)
ANCHOR_PREFIX = "anchor."
ANCHOR_TERMS = ("standing", "best")
MAX_ANCHOR_WEIGHT = 1000.0
ANCHOR_BEST_TOLERANCE = 1e-6  # a standing this close to 1 is the rule's best (standings are float32)


class ModelValidationError(ValueError):
    """The file is not a model this build can serve; the message says why."""


def model_path(directory: Path, policy: str) -> Path:
    """Where a policy's model lives in a model directory: <policy>.safetensors."""
    return Path(directory) / f"{policy.lower()}{MODEL_SUFFIX}"


def sidecar_path(path: Path) -> Path:
    return Path(path).with_suffix(".json")


def servable_rules() -> tuple[str, ...]:
    """The rules a model file may name or a selector may pick: every hand-written rule but the random one."""
    return tuple(name for name in RULES if name != "random")


# --- the networks' shapes --------------------------------------------------------------------------

class AnchorSpec(BaseModel):
    """An anchored node scorer's rule selector and how much its pick's standing weighs."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    hidden: list[int] = Field(min_length=1, max_length=MAX_LAYERS)
    rules: list[str] = Field(min_length=1, max_length=MAX_SELECTOR_RULES)
    weight: float = Field(ge=0.0, le=MAX_ANCHOR_WEIGHT, allow_inf_nan=False)
    # what the weight multiplies: the node's standing under the picked rule, or 1 on its best nodes only
    on: Literal["standing", "best"] = "standing"


class Architecture(BaseModel):
    """What the header says the network is; everything the shapes follow from."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    hidden: list[int] = Field(min_length=1, max_length=MAX_LAYERS)
    node_features: int = Field(ge=1, le=1024)
    pod_features: int = Field(ge=0, le=1024)
    rules: list[str] | None = Field(default=None, max_length=MAX_SELECTOR_RULES)
    # a node scorer's: what it ranks (rlscore.core.features.CANDIDATE_SETS; none: every candidate)
    candidates: Literal["best-latency-tier", "running-first", "best-latency-tier-running-first"] | None = None
    anchor: AnchorSpec | None = None  # a node scorer's: the rule selector it is anchored on

    def anchor_architecture(self) -> Architecture:
        """The anchor's selector as an architecture of its own (its tensors carry ANCHOR_PREFIX)."""
        assert self.anchor is not None
        return Architecture(hidden=self.anchor.hidden, node_features=self.node_features,
                            pod_features=self.pod_features, rules=self.anchor.rules)

    def tensor_shapes(self, model_format: str) -> dict[str, tuple[int, ...]]:
        """name -> shape (torch's [out, in] for linear weights) of every tensor the network has."""
        inputs = self.node_features + self.pod_features
        widths = [inputs, *self.hidden] + ([1] if model_format == MODEL_FORMAT else [])
        shapes: dict[str, tuple[int, ...]] = {}
        for i, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
            shapes[f"layers.{i}.Lambda.weight"] = (b, a)
            shapes[f"layers.{i}.Lambda.bias"] = (b,)
            shapes[f"layers.{i}.Gamma.weight"] = (b, a)
            shapes[f"layers.{i}.Delta.weight"] = (b, a)
        if model_format == SELECTOR_FORMAT:
            last = self.hidden[-1]
            shapes["head.0.weight"] = (last, 2 * last)
            shapes["head.0.bias"] = (last,)
            shapes["head.2.weight"] = (len(self.rules or ()), last)
            shapes["head.2.bias"] = (len(self.rules or ()),)
        if model_format == MODEL_FORMAT and self.anchor is not None:
            selector = self.anchor_architecture().tensor_shapes(SELECTOR_FORMAT)
            shapes.update({ANCHOR_PREFIX + name: shape for name, shape in selector.items()})
        return shapes


def parameter_count(shapes: dict[str, tuple[int, ...]]) -> int:
    return int(sum(np.prod(s, dtype=np.int64) for s in shapes.values()))


# --- the forward pass ------------------------------------------------------------------------------

Layer = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # Lambda [in][out], bias [out], Gamma, Delta


def _layers(weights: dict[str, np.ndarray], count: int) -> list[Layer]:
    """The equivariant layers as the compiled kernel takes them, in float64."""
    def t(name: str) -> np.ndarray:
        return np.ascontiguousarray(weights[name].astype(np.float64).T)

    return [(t(f"layers.{i}.Lambda.weight"), weights[f"layers.{i}.Lambda.bias"].astype(np.float64),
             t(f"layers.{i}.Gamma.weight"), t(f"layers.{i}.Delta.weight")) for i in range(count)]


def trunk(layers: list[Layer], features: np.ndarray, pod_vec: np.ndarray) -> np.ndarray:
    """The equivariant layers in float64, a ReLU between them. The first sees [node features, pod
    features]; the pod part is the same for every node."""
    lam, bias, gam, delta = layers[0]
    x = equivariant_layer(features.astype(np.float64), pod_vec.astype(np.float64), lam, bias, gam, delta, False)
    for lam, bias, gam, delta in layers[1:]:
        x = equivariant_layer(x, _NO_EXTRA, lam, bias, gam, delta, True)
    return x


def _exported_layers(layers: list[Layer]) -> list[dict[str, list]]:
    return [{"lambda": lam.tolist(), "bias": bias.tolist(), "gamma": gam.tolist(), "delta": delta.tolist()}
            for lam, bias, gam, delta in layers]


@dataclass
class LoadedModel:
    """A validated node scorer: one value per candidate node (its Q-value), higher is better."""

    policy: str
    version: str
    architecture: Architecture
    weights: dict[str, np.ndarray]  # torch's state-dict names and shapes, float32
    path: Path
    metadata: dict[str, Any] = field(default_factory=dict)
    heuristic = None  # a trained network, not a named hand-written rule (HeuristicModel)

    def __post_init__(self) -> None:
        self.layers = _layers(self.weights, len(self.architecture.hidden) + 1)
        self.anchor: LoadedSelector | None = None
        spec = self.architecture.anchor
        if spec is not None:
            n = len(ANCHOR_PREFIX)
            self.anchor = LoadedSelector(self.policy, self.version, self.architecture.anchor_architecture(),
                                         {k[n:]: v for k, v in self.weights.items() if k.startswith(ANCHOR_PREFIX)},
                                         self.path)
            self._anchor_columns = [NUM_STATE_FEATURES + RULE_FEATURES.index(rule) for rule in spec.rules]

    def q_values(self, nodes: NodeState, pod: PodRequest) -> np.ndarray:
        """The value of placing `pod` on each of `nodes` (all of them candidates)."""
        features, pod_vec = node_features(nodes, pod)
        return self.q_values_from_features(features, pod_vec)

    def decide(self, nodes: NodeState, pod: PodRequest) -> tuple[np.ndarray, str | None]:
        """The values and the hand-written rule behind them: none for a network that scores the nodes."""
        return self.q_values(nodes, pod), None

    def q_values_from_features(self, features: np.ndarray, pod_vec: np.ndarray) -> np.ndarray:
        if len(features) == 0:
            return np.zeros(0)
        values = trunk(self.layers, features, pod_vec)[:, 0]
        if self.anchor is not None:
            values = values + self.anchor_term(features, pod_vec)
        return rank_outside_set_below(values, features, self.architecture.candidates or "all")

    def anchor_term(self, features: np.ndarray, pod_vec: np.ndarray) -> np.ndarray:
        """weight x each node's standing under the rule the anchor's selector picks (1 on its best
        nodes, 0 elsewhere, with `on` "best")."""
        spec = self.architecture.anchor
        column = self._anchor_columns[int(np.argmax(self.anchor.logits(features, pod_vec)))]
        standing = features[:, column].astype(np.float64)
        if spec.on == "best":
            standing = (standing >= 1.0 - ANCHOR_BEST_TOLERANCE).astype(np.float64)
        return spec.weight * standing

    def export(self) -> dict[str, Any]:
        """The forward pass as plain JSON: per layer Lambda [in][out], its bias [out], Gamma and Delta
        [in][out]. The scheduler plugin's in-process scorer reads this; `lambda` rows
        0..node_features-1 take the node features, the rest the pod features. An anchored scorer's
        (ANCHORED_WEIGHTS_FORMAT) adds its selector's export, the weight and what it multiplies."""
        spec = self.architecture.anchor
        anchored = {"anchor": {**self.anchor.export(), "weight": spec.weight, "on": spec.on}} if spec else {}
        return {"format": ANCHORED_WEIGHTS_FORMAT if spec else WEIGHTS_FORMAT,
                "feature_spec_version": FEATURE_SPEC_VERSION, "policy": self.policy,
                "version": self.version, "node_features": NUM_NODE_FEATURES, "pod_features": NUM_POD_FEATURES,
                "layers": _exported_layers(self.layers),
                **({"candidates": self.architecture.candidates} if self.architecture.candidates else {}), **anchored}


@dataclass
class LoadedSelector:
    """A validated rule selector: per pod its network picks one of `rules`, and that rule's values
    are the answer (the node scores follow from them as from any model's)."""

    policy: str
    version: str
    architecture: Architecture
    weights: dict[str, np.ndarray]
    path: Path
    metadata: dict[str, Any] = field(default_factory=dict)
    heuristic = None

    def __post_init__(self) -> None:
        self.layers = _layers(self.weights, len(self.architecture.hidden))
        self.head = [(np.ascontiguousarray(self.weights[f"head.{k}.weight"].astype(np.float64).T),
                      self.weights[f"head.{k}.bias"].astype(np.float64)) for k in (0, 2)]
        self._rng = np.random.default_rng(0)  # the servable rules are deterministic; this is a formality

    @property
    def rules(self) -> tuple[str, ...]:
        return tuple(self.architecture.rules or ())

    def logits(self, features: np.ndarray, pod_vec: np.ndarray) -> np.ndarray:
        """features [N >= 1, F], pod_vec [P] -> one logit per rule: the trunk, a ReLU, the mean and
        max over the candidates, then the head's two linear layers."""
        top, mean = relu_column_max_mean(trunk(self.layers, features, pod_vec), True)
        (w1, b1), (w2, b2) = self.head
        hidden = np.maximum(np.concatenate([mean, top]) @ w1 + b1, 0.0)
        return hidden @ w2 + b2

    def rule_for(self, nodes: NodeState, pod: PodRequest) -> str:
        """The rule the selector picks for this pod on these candidates (the first on equal logits)."""
        features, pod_vec = node_features(nodes, pod)
        return self.rules[int(np.argmax(self.logits(features, pod_vec)))]

    def decide(self, nodes: NodeState, pod: PodRequest) -> tuple[np.ndarray, str | None]:
        """The picked rule's values (higher is better, ties are the rule's own) and its name."""
        if len(nodes) == 0:
            return np.zeros(0), None
        rule = self.rule_for(nodes, pod)
        return self.rule_values(rule, nodes, pod), rule

    def rule_values(self, rule: str, nodes: NodeState, pod: PodRequest) -> np.ndarray:
        """One of the servable rules' values, as the selector serves them when it picks that rule."""
        return np.asarray(RULES[rule](nodes, pod, self._rng), dtype=np.float64)

    def q_values(self, nodes: NodeState, pod: PodRequest) -> np.ndarray:
        return self.decide(nodes, pod)[0]

    def export(self) -> dict[str, Any]:
        """The selector as plain JSON for the plugin's in-process scorer: the trunk's layers as a node
        scorer's export has them, the head's two linear layers ([in][out] and bias) and the rules."""
        return {"format": SELECTOR_WEIGHTS_FORMAT, "feature_spec_version": FEATURE_SPEC_VERSION,
                "policy": self.policy, "version": self.version, "node_features": NUM_NODE_FEATURES,
                "pod_features": NUM_POD_FEATURES, "rules": list(self.rules), "layers": _exported_layers(self.layers),
                "head": [{"weight": w.tolist(), "bias": b.tolist()} for w, b in self.head]}


@dataclass
class HeuristicModel:
    """A hand-written rule (rlscore.core.rules) in a model file's place: served, gated, rolled out
    and rolled back like a trained model; it has no weights to export or fine-tune."""

    policy: str
    version: str
    heuristic: str
    path: Path
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._fn = RULES[self.heuristic]
        self._rng = np.random.default_rng(0)  # the served rules are deterministic; this is a formality

    def q_values(self, nodes: NodeState, pod: PodRequest) -> np.ndarray:
        if len(nodes) == 0:
            return np.zeros(0)
        return np.asarray(self._fn(nodes, pod, self._rng), dtype=np.float64)

    def decide(self, nodes: NodeState, pod: PodRequest) -> tuple[np.ndarray, str | None]:
        """The named rule's values, and its name."""
        return self.q_values(nodes, pod), self.heuristic


AnyModel = LoadedModel | LoadedSelector | HeuristicModel


# --- writing -------------------------------------------------------------------------------------

def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_atomically(path: Path, data: bytes) -> None:
    """Replace `path` with `data` by a rename: a reader sees the old file or the new one, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", delete=False) as tmp:
        tmp.write(data)
        tmp.flush()
        os.fsync(tmp.fileno())
    # a temporary file is private (0600); the replaced file keeps its mode, a new one is world-readable
    os.chmod(tmp.name, path.stat().st_mode & 0o777 if path.exists() else 0o644)
    os.replace(tmp.name, path)


def _header(model_format: str, policy: str, **extra: str) -> dict[str, str]:
    return {"format": model_format, "policy": policy, **extra}


def _canonical(data: bytes) -> bytes:
    """safetensors writes its metadata in a hash map's order, which changes from process to process:
    with the header's keys sorted, the same weights and header make the same bytes (and checksum)."""
    size = int.from_bytes(data[:8], "little")
    text = json.dumps(json.loads(data[8:8 + size]), sort_keys=True, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the format pads its header to 8 bytes, keeping the tensors aligned
    return len(text).to_bytes(8, "little") + text + data[8 + size:]


def write_model(path: str | Path, weights: dict[str, np.ndarray], policy: str, architecture: dict,
                metadata: dict[str, Any]) -> Path:
    """Write a node scorer or (with `architecture["rules"]`) a rule selector, and its sidecar with the
    file's checksum. `weights` are named and shaped as torch's state dict."""
    from safetensors.numpy import save

    arch = Architecture.model_validate(architecture)
    model_format = SELECTOR_FORMAT if arch.rules else MODEL_FORMAT
    expected = arch.tensor_shapes(model_format)
    if set(weights) != set(expected) or any(tuple(weights[k].shape) != s for k, s in expected.items()):
        raise ValueError("the weights do not have the architecture's names and shapes")
    header = _header(model_format, policy, feature_spec_version=str(FEATURE_SPEC_VERSION),
                     architecture=arch.model_dump_json(exclude_none=True))
    data = _canonical(save({k: np.ascontiguousarray(v, dtype=np.float32) for k, v in sorted(weights.items())},
                           metadata=header))
    return _write_pair(Path(path), data, {"policy": policy, "feature_spec_version": FEATURE_SPEC_VERSION,
                                          "format": model_format}, metadata)


def write_heuristic_model(path: str | Path, heuristic: str, policy: str, metadata: dict[str, Any]) -> Path:
    """Write a model file that serves the rule `heuristic` for `policy`, and its sidecar."""
    from safetensors.numpy import save

    if heuristic not in servable_rules():
        raise ValueError(f"unknown rule {heuristic!r}: expected one of {', '.join(servable_rules())}")
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}: expected one of {', '.join(POLICIES)}")
    data = _canonical(save({}, metadata=_header(HEURISTIC_FORMAT, policy, heuristic=heuristic)))
    return _write_pair(Path(path), data, {"policy": policy, "format": HEURISTIC_FORMAT, "heuristic": heuristic},
                       metadata)


def _write_pair(path: Path, data: bytes, header: dict, metadata: dict[str, Any]) -> Path:
    write_atomically(path, data)
    sidecar = {**metadata, **header, "sha256": sha256_of(path)}
    write_atomically(sidecar_path(path), (json.dumps(sidecar, indent=2) + "\n").encode())
    return path


def install_model(source: Path, target: Path) -> None:
    """Copy a model and its sidecar to `target`: the sidecar first, then the model, each atomically.
    A reader (the server's model watch) sees the old pair, or the new sidecar beside the old model
    (which the loader refuses on its checksum, keeping what it serves), or the new pair."""
    if sidecar_path(source).exists():
        write_atomically(sidecar_path(target), sidecar_path(source).read_bytes())
    write_atomically(target, Path(source).read_bytes())


# --- reading -------------------------------------------------------------------------------------

class Sidecar(BaseModel):
    """The fields of a sidecar that loading relies on; the rest of the record is kept as it is."""

    model_config = ConfigDict(extra="allow")
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    policy: Literal["EE", "LB", "EL"] | None = None
    format: Literal[MODEL_FORMAT, SELECTOR_FORMAT, HEURISTIC_FORMAT] | None = None
    feature_spec_version: int | None = None
    heuristic: str | None = None
    training: dict[str, Any] | None = None
    training_profile: dict[str, Any] | None = None


def read_sidecar(path: Path) -> dict[str, Any]:
    """A sidecar's record, read within bounds and checked against the Sidecar schema."""
    try:
        record = bounded_json.load_file(path, MAX_SIDECAR_BYTES, what="sidecar")
    except bounded_json.BoundedJSONError as exc:
        raise ModelValidationError(f"{path.name}: {exc}") from None
    if not isinstance(record, dict):
        raise ModelValidationError(f"{path.name}: the sidecar is not a JSON object")
    try:
        Sidecar.model_validate(record)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(top)'}: {e['msg']}" for e in exc.errors()[:3])
        raise ModelValidationError(f"{path.name}: invalid sidecar: {problems}") from None
    return record


def _require(condition: bool, path: Path, message: str) -> None:
    if not condition:
        raise ModelValidationError(f"{path.name}: {message}")


def _read_file(path: Path) -> tuple[bytes, dict[str, str], dict[str, tuple[str, tuple[int, ...]]]]:
    """The file's bytes (read whole, not memory-mapped: a file truncated while it is read must not bring
    the process down), its header's metadata, and each tensor's dtype and shape as the header declares
    them. The header is read within bounds before anything else of the file."""
    _require(path.is_file(), path, "no such model file")
    size = path.stat().st_size
    _require(size <= MAX_MODEL_BYTES, path, f"file is {size} bytes, over the {MAX_MODEL_BYTES}-byte limit")
    with open(path, "rb") as f:
        data = f.read(MAX_MODEL_BYTES + 1)
    _require(8 <= len(data) <= MAX_MODEL_BYTES, path, "not a readable model file (too short)")
    header_size = int.from_bytes(data[:8], "little")
    _require(header_size <= len(data) - 8, path, "not a readable model file (its header runs past the end)")
    try:
        header = bounded_json.loads(data[8:8 + header_size], header_size, what="the header")
    except bounded_json.BoundedJSONError as exc:
        raise ModelValidationError(f"{path.name}: not a readable model file ({exc})") from None
    _require(isinstance(header, dict), path, "not a readable model file (its header is not an object)")
    metadata = header.pop("__metadata__", None) or {}
    _require(isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values()), path,
             "not a readable model file (its metadata is not a map of strings)")
    declared = {}
    for name, info in header.items():
        _require(isinstance(info, dict) and isinstance(info.get("shape"), list)
                 and all(isinstance(d, int) and d >= 0 for d in info["shape"]), path,
                 f"not a readable model file (tensor {name[:40]!r} is declared without a shape)")
        declared[name] = (str(info.get("dtype")), tuple(info["shape"]))
    return data, metadata, declared


def load_model(path: str | Path, expected_policy: str | None = None, allow_heuristic: bool = False) -> AnyModel:
    """The validated model at `path` (see the module's docstring for the order of the checks). A file
    naming a rule is taken only with `allow_heuristic`, otherwise refused with the rule named."""
    from safetensors import SafetensorError
    from safetensors.numpy import load

    path = Path(path)
    data, header, declared = _read_file(path)
    model_format, policy = _check_header(path, header, expected_policy)
    if model_format == HEURISTIC_FORMAT:
        _require(not declared, path, "a rule's model file holds no tensors")
        return _heuristic(path, header, policy, allow_heuristic, hashlib.sha256(data).hexdigest())
    spec = header.get("feature_spec_version", "")
    _require(spec.isdigit(), path, f"feature spec version {spec[:10]!r} is not a number")
    arch = _architecture(path, header, model_format, int(spec))
    expected = arch.tensor_shapes(model_format)
    params = parameter_count(expected)
    _require(params <= MAX_PARAMETERS, path,
             f"the architecture has {params} parameters, over the limit of {MAX_PARAMETERS}")
    _require(set(declared) == set(expected), path, "tensor names do not match the architecture "
             f"(missing {sorted(set(expected) - set(declared))[:3]}, unexpected {sorted(set(declared) - set(expected))[:3]})")
    for name, (dtype, shape) in declared.items():
        _require(dtype in ("F32", "F64") and shape == expected[name], path,
                 f"tensor {name} is {dtype} {list(shape)}, the architecture needs float {list(expected[name])}")
    try:
        weights = {k: v.astype(np.float32) for k, v in load(data).items()}
    except SafetensorError as exc:
        raise ModelValidationError(f"{path.name}: not a readable model file ({str(exc)[:120]})") from None
    _require(all(bool(np.isfinite(w).all()) for w in weights.values()), path, "weights contain NaN or infinity")
    weights = upgrade_weights(weights, arch.node_features)
    arch = arch.model_copy(update={"node_features": NUM_NODE_FEATURES})
    digest = hashlib.sha256(data).hexdigest()
    metadata = _sidecar(path, digest, policy, model_format)
    loaded = LoadedSelector if model_format == SELECTOR_FORMAT else LoadedModel
    model = loaded(policy=policy, version=f"{policy.lower()}-{digest[:7]}", architecture=arch, weights=weights,
                   path=path, metadata=metadata)
    _probe(model, path)
    return model


def _check_header(path: Path, header: dict[str, str], expected_policy: str | None) -> tuple[str, str]:
    _require(all(len(v) <= MAX_HEADER_FIELD_BYTES for v in header.values()), path,
             f"a header field is over {MAX_HEADER_FIELD_BYTES} bytes")
    model_format = header.get("format")
    _require(model_format in FORMATS, path, f"format is {str(model_format)[:40]!r}, expected one of "
                                            f"{', '.join(FORMATS)}")
    policy = header.get("policy")
    _require(policy in POLICIES, path, f"policy is {str(policy)[:10]!r}, expected one of {', '.join(POLICIES)}")
    if expected_policy is not None:
        _require(policy == expected_policy, path, f"holds policy {policy}, expected {expected_policy}")
    return model_format, policy


def _architecture(path: Path, header: dict[str, str], model_format: str, spec: int) -> Architecture:
    _require(spec in NODE_FEATURES_OF_VERSION, path,
             f"trained on feature spec version {spec}, this build serves version {FEATURE_SPEC_VERSION} and reads "
             f"{', '.join(map(str, NODE_FEATURES_OF_VERSION))}")
    try:
        arch = Architecture.model_validate(
            bounded_json.loads(header.get("architecture", ""), MAX_HEADER_FIELD_BYTES, what="architecture"))
    except bounded_json.BoundedJSONError as exc:
        raise ModelValidationError(f"{path.name}: invalid architecture: {str(exc).splitlines()[0][:160]}") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(map(str, first["loc"])) or "architecture"
        raise ModelValidationError(f"{path.name}: invalid architecture: {where}: {first['msg'][:160]}") from None
    _require(all(1 <= h <= MAX_HIDDEN_UNITS for h in arch.hidden), path,
             f"hidden layer widths must be within 1..{MAX_HIDDEN_UNITS}")
    width = NODE_FEATURES_OF_VERSION[spec]
    _require(arch.node_features == width and arch.pod_features == NUM_POD_FEATURES, path,
             f"expects {arch.node_features}+{arch.pod_features} features, feature spec version {spec} has "
             f"{width}+{NUM_POD_FEATURES}")
    if model_format == SELECTOR_FORMAT:
        rules = arch.rules or []
        _require(1 <= len(rules) == len(set(rules)) and all(r in servable_rules() for r in rules), path,
                 f"a selector's rules must be 1..{MAX_SELECTOR_RULES} distinct rules of {', '.join(servable_rules())}")
    else:
        _require(arch.rules is None, path, "a node scorer names no rules")
    if arch.anchor is not None:
        rules = arch.anchor.rules
        _require(model_format == MODEL_FORMAT, path, "only a node scorer is anchored on a selector")
        _require(len(rules) == len(set(rules)) and all(r in servable_rules() and r in RULE_FEATURES for r in rules),
                 path, f"an anchor's rules must be distinct rules with a standing column: {', '.join(RULE_FEATURES)}")
        _require(all(1 <= h <= MAX_HIDDEN_UNITS for h in arch.anchor.hidden), path,
                 f"the anchor's hidden layer widths must be within 1..{MAX_HIDDEN_UNITS}")
        _require(arch.candidates is None, path, "an anchored scorer ranks every candidate")
        _require(spec == FEATURE_SPEC_VERSION, path, f"an anchored scorer is of feature spec version "
                                                     f"{FEATURE_SPEC_VERSION}, not {spec}")
    _require(model_format != SELECTOR_FORMAT or arch.candidates is None, path,
             "a selector's candidates are its rules' own")
    return arch


def upgrade_weights(weights: dict[str, np.ndarray], node_features: int) -> dict[str, np.ndarray]:
    """A network's weights (a node scorer's or a selector's trunk) trained on the first `node_features` columns (an earlier feature spec
    version), widened to this version's with zero weight on the columns added since (they sit between
    the old node columns and the pod columns): the network reads the new inputs and decides exactly
    as it did."""
    added = NUM_NODE_FEATURES - node_features
    if added == 0:
        return weights
    upgraded = dict(weights)
    for name in ("Lambda", "Gamma", "Delta"):
        key = f"layers.0.{name}.weight"
        w = weights[key]
        upgraded[key] = np.concatenate([w[:, :node_features], np.zeros((w.shape[0], added), w.dtype),
                                        w[:, node_features:]], axis=1)
    return upgraded


def _sidecar(path: Path, digest: str, policy: str, model_format: str) -> dict[str, Any]:
    """The sidecar's record (empty when there is none), checked against the file it describes."""
    side = sidecar_path(path)
    if not side.is_file():
        return {}
    record = read_sidecar(side)
    _require(record.get("sha256") in (None, digest), side, "sha256 does not match the model file "
                                                           "(file changed after training?)")
    _require(record.get("policy") in (None, policy), side, f"says policy {record.get('policy')}, the model holds {policy}")
    _require(record.get("format") in (None, model_format), side,
             f"says format {record.get('format')}, the model file is {model_format}")
    spec = record.get("feature_spec_version")
    _require(spec is None or model_format == HEURISTIC_FORMAT or spec in NODE_FEATURES_OF_VERSION, side,
             f"says feature spec version {spec}, this build reads {', '.join(map(str, NODE_FEATURES_OF_VERSION))}")
    return record


def _heuristic(path: Path, header: dict[str, str], policy: str, allow: bool, digest: str) -> HeuristicModel:
    name = header.get("heuristic")
    _require(name in servable_rules(), path, f"names rule {str(name)[:40]!r}, expected one of "
                                             f"{', '.join(servable_rules())}")
    _require(allow, path, f"holds the rule {name}, not a trained network (nothing to fine-tune or export)")
    model = HeuristicModel(policy=policy, version=f"{policy.lower()}-{name}-{digest[:7]}", heuristic=name, path=path,
                           metadata=_sidecar(path, digest, policy, HEURISTIC_FORMAT))
    _probe(model, path)
    return model


def probe_states() -> list[tuple[NodeState, PodRequest]]:
    """A few synthetic clusters of different sizes, with and without latency limits."""
    rng = np.random.default_rng(0)
    cases = []
    for n in (1, 3, 64):
        cap = rng.choice([4000.0, 8000.0, 16000.0], n)
        idle = rng.uniform(40, 200, n)
        nodes = NodeState(
            names=[f"probe-{i}" for i in range(n)], cpu_capacity=cap, memory_capacity=cap * 2**21,
            max_pods=np.full(n, 110.0), cpu_requested=cap * rng.uniform(0, 0.8, n),
            memory_requested=cap * 2**21 * rng.uniform(0, 0.8, n), pods=rng.integers(0, 20, n),
            cpu_utilization=rng.uniform(0, 1, n), latency_ms=rng.uniform(1, 80, n),
            power_idle_watts=np.where(rng.random(n) < 0.5, idle, np.nan), power_max_watts=idle * 2.5)
        cases += [(nodes, PodRequest(250, 64 * 2**20)), (nodes, PodRequest(1000, 2**30, 20.0, 30.0))]
    return cases


def _probe(model: AnyModel, path: Path) -> None:
    """Finite values on the probe states."""
    for nodes, pod in probe_states():
        q = model.q_values(nodes, pod)
        _require(q.shape == (len(nodes),) and bool(np.all(np.isfinite(q))), path,
                 f"non-finite values on a {len(nodes)}-node probe input")
