"""What serving and training share: node state, features, compiled kernels, rules, objectives, the
model format and its numpy inference, and the metrics contract. It imports neither the suggestion
server nor anything of training (tests/test_architecture.py checks it)."""
