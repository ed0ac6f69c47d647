"""Scorers turn (candidate nodes, pod) into one value per node, higher is better. Evaluation and
the suggestion server use the same scorers, so what is measured is what is served."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from rlscore.core.rules import RULES, MAX_NODE_SCORE
from rlscore.core.kernels import TIE, node_scores_numpy, node_scores
from rlscore.core.model import LoadedModel, LoadedSelector
from rlscore.core.state import NodeState, PodRequest


class Scorer(Protocol):
    name: str

    def values(self, nodes: NodeState, pod: PodRequest) -> np.ndarray: ...


@dataclass
class HeuristicScorer:
    name: str
    rng: np.random.Generator

    def __post_init__(self) -> None:
        if self.name not in RULES:
            raise ValueError(f"unknown heuristic {self.name!r}: expected one of {', '.join(RULES)}")
        self._fn = RULES[self.name]

    def values(self, nodes: NodeState, pod: PodRequest) -> np.ndarray:
        return self._fn(nodes, pod, self.rng)


@dataclass
class ModelScorer:
    model: LoadedModel | LoadedSelector
    name: str | None = None  # default rl-<policy>; set to tell several models of one policy apart

    def __post_init__(self) -> None:
        if self.name is None:
            self.name = f"rl-{self.model.policy.lower()}"

    def values(self, nodes: NodeState, pod: PodRequest) -> np.ndarray:
        return self.model.q_values(nodes, pod)


def choose(values: np.ndarray, rng: np.random.Generator) -> int:
    """Index of the best value, ties (within TIE) broken at random as kube-scheduler's selectHost does."""
    best = np.flatnonzero(values >= values.max() - TIE)
    return int(best[0] if best.size == 1 else rng.choice(best))


def to_node_scores(values: np.ndarray) -> np.ndarray:
    """Map values onto integer scores 0..100: 100 for the best and the values tied with it, worst 0,
    linear between but at most 99 for any other node.

    So with RLScore as the only scorer the scheduler picks among the nodes `choose` picks among, and
    what the evaluation measures is what is served: rounding alone gave 100 to every node within
    half a point of the best, and the scheduler's random pick among them left a model measurably behind
    its own argmax.
    Non-finite values score 0, so a broken entry can never win. (Compiled: rlscore.core.kernels.node_scores;
    `reference_node_scores` is the same in numpy.)
    """
    return node_scores(np.asarray(values, dtype=np.float64), MAX_NODE_SCORE)[0]


def reference_node_scores(values: np.ndarray) -> np.ndarray:
    """to_node_scores in numpy (what serves where numba is not installed)."""
    return node_scores_numpy(np.asarray(values, dtype=np.float64), MAX_NODE_SCORE)[0]
