"""The Grafana dashboard: built by Grafana's own SDK (so it follows the dashboard schema), the file in
deploy/ is what the builder makes, and every query is PromQL a real Prometheus accepts over the
metrics rlscore and its neighbours really export."""

import json
import re
import subprocess
import sys
from pathlib import Path

import httpx
from grafana_foundation_sdk.models.dashboard import Dashboard

from tests.helpers.processes import PrometheusServer

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "deploy" / "base" / "grafana-dashboard.json"
CHART_COPY = ROOT / "deploy" / "helm" / "rlscore" / "files" / "grafana-dashboard.json"


def _queries(board: dict) -> list[str]:
    return [t["expr"] for p in board["panels"] for t in p.get("targets", [])]


def test_committed_dashboard_is_what_the_builder_makes(tmp_path):
    committed = {path: path.read_text() for path in (DASHBOARD, CHART_COPY)}
    subprocess.run([sys.executable, str(ROOT / "deploy" / "grafana" / "dashboard.py")], check=True, capture_output=True)
    try:
        for path, text in committed.items():
            assert path.read_text() == text, f"{path}: run deploy/grafana/dashboard.py and commit the result"
    finally:
        for path, text in committed.items():
            path.write_text(text)


def test_dashboard_round_trips_through_the_schema_models():
    board = json.loads(DASHBOARD.read_text())
    model = Dashboard.from_json(board)
    assert model.title == "rlscore" and model.uid == "rlscore"
    assert json.loads(json.dumps(model.to_json(), default=lambda o: o.to_json() if hasattr(o, "to_json") else str(o)))
    titles = {p["title"] for p in board["panels"]}
    for wanted in ("Failures by reason", "Fallbacks to the heuristic", "Degraded answers by reason", "Serving models",
                   "Snapshot age", "Active nodes (EE, EL)", "Hot nodes (LB)", "Node user latency (EL)"):
        assert wanted in titles


def test_every_query_is_valid_promql_over_exported_metrics(tmp_path):
    board = json.loads(DASHBOARD.read_text())
    queries = _queries(board)
    assert len(queries) >= 15
    prometheus = PrometheusServer(tmp_path, ["127.0.0.1:1"])
    try:
        for expr in queries:
            r = httpx.get(f"{prometheus.url}/api/v1/query", params={"query": expr}, timeout=10).json()
            assert r["status"] == "success", (expr, r)
    finally:
        prometheus.stop()
    # every rlscore_* series a panel reads is one the server or the plugin exports
    exported = (ROOT / "suggestion_server" / "metrics.py").read_text() + (ROOT / "rlscore" / "core" / "node_metrics.py").read_text()
    exported += " ".join(f"rlscore_{m}" for m in re.findall(r'Name:\s+"(\w+)"', (ROOT / "plugin-go" / "pkg" / "rlscore" / "metrics.go").read_text()))
    for name in set(re.findall(r"\b(rlscore_\w+?)(?:_bucket|_sum|_count)?\b", " ".join(queries))):
        assert name in exported, name
