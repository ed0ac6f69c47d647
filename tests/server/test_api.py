"""The /suggest contract through the ASGI app, with the shipped models."""

import json

import pytest

from suggestion_server.http.schemas import SuggestResponse
from tests.server.conftest import MIB, node, pod, post


def test_scores_every_node_and_follows_each_policy(client):
    nodes = [node("busy", cpu_req=3000, pods=10, latency=45.0), node("half", cpu_req=1500, pods=5, latency=10.0),
             node("empty", latency=5.0)]
    by_policy = {}
    for policy in ("EE", "LB", "EL"):
        r = post(client, {"pod": pod(), "nodes": nodes, "policy": policy})
        assert r.status_code == 200, r.text
        body = r.json()
        assert set(body["scores"]) == {"busy", "half", "empty"}
        assert all(isinstance(s, int) and 0 <= s <= 100 for s in body["scores"].values())
        assert body["policy"] == policy and body["source"] == "model"
        assert body["model_version"].startswith(policy.lower() + "-")
        assert body["degraded"] is False and body["reasons"] == []
        SuggestResponse.model_validate(body)  # the hand-built payload matches the published schema
        by_policy[policy] = max(body["scores"], key=body["scores"].get)
    assert by_policy == {"EE": "busy", "LB": "empty", "EL": "busy"}  # pack / spread / pack (no limits: anywhere)
    # with limits EL packs within them; without, a pod has none (unless the operator configured defaults)
    limited = pod({"rlscore.io/latency-soft-ms": "20", "rlscore.io/latency-hard-ms": "30"})
    scores = post(client, {"pod": limited, "nodes": nodes, "policy": "EL"}).json()["scores"]
    assert max(scores, key=scores.get) == "half"


def test_policy_precedence_request_then_annotation_then_default(make_client):
    client = make_client(default_policy="LB")
    nodes = [node("a", cpu_req=2000, pods=4), node("b")]
    assert post(client, {"pod": pod(), "nodes": nodes}).json()["policy"] == "LB"
    assert post(client, {"pod": pod({"rlscore.io/policy": "ee"}), "nodes": nodes}).json()["policy"] == "EE"
    r = post(client, {"pod": pod({"rlscore.io/policy": "ee"}), "nodes": nodes, "policy": "el"})
    assert r.json()["policy"] == "EL"


def test_latency_limits_from_annotations_including_the_thesis_names(client):
    nodes = [node("near", latency=25.0), node("far", latency=60.0), node("mid", latency=35.0)]
    for annotations in ({"rlscore.io/latency-soft-ms": "20", "rlscore.io/latency-hard-ms": "30"},
                        {"latencySoftConstraint": "20", "latencyHardConstraint": "30"}):
        r = post(client, {"pod": pod(annotations), "nodes": nodes, "policy": "EL"})
        scores = r.json()["scores"]
        assert max(scores, key=scores.get) == "near"
    # looser limits make "mid" acceptable too; the busier one then wins (packing)
    nodes = [node("near", latency=25.0), node("mid", latency=35.0, cpu_req=2000, pods=4)]
    r = post(client, {"pod": pod({"rlscore.io/latency-soft-ms": "50", "rlscore.io/latency-hard-ms": "80"}),
                      "nodes": nodes, "policy": "EL"})
    scores = r.json()["scores"]
    assert max(scores, key=scores.get) == "mid"


