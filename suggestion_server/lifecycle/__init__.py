"""What serves each policy, and how that changes: the validated models (registry), the staged
rollout of retrained candidates (rollout), and drift of live traffic from a model's training profile
(drift)."""
