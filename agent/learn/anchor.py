"""A rule selector as the network's starting point: the values served are the network's plus
`weight` x each node's standing under the rule the selector picks for the pod.

Why: the selector is its rules exactly (their own values, their own ties), where a network that
imitates them is a close copy at best; anchored, the network starts as the selector and TD only has
to learn where departing from the picked rule pays. A node's standing (rlscore.core.features.standing)
is 1 for the rule's best nodes and falls by 1/(N-1) per node ranked above it, so on a small cluster the
network must be sure to overrule the rule, on a large one it reorders the rule's near-best nodes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from rlscore.core.features import NUM_STATE_FEATURES, RULE_FEATURES
from rlscore.core.model import (
    ANCHOR_BEST_TOLERANCE,
    ANCHOR_PREFIX,
    ANCHOR_TERMS,
    LoadedSelector,
    ModelValidationError,
    load_model,
)


class SelectorAnchor:
    """The selector of a model file, read as serving reads it, and the standing column of its pick."""

    def __init__(self, path: str | Path, policy: str, weight: float, on: str = "standing"):
        model = load_model(path, expected_policy=policy)
        if not isinstance(model, LoadedSelector):
            raise ModelValidationError(f"{path}: an anchor must be a rule selector, not a {type(model).__name__}")
        missing = [rule for rule in model.rules if rule not in RULE_FEATURES]
        if missing:
            raise ModelValidationError(f"{path}: the selector picks {', '.join(missing)}, which has no standing "
                                       f"column to anchor on (rlscore.core.features.RULE_FEATURES)")
        if on not in ANCHOR_TERMS:
            raise ValueError(f"the anchor's term must be one of {', '.join(ANCHOR_TERMS)}, not {on!r}")
        self.selector, self.weight, self.best_only = model, float(weight), on == "best"
        self._columns = np.array([RULE_FEATURES.index(rule) for rule in model.rules])

    def column(self, obs: dict) -> int:
        """The standing column (index in RULE_FEATURES) of the rule picked for this observation's pod."""
        width = int(np.asarray(obs["action_mask"]).sum())
        if width == 0:
            return -1
        logits = self.selector.logits(np.asarray(obs["nodes"][:width]), np.asarray(obs["pod"]))
        return int(self._columns[int(np.argmax(logits))])

    def values(self, nodes: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
        """[B, N]: weight x each node's standing in its row's column (0 where the column is -1)."""
        return anchor_values(nodes, columns, self.weight, self.best_only)

    def spec(self) -> dict:
        """The model file's `anchor` (rlscore.core.model.AnchorSpec)."""
        return {"hidden": list(self.selector.architecture.hidden), "rules": list(self.selector.rules),
                "weight": self.weight, "on": "best" if self.best_only else "standing"}

    def tensors(self) -> dict[str, np.ndarray]:
        """The selector's tensors as an anchored model file holds them."""
        return {ANCHOR_PREFIX + name: w for name, w in self.selector.weights.items()}


def anchor_values(nodes: torch.Tensor, columns: torch.Tensor, weight: float, best_only: bool = False) -> torch.Tensor:
    """[B, N]: weight x nodes[b, n, NUM_STATE_FEATURES + columns[b]] (with `best_only`, weight on the
    rule's best nodes, where the standing is 1, and 0 elsewhere); 0 in rows whose column is -1."""
    standing = standing_in(nodes, columns)
    if best_only:
        standing = (standing >= 1.0 - ANCHOR_BEST_TOLERANCE).to(standing.dtype)
    return weight * standing * (columns >= 0).unsqueeze(1).to(standing.dtype)


def standing_in(nodes: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
    """[B, N]: each node's standing under the rule of its row's column (RULE_FEATURES index); rows
    whose column is -1 read the first rule's, for the caller to mask."""
    index = (NUM_STATE_FEATURES + columns.clamp(min=0)).view(-1, 1, 1).expand(-1, nodes.shape[1], 1)
    return nodes.gather(2, index).squeeze(2)
