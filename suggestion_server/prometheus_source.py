"""Node metrics from Prometheus: one query per metric for all nodes, never one per node."""

from __future__ import annotations

import math

from prometheus_api_client import PrometheusConnect
from urllib3.util.retry import Retry

def series_node(labels: dict[str, str], ip_to_node: dict[str, str]) -> str | None:
    """The node a series belongs to: its `node` (or Kepler's `node_name`) label, else its `instance`
    host mapped through the nodes' InternalIPs (node_exporter's instance is ip:port), else the
    instance host itself."""
    if labels.get("node"):
        return labels["node"]
    if labels.get("node_name"):
        return labels["node_name"]
    instance = labels.get("instance")
    if not instance:
        return None
    host = instance
    if host.startswith("["):  # [ipv6]:port
        host = host[1:].split("]", 1)[0]
    elif host.count(":") == 1:
        host = host.rsplit(":", 1)[0]
    return ip_to_node.get(host, host)


class PrometheusSource:
    def __init__(self, url: str, timeout_s: float, queries: dict[str, str],
                 history_queries: dict[str, str] | None = None):
        self.url = url
        self.timeout_s = timeout_s
        self.queries = {field: q for field, q in queries.items() if q}
        # run now and then rather than on every refresh: they look back hours
        self.history_queries = {field: q for field, q in (history_queries or {}).items() if q}
        # No client-side retries: the background refresh retries, and a down Prometheus must cost
        # one timeout per query, not several.
        self._prom = PrometheusConnect(url=url, disable_ssl=True, timeout=timeout_s, retry=Retry(total=0))

    def collect(self, ip_to_node: dict[str, str]) -> tuple[dict[str, dict[str, float]], list[str]]:
        """Per node, the fields whose query answered; and a problem per query that failed."""
        return self._run(self.queries, ip_to_node)

    def collect_history(self, ip_to_node: dict[str, str]) -> tuple[dict[str, dict[str, float]], list[str]]:
        """As `collect`, for the history queries."""
        return self._run(self.history_queries, ip_to_node)

    def _run(self, queries: dict[str, str], ip_to_node: dict[str, str]) -> tuple[dict[str, dict[str, float]], list[str]]:
        values: dict[str, dict[str, float]] = {}
        problems: list[str] = []
        for field, query in queries.items():
            try:
                # PromQL durations take integers: "1500ms", not "1.5s"
                result = self._prom.custom_query(query, params={"timeout": f"{int(self.timeout_s * 1000)}ms"})
            except Exception as exc:  # connection refused, timeout, HTTP or PromQL error
                problems.append(f"prometheus {field}: {type(exc).__name__}: {str(exc)[:200]}")
                continue
            for series in result:
                node = series_node(series.get("metric", {}), ip_to_node)
                try:
                    value = float(series["value"][1])
                except (KeyError, IndexError, TypeError, ValueError):
                    continue
                if node is None or not math.isfinite(value):
                    continue  # NaN from a division by zero, or a series we cannot place
                values.setdefault(node, {})[field] = value
        return values, problems
