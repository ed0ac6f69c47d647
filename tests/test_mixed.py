"""The mixed-world generator (agent/sim/mixed.py): every trait is drawn independently of the others and
covers its range, and the wider range used for evaluation goes beyond training's."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from scipy.stats import chi2_contingency

from agent.sim.mixed import TRAINING, WIDER, mixed_world

WORLDS = 600


def _kind(name: str, position: int) -> str:
    """A pod class's name is index-size-shape-usage-need (shape may hold a dash: memory-heavy)."""
    index, size, *rest = name.split("-")
    need, usage = rest[-1], rest[-2]
    shape = "-".join(rest[:-2])
    return (size, shape, usage, need)[position]


@pytest.fixture(scope="module")
def worlds():
    rng = np.random.default_rng(1)
    return [mixed_world(rng) for _ in range(WORLDS)]


@pytest.fixture(scope="module")
def classes(worlds):
    return [c for w in worlds for c in w.pod_classes]


def _independent(pairs: list[tuple[str, str]]) -> float:
    """The chi-square test's p-value of the contingency table of the pairs."""
    rows, cols = sorted({a for a, _ in pairs}), sorted({b for _, b in pairs})
    table = np.zeros((len(rows), len(cols)))
    for a, b in pairs:
        table[rows.index(a), cols.index(b)] += 1
    return float(chi2_contingency(table)[1])


def _tercile(values: list[float]) -> list[str]:
    cuts = np.quantile(values, [1 / 3, 2 / 3])
    return [str(int(np.searchsorted(cuts, v))) for v in values]


def test_every_kind_of_every_trait_occurs_about_as_often_as_drawn(worlds, classes):
    for position, kinds in enumerate((TRAINING.size_kinds, TRAINING.shape_kinds, TRAINING.usage_kinds,
                                      TRAINING.latency_kinds)):
        seen = Counter(_kind(c.name, position) for c in classes)
        total = sum(seen.values())
        for kind, (probability, _) in kinds.items():
            assert abs(seen[kind] / total - probability) < 0.05, (kind, seen)
    arrivals = Counter(w.tags["arrivals"] for w in worlds)
    for kind, (probability, _) in TRAINING.arrival_kinds.items():
        assert abs(arrivals[kind] / WORLDS - probability) < 0.06, arrivals
    assert abs(np.mean([w.churn for w in worlds]) - TRAINING.churn) < 0.04


def test_numeric_traits_span_their_ranges(worlds):
    sizes = [len(w.nodes) for w in worlds]
    groups = [w.tags["groups"] for w in worlds]
    loads = [w.load for w in worlds]
    latencies = [n.latency_ms for w in worlds for n in w.nodes]
    cores = {n.hardware.cpu_millicores / 1000 for w in worlds for n in w.nodes}
    classes = [len(w.pod_classes) for w in worlds]
    assert min(sizes) <= TRAINING.nodes[0] + 1 and max(sizes) >= TRAINING.nodes[1] - 1
    assert set(groups) == set(range(TRAINING.groups[0], TRAINING.groups[1] + 1))
    assert set(classes) == set(range(TRAINING.classes[0], TRAINING.classes[1] + 1))
    assert cores == set(TRAINING.cores)
    assert min(loads) < TRAINING.load[0] + 0.02 and max(loads) > TRAINING.load[1] - 0.02
    assert min(latencies) < 2.5 and max(latencies) > 75  # edge to far
    # some groups' power is hidden from the scorer, most is not
    hidden = np.mean([h for w in worlds for h in w.power_hidden])
    assert 0.1 < hidden < 0.3


def test_traits_are_drawn_independently(worlds, classes):
    # per pod class: latency need against usage, size and shape
    for position in (0, 1, 2):
        p = _independent([(_kind(c.name, 3), _kind(c.name, position)) for c in classes])
        assert p > 0.001, f"latency need and trait {position} look dependent (p={p:.2g})"
    # per world: arrivals against load and size, churn against size
    loads, sizes = _tercile([w.load for w in worlds]), _tercile([len(w.nodes) for w in worlds])
    assert _independent(list(zip([w.tags["arrivals"] for w in worlds], loads))) > 0.001
    assert _independent(list(zip([w.tags["arrivals"] for w in worlds], sizes))) > 0.001
    assert _independent(list(zip([str(w.churn) for w in worlds], sizes))) > 0.001
    # per node group: whether its power is known, against its latency tier
    groups = {}
    for w in worlds:
        for node, hidden in zip(w.nodes, w.power_hidden):
            groups[(id(w), node.hardware.name)] = (hidden, node.latency_ms)
    tiers = ["edge" if lat < 9 else "mid" if lat < 26 else "far" for _, lat in groups.values()]
    assert _independent([(str(h), t) for (h, _), t in zip(groups.values(), tiers)]) > 0.001


def test_the_wider_range_goes_beyond_training():
    rng = np.random.default_rng(7)
    wide = [mixed_world(rng, ranges=WIDER) for _ in range(100)]
    assert min(len(w.nodes) for w in wide) >= TRAINING.nodes[1]
    assert max(len(w.nodes) for w in wide) > 2 * TRAINING.nodes[1]
    assert max(w.tags["groups"] for w in wide) > TRAINING.groups[1]
    assert max(w.load for w in wide) > TRAINING.load[1]
