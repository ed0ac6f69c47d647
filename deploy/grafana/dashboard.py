"""Builds deploy/base/grafana-dashboard.json (and the Helm chart's copy) with Grafana's own typed SDK (grafana-foundation-sdk),
so the JSON follows Grafana's dashboard schema by construction. Re-run after editing:

    .venv/bin/python deploy/grafana/dashboard.py

Panels: the plugin's view (requests, failures by reason, latency, RLScore's share of the
scheduler's time), the server's (answers by policy and source, latency, fallbacks, degraded answers
by reason, invalid requests, serving model versions, snapshot age), and what each policy optimizes
(active and hot nodes from node_exporter, power from Kepler when present, node latency).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from grafana_foundation_sdk.builders import dashboard, prometheus, stat, table, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef
from grafana_foundation_sdk.models.dashboard import DashboardCursorSync
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

DEPLOY = Path(__file__).resolve().parent.parent
# kustomize and Helm each read files only below their own root: one copy for each
OUTPUTS = (DEPLOY / "base" / "grafana-dashboard.json", DEPLOY / "helm" / "rlscore" / "files" / "grafana-dashboard.json")
DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
# node-level busy cpu, as the server's default query reads it
BUSY = '1 - avg by (node) (irate(node_cpu_seconds_total{mode="idle"}[1m]))'


def query(expr: str, legend: str, ref: str = "A") -> prometheus.Dataquery:
    return prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(ref).datasource(DATASOURCE)


def series(title: str, unit: str, *queries: prometheus.Dataquery, description: str = "") -> timeseries.Panel:
    panel = timeseries.Panel().title(title).unit(unit).height(8).span(8).datasource(DATASOURCE)
    if description:
        panel = panel.description(description)
    for q in queries:
        panel = panel.with_target(q)
    return panel


def build() -> dict:
    d = (dashboard.Dashboard("rlscore").uid("rlscore").tags(["rlscore", "scheduler"]).refresh("30s")
         .time("now-1h", "now").tooltip(DashboardCursorSync.CROSSHAIR)
         .description("The RLScore plugin, the suggestion server and what each policy optimizes.")
         .with_variable(dashboard.DatasourceVariable("datasource").label("Prometheus").type("prometheus")))

    d = d.with_row(dashboard.Row("Scheduler: the RLScore plugin"))
    d = d.with_panel(series("Suggestions by result", "reqps",
                            query('sum by (result) (rate(rlscore_suggest_requests_total{result!=""}[5m]))', "{{result}}"),
                            description="ok, failed (scored neutrally) or shadow, per second"))
    d = d.with_panel(series("Failures by reason", "reqps",
                            query('sum by (reason) (rate(rlscore_suggest_failures_total[5m]))', "{{reason}}"),
                            description="timeout, unreachable, tls, http_status, malformed, ... : the pod was scored neutrally"))
    d = d.with_panel(series("Suggest latency seen by the plugin", "s",
                            query('histogram_quantile(0.5, sum by (le) (rate(rlscore_suggest_duration_seconds_bucket{source=""}[5m])))', "p50"),
                            query('histogram_quantile(0.99, sum by (le) (rate(rlscore_suggest_duration_seconds_bucket{source=""}[5m])))', "p99", "B")))
    d = d.with_panel(series("RLScore's share of the scheduling time", "percentunit",
                            query('sum(rate(scheduler_plugin_execution_duration_seconds_sum{plugin="RLScore"}[5m])) '
                                  '/ sum(rate(scheduler_plugin_execution_duration_seconds_count{plugin="RLScore", extension_point="PreScore"}[5m])) '
                                  '/ (sum(rate(scheduler_scheduling_attempt_duration_seconds_sum{profile=~"rl-.*"}[5m])) '
                                  '/ sum(rate(scheduler_scheduling_attempt_duration_seconds_count{profile=~"rl-.*"}[5m])))', "RLScore"),
                            description="mean RLScore time per sampled cycle over the mean scheduling attempt of the rl profiles"))
    d = d.with_panel(series("Scheduling attempts by profile", "ops",
                            query('sum by (profile, result) (rate(scheduler_schedule_attempts_total[5m]))', "{{profile}} {{result}}")))

    d = d.with_row(dashboard.Row("Suggestion server"))
    d = d.with_panel(series("Answers by policy and source", "reqps",
                            query('sum by (policy, source) (rate(rlscore_suggest_requests_total{source!=""}[5m]))', "{{policy}} {{source}}"),
                            description="source=heuristic: the model was missing or failed, see fallbacks"))
    d = d.with_panel(series("Answer latency (server)", "s",
                            query('histogram_quantile(0.99, sum by (le, policy) (rate(rlscore_suggest_duration_seconds_bucket{source!=""}[5m])))', "p99 {{policy}}")))
    d = d.with_panel(series("Fallbacks to the heuristic", "reqps",
                            query('sum by (policy, reason) (rate(rlscore_fallbacks_total[5m]))', "{{policy}} {{reason}}")))
    d = d.with_panel(series("Degraded answers by reason", "reqps",
                            query('sum by (reason) (rate(rlscore_degraded_total[5m]))', "{{reason}}"),
                            description="node state missing or stale: capacity, requests, utilization, latency, stale, source"))
    d = d.with_panel(series("Rejected requests by status", "reqps",
                            query('sum by (status) (rate(rlscore_suggest_invalid_requests_total[5m]))', "{{status}}")))
    d = d.with_panel(stat.Panel().title("Snapshot age").unit("s").height(8).span(4).datasource(DATASOURCE)
                     .with_target(query("max(rlscore_snapshot_age_seconds)", "age")))
    d = d.with_panel(table.Panel().title("Serving models").height(8).span(4).datasource(DATASOURCE)
                     .with_target(query("max by (policy, version) (rlscore_model_info)", "{{policy}} {{version}}")
                                  .instant().format(PromQueryFormat.TABLE)))

    d = d.with_row(dashboard.Row("What the policies optimize"))
    d = d.with_panel(series("Active nodes (EE, EL)", "short",
                            query(f"count(({BUSY}) > 0.05)", "busy above 5%"),
                            description="fewer is better for EE and EL: empty nodes can be scaled down"))
    d = d.with_panel(series("Hot nodes (LB)", "short", query(f"count(({BUSY}) > 0.85) or vector(0)", "above 85% cpu"),
                            description="LB's objective: time nodes spend above 85% measured cpu"))
    d = d.with_panel(series("Cluster power (Kepler)", "watt",
                            query("sum(kepler_node_cpu_idle_watts) + sum(kepler_node_cpu_active_watts)", "watts"),
                            description="EE's objective, when Kepler exports node power"))
    d = d.with_panel(series("Node user latency (EL)", "ms",
                            query("avg by (node) (rlscore_node_user_latency_ms)", "{{node}}"),
                            description="what EL's latency limits are met against"))
    return json.loads(JSONEncoder(sort_keys=True, indent=2).encode(d.build()))


def main() -> int:
    text = json.dumps(build(), indent=2, sort_keys=True) + "\n"
    for out in OUTPUTS:
        out.write_text(text)
        print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