@pytest.mark.parametrize("mutate, status, field", [
    (lambda b: b.update(policy="fast"), 422, "policy"),
    (lambda b: b["pod"]["annotations"].update({"rlscore.io/policy": "XX"}), 422, "rlscore.io/policy"),
    (lambda b: b["pod"]["annotations"].update({"rlscore.io/latency-soft-ms": "fast"}), 422, "rlscore.io/latency-soft-ms"),
    (lambda b: b["pod"]["annotations"].update({"latencyHardConstraint": "-3"}), 422, "latencyHardConstraint"),
    (lambda b: b["pod"]["annotations"].update({"rlscore.io/latency-soft-ms": "40", "rlscore.io/latency-hard-ms": "30"}), 422, "annotations"),
    (lambda b: b["pod"]["annotations"].update({"rlscore.io/cpu-usage-ratio": "lots"}), 422, "rlscore.io/cpu-usage-ratio"),
    (lambda b: b["pod"]["annotations"].update({"rlscore.io/cpu-usage-ratio": "nan"}), 422, "rlscore.io/cpu-usage-ratio"),
    (lambda b: b["pod"]["annotations"].update({"rlscore.io/cpu-usage-ratio": "0"}), 422, "rlscore.io/cpu-usage-ratio"),
    (lambda b: b["pod"]["annotations"].update({"rlscore.io/cpu-usage-ratio": "1e9"}), 422, "rlscore.io/cpu-usage-ratio"),
    (lambda b: b["pod"].update(cpu_request_millicores=-1), 422, "cpu_request_millicores"),
    (lambda b: b["pod"].update(memory_request_bytes=1e19), 422, "memory_request_bytes"),
    (lambda b: b["nodes"][0].update(cpu_capacity_millicores=1.7e308), 422, "cpu_capacity_millicores"),
    (lambda b: b["nodes"][0].update(memory_requested_bytes=2.0**63 * 2), 422, "memory_requested_bytes"),
    (lambda b: b["nodes"][0].update(max_pods=2**63 + 1), 422, "max_pods"),
    (lambda b: b["nodes"][0].update(power_max_watts=2e9), 422, "power_max_watts"),
    (lambda b: b["nodes"][0].update(latency_ms=1e10), 422, "latency_ms"),
    (lambda b: b["pod"].pop("name"), 422, "name"),
    (lambda b: b["nodes"][0].update(cpu_utilization=1.5), 422, "cpu_utilization"),
    (lambda b: b["nodes"][0].update(memory_utilization=-0.1), 422, "memory_utilization"),
    (lambda b: b["nodes"][0].update(cpu_capacity_millicores=0), 422, "cpu_capacity_millicores"),
    (lambda b: b["nodes"][0].update(pods=-1), 422, "pods"),
    (lambda b: b["nodes"][0].update(power_idle_watts=-5), 422, "power_idle_watts"),
    (lambda b: b["nodes"][0].update(power_idle_watts=300, power_max_watts=200), 422, "power_max_watts (200.0) must not be below"),
    (lambda b: b["nodes"][0].update(disk_utilization=1.2), 422, "disk_utilization"),
    (lambda b: b["nodes"][0].update(cpu_utilization_stddev=-0.1), 422, "cpu_utilization_stddev"),
    (lambda b: b["nodes"][0].update(tcp_established=-1), 422, "tcp_established"),
    (lambda b: b["nodes"][0].update(network_receive_bytes_per_s="fast"), 422, "network_receive_bytes_per_s"),
    (lambda b: b.update(nodes=[]), 422, "nodes"),
    (lambda b: b.update(nodes=["a", ""]), 422, "name"),
    (lambda b: b.update(nodes=["a", "a"]), 422, "duplicate node name 'a'"),
    (lambda b: b.update(nodes=[1, 2]), 422, "node name or an object"),
    (lambda b: b.update(nodes=["a\u0000"]), 422, "DNS-1123"),
    (lambda b: b.update(nodes=["Worker_1"]), 422, "DNS-1123"),
    (lambda b: b.update(nodes=["-a"]), 422, "DNS-1123"),
    (lambda b: b["nodes"][0].update(name="a" * 254), 422, "name"),
    (lambda b: b["pod"].update(name="web\u0000"), 422, "DNS-1123"),
    (lambda b: b["pod"].update(name="web\u202e1"), 422, "DNS-1123"),
    (lambda b: b["pod"].update(namespace="kube.system"), 422, "namespace"),
    (lambda b: b["pod"].update(namespace="n" * 64), 422, "namespace"),
    (lambda b: b["pod"]["annotations"].update({"bad key!": "x"}), 422, "annotations"),
    (lambda b: b["pod"]["annotations"].update({"rlscore.io/policy": "EE\u0007"}), 422, "non-printable"),
    (lambda b: b["pod"]["annotations"].update({"rlscore.io/note": "x" * 5000}), 422, "annotations"),
    (lambda b: b["pod"].update(annotations={f"k{i}": "v" for i in range(65)}), 422, "annotations"),
    (lambda b: b.pop("nodes"), 422, "nodes"),
])
def test_invalid_input_is_a_4xx_naming_the_field(client, mutate, status, field):
    body = {"pod": pod(), "nodes": [node("a"), node("b")]}
    mutate(body)
    r = post(client, body)
    assert r.status_code == status, r.text
    assert field in r.text


