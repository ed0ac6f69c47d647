"""DQN from demonstrations (agent/learn/dqn.py): its losses on hand-built batches, a short real run on a
tiny world where the teacher is wrong half the time, and `rlscore-train` end to end."""

import json

import numpy as np
import pytest
import torch

from agent.evaluate.compare import evaluate, summarize
from agent.learn import dqn
from agent.learn.dqn import (CONSERVATIVE_ROWS, DQNConfig, TrainingReward, advantage_loss, conservative_loss,
                             conservative_rows, head_td_targets, margin_loss, taken_values, td_targets, teacher_column,
                             teacher_value, train, trusted_departures)
from agent.learn.faint_signal import registered, tiny_config, tiny_scarce_near
from agent.learn.model_io import save_model, torch_network
from agent.learn.network import Critics, NodeScorer
from agent.learn.train import main as train_main
from agent.sim import families
from rlscore.core.features import (NUM_NODE_FEATURES, NUM_POD_FEATURES, NUM_STATE_FEATURES, RULE_FEATURES,
                                   candidate_level)
from rlscore.core.model import load_model
from rlscore.core.scoring import ModelScorer

# --- the losses --------------------------------------------------------------------------------------


def test_the_training_reward_is_scaled_and_clipped_and_noisy_only_when_asked():
    """TD's reward: the raw reward in units of the demonstrations' spread, clipped; reward_noise adds that
    spread of Gaussian noise after the clip, from a stream of its own (a run without noise draws nothing)."""
    plain = TrainingReward(DQNConfig(policy="EE", reward_clip=10.0), scale=0.5, stream=0)
    assert [plain(r) for r in (4.0, -100.0, 100.0)] == [2.0, -10.0, 10.0]
    noisy = TrainingReward(DQNConfig(policy="EE", reward_clip=10.0, reward_noise=3.0), scale=0.5, stream=0)
    draws = np.array([noisy(100.0) for _ in range(20_000)])
    assert abs(draws.mean() - 10.0) < 0.1 and abs(draws.std() - 3.0) < 0.1  # noise past the clip, unbiased
    again = TrainingReward(DQNConfig(policy="EE", reward_clip=10.0, reward_noise=3.0), scale=0.5, stream=0)
    other = TrainingReward(DQNConfig(policy="EE", reward_clip=10.0, reward_noise=3.0), scale=0.5, stream=1)
    assert again(100.0) == draws[0] != other(100.0)  # one stream per place the rewards are drawn
    with pytest.raises(ValueError, match="--reward-noise must be >= 0"):
        DQNConfig(policy="EE", reward_noise=-1.0)


def test_the_margin_loss_is_zero_once_the_teachers_choice_leads_by_the_margin():
    q = torch.tensor([[1.0, 0.5, 0.0, 9.0], [1.0, 0.5, 0.9, 9.0], [1.0, 1.0, 0.0, 9.0]])
    mask = torch.tensor([[True, True, True, False]] * 3)  # the fourth slot is padding: its 9 never counts
    expert = torch.tensor([[True, False, False, False], [True, False, False, False], [True, True, False, False]])
    loss = margin_loss(q, mask, expert, margin=0.8)
    # 1. the teacher's node leads by 0.5 < 0.8: max(1, 0.5 + 0.8, 0 + 0.8) - 1 = 0.3
    # 2. the third node is 0.1 behind: 0.9 + 0.8 - 1 = 0.7
    # 3. two tied teacher's choices, both right: the other node at 0 + 0.8 is below them, nothing to pay
    np.testing.assert_allclose(loss.numpy(), [0.3, 0.7, 0.0], atol=1e-6)


def test_the_advantage_loss_fits_only_the_differences_among_the_measured_candidates():
    nan = float("nan")
    q = torch.tensor([[1.0, 2.0, 3.0, 9.0], [0.0, 0.0, 7.0, 0.0], [1.0, 5.0, 0.0, 0.0], [4.0, 4.0, 0.0, 0.0]])
    advantage = torch.tensor([[10.0, 11.0, 12.0, nan], [nan, nan, 1.0, nan], [0.0, 1.0, nan, nan], [0.0, 1.0, nan, nan]])
    loss = advantage_loss(q, advantage)
    # 1. the same differences, shifted by 9: nothing to pay; the unmeasured 9 never counts
    # 2. one measured candidate says nothing about differences
    # 3. centred Q (-2, 2) against centred targets (-0.5, 0.5): 1.5^2 on each
    # 4. Q ties two candidates that differ by 1: 0.5^2 on each
    np.testing.assert_allclose(loss.numpy(), [0.0, 0.0, 2.25, 0.25], atol=1e-6)


def test_the_conservative_loss_pushes_the_untaken_nodes_below_the_taken_one():
    q = torch.tensor([[0.0, 0.0, 9.0], [5.0, 0.0, 9.0], [0.0, 5.0, 9.0]], requires_grad=True)
    mask = torch.tensor([[True, True, False]] * 3)  # the third slot is padding: its 9 never counts
    action = torch.tensor([0, 0, 0])
    loss = conservative_loss(q, mask, action)
    # 1. two equal nodes: log 2; 2. the taken node leads by 5: log(1 + e^-5); 3. it trails by 5: 5 + log(1 + e^-5)
    small = float(np.log1p(np.exp(-5.0)))
    np.testing.assert_allclose(loss.detach().numpy(), [np.log(2.0), small, 5.0 + small], atol=1e-6)
    loss.sum().backward()
    # the taken node is lifted, the untaken one lowered, by its softmax weight; padding gets no gradient
    np.testing.assert_allclose(q.grad[0].numpy(), [-0.5, 0.5, 0.0], atol=1e-6)
    assert q.grad[2, 0] < -0.99 and q.grad[2, 1] > 0.99 and q.grad[:, 2].abs().max() == 0


def _constant(value: float, hidden: int = 4) -> NodeScorer:
    """A network whose every Q-value is `value` (all weights 0, the last bias `value`)."""
    network = NodeScorer((hidden,))
    with torch.no_grad():
        for p in network.parameters():
            p.zero_()
        network.layers[-1].Lambda.bias.fill_(value)
    return network


def test_the_td_target_is_the_n_step_double_dqn_target():
    online, target = _constant(2.0), _constant(5.0)
    n = 3
    batch = {"nodes": torch.rand(2, n, NUM_NODE_FEATURES), "pod": torch.rand(2, NUM_POD_FEATURES), "mask": torch.ones(2, n, dtype=torch.bool),
             "next_nodes": torch.rand(2, n, NUM_NODE_FEATURES), "next_pod": torch.rand(2, NUM_POD_FEATURES), "next_mask": torch.ones(2, n, dtype=torch.bool),
             "action": torch.tensor([0, 2]), "ret": torch.tensor([1.0, -0.5]), "discount": torch.tensor([0.9, 0.0])}
    # 1 + 0.9 x 5 = 5.5 (bootstrapped from the target network's value of the online network's pick), -0.5 (terminal)
    np.testing.assert_allclose(td_targets(online, target, batch).numpy(), [5.5, -0.5], atol=1e-6)
    q = online(batch["nodes"], batch["pod"], batch["mask"])
    np.testing.assert_allclose(taken_values(q, batch).detach().numpy(), [2.0, 2.0], atol=1e-6)


