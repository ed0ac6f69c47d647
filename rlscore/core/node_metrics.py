"""The metrics contract: the Prometheus series rlscore reads per node, as PromQL that gives one value
per node. The suggestion server reads them live (each is a setting, RLSCORE_<NAME>_QUERY, defaulting
to these); calibration reads the same series over a window, so what a profile measures is what the
server serves. Series are placed on nodes by their `node` label, Kepler's `node_name`, or the host of
`instance` (docs/operations.md)."""

from __future__ import annotations

# what the latency probe DaemonSet exports, per node and target (latency_probe.probe)
LATENCY_METRIC = "rlscore_node_user_latency_ms"

CPU_QUERY = '1 - avg by (instance, node) (irate(node_cpu_seconds_total{mode="idle"}[1m]))'
MEMORY_QUERY = "1 - node_memory_MemAvailable_bytes / node_memory_MemTotal_bytes"
CPU_COUNT_QUERY = 'count by (instance, node) (node_cpu_seconds_total{mode="idle"})'
MEMORY_TOTAL_QUERY = "node_memory_MemTotal_bytes"
LATENCY_QUERY = f"avg by (node) ({LATENCY_METRIC})"
NETWORK_QUERY = ('sum by (instance, node) (irate(node_network_receive_bytes_total'
                 '{device!~"lo|veth.*|docker.*|cni.*|flannel.*|cali.*|cilium.*|br-.*|virbr.*"}[1m]))')
TCP_QUERY = "sum by (instance, node) (node_netstat_Tcp_CurrEstab)"
DISK_QUERY = ('max by (instance, node) (1 - node_filesystem_avail_bytes{mountpoint="/"} '
              '/ node_filesystem_size_bytes{mountpoint="/"})')


def cpu_stddev_query(cpu_query: str) -> str:
    """How much a node's cpu swings: the standard deviation of `cpu_query` over 2 minutes."""
    return f"stddev_over_time(({cpu_query})[2m:15s])"


# A node's power model from Kepler (>= 0.10): idle watts, and the active watts at the current cpu usage
# (max = idle + active / usage). Kepler labels each node's series by `zone` -- package (which already
# holds core and uncore), core, uncore, dram, and psys (the platform) where RAPL has it -- and by
# `path`, one per socket. A node's power is its platform zone where exported, else package + dram
# summed over its sockets; summing every zone counts core and uncore twice. Node labels/annotations
# rlscore.io/power-{idle,max}-watts win over Kepler.
PLATFORM_ZONES = "psys|platform"
NODE_ZONES = "package|dram"


def kepler_node_watts(metric: str) -> str:
    """Per node: `metric` of the platform zone where exported, else of package + dram."""
    return (f'sum by (node_name) ({metric}{{zone=~"{PLATFORM_ZONES}"}}) or '
            f'sum by (node_name) ({metric}{{zone=~"{NODE_ZONES}"}})')


POWER_IDLE_QUERY = kepler_node_watts("kepler_node_cpu_idle_watts")
POWER_ACTIVE_QUERY = kepler_node_watts("kepler_node_cpu_active_watts")
POWER_USAGE_QUERY = "avg by (node_name) (kepler_node_cpu_usage_ratio)"
# Full-load watts can only be estimated while a node is busy; the history keeps what was seen.
POWER_MAX_HISTORY_QUERY = (f"avg_over_time((({POWER_IDLE_QUERY}) + ({POWER_ACTIVE_QUERY}) / "
                           f"({POWER_USAGE_QUERY} >= 0.05))[6h:1m])")