@pytest.mark.parametrize("raw", [b"", b"{", b"[]", b"null", b'{"pod": {"name": "x"}, "nodes": ["a"], "x": NaN',
                                 b'{"pod": {"name": "x"}, "nodes": [{"name": "a", "latency_ms": NaN}]}',
                                 b'{"pod": {"name": "x"}, "nodes": [{"name": "a", "cpu_requested_millicores": Infinity}]}',
                                 "{\"pod\": {\"name\": \"\u00e9\"}, \"nodes\": [\"\u00e9\"]}".encode() + b"\xff"])
def test_malformed_bodies_are_422(client, raw):
    r = client.post("/suggest", content=raw, headers={"content-type": "application/json"})
    assert r.status_code in (400, 422) and "body" in r.text, r.text  # 400 only for bytes that are not UTF-8


def test_size_limits_are_413(make_client):
    client = make_client(max_nodes=5, max_body_bytes=4096)
    r = post(client, {"pod": pod(), "nodes": [f"n{i}" for i in range(6)]})
    assert r.status_code == 413 and "nodes" in r.text and "limit of 5" in r.text
    r = post(client, {"pod": pod({"x": "y" * 5000}), "nodes": ["a"]})
    assert r.status_code == 413 and "byte limit" in r.text


def _routes(app) -> set[tuple[str, str]]:
    """Every (method, path) the app serves, from its own router (a new endpoint cannot be missed)."""
    out = set()
    for route in app.routes:
        for method in getattr(route, "methods", None) or ():
            if method != "HEAD":
                out.add((method, route.path))
    return out


STATE_CHANGING = {("POST", "/v1/scores"), ("POST", "/suggest"), ("POST", "/models/reload"),
                  ("POST", "/v1/rollout/{policy}/candidate"), ("POST", "/v1/rollout/{policy}/promote"),
                  ("POST", "/v1/rollout/{policy}/rollback")}
READ_ONLY = {("GET", "/policies"), ("GET", "/state"), ("GET", "/metrics"), ("GET", "/v1/rollout"), ("GET", "/openapi.json"),
             ("GET", "/docs"), ("GET", "/docs/oauth2-redirect"), ("GET", "/redoc")}
PROBES = {("GET", "/healthz"), ("GET", "/readyz")}
# reads that hand out the models and the cluster's measured state: the token even with open reads
SCORING_STATE = {("GET", "/v1/node-metrics"), ("GET", "/v1/models/{policy}")}