def test_an_anchored_td_target_values_the_next_state_with_the_anchors_term():
    """With an anchor, the online network's next node and the target network's value of it both carry
    weight x the standing in the transition's next column: the constant networks then pick the node the
    rule ranks best, and its target is 5 + the weight."""
    from agent.learn.anchor import SelectorAnchor

    anchor = SelectorAnchor("models/ee.safetensors", "EE", 2.0)
    online, target = _constant(2.0), _constant(5.0)
    column = RULE_FEATURES.index("efficient-first")
    next_nodes = torch.zeros(2, 3, NUM_NODE_FEATURES)
    next_nodes[:, :, NUM_STATE_FEATURES + column] = torch.tensor([0.0, 1.0, 0.5])
    batch = {"nodes": torch.zeros(2, 3, NUM_NODE_FEATURES), "pod": torch.zeros(2, NUM_POD_FEATURES),
             "mask": torch.ones(2, 3, dtype=torch.bool), "next_nodes": next_nodes,
             "next_pod": torch.zeros(2, NUM_POD_FEATURES), "next_mask": torch.ones(2, 3, dtype=torch.bool),
             "action": torch.tensor([0, 0]), "ret": torch.tensor([1.0, 1.0]), "discount": torch.tensor([1.0, 1.0]),
             "anchor": torch.tensor([-1, -1]), "next_anchor": torch.tensor([column, -1])}
    # 1 + (5 + 2 x 1) = 8 where the next state has the anchor's column, 1 + 5 = 6 where it has none
    np.testing.assert_allclose(td_targets(online, target, batch, anchor=anchor).numpy(), [8.0, 6.0], atol=1e-6)


def test_bootstrapping_on_the_teacher_takes_the_mean_target_value_over_the_teachers_best_nodes():
    """The target network values the next state's nodes 1, 2, 3 (node 3 off the mask); the teacher's
    standing column says which of them it would pick. A transition whose teacher has no column, or none
    of whose picks has a value, falls back to double DQN's max."""

    class Indexed(torch.nn.Module):  # value = 1 + slot index, -inf off the mask
        def forward(self, nodes, pod, mask):
            values = torch.arange(1.0, nodes.shape[1] + 1).expand(nodes.shape[0], -1).clone()
            return values.masked_fill(~mask, float("-inf"))

    column = NUM_STATE_FEATURES + RULE_FEATURES.index("latency-fit")
    next_nodes = torch.zeros(3, 4, NUM_NODE_FEATURES)
    next_nodes[0, [0, 1], column] = 1.0  # the teacher ties nodes 0 and 1: its value is their mean, 1.5
    next_nodes[1, 3, column] = 1.0  # its pick is off the mask: the max, 3
    next_nodes[2, 0, column] = 1.0  # this transition has no teacher column: the max, 3
    mask = torch.tensor([[True, True, True, False]] * 3)
    batch = {"next_nodes": next_nodes, "next_pod": torch.zeros(3, NUM_POD_FEATURES), "next_mask": mask,
             "teacher": torch.tensor([RULE_FEATURES.index("latency-fit")] * 2 + [-1]),
             "action": torch.zeros(3, dtype=torch.long), "ret": torch.zeros(3), "discount": torch.ones(3)}
    has, mean = teacher_value(Indexed()(next_nodes, None, mask), batch)
    assert has.tolist() == [True, False, False] and mean[0] == pytest.approx(1.5)
    np.testing.assert_allclose(td_targets(Indexed(), Indexed(), batch, bootstrap="teacher").numpy(), [1.5, 3.0, 3.0])
    assert td_targets(Indexed(), Indexed(), batch)[0] == pytest.approx(3.0)  # max: node 2's 3
    assert teacher_column("latency-greedy") == -1 and teacher_column("latency-fit") >= 0


def test_advantage_learning_lowers_the_target_of_a_node_by_its_gap_to_the_states_best():
    """The target network values the state's nodes 1, 2, 3 (slot index + 1) and the next state's alike;
    taking node 0 is 2 below the best, so with action gap 0.5 its target drops by 1; the best node's
    target is double DQN's."""

    class Indexed(torch.nn.Module):
        def forward(self, nodes, pod, mask):
            values = torch.arange(1.0, nodes.shape[1] + 1).expand(nodes.shape[0], -1).clone()
            return values.masked_fill(~mask, float("-inf"))

    mask = torch.ones(2, 3, dtype=torch.bool)
    batch = {"nodes": torch.zeros(2, 3, NUM_NODE_FEATURES), "pod": torch.zeros(2, NUM_POD_FEATURES), "mask": mask,
             "next_nodes": torch.zeros(2, 3, NUM_NODE_FEATURES), "next_pod": torch.zeros(2, NUM_POD_FEATURES),
             "next_mask": mask, "action": torch.tensor([0, 2]), "ret": torch.tensor([10.0, 10.0]),
             "discount": torch.tensor([0.5, 0.5])}
    plain = td_targets(Indexed(), Indexed(), batch)
    gapped = td_targets(Indexed(), Indexed(), batch, action_gap=0.5)
    np.testing.assert_allclose(plain.numpy(), [11.5, 11.5])  # 10 + 0.5 x 3
    np.testing.assert_allclose(gapped.numpy(), [10.5, 11.5])  # node 0: 11.5 - 0.5 x (3 - 1)
    # the caller's own target values of these states (the Q-filter's) give the same targets
    here = Indexed()(batch["nodes"], batch["pod"], mask)
    shared = td_targets(Indexed(), Indexed(), batch, action_gap=0.5, target_here=here)
    np.testing.assert_allclose(shared.numpy(), gapped.numpy())
    lowered = td_targets(Indexed(), Indexed(), batch, action_gap=0.5, target_here=here * 2)
    np.testing.assert_allclose(lowered.numpy(), [11.5 - 0.5 * 4, 11.5])  # node 0's gap is 4 now


ONE_NODE = {"nodes": np.zeros((1, NUM_NODE_FEATURES), np.float32), "pod": np.zeros(NUM_POD_FEATURES, np.float32),
            "action_mask": np.ones(1, np.int8)}


def _replay(count: int, alpha: float) -> dqn.Replay:
    """A replay of `count` one-node transitions whose return is their index."""
    replay = dqn.Replay(count, 1, alpha=alpha, floor=0.01)
    for i in range(count):
        replay.add(ONE_NODE, 0, float(i), 0.9, ONE_NODE)
    return replay


def test_prioritized_replay_draws_in_proportion_to_the_td_error_and_weighs_the_draws_back():
    rng = np.random.default_rng(0)
    replay = _replay(4, alpha=1.0)
    first = replay.sample(4000, rng)  # every new transition has the same (highest) priority
    assert abs(np.bincount(first["index"].numpy(), minlength=4) / 4000 - 0.25).max() < 0.03
    assert torch.all(first["weight"] == 1)
    # errors 0.99, 0.09, 0.09, 0.09 (+ floor 0.01): priorities 1, 0.1, 0.1, 0.1 -> shares 10/13, 1/13 each
    replay.reprioritize(torch.arange(4), torch.tensor([0.99, -0.09, 0.09, 0.09]))
    drawn = replay.sample(13_000, rng, beta=1.0)
    np.testing.assert_allclose(np.bincount(drawn["index"].numpy(), minlength=4) / 13_000, [10 / 13] + [1 / 13] * 3,
                               atol=0.01)
    assert torch.all(drawn["ret"] == drawn["index"].float())  # each row is the transition drawn
    # importance weights (N P(i))^-beta over the largest: the rare ones 1, the frequent one 1/10 at beta 1
    weight = dict(zip(drawn["index"].tolist(), drawn["weight"].tolist()))
    assert weight[0] == pytest.approx(0.1) and weight[1] == pytest.approx(1.0)
    assert replay.sample(64, rng, beta=0.5)["weight"].min() == pytest.approx(0.1 ** 0.5)
    # a transition added later comes in at the highest priority given so far: the ring wraps onto slot 1
    replay.reprioritize(torch.tensor([0]), torch.tensor([3.99]))
    replay.add(ONE_NODE, 0, 0.0, 0.9, ONE_NODE)
    replay.add(ONE_NODE, 0, 0.0, 0.9, ONE_NODE)
    assert replay.priority[1] == pytest.approx(4.0) and replay.priority[0] == pytest.approx(4.0)


