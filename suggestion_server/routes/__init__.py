"""The server's routes, one router per concern: scoring, models and rollout, operations."""