@pytest.mark.parametrize("open_reads", [False, True])
def test_every_endpoint_with_and_without_the_token(make_client, open_reads):
    client = make_client(api_token="s3cret", open_read_endpoints=open_reads)
    routes = _routes(client.app)
    unclassified = routes - STATE_CHANGING - READ_ONLY - PROBES - SCORING_STATE
    assert not unclassified, f"classify the new endpoints {unclassified} in this test"
    body = {"pod": pod(), "nodes": [node("a")]}
    for method, path in sorted(routes):
        kwargs = {"json": body} if method == "POST" else {"params": {"node": "a"}} if path == "/state" else {}
        for headers, expect_allowed in (({}, None), ({"authorization": "Bearer nope"}, None),
                                        ({"authorization": "Bearer s3cret"}, True)):
            r = client.request(method, path, headers=headers, **kwargs)
            allowed = expect_allowed or (method, path) in PROBES or (open_reads and (method, path) in READ_ONLY)
            if allowed:
                assert r.status_code not in (401, 403), (method, path, headers, r.status_code)
            else:
                assert r.status_code == 401 and "authorization" in r.text, (method, path, headers, r.status_code)
                assert r.headers["www-authenticate"] == "Bearer"
    # without a token configured nothing asks for one, and the routes that change what serves are closed
    # unless the operator opens them
    plain = make_client()
    for path in ("/models/reload", "/v1/rollout/ee/promote"):
        r = plain.post(path)
        assert r.status_code == 403 and "RLSCORE_API_TOKEN" in r.text, (path, r.text)
    opened = make_client(allow_unauthenticated_changes=True)
    assert opened.post("/models/reload").status_code == 200
    # a cross-site form or text/plain POST (which a browser sends without asking) changes nothing
    r = client.post("/models/reload", content=b"x", headers={"authorization": "Bearer s3cret",
                                                              "content-type": "text/plain"})
    assert r.status_code == 415 and "application/json" in r.text


def test_names_without_any_state_are_answered_degraded(client):
    r = post(client, {"pod": pod(), "nodes": ["unknown-1", "unknown-2"], "policy": "EL"})
    assert r.status_code == 200
    body = r.json()
    assert body["degraded"] is True and set(body["scores"]) == {"unknown-1", "unknown-2"}
    SuggestResponse.model_validate(body)
    assert any("capacity unknown for 2 node(s)" in reason for reason in body["reasons"])
    assert any("latency unknown" in reason for reason in body["reasons"])


def test_heuristic_fallback_without_models(make_client, tmp_path):
    client = make_client(model_dir=tmp_path)
    r = post(client, {"pod": pod(), "nodes": [node("busy", cpu_req=3000, pods=9), node("empty")], "policy": "EE"})
    body = r.json()
    assert r.status_code == 200 and body["source"] == "heuristic" and body["model_version"] is None
    assert body["scores"] == {"busy": 100, "empty": 0}  # MostAllocated
    assert any("no valid EE model" in reason for reason in body["reasons"])
    statuses = {p["policy"]: p for p in client.get("/policies").json()["policies"]}
    assert statuses["EE"]["serving"] == "heuristic" and "no such model file" in statuses["EE"]["error"]
    assert "rlscore_fallbacks_total" in client.get("/metrics").text


def test_a_rule_served_as_the_model_reads_the_cpu_swing_the_request_gives(make_client, tmp_path):
    """LoadVariationRiskBalancing served (the retraining loop's fallback names it in a model file)
    weighs each node's cpu swing: of two nodes alike but for it, the steady one scores higher. The
    server dropped the field before, and both scored the same."""
    from rlscore.core.model import write_heuristic_model

    write_heuristic_model(tmp_path / "lb.safetensors", "load-variation-risk-balancing", "LB", {"note": "test"})
    client = make_client(model_dir=tmp_path)
    nodes = [node("steady", cpu_req=1000, pods=3, util=0.3, cpu_utilization_stddev=0.0),
             node("swinging", cpu_req=1000, pods=3, util=0.3, cpu_utilization_stddev=0.4)]
    body = post(client, {"pod": pod(), "nodes": nodes, "policy": "LB"}).json()
    assert body["source"] == "heuristic", body
    assert body["scores"]["steady"] > body["scores"]["swinging"], body
    assert not any("cpu swing" in reason for reason in body["reasons"]), body
    state = client.get("/state", params={"node": ["steady", "swinging"]}).json()["nodes"]
    assert [row["cpu_utilization_stddev"] for row in state] == [None, None]  # given, not measured
    # not given and not measured: scored as steady, and the reasons say so without degrading the answer
    del nodes[1]["cpu_utilization_stddev"]
    body = post(client, {"pod": pod(), "nodes": nodes, "policy": "LB"}).json()
    assert body["scores"]["steady"] == body["scores"]["swinging"], body
    swing = [reason for reason in body["reasons"] if "cpu swing" in reason]
    assert swing == ["cpu swing unknown for 1 node(s) (swinging): load-variation-risk-balancing scored as steady "
                     "(RLSCORE_CPU_STDDEV_QUERY)"], body