def test_a_uniform_replay_ignores_td_errors_and_draws_as_before():
    """alpha 0: the draws are the generator's integers, as a replay without priorities drew them."""
    replay = _replay(8, alpha=0.0)
    replay.reprioritize(torch.arange(8), torch.arange(8.0) * 100)
    drawn = replay.sample(16, np.random.default_rng(5))
    assert drawn["index"].tolist() == np.random.default_rng(5).integers(0, 8, 16).tolist()
    assert torch.all(drawn["weight"] == 1)


def test_a_prioritized_run_reprioritizes_both_buffers_from_its_td_errors(tiny_family, monkeypatch):
    """Pre-training sets the demonstrations' priorities, interaction the demonstrations' and its own
    replay's, each from the rows of the batch that came from it."""
    calls = []
    real = dqn.Replay.reprioritize

    def reprioritize(self, index, error):
        calls.append((self.size, len(index), bool(torch.isfinite(error).all())))
        real(self, index, error)

    monkeypatch.setattr(dqn.Replay, "reprioritize", reprioritize)
    short = {"total_timesteps": 256, "pretrain_steps": 8, "demo_worlds": 1, "demo_decisions": 32, "buffer_size": 5000}
    _, record = train(tiny_config(tiny_family, prioritized=0.6, **short))
    assert record["training"]["hyperparameters"]["prioritized"] == 0.6
    demo_share = round(DQNConfig.demo_share * 64)  # tiny_config's batch: 64 rows
    assert (32, 64, True) in calls  # pre-training: the whole batch from the demonstrations
    assert (32, demo_share, True) in calls and (5000, 64 - demo_share, True) in calls  # interaction
    assert {size for size, _, _ in calls} == {32, 5000}


def _critics(values: list[float], prior_scale: float = 0.0) -> Critics:
    """Critics whose trained heads' values on any node are each head's constant."""
    critics = Critics(len(values), (4,), prior_scale=prior_scale)
    with torch.no_grad():
        for p in critics.trained.parameters():
            p.zero_()
        critics.trained.layers[-1].Lambda.bias.copy_(torch.tensor(values))
    return critics


def test_each_critics_td_target_is_its_own_double_dqn_target():
    """Head k of the online critics picks the next node, head k of the target critics values it."""
    online, target = _critics([2.0, -1.0, 0.5]), _critics([5.0, 1.0, -3.0])
    n = 3
    batch = {"next_nodes": torch.rand(2, n, NUM_NODE_FEATURES), "next_pod": torch.rand(2, NUM_POD_FEATURES),
             "next_mask": torch.tensor([[True, True, True], [True, False, False]]),
             "ret": torch.tensor([1.0, -0.5]), "discount": torch.tensor([0.5, 0.0])}
    # 1 + 0.5 x (5, 1, -3); the terminal row is its return in every head
    np.testing.assert_allclose(head_td_targets(online, target, batch).numpy(),
                               [[3.5, 1.5, -0.5], [-0.5, -0.5, -0.5]], atol=1e-6)
    heads = online.head_values(batch["next_nodes"], batch["next_pod"], batch["next_mask"])
    batch["action"] = torch.tensor([2, 0])
    np.testing.assert_allclose(taken_values(heads, batch).detach().numpy(), [[2.0, -1.0, 0.5]] * 2, atol=1e-6)


def test_each_critic_adds_a_fixed_random_prior_that_keeps_the_heads_apart_where_nothing_was_learned():
    nodes, pod, mask = torch.rand(2, 5, NUM_NODE_FEATURES), torch.rand(2, NUM_POD_FEATURES), torch.ones(2, 5, dtype=torch.bool)
    bare, with_prior = _critics([1.0] * 4), _critics([1.0] * 4, prior_scale=2.0)
    assert torch.all(bare.head_values(nodes, pod, mask) == 1.0)
    prior = with_prior.head_values(nodes, pod, mask) - 1.0
    torch.testing.assert_close(prior, 2.0 * with_prior.prior.head_values(nodes, pod, mask))
    assert prior.std(dim=-1).min() > 0  # the heads disagree on every node
    assert not any(p.requires_grad for p in with_prior.prior.parameters())
    mask[1, 3:] = False
    assert torch.isneginf(with_prior.head_values(nodes, pod, mask)[1, 3:]).all()


@pytest.mark.parametrize("heads, valid, expert, z, trusted", [
    # three heads' values of three nodes, the teacher's choice node 0
    ([[1.0, 1.0, 1.0], [2.0, 2.5, 3.0], [0.0, 0.0, 0.0]], [True] * 3, [True, False, False], 1.0, True),  # all agree
    ([[1.0, 1.0, 1.0], [2.0, 0.5, 3.0], [0.0, 0.0, 0.0]], [True] * 3, [True, False, False], 1.0, False),  # one says no
    ([[1.0, 1.0, 1.0], [2.0, 1.1, 3.0], [0.0, 0.0, 0.0]], [True] * 3, [True, False, False], 0.0, True),  # mean > 0 at z 0
    ([[1.0, 1.0, 1.0], [2.0, 2.5, 3.0], [0.0, 0.0, 0.0]], [True, False, True], [True, False, False], 1.0, False),  # off the mask
    ([[1.0, 1.0, 1.0], [2.0, 2.5, 3.0], [0.0, 0.0, 0.0]], [True] * 3, [True, True, False], 1.0, False),  # node 1 taught too
    ([[3.0, 3.0, 3.0], [2.0, 2.5, 3.0], [0.0, 0.0, 0.0]], [True] * 3, [True, False, False], 0.0, False),  # the teacher leads
    # each head rates another node best: no one node beats the teacher in every head
    ([[1.0, 1.0, 1.0], [3.0, 0.0, 0.0], [0.0, 3.0, 0.0], [0.0, 0.0, 3.0]], [True] * 4, [True, False, False, False], 0.0,
     False),
])
def test_the_margin_is_lifted_only_where_the_heads_agree_another_node_beats_the_teacher(heads, valid, expert, z,
                                                                                       trusted):
    q = torch.tensor([heads])  # [1, nodes, heads]
    assert bool(trusted_departures(q, torch.tensor([valid]), torch.tensor([expert]), z)[0]) is trusted


def test_each_replayed_transition_teaches_a_fixed_random_share_of_the_critics():
    replay = dqn.Replay(2000, 1, critics=4, head_share=0.25, seed=3)
    for i in range(2000):
        replay.add(ONE_NODE, 0, float(i), 0.9, ONE_NODE)
    assert abs(replay.learns.mean() - 0.25) < 0.02
    rng = np.random.default_rng(0)
    drawn = replay.sample(64, rng)
    assert torch.equal(drawn["learns"], torch.from_numpy(replay.learns[drawn["index"].numpy()]))
    assert _replay(4, alpha=0.0).sample(8, rng)["learns"].shape == (8, 0)  # no critics


