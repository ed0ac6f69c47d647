"""The node state the server scores with: every known node's row (node_table), filled by the
Kubernetes watch (kube_state), Prometheus (prometheus_source) and the latency probes
(latency_source), and assembled per request from a snapshot (snapshot)."""
