"""The networks: DeepSets stacks of permutation-equivariant layers.

Each layer computes Lambda x_i - Gamma maxpool_j(x_j) - Delta meanpool_j(x_j) (Zaheer et al.; the
thesis used the max only). The mean gives the set's averages -- how loaded the cluster is, how many
nodes are on -- which a max cannot express and which decide, e.g., whether packing small nodes or
filling big efficient ones saves more energy. There is no dense layer over the node axis, so the
same weights serve any node count, and the pools only see the nodes the mask marks as candidates:
padding and infeasible nodes neither leak into the set summary nor get a finite score.

`NodeScorer` gives one value per node: the Q-values of DQN (or, in a behaviour clone an earlier trainer
wrote, the logits of a masked softmax over nodes). `ValueHead` is its own equivariant trunk pooled (mean
and max over the candidates) into values of the whole state: the dueling head's V(s) (`DuelingQ`).
`RuleSelector` is the same pooled trunk with one output per hand-written rule, which rule places this pod:
an earlier trainer's model, still loaded and served. NodeScorer and RuleSelector are the networks that
are served.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from rlscore.core.features import CANDIDATE_SETS, NUM_NODE_FEATURES, NUM_POD_FEATURES, candidate_level


class EquivariantLayer(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.Lambda = nn.Linear(in_features, out_features)
        self.Gamma = nn.Linear(in_features, out_features, bias=False)
        self.Delta = nn.Linear(in_features, out_features, bias=False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """x: [batch, nodes, in]; mask: [batch, nodes] bool, True for candidate nodes."""
        m = mask.unsqueeze(-1)
        hidden = x.masked_fill(~m, float("-inf"))
        top = hidden.max(dim=1).values
        top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
        mean = (x * m).sum(dim=1) / m.sum(dim=1).clamp(min=1)
        return self.Lambda(x) - (self.Gamma(top) + self.Delta(mean)).unsqueeze(1)


def _inputs(nodes: torch.Tensor, pod: torch.Tensor) -> torch.Tensor:
    return torch.cat([nodes, pod.unsqueeze(1).expand(-1, nodes.shape[1], -1)], dim=-1)


def ranked_candidates(nodes: torch.Tensor, mask: torch.Tensor, candidates: str) -> torch.Tensor:
    """nodes [B, N, F], mask [B, N] -> [B, N] bool: the candidates each row's network ranks, those at the
    highest level of the candidate set among the row's candidates (rlscore.core.features.ranked_candidates,
    batched)."""
    if candidates == "all":
        return mask
    level = candidate_level(nodes, candidates)  # plain column arithmetic: works on tensors too
    best = level.masked_fill(~mask, -1.0).amax(dim=1, keepdim=True)
    return mask & (level >= best)


class NodeScorer(nn.Module):
    """Equivariant layers with ReLUs between them, ending in one value per node. With `candidates` other
    than "all" only the candidates the set ranks (rlscore.core.features.CANDIDATE_SETS) get a value (the
    others -inf, as off the mask); every candidate still enters the pools."""

    def __init__(self, hidden: tuple[int, ...] = (64, 64),
                 node_features: int = NUM_NODE_FEATURES, pod_features: int = NUM_POD_FEATURES,
                 candidates: str = "all", heads: int = 1):
        super().__init__()
        if candidates not in CANDIDATE_SETS:
            raise ValueError(f"unknown candidates {candidates!r}: expected one of {', '.join(CANDIDATE_SETS)}")
        if heads < 1:
            raise ValueError(f"a NodeScorer needs at least one head, not {heads}")
        self.candidates = candidates
        self.hidden = tuple(hidden)
        self.heads = heads
        self.node_features, self.pod_features = node_features, pod_features
        sizes = (node_features + pod_features, *self.hidden, heads)
        self.layers = nn.ModuleList(EquivariantLayer(a, b) for a, b in zip(sizes[:-1], sizes[1:]))

    def forward(self, nodes: torch.Tensor, pod: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """nodes [B, N, F], pod [B, P], mask [B, N] bool -> [B, N], -inf where mask is False (the first
        head's values: a served network has one)."""
        return self.head_values(nodes, pod, mask)[..., 0]

    def head_values(self, nodes: torch.Tensor, pod: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """[B, N, heads]: each head's values, -inf where mask is False."""
        x = _inputs(nodes, pod)
        for i, layer in enumerate(self.layers):
            x = layer(x, mask)
            if i < len(self.layers) - 1:
                x = torch.relu(x)
        ranked = ranked_candidates(nodes, mask, self.candidates)
        return x.masked_fill(~ranked.unsqueeze(-1), float("-inf"))

    def blind_to(self, columns: list[int]) -> None:
        """Hold the first layer's weights on these input columns at zero, for good: the network
        cannot read those inputs, and the served model keeps the same shape and format."""
        if not columns:
            return
        keep = torch.ones(self.node_features + self.pod_features)
        keep[columns] = 0.0
        first = self.layers[0]
        for linear in (first.Lambda, first.Gamma, first.Delta):
            with torch.no_grad():
                linear.weight.mul_(keep)
            linear.weight.register_hook(lambda grad: grad * keep)

    def blind_columns(self) -> list[int]:
        """Input columns every first-layer weight ignores (what `blind_to` made, or training left)."""
        first = self.layers[0]
        used = sum(linear.weight.detach().abs().sum(dim=0) for linear in (first.Lambda, first.Gamma, first.Delta))
        return [int(i) for i in torch.nonzero(used == 0).flatten()]

    def architecture(self) -> dict:
        ranked = {} if self.candidates == "all" else {"candidates": self.candidates}
        return {"hidden": list(self.hidden), "node_features": self.node_features,
                "pod_features": self.pod_features, **ranked}


class ValueHead(nn.Module):
    """State value: an equivariant trunk, mean- and max-pooled over the candidates, then an MLP
    (with `outputs` > 1, that many values per state)."""

    def __init__(self, hidden: tuple[int, ...] = (64, 64),
                 node_features: int = NUM_NODE_FEATURES, pod_features: int = NUM_POD_FEATURES, outputs: int = 1):
        super().__init__()
        self.hidden = tuple(hidden)
        self.node_features, self.pod_features = node_features, pod_features
        sizes = (node_features + pod_features, *hidden)
        self.layers = nn.ModuleList(EquivariantLayer(a, b) for a, b in zip(sizes[:-1], sizes[1:]))
        self.head = nn.Sequential(nn.Linear(2 * hidden[-1], hidden[-1]), nn.ReLU(), nn.Linear(hidden[-1], outputs))

    def forward(self, nodes: torch.Tensor, pod: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """nodes [B, N, F], pod [B, P], mask [B, N] bool -> [B]"""
        return self.pooled(nodes, pod, mask).squeeze(-1)

    def pooled(self, nodes: torch.Tensor, pod: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """[B, outputs]"""
        x = _inputs(nodes, pod)
        for layer in self.layers:
            x = torch.relu(layer(x, mask))
        m = mask.unsqueeze(-1)
        count = m.sum(dim=1).clamp(min=1)
        mean = (x * m).sum(dim=1) / count
        top = x.masked_fill(~m, float("-inf")).max(dim=1).values
        top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
        return self.head(torch.cat([mean, top], dim=-1))


class RuleSelector(ValueHead):
    """Which of `rules` (names of rlscore.core.rules) should place the pod, from the whole candidate
    set: one logit per rule. The rule it picks scores the nodes, so where it picks the right rule it
    places exactly as that rule does. Trained by an earlier trainer (`git show e8d7425^:agent/learn/selector.py`);
    models/ee.safetensors is one."""

    def __init__(self, rules: tuple[str, ...], hidden: tuple[int, ...] = (64, 64),
                 node_features: int = NUM_NODE_FEATURES, pod_features: int = NUM_POD_FEATURES):
        super().__init__(hidden, node_features, pod_features, outputs=len(rules))
        self.rules = tuple(rules)

    def forward(self, nodes: torch.Tensor, pod: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """nodes [B, N, F], pod [B, P], mask [B, N] bool -> logits [B, rules]"""
        return self.pooled(nodes, pod, mask)

    def architecture(self) -> dict:
        return {"hidden": list(self.hidden), "node_features": self.node_features,
                "pod_features": self.pod_features, "rules": list(self.rules)}


class DuelingQ(nn.Module):
    """Q(s, a) = V(s) + A(s, a) - mean_a A(s, a) over the candidates (Wang et al., 2016). Where the return
    swings with what the future brings whatever the placement, V carries the swing and A the small
    differences between nodes, which are all the ranking needs: `advantage`, a NodeScorer, is the
    network that is served (its scores rank the nodes as Q does)."""

    def __init__(self, advantage: NodeScorer, value_hidden: tuple[int, ...] = (32,)):
        super().__init__()
        self.advantage = advantage
        self.value = ValueHead(value_hidden, advantage.node_features, advantage.pod_features)

    def forward(self, nodes: torch.Tensor, pod: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """nodes [B, N, F], pod [B, P], mask [B, N] bool -> [B, N], -inf where the advantage is (off the
        mask, or outside the nodes it ranks); the mean is over the nodes it ranks."""
        a = self.advantage(nodes, pod, mask)
        ranked = torch.isfinite(a)
        finite = torch.where(ranked, a, torch.zeros_like(a))
        mean = finite.sum(dim=1, keepdim=True) / ranked.sum(dim=1, keepdim=True).clamp(min=1)
        return a - mean + self.value(nodes, pod, mask).unsqueeze(1)


class Critics(nn.Module):
    """Q-value heads on a trunk of their own, each plus a fixed random prior function of the same shape
    (Osband et al. 2018, "Randomized prior functions"): where the replay has no evidence the heads keep
    their priors' disagreement, so their spread says what TD has not resolved. A trainer's instrument
    (DQNConfig.trust_heads), never served."""

    def __init__(self, heads: int, hidden: tuple[int, ...] = (64, 64), candidates: str = "all",
                 prior_scale: float = 1.0):
        super().__init__()
        self.trained = NodeScorer(hidden, candidates=candidates, heads=heads)
        self.prior = NodeScorer(hidden, candidates=candidates, heads=heads).requires_grad_(False)
        self.prior_scale = prior_scale

    def head_values(self, nodes: torch.Tensor, pod: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """[B, N, heads], -inf where the trained heads are."""
        values = self.trained.head_values(nodes, pod, mask)
        if self.prior_scale == 0:
            return values
        with torch.no_grad():
            prior = self.prior.head_values(nodes, pod, mask)
        return values + self.prior_scale * torch.where(torch.isfinite(prior), prior, torch.zeros_like(prior))


def values_by_extent(network: nn.Module, nodes: torch.Tensor, pod: torch.Tensor, mask: torch.Tensor,
                     groups: int = 3, heads: bool = False) -> torch.Tensor:
    """`network(nodes, pod, mask)` ([B, N] values, -inf off the mask) computed on `groups` groups of rows of
    similar extent (last candidate slot), each cut to its own widest: a replay batch mixes clusters of
    2 to 48 nodes padded to the largest, and the padding is most of a forward pass's cost. Each row's
    values depend on that row alone, so the result is the whole batch's (up to float rounding). With
    `heads`, `network.head_values` ([B, N, heads])."""
    slots = mask.shape[1]
    extent = (mask * torch.arange(1, slots + 1)).amax(dim=1)
    order = torch.argsort(extent, stable=True)
    parts = []
    for rows in torch.tensor_split(order, groups):
        if len(rows):
            width = max(int(extent[rows].max()), 1)
            forward = network.head_values if heads else network
            values = forward(nodes[rows, :width], pod[rows], mask[rows, :width])
            pad = (0, 0, 0, slots - width) if heads else (0, slots - width)
            parts.append(F.pad(values, pad, value=float("-inf")))
    return torch.cat(parts)[torch.argsort(order)]