def test_a_run_with_critics_records_how_often_they_lifted_the_margin_and_writes_the_served_network(tiny_family,
                                                                                                   tmp_path):
    short = {"total_timesteps": 256, "pretrain_steps": 8, "demo_worlds": 1, "demo_decisions": 32}
    net, record = train(tiny_config(tiny_family, trust_heads=3, **short))
    assert isinstance(net, NodeScorer) and net.heads == 1
    final = record["training"]["final_losses"]
    assert record["training"]["hyperparameters"]["trust_heads"] == 3
    assert np.isfinite(final["td"]) and np.isfinite(final["critics"]) and 0.0 <= final["trusted"] <= 1.0, final
    assert dqn.margin_pull(DQNConfig(policy="EL", trust_heads=3), 10_000) == DQNConfig.margin_weight
    assert dqn.margin_pull(DQNConfig(policy="EL"), 10_000) == DQNConfig.margin_floor
    # the file holds the served network alone, and serves what it served in training
    written = torch_network(load_model(save_model(tmp_path / "trust.safetensors", net, "EL", {})))
    state = torch.rand(2, 3, NUM_NODE_FEATURES), torch.rand(2, NUM_POD_FEATURES), torch.ones(2, 3, dtype=torch.bool)
    torch.testing.assert_close(written(*state), net(*state))
    # who plays: the served network's values, or a critic's for the environments it plays
    critics = _critics([7.0, 9.0])
    nodes, pod, mask = torch.rand(3, 2, NUM_NODE_FEATURES), torch.rand(3, NUM_POD_FEATURES), torch.ones(3, 2, dtype=torch.bool)
    played = dqn.played_values(torch.zeros(3, 2), critics, nodes, pod, mask, np.array([0, 2, 1]))
    np.testing.assert_allclose(played.detach().numpy(), [[0.0, 0.0], [9.0, 9.0], [7.0, 7.0]])


@pytest.mark.parametrize("values, valid, expert, margin, kept", [
    ([1.0, 2.0, 3.0], [True, True, True], [False, False, True], 0.5, True),    # the teacher's choice is the best
    ([1.0, 2.0, 3.0], [True, True, True], [False, True, False], 0.5, False),   # 1 below the best, beyond the margin
    ([1.0, 2.0, 3.0], [True, True, True], [False, True, False], 1.0, True),    # 1 below the best, within the margin
    ([1.0, 2.0, 3.0], [True, True, True], [True, True, False], 0.5, False),    # its best tied choice counts
    ([1.0, 2.0, 3.0], [True, True, True], [True, True, False], 1.0, True),     # the best of its choices, not the worst
    ([1.0, 2.0, 9.0], [True, True, False], [False, True, False], 0.5, True),   # node 2 is off the mask: node 1 is best
])
def test_the_q_filter_keeps_a_demonstration_where_the_target_network_rates_its_teacher(values, valid, expert, margin,
                                                                                      kept):
    """DQfD's Q-filter: the margin loss applies where the teacher's best choice is within `margin` of
    the target network's best node over the valid ones."""
    from agent.learn.dqn import q_filtered

    keep = q_filtered(torch.tensor([values]), torch.tensor([valid]), torch.tensor([expert]), margin)
    assert bool(keep[0]) is kept


def test_pick_teachers_names_each_family_and_size_bands_rule_that_costs_least_on_training_seeds():
    """pick_teachers, which chose dqn.TEACHERS: each rule's objective on training seeds, relative to
    the seed's best rule, and the teacher is the rule with the lowest mean of those; per size band too."""
    from agent.evaluate.compare import baselines_for, run
    from agent.learn.teachers import TEACHER_SEED_BASE, pick_teachers
    from rlscore.core.scoring import HeuristicScorer

    picked = pick_teachers("EE", ("test2",), seeds=2, arrivals=40, workers=1, bands=(5, 20))["test2"]
    names = [b for b in baselines_for("EE") if b != "random"]
    table = np.array([[run(HeuristicScorer(b, np.random.default_rng(k)), "test2", TEACHER_SEED_BASE + k, "EE",
                           None, 40)[0].objective for b in names] for k in range(2)])
    relative = (table / table.min(axis=1, keepdims=True)).mean(axis=0)
    assert picked["relative_objective"] == pytest.approx(dict(zip(names, relative)), abs=1e-4)
    assert picked["teacher"] == names[int(np.argmin(relative.round(4)))]
    assert [band["max_nodes"] for band in picked["by_size"]] == [5, 20]
    for band in picked["by_size"]:
        scores = band["relative_objective"]
        assert min(scores.values()) >= 1.0 and band["teacher"] == min(scores, key=scores.get)
    # small clusters of test2 are run best by another rule than the family as a whole (why the bands)
    assert picked["by_size"][0]["teacher"] != picked["teacher"]


@pytest.mark.parametrize("steady", [False, True])
def test_the_mixed_worlds_teachers_are_measured_where_teacher_steady_says(steady):
    """--teacher-steady picks each mixed world's teacher on runs after one fill, as the demonstrations
    are recorded; off, on runs from an empty cluster: each planned world gets what world_teacher
    measures there."""
    from agent.learn.dqn import assign_teachers, make_env, world_plan
    from agent.learn.teachers import mixed_world_teacher

    cfg = DQNConfig(policy="EL", families=("mixed",), demo_worlds=3, demo_decisions=16, max_nodes=12, workers=1,
                    teacher_futures=1, teacher_steady=steady, progress=False)
    plan = world_plan(cfg, cfg.demo_worlds, cfg.seed)
    expected, differs = [], False
    for name, nodes, seed in plan:
        env = make_env(cfg)
        env.reset(seed=seed, options={"family": name, "nodes": nodes})
        expected.append(mixed_world_teacher("EL", env.sim.world, seed, cfg.demo_decisions, cfg.teacher_futures, steady=steady))
        other = mixed_world_teacher("EL", env.sim.world, seed, cfg.demo_decisions, cfg.teacher_futures, steady=not steady)
        differs = differs or other != expected[-1]
    assert differs  # these worlds tell the two settings apart
    assert assign_teachers(cfg, plan) == expected


def test_rollouts_on_redrawn_futures_label_only_the_worlds_whose_arrivals_can_be_redrawn():
    from agent.learn.dqn import assign_teachers, record_demonstrations, world_plan

    cfg = DQNConfig(policy="LB", families=("mixed", "test2"), demo_worlds=4, demo_decisions=8, burn_in=10,
                    max_nodes=48, workers=1, rollout_every=2, rollout_horizon=6, rollout_futures=2, progress=False)
    plan = world_plan(cfg, cfg.demo_worlds, cfg.seed)
    poisson = sum(name == "mixed" for name, _, _ in plan)  # test2's arrivals are the thesis' fixed cycle
    assert 0 < poisson < len(plan)
    demos, _, record = record_demonstrations(cfg, plan, assign_teachers(cfg, plan), progress=False)
    assert record["rollout_labels"]["decisions"] == poisson * 4
    assert int((~np.isnan(demos.advantage)).any(axis=1).sum()) == poisson * 4


