"""Several trained models scored as one: the mean of their values, each standardized over the
candidates of the decision.

A diagnostic, not something the plugin serves. When models of one recipe differ only by their
training seed, what they learned in common survives the mean and what each fitted to its own noise
averages out; an ensemble of DQNs against an ensemble of their demonstrations-only twins therefore
asks whether TD found anything the seeds agree on (`rlscore-eval --ensemble a,b,c --ensemble d,e,f`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rlscore.core.features import node_features
from rlscore.core.model import LoadedModel, load_model
from rlscore.core.state import NodeState, PodRequest


@dataclass
class EnsembleScorer:
    models: list[LoadedModel]
    name: str = "rl-ensemble"

    def __post_init__(self) -> None:
        if len(self.models) < 2:
            raise ValueError(f"{self.name}: an ensemble needs at least two models")
        policies = {m.policy for m in self.models}
        if len(policies) != 1:
            raise ValueError(f"{self.name}: models of several policies ({', '.join(sorted(policies))})")
        if not all(isinstance(m, LoadedModel) for m in self.models):
            raise ValueError(f"{self.name}: only networks that score the nodes can be averaged (not rule selectors)")

    def values(self, nodes: NodeState, pod: PodRequest) -> np.ndarray:
        return self.values_from_features(*node_features(nodes, pod))

    def values_from_features(self, features: np.ndarray, pod_vec: np.ndarray) -> np.ndarray:
        return consensus([model.q_values_from_features(features, pod_vec) for model in self.models])


def consensus(values: list[np.ndarray]) -> np.ndarray:
    """The mean of several models' values of one decision's candidates, each standardized over them
    (a model's scale and offset say nothing about the ranking)."""
    total = np.zeros(len(values[0]))
    for q in values:
        spread = float(q.std())
        if spread > 0:  # a model indifferent among the candidates adds nothing to the ranking
            total += (q - q.mean()) / spread
    return total / len(values)


def load_ensemble(files: str, policy: str, name: str) -> EnsembleScorer:
    """`a.safetensors,b.safetensors,...` -> one scorer; raises ModelValidationError or ValueError
    naming the file or the problem."""
    paths = [Path(p) for p in files.split(",") if p.strip()]
    return EnsembleScorer([load_model(path, expected_policy=policy) for path in paths], name=name)
