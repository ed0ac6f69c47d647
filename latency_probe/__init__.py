"""The latency probe: a DaemonSet that measures each node's round-trip time to the users and exports it
(rlscore.core.node_metrics.LATENCY_METRIC) for the suggestion server to read."""