def test_a_rollout_label_on_redrawn_futures_departs_only_beyond_the_confidence_asked():
    """With --rollout-confidence, the teacher's label stands unless the cheapest candidate's gain over
    it is beyond that many standard errors over the futures: at 0 some labels depart, at an
    unreachable confidence none does, while the measured advantages stay the same."""
    from agent.learn.dqn import assign_teachers, record_demonstrations, world_plan

    recorded = {}
    for z, relabel in ((0.0, True), (1e9, True), (0.0, False)):
        cfg = DQNConfig(policy="LB", families=("mixed",), demo_worlds=3, demo_decisions=16, burn_in=10, max_nodes=48,
                        workers=1, rollout_every=2, rollout_horizon=12, rollout_futures=3, rollout_confidence=z,
                        rollout_relabel=relabel, progress=False)
        plan = world_plan(cfg, cfg.demo_worlds, cfg.seed)
        recorded[z, relabel] = record_demonstrations(cfg, plan, assign_teachers(cfg, plan), progress=False)
    (loose, _, loose_record), (strict, _, strict_record), (kept, _, _) = recorded.values()
    assert loose_record["rollout_labels"]["departed_from_teacher"] > 0
    assert strict_record["rollout_labels"]["departed_from_teacher"] == 0
    # every label is the teacher's, as when the rollouts relabel nothing (the same random streams)
    for name in ("expert", "action", "nodes"):
        assert np.array_equal(getattr(strict, name), getattr(kept, name)), name
    assert not np.array_equal(loose.expert, kept.expert)
    np.testing.assert_array_equal(strict.advantage, kept.advantage)


def test_the_rollout_confidence_needs_futures_to_measure_the_noise():
    with pytest.raises(ValueError, match="--rollout-confidence needs --rollout-futures >= 2"):
        DQNConfig(policy="LB", rollout_every=2, rollout_futures=1, rollout_confidence=2.0)
    with pytest.raises(ValueError, match="--rollout-confidence must be >= 0"):
        DQNConfig(policy="LB", rollout_every=2, rollout_futures=4, rollout_confidence=-1.0)


# --- a tiny world where the teacher is wrong half the time ------------------------------------------

# One small node near the users, two big far ones. Strict pods (half of them) meet their limit only on
# the near node; loose pods (the other half) anywhere. latency-pack, the teacher, sends every pod to the
# best latency tier it can get and packs there, so it fills the near node with loose pods and the strict
# pods that come next break their limits: wrong on every loose pod, right on every strict one
# (agent/learn/faint_signal.py, which also thins the strict pods to see how faint a gain TD finds).


@pytest.fixture
def tiny_family():
    with registered(tiny_scarce_near()) as name:
        yield name


def test_td_learning_beats_a_teacher_that_is_wrong_half_the_time(tiny_family, tmp_path):
    """The demonstrations alone copy latency-pack, loose pods on the near node and all; TD on the outcome
    reward learns to leave the near node to the strict pods. (9 000 steps: at 12 000 TD broke 0.30 of
    the teacher's hard limits on training seeds 3, 4 and 5, at 9 000 0.30-0.35, at 6 000 up to 0.63.)"""
    full, _ = train(tiny_config(tiny_family, total_timesteps=9_000))
    copy, record = train(tiny_config(tiny_family, total_timesteps=9_000, demonstrations_only=True))
    assert record["training"]["td_steps"] == 0 and record["training"]["interaction_steps"] == 0
    assert record["training"]["gradient_steps"] == 300 + 9_000 // 2  # as many as the whole run takes
    models = [ModelScorer(load_model(save_model(tmp_path / f"{name}.safetensors", net, "EL", {})), name=name)
              for name, net in (("dqn", full), ("demonstrations-only", copy))]
    results, _ = evaluate("EL", models, (tiny_family,), seeds=4, arrivals=300, progress=False,
                          baselines=("latency-pack", "latency-fit"))
    rows = {r["scorer"]: r for r in summarize(results)}
    teacher, dqn, imitation = rows["latency-pack"], rows["dqn"], rows["demonstrations-only"]
    assert teacher["hard_violation_rate"] > 0.1  # the teacher's mistake costs the strict pods
    assert imitation["hard_violation_rate"] > 0.6 * teacher["hard_violation_rate"], (imitation, teacher)
    assert dqn["hard_violation_rate"] < 0.5 * teacher["hard_violation_rate"], (dqn, teacher)
    assert dqn["objective"] < 0.7 * teacher["objective"]


@pytest.mark.reproduction  # a finding of docs/training.md re-run (two minutes): make verify
def test_cqls_regulariser_keeps_the_network_on_its_teacher_even_where_td_pays(tiny_family, tmp_path):
    """The same run with --conservative-weight 0.3 breaks as many limits as its teacher: with little
    exploration the nodes the teacher does not take are rarely replayed, and the regulariser holds them
    down harder the rarer they are (docs/training.md, "What TD learns to do on EE and EL")."""
    net, _ = train(tiny_config(tiny_family, conservative_weight=0.3))
    model = ModelScorer(load_model(save_model(tmp_path / "cql.safetensors", net, "EL", {})), name="cql")
    results, _ = evaluate("EL", [model], (tiny_family,), seeds=4, arrivals=300, progress=False,
                          baselines=("latency-pack",))
    rows = {r["scorer"]: r for r in summarize(results)}
    teacher, cql = rows["latency-pack"], rows["cql"]
    assert teacher["hard_violation_rate"] > 0.1
    assert cql["hard_violation_rate"] > 0.9 * teacher["hard_violation_rate"], (cql, teacher)


@pytest.mark.parametrize("candidates, outside_key", [("best-latency-tier", "teacher_outside_best_latency_tier"),
                                                     ("running-first", "teacher_outside_ranked"),
                                                     ("best-latency-tier-running-first", "teacher_outside_ranked")])
def test_a_run_ranking_a_candidate_set_neither_acts_nor_is_taught_outside_it(tiny_family, monkeypatch, candidates,
                                                                             outside_key):
    """With --candidates best-latency-tier (running-first) every action the run takes (exploring at random
    throughout) and every node its demonstrations mark right lies in the pod's best latency tier (on a
    running node while one is a candidate), and the network it serves ranks only there."""
    seen = []
    original = dqn.explorable

    def watched(obs, chosen):
        valid = original(obs, chosen)
        level = candidate_level(obs["nodes"][np.flatnonzero(obs["action_mask"])], candidates)
        seen.append((level.max(), candidate_level(obs["nodes"][valid], candidates).min(), len(valid)))
        return valid

    monkeypatch.setattr(dqn, "explorable", watched)
    net, record = train(tiny_config(tiny_family, candidates=candidates, total_timesteps=400,
                                     pretrain_steps=20, demo_worlds=2, demo_decisions=32, start_e=1.0, end_e=1.0))
    assert net.candidates == candidates and len(seen) >= 400 + 2 * 32
    assert all(lowest == best for best, lowest, _ in seen)
    assert any(count < 3 for _, _, count in seen)  # the tiny world's near node is often the only one ranked
    outside = record["training"]["demonstrations"][outside_key]  # how many teacher's choices lay outside
    if candidates == "best-latency-tier":
        assert outside == 0  # latency-pack keeps to it


def test_fine_tuning_keeps_the_candidates_its_starting_network_ranks(tiny_family):
    """A run that starts from a network and names no candidates ranks what that network ranks; one that
    names them ranks those."""
    start = NodeScorer((32, 32), candidates="best-latency-tier")
    short = {"total_timesteps": 64, "pretrain_steps": 4, "demo_worlds": 1, "demo_decisions": 16}
    kept, _ = train(tiny_config(tiny_family, **short), init=start)
    named, _ = train(tiny_config(tiny_family, candidates="all", **short), init=start)
    assert (kept.candidates, named.candidates) == ("best-latency-tier", "all")


@pytest.mark.parametrize("q_filter, action_gap", [(True, 0.0), (False, 0.5), (True, 0.5)])
def test_a_run_with_the_q_filter_or_advantage_learning_trains_both_losses(tiny_family, q_filter, action_gap):
    """The target network's values of a batch's states are read by the Q-filter (the demonstrations)
    and by advantage learning (every row), together or alone: each combination trains to finite values."""
    short = {"total_timesteps": 256, "pretrain_steps": 8, "demo_worlds": 1, "demo_decisions": 32}
    _, record = train(tiny_config(tiny_family, q_filter=q_filter, action_gap=action_gap, **short))
    final = record["training"]["final_losses"]
    assert record["training"]["td_steps"] > 0, record["training"]
    assert np.isfinite(final["margin"]) and np.isfinite(final["td"]), final
    assert final["conservative"] is None  # the regulariser is off by default


