import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import agent
from agent.learn.env import SchedulingEnv
from agent.learn.rewards import INVALID_ACTION_REWARD


@pytest.mark.parametrize("policy", ["EE", "LB", "EL"])
def test_registered_env_passes_gymnasium_checker(policy):
    env = gymnasium.make(agent.ENV_ID, policy=policy)
    check_env(env.unwrapped, skip_render_check=True)


def test_mask_marks_exactly_the_feasible_nodes_and_only_they_are_placed_on():
    env = SchedulingEnv(policy="LB", max_nodes=16, min_nodes=2, families=("churn", "usage-skew"))
    rng = np.random.default_rng(0)
    obs, _ = env.reset(seed=3)
    for _ in range(600):
        sim = env.sim
        mask = env.action_masks()
        feasible = sim.cluster.feasible(sim.pod)
        assert mask.sum() == len(feasible) > 0
        assert np.array_equal(obs["action_mask"].astype(bool), mask)
        # absent nodes are never offered
        assert sim.cluster.present[sim.candidates].all()
        action = int(rng.choice(np.flatnonzero(mask)))
        node, pod = int(sim.candidates[action]), sim.pod
        placements = []
        original_bind = sim.cluster.bind
        sim.cluster.bind = lambda p, n, **kw: (placements.append((p.id, n)), original_bind(p, n, **kw))
        obs, _, _, truncated, info = env.step(action)
        sim.cluster.bind = original_bind
        assert not info["invalid_action"]
        assert placements == [(pod.id, node)]
        if truncated:
            obs, _ = env.reset()


def test_invalid_action_is_penalised_and_places_nothing():
    env = SchedulingEnv(policy="EE", max_nodes=8, min_nodes=3)
    obs, _ = env.reset(seed=1, options={"nodes": 3})
    placed = env.sim.cluster.pods.sum()
    invalid = int(np.flatnonzero(~env.action_masks())[0])
    _, reward, terminated, _, info = env.step(invalid)
    assert info["invalid_action"] and reward == INVALID_ACTION_REWARD and not terminated
    assert env.sim.cluster.pods.sum() <= placed


@pytest.mark.parametrize("nodes", [1, 2, 7, 32])
def test_variable_node_count(nodes):
    env = SchedulingEnv(policy="EL", max_nodes=32)
    obs, info = env.reset(seed=5, options={"nodes": nodes})
    assert info["nodes"] == nodes
    assert obs["nodes"].shape == (32, env.observation_space["nodes"].shape[1])
    assert 1 <= obs["action_mask"].sum() <= nodes
    assert not obs["nodes"][nodes:].any()  # padding is zero
    assert env.observation_space.contains(obs)


def test_episode_lasts_three_fills_of_the_world_at_least_the_configured_decisions():
    env = SchedulingEnv(policy="EE", max_nodes=8, episode_decisions=25, families=("test2",))
    env.reset(seed=2)  # test2 holds 30 pods: 90 decisions
    for step in range(1, 91):
        _, _, _, truncated, _ = env.step(int(np.flatnonzero(env.action_masks())[0]))
        assert truncated == (step == 90)
    env = SchedulingEnv(policy="EE", max_nodes=8, episode_decisions=120, families=("test2",))
    env.reset(seed=2)
    steps = 1
    while not env.step(int(np.flatnonzero(env.action_masks())[0]))[3]:
        steps += 1
    assert steps == 120


def test_rejects_bad_options():
    with pytest.raises(ValueError, match="unknown policy"):
        SchedulingEnv(policy="XX")
    with pytest.raises(ValueError, match="unknown scenario family"):
        SchedulingEnv(families=("nope",))
    with pytest.raises(ValueError, match="unknown reward variant"):
        SchedulingEnv(reward="nope")
    with pytest.raises(ValueError, match="unknown node draw 'log'"):
        SchedulingEnv(node_draw="log")
    env = SchedulingEnv(max_nodes=4)
    with pytest.raises(ValueError, match="nodes"):
        env.reset(options={"nodes": 10})


@pytest.mark.parametrize("draw, small_share", [("uniform", (0.08, 0.14)), ("log-uniform", (0.38, 0.48))])
def test_episode_sizes_stay_in_range_and_log_uniform_favours_small_clusters(draw, small_share):
    """Share of 2..8-node episodes: 7/63 drawn uniformly, ~43% log-uniformly; every size in 2..64."""
    env = SchedulingEnv(policy="LB", families=("test2",), node_draw=draw)
    sizes = np.array([env.reset(seed=k)[1]["nodes"] for k in range(600)])
    assert sizes.min() >= 2 and sizes.max() <= 64
    assert small_share[0] <= np.mean(sizes <= 8) <= small_share[1], np.mean(sizes <= 8)
    assert len(set(sizes.tolist())) > 30  # the whole range is drawn, not a few sizes
