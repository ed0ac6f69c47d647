"""The Q-network: a DeepSets stack of permutation-equivariant layers, one Q-value per node.

Each layer computes Lambda x_i - Gamma maxpool_j(x_j) (Zaheer et al., as in the thesis). Unlike the
thesis network there is no final dense layer over the node axis, so the same weights serve any node
count, and the max-pool only sees the nodes the mask marks as candidates: padding and infeasible
nodes neither leak into the set summary nor get a finite Q-value.
"""

from __future__ import annotations

import torch
from torch import nn

from agent.features import NUM_NODE_FEATURES, NUM_POD_FEATURES


class EquivariantLayer(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.Lambda = nn.Linear(in_features, out_features)
        self.Gamma = nn.Linear(in_features, out_features, bias=False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """x: [batch, nodes, in]; mask: [batch, nodes] bool, True for candidate nodes."""
        hidden = x.masked_fill(~mask.unsqueeze(-1), float("-inf"))
        pooled = hidden.max(dim=1).values
        pooled = torch.where(torch.isfinite(pooled), pooled, torch.zeros_like(pooled))
        return self.Lambda(x) - self.Gamma(pooled).unsqueeze(1)


class QNetwork(nn.Module):
    def __init__(self, hidden: tuple[int, ...] = (64, 64),
                 node_features: int = NUM_NODE_FEATURES, pod_features: int = NUM_POD_FEATURES):
        super().__init__()
        self.hidden = tuple(hidden)
        self.node_features, self.pod_features = node_features, pod_features
        sizes = (node_features + pod_features, *self.hidden, 1)
        self.layers = nn.ModuleList(EquivariantLayer(a, b) for a, b in zip(sizes[:-1], sizes[1:]))

    def forward(self, nodes: torch.Tensor, pod: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """nodes [B, N, F], pod [B, P], mask [B, N] bool -> Q [B, N], -inf where mask is False."""
        x = torch.cat([nodes, pod.unsqueeze(1).expand(-1, nodes.shape[1], -1)], dim=-1)
        for i, layer in enumerate(self.layers):
            x = layer(x, mask)
            if i < len(self.layers) - 1:
                x = torch.relu(x)
        q = x.squeeze(-1)
        return q.masked_fill(~mask, float("-inf"))

    def architecture(self) -> dict:
        return {"hidden": list(self.hidden), "node_features": self.node_features,
                "pod_features": self.pod_features}