@pytest.mark.parametrize("rules", [("load-variation-risk-balancing", "one-step-lb"), ("load-variation-risk-balancing",),
                                   ("one-step-lb",), ("headroom-balance", "one-step-lb"), ("headroom-balance",)])
def test_a_rule_selector_answers_with_the_rule_it_picks(make_client, tmp_path, rules):
    """A rule selector's answer is its picked rule's own scores; the source is the model, the metrics
    count the rule, the plugin gets its weights, and a picked rule that reads the cpu swing says
    where it was unknown, as a rule served alone does."""
    import numpy as np
    import torch

    from rlscore.core.rules import RULES
    from rlscore.core.model import load_model
    from agent.learn.model_io import save_model
    from agent.learn.network import RuleSelector
    from rlscore.core.scoring import to_node_scores
    from rlscore.core.state import NodeState, PodRequest

    torch.manual_seed(0)
    path = save_model(tmp_path / "lb.safetensors", RuleSelector(rules, (8, 8)), "LB", {"note": "test"})
    selector = load_model(path)
    client = make_client(model_dir=tmp_path)
    nodes = [node("a", cpu_req=1000, pods=3, util=0.5, cpu_utilization_stddev=0.3),
             node("b", cpu_req=2000, pods=6, util=0.2), node("c")]
    body = post(client, {"pod": pod(), "nodes": nodes, "policy": "LB"}).json()
    assert body["source"] == "model" and body["model_version"] == selector.version, body
    state = NodeState(names=["a", "b", "c"], cpu_capacity=np.full(3, 4000.0), memory_capacity=np.full(3, 8000.0 * MIB),
                      max_pods=np.full(3, 110.0), cpu_requested=np.array([1000.0, 2000.0, 0.0]),
                      memory_requested=np.array([2000.0, 4000.0, 0.0]) * MIB, pods=np.array([3.0, 6.0, 0.0]),
                      cpu_utilization=np.array([0.5, 0.2, 0.0]), memory_utilization=np.array([0.125, 0.25, 0.0]),
                      power_idle_watts=np.full(3, 48.0), power_max_watts=np.full(3, 120.0),
                      network_receive_bytes_per_s=np.array([1e6, 2e6, 0.0]), tcp_established=np.array([25.0, 40.0, 10.0]),
                      disk_utilization=np.full(3, 0.3), cpu_utilization_stddev=np.array([0.3, np.nan, np.nan]),
                      cpu_requested_since_metrics=np.zeros(3))
    request = PodRequest(250, 64 * MIB)
    rule = selector.rule_for(state, request)
    assert body["scores"] == dict(zip("abc", to_node_scores(RULES[rule](state, request, None)).tolist())), body
    swing = [reason for reason in body["reasons"] if "cpu swing" in reason]
    assert swing == ([f"cpu swing unknown for 2 node(s) (b, c): {rule} scored as steady (RLSCORE_CPU_STDDEV_QUERY)"]
                     if rule == "load-variation-risk-balancing" else []), body
    assert f'rlscore_selector_rules_total{{policy="LB",rule="{rule}"}}' in client.get("/metrics").text
    weights = client.get("/v1/models/LB").json()
    assert weights["format"] == "rlscore-rule-selector-weights" and weights["rules"] == list(selector.rules)


