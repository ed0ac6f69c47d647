import pytest
import torch

from rlscore.core.features import NUM_NODE_FEATURES, NUM_POD_FEATURES
from agent.learn.network import NodeScorer


def _inputs(batch, nodes, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(batch, nodes, NUM_NODE_FEATURES, generator=g)
    p = torch.rand(batch, NUM_POD_FEATURES, generator=g)
    return x, p


def test_permuting_nodes_permutes_q_values():
    torch.manual_seed(0)
    net = NodeScorer((32, 32))
    x, p = _inputs(4, 9)
    mask = torch.ones(4, 9, dtype=torch.bool)
    mask[:, 7:] = False
    q = net(x, p, mask)
    perm = torch.randperm(9)
    q_perm = net(x[:, perm], p, mask[:, perm])
    assert torch.allclose(q[:, perm], q_perm, atol=1e-6)
    # the set summary really matters: changing one node changes the others' Q-values
    x2 = x.clone()
    x2[:, 0] += 1.0
    assert not torch.allclose(net(x2, p, mask)[:, 1:7], q[:, 1:7])


def test_masked_nodes_get_minus_infinity_and_do_not_influence_the_rest():
    torch.manual_seed(1)
    net = NodeScorer()
    x, p = _inputs(1, 6)
    mask = torch.tensor([[True, True, False, True, False, False]])
    q = net(x, p, mask)
    assert torch.isinf(q[~mask]).all() and (q[~mask] < 0).all()
    assert torch.isfinite(q[mask]).all()
    # padding or infeasible nodes with any content leave the candidates' Q-values unchanged
    x_noise = x.clone()
    x_noise[~mask] = 3.7
    assert torch.allclose(net(x_noise, p, mask)[mask], q[mask], atol=1e-6)
    # and equal the Q-values of the candidate set alone
    alone = net(x[:, mask[0]], p, torch.ones(1, 3, dtype=torch.bool))
    assert torch.allclose(alone[0], q[mask], atol=1e-6)


def test_same_weights_serve_2_and_5000_nodes():
    torch.manual_seed(2)
    net = NodeScorer()
    for n in (2, 5000):
        x, p = _inputs(1, n)
        q = net(x, p, torch.ones(1, n, dtype=torch.bool))
        assert q.shape == (1, n) and torch.isfinite(q).all()


def test_all_masked_row_is_all_minus_infinity_not_nan():
    net = NodeScorer()
    x, p = _inputs(2, 3)
    mask = torch.tensor([[False] * 3, [True, False, True]])
    q = net(x, p, mask)
    assert not torch.isnan(q).any()
    assert torch.isinf(q[0]).all()


def test_a_blind_network_never_reads_those_inputs_however_it_is_trained():
    """blind_to holds the first layer's weights on the named inputs at zero through optimizer steps,
    so the outputs do not move when those inputs do (node and pod columns alike), and the others
    still count."""
    from rlscore.core.features import NODE_FEATURES, input_columns

    torch.manual_seed(3)
    net = NodeScorer((16, 16))
    blind = input_columns(("latency", "power"))
    net.blind_to(blind)
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
    x, p = _inputs(8, 5)
    mask = torch.ones(8, 5, dtype=torch.bool)
    for _ in range(20):  # a loss that depends on every input, the blind ones too
        loss = (net(x, p, mask) - x.sum(-1) - p.sum(-1, keepdim=True)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert net.blind_columns() == blind
    q = net(x, p, mask)
    x2, p2 = x.clone(), p.clone()
    node_blind = [c for c in blind if c < NUM_NODE_FEATURES]
    x2[..., node_blind] = torch.rand(8, 5, len(node_blind))
    p2[..., [c - NUM_NODE_FEATURES for c in blind if c >= NUM_NODE_FEATURES]] = 0.5
    assert torch.equal(net(x2, p2, mask), q)
    x2[..., NODE_FEATURES.index("cpu_share")] += 0.5
    assert not torch.allclose(net(x2, p2, mask), q)


def test_values_by_extent_are_the_whole_batchs_values_and_gradients():
    """The learner's forward pass on groups of rows cut to their own extent gives the padded batch's
    values (-inf off the mask) and the same gradients, whatever the masks (holes, empty rows)."""
    from agent.learn.network import DuelingQ, values_by_extent

    torch.manual_seed(0)
    net = DuelingQ(NodeScorer((16, 16)))
    x, p = _inputs(11, 12)
    extent = torch.tensor([1, 12, 3, 7, 2, 12, 5, 9, 4, 0, 6])
    mask = torch.arange(12)[None, :] < extent[:, None]
    mask[3, 2] = mask[5, 0] = False  # an infeasible node inside a row
    grads = []
    for forward in (lambda: net(x, p, mask), lambda: values_by_extent(net, x, p, mask, groups=4)):
        net.zero_grad()
        values = forward()
        assert torch.equal(torch.isneginf(values), ~mask)
        torch.where(mask, values * torch.arange(1.0, 13.0), torch.zeros_like(values)).sum().backward()
        grads.append((values.detach(), [w.grad.clone() for w in net.parameters()]))
    (whole, whole_grads), (grouped, grouped_grads) = grads
    assert torch.allclose(torch.where(mask, grouped, 0.0), torch.where(mask, whole, 0.0), atol=1e-6)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(grouped_grads, whole_grads))


def test_a_best_tier_scorer_ranks_only_the_best_latency_tier_and_pools_over_every_candidate():
    """meets_soft/meets_hard (columns 19, 20) make a node's tier; only the best tier among the candidates
    gets a value, and the nodes outside it still shape the others' values through the pools."""
    torch.manual_seed(0)
    net = NodeScorer((16, 16), candidates="best-latency-tier")
    x, p = _inputs(2, 5)
    x[..., 19:21] = 0.0
    x[0, 1, 19:21] = 1.0  # row 0: node 1 within the soft limit, nodes 2 and 3 within the hard limit
    x[0, 2:4, 20] = 1.0
    x[1, 2:4, 20] = 1.0  # row 1: the hard tier is the best; node 4 is off the mask
    mask = torch.ones(2, 5, dtype=torch.bool)
    mask[1, 4] = False
    q = net(x, p, mask)
    assert torch.isfinite(q[0]).tolist() == [False, True, False, False, False]
    assert torch.isfinite(q[1]).tolist() == [False, False, True, True, False]
    changed = x.clone()
    changed[1, 0, :5] += 1.0  # a node outside the tier still enters the set summary
    assert not torch.allclose(net(changed, p, mask)[1, 2:4], q[1, 2:4])
    every = NodeScorer((16, 16))
    every.load_state_dict(net.state_dict())
    assert torch.equal(every(x, p, mask)[0, 1], q[0, 1])  # the values inside are the unrestricted network's


def test_a_running_first_scorer_ranks_only_the_running_candidates_while_one_runs():
    """`active` (column 11) marks a running node: while a candidate runs, only the running candidates get a
    value; a row where none of the candidates runs (the running node off the mask) ranks them all."""
    torch.manual_seed(0)
    net = NodeScorer((16, 16), candidates="running-first")
    x, p = _inputs(2, 4)
    x[..., 11] = 0.0
    x[0, [1, 3], 11] = 1.0
    x[1, 2, 11] = 1.0
    mask = torch.ones(2, 4, dtype=torch.bool)
    mask[1, 2] = False
    q = net(x, p, mask)
    assert torch.isfinite(q[0]).tolist() == [False, True, False, True]
    assert torch.isfinite(q[1]).tolist() == [True, True, False, True]


def test_a_tier_running_scorer_ranks_the_running_candidates_of_the_best_tier():
    """best-latency-tier-running-first: the best tier first, then running inside it; a best tier with no
    running candidate ranks all of its candidates."""
    torch.manual_seed(0)
    net = NodeScorer((16, 16), candidates="best-latency-tier-running-first")
    x, p = _inputs(2, 4)
    x[..., [11, 19, 20]] = 0.0
    x[:, 0:2, 20] = 1.0  # nodes 0 and 1 within the hard limit, 2 and 3 beyond it
    x[0, [1, 2], 11] = 1.0  # row 0: node 1 runs (in the tier), node 2 runs (outside it)
    x[1, [2, 3], 11] = 1.0  # row 1: only nodes outside the tier run
    q = net(x, p, torch.ones(2, 4, dtype=torch.bool))
    assert torch.isfinite(q[0]).tolist() == [False, True, False, False]
    assert torch.isfinite(q[1]).tolist() == [True, True, False, False]


def test_a_pod_without_limits_or_one_tier_leaves_every_candidate_ranked():
    torch.manual_seed(0)
    net = NodeScorer((16, 16), candidates="best-latency-tier")
    x, p = _inputs(1, 4)
    x[..., 19:21] = 0.0
    mask = torch.ones(1, 4, dtype=torch.bool)
    assert torch.isfinite(net(x, p, mask)).all()
    with pytest.raises(ValueError, match="unknown candidates 'nearest'"):
        NodeScorer((16,), candidates="nearest")
