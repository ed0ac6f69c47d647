"""rlscore: a reinforcement-learning node scorer for Kubernetes."""