@pytest.mark.parametrize("which, demo_rows, batch_rows, rows", [
    ("all", 32, 128, range(128)),
    ("demonstrations", 32, 128, range(32)),
    ("interaction", 32, 128, range(32, 128)),
    ("interaction", 128, 128, range(128, 128)),  # pre-training: every row is a demonstration
])
def test_the_conservative_rows_are_the_batch_rows_asked_for(which, demo_rows, batch_rows, rows):
    assert range(batch_rows)[conservative_rows(which, demo_rows, batch_rows)] == rows


def test_a_run_with_the_regulariser_on_some_rows_records_its_loss_on_those_rows(tiny_family):
    """Each setting records a positive loss, and each a different one: the same seeded run regularised
    on other rows (had the setting not reached the loss, the three runs would be the same to the bit)."""
    short = {"total_timesteps": 256, "pretrain_steps": 8, "demo_worlds": 1, "demo_decisions": 32}
    losses = {}
    for which in CONSERVATIVE_ROWS:
        _, record = train(tiny_config(tiny_family, conservative_weight=0.3, conservative_rows=which, **short))
        losses[which] = record["training"]["final_losses"]["conservative"]
    assert all(np.isfinite(loss) and loss > 0 for loss in losses.values()), losses
    assert len(set(losses.values())) == len(CONSERVATIVE_ROWS), losses


# --- rlscore-train ----------------------------------------------------------------------------------

TINY = ["--demo-worlds", "3", "--demo-decisions", "32", "--burn-in", "20", "--pretrain-steps", "20",
        "--total-timesteps", "200", "--num-envs", "2", "--episode-decisions", "40", "--batch-size", "32",
        "--teacher-futures", "1", "--workers", "1", "--log-dir", "", "--no-eval", "--no-progress"]


@pytest.mark.parametrize("demonstrations_only", [False, True])
def test_rlscore_train_writes_a_servable_model_that_records_how_it_was_trained(tmp_path, demonstrations_only):
    args = ["--policy", "lb", "--families", "mixed,test2", "--out", str(tmp_path), *TINY]
    assert train_main(args + (["--demonstrations-only"] if demonstrations_only else [])) == 0
    # the twin writes lb-demonstrations.safetensors unless --name says otherwise
    name = "lb-demonstrations.safetensors" if demonstrations_only else "lb.safetensors"
    model = load_model(tmp_path / name, expected_policy="LB")
    training = model.metadata["training"]
    assert training["algorithm"].startswith("demonstrations only" if demonstrations_only else "DQN from demonstrations")
    assert training["demonstrations"]["worlds"] == 3 and training["demonstrations"]["decisions"] > 0
    assert (training["td_steps"] == 0) == demonstrations_only
    assert training["hyperparameters"]["families"] == ["mixed", "test2"]
    assert training["command"].startswith("rlscore-train --policy lb")
    nodes, pod = _probe()
    assert np.isfinite(model.q_values(nodes, pod)).all()


def _probe():
    from agent.sim.simulator import Simulation
    sim = Simulation.of_family("poisson", seed=0, nodes=7)
    sim.next_decision()
    return sim.candidate_state()


def test_fine_tuning_on_a_cluster_profile_records_it(tmp_path):
    """rlscore-train --profile --init: a model fine-tuned on one cluster, taught by the profile's best
    rule; the sidecar keeps the profile (the server's drift check reads it)."""
    from agent.sim.cluster_profile import profile_world, world_profile
    from rlscore.core.profile import ClusterProfile, save_profile

    world = families.family("churn").world(np.random.default_rng(0), 5)
    profile = save_profile(world_profile(world, "tiny-shop"), tmp_path / "cluster.yaml")
    start = tmp_path / "start.safetensors"
    torch.manual_seed(0)
    save_model(start, NodeScorer((16, 16)), "EE", {})
    args = ["--policy", "EE", "--profile", str(profile), "--init", str(start), "--out", str(tmp_path / "out"), *TINY]
    assert train_main(args) == 0
    meta = json.loads((tmp_path / "out" / "ee.json").read_text())
    assert profile_world(ClusterProfile.model_validate(meta["training_profile"])).nodes == world.nodes
    assert meta["training"]["hyperparameters"]["init"] == str(start)
    assert meta["training"]["hyperparameters"]["hidden"] == [16, 16]


def test_rlscore_train_distils_several_runs_into_the_served_network(tmp_path):
    args = ["--policy", "lb", "--families", "mixed,test2", "--out", str(tmp_path), "--seed", "4", "--members", "2",
            "--distil-worlds", "3", "--distil-decisions", "16", "--distil-steps", "20", *TINY]
    assert train_main(args) == 0
    runs = sorted((tmp_path / "lb-members").glob("*.safetensors"))
    assert [p.name for p in runs] == ["lb-seed4.safetensors", "lb-seed5.safetensors"]
    sidecars = [json.loads(p.with_suffix(".json").read_text()) for p in runs]
    assert [s["training"]["seed"] for s in sidecars] == [4, 5]
    served = json.loads((tmp_path / "lb.json").read_text())
    training = served["training"]
    assert training["algorithm"].startswith("2 runs of DQN from demonstrations")
    assert [m["sha256"] for m in training["members"]] == [s["sha256"] for s in sidecars]
    assert training["td_steps"] == sum(s["training"]["td_steps"] for s in sidecars) > 0
    assert training["demonstrations"]["per_run"] == [s["training"]["demonstrations"]["decisions"] for s in sidecars]
    assert training["recipe"]["members"] == 2 and training["command"].startswith("rlscore-train --policy lb")
    # one after another here: the wall clock covers both runs and the distillation
    assert training["wall_seconds"] >= sum(s["training"]["seconds"] for s in sidecars) + training["distillation_seconds"] - 1
    load_model(tmp_path / "lb.safetensors", expected_policy="LB")


