"""The trainers' side of the model format (rlscore.core.model): torch networks written as model files,
and model files read back as torch networks (to fine-tune, or as the reference a fast path is held to).
Serving never imports this: it reads the same files with numpy alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlscore.core.features import rank_outside_set_below
from rlscore.core.model import ANCHOR_PREFIX, Architecture, LoadedModel, LoadedSelector, write_model
from agent.learn.anchor import SelectorAnchor
from agent.learn.network import NodeScorer, RuleSelector


def save_model(path: str | Path, network: NodeScorer | RuleSelector, policy: str, metadata: dict[str, Any],
               anchor: SelectorAnchor | None = None) -> Path:
    """Write the network (a node scorer or a rule selector) and its sidecar, which gets the file's checksum;
    with an `anchor`, a node scorer anchored on its selector (the selector's tensors in the same file)."""
    weights = {k: v.detach().cpu().numpy().astype(np.float32) for k, v in network.state_dict().items()}
    architecture = network.architecture()
    if anchor is not None:
        weights.update(anchor.tensors())
        architecture = {**architecture, "anchor": anchor.spec()}
    return write_model(path, weights, policy, architecture, metadata)


def served(network: NodeScorer | RuleSelector, policy: str) -> LoadedModel | LoadedSelector:
    """The network as serving would run it (numpy, float64), without writing a file."""
    weights = {k: v.detach().cpu().numpy().astype(np.float32) for k, v in network.state_dict().items()}
    arch = Architecture.model_validate(network.architecture())
    loaded = LoadedSelector if isinstance(network, RuleSelector) else LoadedModel
    return loaded(policy=policy, version="unsaved", architecture=arch, weights=weights, path=Path("<memory>"))


def torch_network(model: LoadedModel | LoadedSelector) -> NodeScorer | RuleSelector:
    """The loaded model as the torch network it was trained as (eval mode)."""
    arch = model.architecture
    if isinstance(model, LoadedSelector):
        network = RuleSelector(tuple(arch.rules), tuple(arch.hidden), arch.node_features, arch.pod_features)
    else:
        network = NodeScorer(tuple(arch.hidden), arch.node_features, arch.pod_features, arch.candidates or "all")
    # an anchored scorer's selector is not part of its network (LoadedModel.anchor_term adds it)
    own = {k: v for k, v in model.weights.items() if not k.startswith(ANCHOR_PREFIX)}
    network.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in own.items()}, strict=True)
    return network.eval()


def reference_values(model: LoadedModel | LoadedSelector, features: np.ndarray, pod_vec: np.ndarray) -> np.ndarray:
    """The torch network itself in float64 on all candidates (Q-values, or a selector's logits; an
    anchored scorer's with its anchor's term): what the served numpy forward pass must reproduce."""
    network = torch_network(model).double()
    with torch.inference_mode():
        x = torch.from_numpy(features.astype(np.float64)).unsqueeze(0)
        p = torch.from_numpy(pod_vec.astype(np.float64)).unsqueeze(0)
        values = network(x, p, torch.ones(x.shape[:2], dtype=torch.bool))[0].numpy()
    if isinstance(model, LoadedModel) and model.anchor is not None:
        values = values + model.anchor_term(features, pod_vec)
    return rank_outside_set_below(values, features, getattr(network, "candidates", "all"))