def test_health_readiness_metrics_and_openapi(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    r = client.get("/readyz")
    assert r.status_code == 503 and r.json()["models_loaded"] is True  # no snapshot attempted yet
    import asyncio
    asyncio.run(client.app.state.services.collector.refresh())
    assert client.get("/readyz").status_code == 200
    post(client, {"pod": pod(), "nodes": [node("a")], "policy": "LB"})
    text = client.get("/metrics").text
    assert 'rlscore_suggest_requests_total{policy="LB",source="model"}' in text
    assert "rlscore_suggest_duration_seconds_bucket" in text and "rlscore_model_info" in text
    schema = client.get("/openapi.json").json()
    assert "/suggest" in schema["paths"] and "SuggestRequest" in json.dumps(schema)
    assert client.get("/docs").status_code == 200


def test_scales_to_many_nodes(client):
    nodes = [node(f"n{i}", cpu_req=(i % 7) * 500, pods=i % 7, latency=float(i % 50)) for i in range(2000)]
    r = post(client, {"pod": pod(memory=MIB), "nodes": nodes, "policy": "EL"})
    assert r.status_code == 200 and len(r.json()["scores"]) == 2000


def test_latency_limits_are_validated_for_every_policy_but_only_el_uses_them(client):
    nodes = [node("a", cpu_req=1000, pods=2, latency=50.0), node("b", latency=5.0)]
    limits = {"rlscore.io/latency-soft-ms": "20", "rlscore.io/latency-hard-ms": "30"}
    with_limits = post(client, {"pod": pod(limits), "nodes": nodes, "policy": "LB"}).json()
    without = post(client, {"pod": pod(), "nodes": nodes, "policy": "LB"}).json()
    assert with_limits["scores"] == without["scores"]
    bad = post(client, {"pod": pod({"rlscore.io/latency-soft-ms": "soon"}), "nodes": nodes, "policy": "EE"})
    assert bad.status_code == 422


def test_unknown_power_and_extra_metrics_are_reported_without_degrading(client):
    bare = [{k: v for k, v in node(name, cpu_req=1000.0 * i, pods=i).items()
             if k not in ("power_idle_watts", "power_max_watts", "network_receive_bytes_per_s", "tcp_established",
                          "disk_utilization")} for i, name in enumerate(("a", "b"))]
    body = post(client, {"pod": pod(), "nodes": bare, "policy": "EE"}).json()
    assert body["degraded"] is False
    assert any("power model unknown for 2 node(s)" in r for r in body["reasons"])
    assert any("network/tcp/disk metrics unknown for 2 node(s)" in r for r in body["reasons"])
    # LB has no use for power: not mentioned
    body = post(client, {"pod": pod(), "nodes": bare, "policy": "LB"}).json()
    assert not any("power" in r for r in body["reasons"])
    # a power model given in the request is used as given
    full = post(client, {"pod": pod(), "nodes": [node("a"), node("b")], "policy": "EE"}).json()
    assert full["reasons"] == []


def test_state_shows_what_the_server_would_score_with(client):
    r = client.get("/state")
    assert r.status_code == 422 and "node" in r.text
    assert client.get("/state", params={"node": ["a", "a"]}).status_code == 422
    r = client.get("/state", params={"node": ["w1", "w2"]})
    assert r.status_code == 200
    body = r.json()
    assert [row["name"] for row in body["nodes"]] == ["w1", "w2"]
    assert body["nodes"][0]["power_idle_watts"] is None  # nothing known: no Kubernetes, no Prometheus
    assert any("capacity unknown for 2 node(s)" in reason for reason in body["reasons"])


def test_validation_errors_locate_the_field_under_body_and_never_echo_the_input(client):
    body = {"pod": pod(), "nodes": [node("a"), node("b")]}
    body["nodes"][1]["cpu_utilization"] = 1.25
    r = post(client, body)
    assert r.status_code == 422, r.text
    (error,) = r.json()["detail"]
    assert error["loc"][:3] == ["body", "nodes", 1] and error["loc"][-1] == "cpu_utilization", error
    assert "1.25" not in r.text and set(error) == {"loc", "msg", "type"}
    r = client.post("/v1/scores", content=b'{"pod":{"name":"Bad_Name"}}\na',
                    headers={"content-type": "application/x-rlscore-names"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][:3] == ["body", "header", "pod"], r.text


def test_the_scoring_endpoints_answer_only_post(client):
    # DirectDispatch takes POST /suggest and /v1/scores before the router; anything else still
    # goes through FastAPI's routing
    assert client.get("/suggest").status_code == 405
    assert client.get("/v1/scores").status_code == 405


def test_the_clusters_cpu_requests_now_and_at_their_recent_peak_once_the_watch_reported_pods(client):
    """What /v1/node-metrics hands the in-process scorer and what /suggest scores with (/state)."""
    def sums():
        metrics = client.get("/v1/node-metrics").json()
        state = client.get("/state", params={"node": ["a"]}).json()
        pair = metrics["cluster_cpu_requested_millicores"], metrics["recent_peak_cpu_requested_millicores"]
        assert pair == (state["cluster_cpu_requested_millicores"], state["recent_peak_cpu_requested_millicores"])
        return pair

    assert sums() == (None, None)
    table = client.app.state.services.table
    table.replace_usage({"a": (1000.0, 0.0, 1.0)})
    table.add_usage("b", 3000.0, 0.0, 1.0)
    table.add_usage("b", -3000.0, 0.0, -1.0)
    assert sums() == (1000.0, 4000.0)


def test_the_workloads_usage_ratio_reaches_the_scorer_for_every_policy():
    from suggestion_server.http.schemas import PodIn
    from suggestion_server.pods import pod_request

    annotated = PodIn.model_validate(pod({"rlscore.io/cpu-usage-ratio": " 2.5 "}))
    for policy in ("EE", "LB", "EL"):
        assert pod_request(annotated, policy, (20.0, 30.0)).cpu_usage_ratio == 2.5
    assert pod_request(PodIn.model_validate(pod()), "LB", None).cpu_usage_ratio is None


def test_a_served_headroom_informed_keeps_room_for_what_the_annotated_workload_uses(tmp_path, make_client):
    """LB served by the rule headroom-informed (a model file that names it): the annotation moves the
    pick, through the whole request path."""
    from rlscore.core.model import write_heuristic_model

    write_heuristic_model(tmp_path / "lb.safetensors", "headroom-informed", "LB", {"note": "test"})
    client = make_client(model_dir=tmp_path)
    nodes = [node("a", cpu_req=2000, util=0.1), node("b", cpu_req=1000, util=0.2), node("c", util=0.6)]
    picks = {}
    for ratio in (None, "0.3", "3.5"):
        annotations = {"rlscore.io/cpu-usage-ratio": ratio} if ratio else {}
        body = post(client, {"pod": pod(annotations, cpu=500), "nodes": nodes, "policy": "LB"}).json()
        assert body["source"] == "heuristic" and body["degraded"] is False, body
        # the answer says when the rule could not see what the workload uses
        assert ("the pod has no rlscore.io/cpu-usage-ratio: headroom-informed scored it as headroom-balance"
                in body["reasons"]) == (ratio is None), body
        picks[ratio] = [name for name, score in body["scores"].items() if score == 100]
    # unknown: room for a 3x burst on a and b, b has fewer requests; an idle workload fits on c with the
    # fewest requests; a known hog has room only on the least loaded node
    assert picks == {None: ["b"], "0.3": ["c"], "3.5": ["a"]}