@pytest.mark.parametrize("extra, message", [
    (["--families", "test9"], "unknown scenario family 'test9'"),
    (["--gamma", "1.5"], "--gamma must be within (0, 1]"),
    (["--demo-worlds", "0"], "--demo-worlds must be >= 1"),
    (["--start-e", "0.01", "--end-e", "0.5"], "--end-e <= --start-e"),
    (["--profile", "/nonexistent.yaml"], "--profile"),
    (["--init", "/nonexistent.safetensors"], "--init"),
    (["--members", "0"], "--members must be >= 1"),
    (["--candidates", "nearest"],
     "--candidates must be one of all, best-latency-tier, running-first, best-latency-tier-running-first, "
     "not 'nearest'"),
    (["--shaping-gamma", "1.5"], "--shaping-gamma must be -1 (the discount) or within 0..1"),
    (["--bootstrap", "mean"], "--bootstrap must be one of max, teacher, not 'mean'"),
    (["--action-gap", "1"], "--action-gap must be within [0, 1)"),
    (["--conservative-weight", "-1"], "--conservative-weight must be within 0..100"),
    (["--conservative-rows", "new"], "--conservative-rows must be one of all, demonstrations, interaction, not 'new'"),
    (["--energy-potential", "future"], "--energy-potential must be committed or rate, not 'future'"),
    (["--members", "2", "--distil-worlds", "1"], "--distil-worlds must be >= 2"),
    (["--members", "2", "--snapshot-dir", "/tmp/x"], "--snapshot-dir writes one run's weights"),
    (["--anchor", "/nonexistent.safetensors"], "--anchor"),
    (["--anchor", "models/ee.safetensors", "--actors", "2"], "--anchor is played here only: not with --actors"),
    (["--anchor", "models/ee.safetensors", "--anchor-weight", "-1"], "--anchor-weight must be >= 0"),
    (["--anchor", "models/ee.safetensors", "--anchor-on", "rank"], "--anchor-on must be one of standing, best"),
    (["--prioritized", "1.5"], "--prioritized must be within 0..1"),
    (["--priority-beta", "-0.1"], "--priority-beta must be within 0..1"),
    (["--priority-floor", "0"], "--priority-floor must be > 0"),
    (["--margin-floor", "-1"], "--margin-floor must be >= 0"),
    (["--trust-heads", "1"], "--trust-heads must be 0 (none) or at least 2"),
    (["--trust-heads", "-2"], "--trust-heads must be 0 (none) or at least 2"),
    (["--trust-z", "-1"], "--trust-z must be >= 0"),
    (["--head-share", "0"], "--head-share must be within (0, 1]"),
    (["--prior-scale", "-1"], "--prior-scale must be >= 0"),
    (["--trust-heads", "4", "--q-filter"], "--trust-heads does not combine with --q-filter"),
])
def test_rlscore_train_refuses_bad_options_by_name(tmp_path, capsys, extra, message):
    assert train_main(["--policy", "EE", "--out", str(tmp_path), *TINY, *extra]) == 2
    assert message in capsys.readouterr().err


def test_demonstrations_do_not_depend_on_how_many_processes_record_them():
    """Each world is recorded with its own random stream, on one process or two alike; rollout labels
    (every second decision here) change some of the teacher's choices."""
    from agent.learn.dqn import assign_teachers, record_demonstrations, world_plan

    recorded = {}
    for workers, rollout_every in ((1, 0), (2, 0), (2, 2)):
        cfg = DQNConfig(policy="LB", families=("mixed", "usage-skew"), demo_worlds=3, demo_decisions=12, burn_in=10,
                        max_nodes=48, workers=workers, rollout_every=rollout_every, rollout_horizon=8, progress=False)
        plan = world_plan(cfg, cfg.demo_worlds, cfg.seed)
        demos, scale, record = record_demonstrations(cfg, plan, assign_teachers(cfg, plan), progress=False)
        recorded[workers, rollout_every] = (demos, scale, record)
    (one, scale_one, _), (two, scale_two, _), (_, _, labelled) = recorded.values()
    assert len(one) == len(two) == 36 and scale_one == scale_two
    for name in ("nodes", "action", "ret", "expert"):
        assert np.array_equal(getattr(one, name), getattr(two, name)), name
    assert labelled["rollout_labels"]["decisions"] == 3 * 6
    # the labelled decisions carry the rollouts' advantages, and their labels are among the best measured nodes:
    # the teacher's, or where the teacher's choice is not, the best measured
    demos = recorded[2, 2][0]
    measured = ~np.isnan(demos.advantage)
    rows = np.flatnonzero(measured.any(axis=1))
    assert len(rows) == 3 * 6 and not measured[np.setdiff1d(np.arange(len(demos)), rows)].any()
    departed = 0
    for i in rows:
        cheapest = measured[i] & (demos.advantage[i] >= np.nanmax(demos.advantage[i]) - 1e-6)
        assert (demos.expert[i] & cheapest).any()  # the teacher's choice where it is among them
        departed += np.array_equal(demos.expert[i], cheapest) and not (demos.expert[i] & ~measured[i]).any()
    assert departed >= round(labelled["rollout_labels"]["departed_from_teacher"] * len(rows)) > 0
    # without relabelling, a decision where the rollouts depart keeps its teacher's choice (so what the
    # teacher meets afterwards differs)
    cfg = DQNConfig(policy="LB", families=("mixed", "usage-skew"), demo_worlds=3, demo_decisions=12, burn_in=10,
                    max_nodes=48, workers=2, rollout_every=2, rollout_horizon=8, rollout_relabel=False, progress=False)
    plan = world_plan(cfg, cfg.demo_worlds, cfg.seed)
    kept, _, record = record_demonstrations(cfg, plan, assign_teachers(cfg, plan), progress=False)
    assert record["rollout_labels"]["decisions"] == labelled["rollout_labels"]["decisions"]
    assert np.array_equal(np.flatnonzero((~np.isnan(kept.advantage)).any(axis=1)), rows)
    departed = [i for i in rows if not (kept.expert[i] & (kept.advantage[i] >= np.nanmax(kept.advantage[i]) - 1e-6)).any()]
    assert len(departed) == round(record["rollout_labels"]["departed_from_teacher"] * len(rows)) > 0


def test_the_sidecar_records_the_commit_the_run_started_on(monkeypatch):
    """A long run outlives commits made meanwhile: its record names the code it ran, read when it
    started, not the checkout it finished on."""
    from agent.learn import dqn

    # the checkout changes once the run is under way: after its demonstrations are recorded
    under_way = []
    record = dqn.record_demonstrations
    monkeypatch.setattr(dqn, "record_demonstrations", lambda *a, **k: under_way.append(True) or record(*a, **k))
    monkeypatch.setattr(dqn, "git_commit",
                        lambda: "a-commit-made-during-the-run" if under_way else "the-commit-it-started-on")
    cfg = DQNConfig(policy="LB", families=("test2",), demo_worlds=1, demo_decisions=8, burn_in=10, max_nodes=6,
                    workers=1, pretrain_steps=2, total_timesteps=16, log_dir="", progress=False)
    _, meta = dqn.train(cfg)
    assert meta["training"]["git_commit"] == "the-commit-it-started-on"


def test_the_served_weights_are_the_average_asked_for_and_every_way_of_serving_is_written(monkeypatch, tmp_path):
    """--weight-average uniform serves the mean of the online network's weights over the gradient steps
    after --average-start; --snapshot-dir writes it, the moving average, the last weights and the
    quarters' checkpoints, each with the run's sidecar."""
    from agent.learn import dqn

    online = []  # the online network's weights after every gradient step, as the optimizer leaves them

    class RecordingAdam(torch.optim.Adam):
        def step(self, closure=None):
            result = super().step(closure)
            online.append([p.detach().clone() for group in self.param_groups for p in group["params"]])
            return result

    monkeypatch.setattr(dqn.torch.optim, "Adam", RecordingAdam)
    cfg = DQNConfig(policy="LB", families=("test2",), demo_worlds=1, demo_decisions=16, burn_in=10, max_nodes=6,
                    workers=1, pretrain_steps=8, total_timesteps=96, train_frequency=2, batch_size=8, num_envs=2,
                    log_dir="", progress=False, weight_average="uniform", average_start=0.5, ema_decay=0.9,
                    snapshot_dir=str(tmp_path))
    network, record = dqn.train(cfg)
    weights = record["training"]["weights"]
    assert weights["uniform_average_from_step"] == 8 + 48 // 2
    averaged = online[weights["uniform_average_from_step"]:]
    assert weights["uniform_average_steps"] == len(averaged) > 1
    # the served network is the advantage stream of the averaged dueling network: its parameters come first
    served = list(network.parameters())
    for k, p in enumerate(served):
        assert torch.allclose(p, torch.stack([step[k] for step in averaged]).mean(dim=0), atol=1e-6)
    assert not torch.allclose(served[0], online[-1][0])  # the average is not the last weights
    files = {p.name for p in tmp_path.glob("*.safetensors")}
    assert files == {f"lb-{name}.safetensors" for name in ("last-q1", "last-q2", "last-q3", "last", "uniform", "ema")}
    last = load_model(tmp_path / "lb-last.safetensors", expected_policy="LB")
    assert np.allclose(last.weights["layers.0.Lambda.weight"], online[-1][0].numpy())
    uniform = load_model(tmp_path / "lb-uniform.safetensors", expected_policy="LB")
    assert np.allclose(uniform.weights["layers.0.Lambda.weight"], served[0].detach().numpy())
    moving = online[0][0]  # the moving average starts at the first step's weights
    for step in online[1:]:
        moving = 0.9 * moving + 0.1 * step[0]
    ema = load_model(tmp_path / "lb-ema.safetensors", expected_policy="LB")
    assert np.allclose(ema.weights["layers.0.Lambda.weight"], moving.numpy(), atol=1e-6)
    assert uniform.metadata["snapshot"] == "uniform" and uniform.metadata["training"]["weights"]["served"] == "uniform"


