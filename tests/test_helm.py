"""The Helm chart: lints, renders, and installs what the kustomize overlays install (with TLS on, what
overlays/tls installs), locked down the same way."""

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.test_deploy import render

ROOT = Path(__file__).resolve().parent.parent
HELM = ROOT / "bin" / "helm"
CHART = ROOT / "deploy" / "helm" / "rlscore"


def helm(*args: str) -> str:
    if not HELM.exists():
        pytest.fail(f"{HELM} missing: run `make bin/helm` (make py-test builds it)")
    r = subprocess.run([str(HELM), *args], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout


def template(*sets: str) -> list[dict]:
    args = ["template", "rlscore", str(CHART), "--namespace", "rlscore-system", "--kube-version", "v1.35.4"]
    for s in sets:
        args += ["--set", s]
    return [doc for doc in yaml.safe_load_all(helm(*args)) if doc]


def _by_key(objects: list[dict]) -> dict:
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


RETRAINING = ("retraining.enabled=true", "server.apiTokenSecret=rlscore-api-token")


@pytest.mark.parametrize("sets", [(), ("tls.enabled=true",), (*RETRAINING, "retraining.ray.enabled=true"),
                                  ("tls.enabled=true", "tls.certManager=true"),
                                  ("prometheus.enabled=false", "prometheusURL=http://prom:9090",
                                   "nodeExporter.enabled=false", "server.replicas=1")])
def test_chart_lints(sets):
    args = ["lint", str(CHART), "--strict"]
    for s in sets:
        args += ["--set", s]
    assert "0 chart(s) failed" in helm(*args)


@pytest.mark.parametrize("overlay, sets", [("cluster", ()), ("tls", ("tls.enabled=true",)),
                                          ("retraining", RETRAINING),
                                          ("ray", (*RETRAINING, "retraining.ray.enabled=true"))])
def test_chart_installs_what_the_overlay_installs(overlay, sets):
    chart = _by_key(template(*sets))
    kustomized = _by_key(_without_hash_suffixes([o for o in render(ROOT / "deploy" / "overlays" / overlay)
                                                 if o["kind"] != "Namespace"]))
    assert set(chart) == set(kustomized)
    for key, expected in kustomized.items():
        got = chart[key]
        if key[0] in ("Deployment", "DaemonSet"):
            want_spec, got_spec = expected["spec"]["template"]["spec"], got["spec"]["template"]["spec"]
            for field in ("replicas", "strategy"):
                assert got["spec"].get(field) == expected["spec"].get(field), (key, field)
            for field in ("serviceAccountName", "securityContext", "priorityClassName", "affinity",
                          "topologySpreadConstraints", "tolerations", "hostNetwork", "volumes"):
                assert _named(got_spec.get(field)) == _named(want_spec.get(field)), (key, field)
            for want_c, got_c in zip(want_spec.get("initContainers", []) + want_spec["containers"],
                                     got_spec.get("initContainers", []) + got_spec["containers"], strict=True):
                for field in ("image", "args", "ports", "resources", "securityContext", "readinessProbe",
                              "livenessProbe", "volumeMounts", "envFrom"):
                    assert _named(got_c.get(field)) == _named(want_c.get(field)), (key, want_c["name"], field)
                assert {e["name"]: e.get("value") for e in got_c.get("env", [])} == \
                    {e["name"]: e.get("value") for e in want_c.get("env", [])}, key
        elif key[0] in ("PodDisruptionBudget", "NetworkPolicy", "Service", "ClusterRole", "Role",
                        "PersistentVolumeClaim"):
            assert got.get("spec", got.get("rules")) == expected.get("spec", expected.get("rules")), key
        elif key[0] in ("ClusterRoleBinding", "RoleBinding"):
            assert (got["roleRef"], got["subjects"]) == (expected["roleRef"], expected["subjects"]), key
        elif key[0] == "ServiceAccount":
            assert got.get("automountServiceAccountToken") == expected.get("automountServiceAccountToken"), key
        elif key[0] == "CronJob":
            want_job, got_job = expected["spec"]["jobTemplate"]["spec"], got["spec"]["jobTemplate"]["spec"]
            for c in want_job["template"]["spec"]["containers"] + got_job["template"]["spec"]["containers"]:
                c.pop("imagePullPolicy", None)  # the chart says the default explicitly
                c["args"] = sorted(c["args"])  # the overlay's patch appends; the chart lists them in place
            assert (got["spec"]["schedule"], got_job) == (expected["spec"]["schedule"], want_job), key
        elif key[0] == "RayCluster":
            groups = [got["spec"]["headGroupSpec"], *got["spec"]["workerGroupSpecs"]]
            for c in (c for g in groups for c in g["template"]["spec"]["containers"]):
                c.pop("imagePullPolicy")  # the chart says the default explicitly
            assert got["spec"] == expected["spec"], key
        elif key == ("ConfigMap", "rl-scheduler-config"):
            want_cfg = yaml.safe_load(expected["data"]["scheduler-config.yaml"])
            got_cfg = yaml.safe_load(got["data"]["scheduler-config.yaml"])
            got_cfg["profiles"][0]["pluginConfig"][0]["args"].pop("wireFormat")  # the default, said explicitly
            assert got_cfg == want_cfg
        elif key[0] == "ConfigMap":
            assert got["data"] == expected["data"], key


def _named(value):
    """Volumes and mounts in name order: kustomize's patches merge them in an order of their own."""
    if isinstance(value, list) and value and all(isinstance(v, dict) and "name" in v for v in value):
        return sorted(value, key=lambda v: v["name"])
    return value


def _without_hash_suffixes(objects: list[dict]) -> list[dict]:
    """kustomize appends a content hash to generated ConfigMap names; the chart's names are plain."""
    renames = {o["metadata"]["name"]: o["metadata"]["name"].rsplit("-", 1)[0] for o in objects
               if o["kind"] == "ConfigMap" and re.fullmatch(r".+-[a-z0-9]{10}", o["metadata"]["name"])}

    def rename(value):
        if isinstance(value, dict):
            return {k: rename(v) for k, v in value.items()}
        if isinstance(value, list):
            return [rename(v) for v in value]
        return renames.get(value, value) if isinstance(value, str) else value
    return [rename(o) for o in objects]


def test_chart_copies_of_kustomize_files_are_in_sync():
    assert (CHART / "files" / "prometheus.yml").read_text() == (ROOT / "deploy" / "base" / "prometheus.yml").read_text()


def test_token_secret_is_wired_to_both_sides():
    objects = _by_key(template("server.apiTokenSecret=rlscore-api-token"))
    server = objects[("Deployment", "rlscore-suggestion-server")]["spec"]["template"]["spec"]["containers"][0]
    token_env = next(e for e in server["env"] if e["name"] == "RLSCORE_API_TOKEN")
    assert token_env["valueFrom"]["secretKeyRef"] == {"name": "rlscore-api-token", "key": "token"}
    cfg = yaml.safe_load(objects[("ConfigMap", "rl-scheduler-config")]["data"]["scheduler-config.yaml"])
    token_file = cfg["profiles"][0]["pluginConfig"][0]["args"]["bearerTokenFile"]
    scheduler = objects[("Deployment", "rl-scheduler")]["spec"]["template"]["spec"]
    mount = next(m for m in scheduler["containers"][0]["volumeMounts"] if m["name"] == "token")
    assert token_file == mount["mountPath"] + "/token"


def _server_pod(objects: dict) -> dict:
    return objects[("Deployment", "rlscore-suggestion-server")]["spec"]["template"]["spec"]


@pytest.mark.parametrize("sets, env", [
    ((), {}),
    (("prometheusTLS.caConfigMap=prom-ca", "prometheusTLS.caKey=root.pem"),
     {"RLSCORE_PROMETHEUS_CA_FILE": "/etc/rlscore/prometheus-ca/ca.crt"}),
    (("prometheusTLS.insecureSkipVerify=true",), {"RLSCORE_PROMETHEUS_INSECURE_SKIP_VERIFY": "true"}),
])
def test_an_https_prometheus_ca_reaches_the_server(sets, env):
    pod = _server_pod(_by_key(template("prometheus.enabled=false", "prometheusURL=https://prom:9090", *sets)))
    server = pod["containers"][0]
    got = {e["name"]: e.get("value") for e in server["env"] if e["name"].startswith("RLSCORE_PROMETHEUS_")}
    assert got == {"RLSCORE_PROMETHEUS_URL": "https://prom:9090", **env}
    if "RLSCORE_PROMETHEUS_CA_FILE" in env:
        mount = next(m for m in server["volumeMounts"] if m["name"] == "prometheus-ca")
        volume = next(v for v in pod["volumes"] if v["name"] == "prometheus-ca")
        assert volume["configMap"] == {"name": "prom-ca", "items": [{"key": "root.pem", "path": "ca.crt"}]}
        assert env["RLSCORE_PROMETHEUS_CA_FILE"] == mount["mountPath"] + "/ca.crt"


def test_the_chart_refuses_both_a_prometheus_ca_and_skipping_verification():
    args = ["template", "rlscore", str(CHART), "--kube-version", "v1.35.4",
            "--set", "prometheusTLS.caConfigMap=prom-ca", "--set", "prometheusTLS.insecureSkipVerify=true"]
    r = subprocess.run([str(HELM), *args], capture_output=True, text=True)
    assert r.returncode != 0 and "not both" in r.stderr


def test_images_come_from_the_registry_make_images_pushed_to():
    """`--set images.registry=` moves all three of rlscore's images, with the names and tags `make images`
    gives them; third-party images stay where they are."""
    makefile = (ROOT / "Makefile").read_text()
    built = subprocess.run(["make", "-s", "--no-print-directory", "print-images", "REGISTRY=reg.example.com/rl"],
                           cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    assert "print-images" in makefile and len(built) == 3
    images = {c["image"] for o in template("images.registry=reg.example.com/rl/")
              if o["kind"] in ("Deployment", "DaemonSet")
              for c in o["spec"]["template"]["spec"]["containers"]}
    ours = {i for i in images if i.startswith("reg.example.com/rl/")}
    assert ours == set(built)
    assert all(i.startswith("quay.io/prometheus/") for i in images - ours)


@pytest.mark.parametrize("sets, message", [
    (("retraining.enabled=true",), "retraining.enabled: set server.apiTokenSecret too"),
    (("retraining.ray.enabled=true",), "retraining.ray.enabled: the Ray cluster runs the retraining job's work"),
    ((*RETRAINING, "retraining.policy=XX"), 'retraining.policy: "XX" is not one of EE, LB, EL'),
])
def test_the_chart_refuses_retraining_it_cannot_run(sets, message):
    args = ["template", "rlscore", str(CHART), "--kube-version", "v1.35.4"]
    for s in sets:
        args += ["--set", s]
    r = subprocess.run([str(HELM), *args], capture_output=True, text=True)
    assert r.returncode != 0 and message in r.stderr, r.stderr


def test_retraining_for_another_policy_starts_from_that_policys_shipped_model():
    objects = _by_key(template(*RETRAINING, "retraining.policy=lb"))
    job = objects[("CronJob", "rlscore-retrain")]["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    args = job["containers"][0]["args"]
    assert "--policy=LB" in args and "--start-from=/opt/rlscore/models/lb.safetensors" in args
    assert not any(a.startswith("--ray-address") for a in args)
    assert ("RayCluster", "rlscore-ray") not in objects
