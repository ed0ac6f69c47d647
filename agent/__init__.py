"""rlscore's learning agent: simulator, Gymnasium environment, DeepSets DQN, evaluation."""

import gymnasium

ENV_ID = "rlscore/Scheduling-v0"

if ENV_ID not in gymnasium.registry:
    gymnasium.register(id=ENV_ID, entry_point="agent.learn.env:SchedulingEnv")