@pytest.mark.parametrize("extra, message", [
    (["--weight-average", "median"], "--weight-average must be one of last, uniform, ema"),
    (["--average-start", "1.5"], "--average-start must be within 0..1"),
    (["--ema-decay", "1"], "--ema-decay must be within [0, 1)"),
])
def test_rlscore_train_refuses_bad_weight_averages_by_name(tmp_path, capsys, extra, message):
    assert train_main(["--policy", "LB", "--out", str(tmp_path), *TINY, *extra]) == 2
    assert message in capsys.readouterr().err


def test_a_runs_demonstrations_can_come_from_another_seed(monkeypatch):
    """--demo-seed crosses one seed's demonstrations with another's initial weights and interaction."""
    from agent.learn import dqn

    recorded = []
    record = dqn.record_demonstrations
    monkeypatch.setattr(dqn, "record_demonstrations", lambda *a, **k: recorded.append(record(*a, **k)) or recorded[-1])

    def run(**seeds):
        cfg = DQNConfig(policy="LB", families=("mixed", "test2"), demo_worlds=2, demo_decisions=8, burn_in=10,
                        max_nodes=8, workers=1, pretrain_steps=2, total_timesteps=16, log_dir="", progress=False,
                        **seeds)
        network, _ = dqn.train(cfg)
        return recorded[-1][0], network.state_dict()["layers.0.Lambda.weight"]

    own, own_weights = run(seed=3)
    crossed, crossed_weights = run(seed=7, demo_seed=3)
    other, _ = run(seed=7)
    for name in ("nodes", "action", "ret", "expert"):
        assert np.array_equal(getattr(own, name), getattr(crossed, name)), name
    assert not np.array_equal(own.nodes, other.nodes)
    assert not torch.equal(crossed_weights, own_weights)  # the rest of the run is seed 7's
    with pytest.raises(ValueError, match="--demo-seed must be >= 0"):
        DQNConfig(policy="LB", demo_seed=-2)


# --- anchored on a rule selector (agent/learn/anchor.py) ------------------------------------------

def test_the_anchor_adds_its_weight_times_each_nodes_standing_in_the_rows_column():
    from agent.learn.anchor import anchor_values

    nodes = torch.zeros(2, 3, NUM_NODE_FEATURES)
    k = RULE_FEATURES.index("most-allocated")
    nodes[0, :, NUM_STATE_FEATURES + k] = torch.tensor([1.0, 0.5, 0.0])
    nodes[1, :, NUM_STATE_FEATURES + k] = torch.tensor([0.0, 1.0, 1.0])
    values = anchor_values(nodes, torch.tensor([k, -1]), 3.0)
    assert values.tolist() == [[3.0, 1.5, 0.0], [0.0, 0.0, 0.0]]
    # on the rule's best nodes only (ties included): overruling the rule costs the weight at any size
    values = anchor_values(nodes, torch.tensor([k, k]), 3.0, best_only=True)
    assert values.tolist() == [[3.0, 0.0, 0.0], [0.0, 3.0, 3.0]]


def test_an_anchor_must_be_a_rule_selector():
    from agent.learn.anchor import SelectorAnchor
    from rlscore.core.model import ModelValidationError

    with pytest.raises(ModelValidationError, match="an anchor must be a rule selector"):
        SelectorAnchor("models/el.safetensors", "EL", 1.0)


def test_the_anchors_column_is_the_served_selectors_pick_on_the_environments_observation(tmp_path):
    """The observation's features are what serving computes, so the anchor picks what the served
    selector picks (models/ee.safetensors on states of three families), and the term training adds
    (torch, float32) is the term the anchored model serves (numpy, float64), ties at the best included."""
    from agent.learn.anchor import SelectorAnchor
    from agent.learn.env import SchedulingEnv

    anchors = {on: SelectorAnchor("models/ee.safetensors", "EE", 2.0, on) for on in ("standing", "best")}
    served = {on: load_model(save_model(tmp_path / f"{on}.safetensors", NodeScorer((8,)), "EE", {}, anchor))
              for on, anchor in anchors.items()}
    anchor = anchors["standing"]
    picked, best_counts = set(), set()
    for name, nodes in (("test1", 3), ("test2", 10), ("poisson", 20)):
        env = SchedulingEnv("EE", max_nodes=24, families=(name,))
        obs, _ = env.reset(seed=5, options={"family": name, "nodes": nodes})
        for _ in range(30):
            rule = anchor.selector.rule_for(env._state, env._pod)
            assert anchor.column(obs) == RULE_FEATURES.index(rule)
            picked.add(rule)
            width = int(obs["action_mask"].sum())
            for on, trained in anchors.items():
                term = trained.values(torch.from_numpy(obs["nodes"][None, :width]),
                                      torch.tensor([trained.column(obs)]))[0].numpy()
                np.testing.assert_allclose(term, served[on].anchor_term(obs["nodes"][:width], obs["pod"]), rtol=1e-6)
                if on == "best":
                    best_counts.add(int(term.astype(bool).sum()))
            obs, _, terminated, truncated, _ = env.step(int(np.flatnonzero(obs["action_mask"])[0]))
            if terminated or truncated:
                break
    assert len(picked) >= 2
    assert max(best_counts) >= 2  # some state has tied best nodes


def test_an_anchored_run_records_its_anchor_and_its_replay_carries_the_picks(tmp_path, monkeypatch):
    """A short EE run on the shipped selector: every replayed transition has the selector's pick of
    its state and of the next one (what the losses add the standing of), and the sidecar says so."""
    seen = []
    real = dqn.Replay.sample

    def sample(self, count, rng, beta=1.0):
        batch = real(self, count, rng, beta)
        seen.append((batch["anchor"], batch["next_anchor"]))
        return batch

    monkeypatch.setattr(dqn.Replay, "sample", sample)
    args = ["--policy", "EE", "--families", "test1,poisson", "--out", str(tmp_path), "--anchor",
            "models/ee.safetensors", "--anchor-weight", "1.5", *TINY]
    assert train_main(args) == 0
    columns = {RULE_FEATURES.index(r) for r in ("most-allocated", "efficient-first", "one-step-ee")}
    assert seen and all(set(a.tolist()) <= columns and set(b.tolist()) <= columns for a, b in seen)
    hyper = json.loads((tmp_path / "ee.json").read_text())["training"]["hyperparameters"]
    assert hyper["anchor"] == "models/ee.safetensors" and hyper["anchor_weight"] == 1.5
