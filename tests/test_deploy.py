"""Static checks of deploy/: every overlay renders, and every container runs locked down."""

import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
KUBECTL = ROOT / "bin" / "kubectl"
OVERLAYS = sorted(p.parent for p in (ROOT / "deploy" / "overlays").glob("*/kustomization.yaml"))


def render(overlay: Path) -> list[dict]:
    if not KUBECTL.exists():
        pytest.fail(f"{KUBECTL} missing: run `make local-bin` (make py-test builds it)")
    out = subprocess.run([str(KUBECTL), "kustomize", str(overlay)], capture_output=True, text=True, check=True)
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def pod_specs(objects: list[dict]):
    for obj in objects:
        if obj["kind"] in ("Deployment", "DaemonSet", "StatefulSet", "Job"):
            yield obj, obj["spec"]["template"]["spec"]
        elif obj["kind"] == "CronJob":
            yield obj, obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        elif obj["kind"] == "RayCluster":
            yield obj, obj["spec"]["headGroupSpec"]["template"]["spec"]
            for group in obj["spec"]["workerGroupSpecs"]:
                yield obj, group["template"]["spec"]


def test_overlays_exist():
    assert {p.name for p in OVERLAYS} >= {"kind", "cluster"}


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.name)
def test_every_container_is_locked_down_and_pinned(overlay):
    objects = render(overlay)
    kinds = {o["kind"] for o in objects}
    assert {"Namespace", "Deployment", "DaemonSet", "Service", "NetworkPolicy", "ConfigMap"} <= kinds
    checked = 0
    for obj, spec in pod_specs(objects):
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        assert obj["metadata"]["namespace"] == "rlscore-system", where
        pod_ctx = spec.get("securityContext", {})
        for c in spec.get("initContainers", []) + spec["containers"]:
            ctx = c.get("securityContext", {})
            name = f"{where} container {c['name']}"
            assert ctx.get("runAsNonRoot", pod_ctx.get("runAsNonRoot")) is True, name
            assert ctx.get("allowPrivilegeEscalation") is False, name
            assert ctx.get("readOnlyRootFilesystem") is True, name
            assert "ALL" in ctx.get("capabilities", {}).get("drop", []), name
            image = c["image"]
            assert ":" in image.rsplit("/", 1)[-1] and not image.endswith(":latest"), f"{name}: {image}"
            assert "limits" in c.get("resources", {}) and "requests" in c["resources"], name
            checked += 1
    assert checked >= 5


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.name)
def test_scheduling_path_survives_drains_and_node_loss(overlay):
    objects = render(overlay)
    budgets = {o["metadata"]["name"]: o["spec"] for o in objects if o["kind"] == "PodDisruptionBudget"}
    deployments = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Deployment"}
    for name in ("rlscore-suggestion-server", "rl-scheduler"):
        spec = deployments[name]["spec"]["template"]["spec"]
        labels = deployments[name]["spec"]["selector"]["matchLabels"]
        assert budgets[name]["selector"]["matchLabels"] == labels, name
        assert spec["priorityClassName"] == "system-cluster-critical", name
        anti = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
        assert anti["podAffinityTerm"]["labelSelector"]["matchLabels"] == labels, name
    server = deployments["rlscore-suggestion-server"]
    budget = budgets["rlscore-suggestion-server"]
    if server["spec"]["replicas"] > 1:  # one always serves during a drain
        assert budget["minAvailable"] == 1
    else:  # one replica (kind): a budget must not block every drain
        assert budget.get("maxUnavailable") == 1 and "minAvailable" not in budget
    spread = server["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert {c["topologyKey"] for c in spread} == {"kubernetes.io/hostname", "topology.kubernetes.io/zone"}


def test_scheduler_uses_the_generated_config_and_the_server_service():
    objects = render(ROOT / "deploy" / "overlays" / "kind")
    config_maps = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ConfigMap"}
    scheduler = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "rl-scheduler")
    volume = scheduler["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"]
    config = yaml.safe_load(config_maps[volume]["data"]["scheduler-config.yaml"])
    assert config["profiles"][0]["schedulerName"] == "rl-scheduler"
    args = config["profiles"][0]["pluginConfig"][0]["args"]
    services = {o["metadata"]["name"] for o in objects if o["kind"] == "Service"}
    host = args["suggestionURL"].split("//")[1].split(".")[0]
    assert host in services


def test_kind_targets_fail_early_and_clearly_without_a_docker_engine():
    import shutil
    if shutil.which("docker") and subprocess.run(["docker", "info"], capture_output=True).returncode == 0:
        pytest.skip("a Docker engine is running here: make kind-up would really run")
    r = subprocess.run(["make", "-s", "kind-up"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "Docker" in r.stdout + r.stderr and "make local-up" in r.stdout + r.stderr
    assert "kind create cluster" not in r.stdout  # stopped before doing anything


def test_tls_overlay_serves_https_and_the_scheduler_trusts_only_the_ca():
    objects = render(ROOT / "deploy" / "overlays" / "tls")
    deployments = {o["metadata"]["name"]: o["spec"]["template"]["spec"] for o in objects if o["kind"] == "Deployment"}
    server = deployments["rlscore-suggestion-server"]
    container = server["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    secrets = {v["name"]: v["secret"] for v in server["volumes"] if "secret" in v}
    assert env["RLSCORE_TLS_CERT_FILE"] == mounts["tls"] + "/tls.crt"
    assert env["RLSCORE_TLS_KEY_FILE"] == mounts["tls"] + "/tls.key"
    assert secrets["tls"]["secretName"] == "rlscore-suggestion-server-tls"
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert container["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"

    scheduler = deployments["rl-scheduler"]
    ca_volume = next(v for v in scheduler["volumes"] if v["name"] == "server-ca")["secret"]
    assert ca_volume["secretName"] == "rlscore-suggestion-server-tls"
    assert [item["key"] for item in ca_volume["items"]] == ["ca.crt"]  # never the server's key
    ca_mount = next(m for m in scheduler["containers"][0]["volumeMounts"] if m["name"] == "server-ca")["mountPath"]
    config_maps = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ConfigMap"}
    volume = next(v for v in scheduler["volumes"] if "configMap" in v)["configMap"]["name"]
    args = yaml.safe_load(config_maps[volume]["data"]["scheduler-config.yaml"])["profiles"][0]["pluginConfig"][0]["args"]
    assert args["suggestionURL"].startswith("https://") and args["tlsCAFile"] == ca_mount + "/ca.crt"

    # cert-manager issues that Secret for exactly the host the scheduler connects to
    issued = [d for d in yaml.safe_load_all((ROOT / "deploy" / "tls" / "cert-manager.yaml").read_text())
              if d["kind"] == "Certificate" and d["spec"]["secretName"] == "rlscore-suggestion-server-tls"]
    host = args["suggestionURL"].split("//")[1].split(":")[0].split("/")[0]
    assert len(issued) == 1 and host in issued[0]["spec"]["dnsNames"]


def test_self_signed_script_makes_a_certificate_the_server_serves_for_its_service_name(tmp_path):
    import os
    import socket
    import ssl
    import sys

    from tests.helpers.processes import free_port, wait_for

    subprocess.run([str(ROOT / "deploy" / "tls" / "self-signed.sh"), "--dir", str(tmp_path), "--days", "2"],
                   check=True, capture_output=True)
    port = free_port()
    env = {**os.environ, "RLSCORE_MODEL_DIR": str(ROOT / "models"), "RLSCORE_KUBERNETES": "off",
           "RLSCORE_TLS_CERT_FILE": str(tmp_path / "tls.crt"), "RLSCORE_TLS_KEY_FILE": str(tmp_path / "tls.key")}
    proc = subprocess.Popen([str(Path(sys.executable).parent / "rlscore-server"), "--host", "127.0.0.1",
                             "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    context = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))

    def handshake(name: str) -> bool:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as raw:
            with context.wrap_socket(raw, server_hostname=name) as tls:
                return tls.version() is not None

    try:
        wait_for(lambda: handshake("rlscore-suggestion-server.rlscore-system.svc"), 60, "TLS server up")
        with pytest.raises(ssl.SSLCertVerificationError):
            handshake("somewhere-else.example")
    finally:
        proc.terminate()
        proc.wait(10)


def test_retraining_overlay_shares_the_models_and_needs_only_node_reads():
    objects = render(ROOT / "deploy" / "overlays" / "retraining")
    by = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    job = by[("CronJob", "rlscore-retrain")]["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    server = by[("Deployment", "rlscore-suggestion-server")]["spec"]["template"]["spec"]
    container = job["containers"][0]
    assert container["command"] == ["rlscore-retrain"]
    args = dict(a.removeprefix("--").split("=", 1) for a in container["args"])
    assert args["model-dir"] == "/var/lib/rlscore/models" and args["token-file"] == "/etc/rlscore/token/token"
    # the job runs the training image (the server's has no torch), whose shipped models are starting
    # points too: where the image puts them, under no volume
    assert container["image"] == "rlscore/trainer:0.1.0"
    containerfile = (ROOT / "deploy" / "images" / "trainer.Containerfile").read_text()
    assert "'rlscore[train,distributed]'" in containerfile
    assert "models/ee.safetensors" in containerfile and "/opt/rlscore/models/" in containerfile
    assert args["start-from"] == "/opt/rlscore/models/ee.safetensors"
    assert not any(args["start-from"].startswith(m["mountPath"]) for m in container["volumeMounts"])
    # one volume: the job writes candidates where the server looks for them
    claim = {v["name"]: v.get("persistentVolumeClaim", {}).get("claimName") for v in job["volumes"]}
    assert claim["models"] == "rlscore-models"
    assert {v["name"]: v.get("persistentVolumeClaim", {}).get("claimName") for v in server["volumes"]}["models"] \
        == "rlscore-models"
    env = {e["name"]: e for e in server["containers"][0]["env"]}
    assert env["RLSCORE_MODEL_DIR"]["value"] == args["model-dir"]
    assert env["RLSCORE_API_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "rlscore-api-token"
    # least privilege: the job's account reads nodes, nothing else
    role = by[("ClusterRole", "rlscore:retrain")]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}]
    binding = by[("ClusterRoleBinding", "rlscore:retrain")]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "rlscore-retrain", "namespace": "rlscore-system"}]
    assert job["serviceAccountName"] == "rlscore-retrain"
    # the scheduler sends the token the server now requires; the job may reach the server
    config = yaml.safe_load(by[("ConfigMap", next(n for k, n in by if k == "ConfigMap" and n.startswith("rl-scheduler-config")))]
                            ["data"]["scheduler-config.yaml"])
    assert config["profiles"][0]["pluginConfig"][0]["args"]["bearerTokenFile"] == "/etc/rlscore/token/token"
    # on drift the server may make a Job from that one CronJob, nothing more
    assert env["RLSCORE_DRIFT_RETRAIN_CRONJOB"]["value"] == "rlscore-system/rlscore-retrain"
    assert by[("Role", "rlscore:suggestion-server-retrain")]["rules"] == [
        {"apiGroups": ["batch"], "resources": ["cronjobs"], "resourceNames": ["rlscore-retrain"], "verbs": ["get"]},
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create"]}]
    policy = by[("NetworkPolicy", "rlscore-suggestion-server")]["spec"]["ingress"][0]["from"]
    assert {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "rlscore-retrain"}}} in policy


def test_ray_overlay_runs_retraining_on_a_ray_cluster_of_the_training_image():
    """overlays/ray: the CronJob of overlays/retraining connects to the RayCluster's head with the Ray
    client; the Ray pods run the training image, need no Kubernetes API, and take connections only
    from each other and from that job. (The e2e test tests/e2e/test_ray_cluster.py has a real
    kube-apiserver with KubeRay's CRD accept the RayCluster.)"""
    objects = render(ROOT / "deploy" / "overlays" / "ray")
    by = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    ray_cluster = by[("RayCluster", "rlscore-ray")]
    job = by[("CronJob", "rlscore-retrain")]["spec"]["jobTemplate"]["spec"]["template"]
    args = job["spec"]["containers"][0]["args"]
    assert f"--ray-address=ray://{ray_cluster['metadata']['name']}-head-svc.rlscore-system.svc:10001" in args
    assert "--actors=2" in args
    specs = [ray_cluster["spec"]["headGroupSpec"]["template"]["spec"],
             *(g["template"]["spec"] for g in ray_cluster["spec"]["workerGroupSpecs"])]
    for spec in specs:
        assert spec["containers"][0]["image"] == job["spec"]["containers"][0]["image"] == "rlscore/trainer:0.1.0"
        assert spec["automountServiceAccountToken"] is False and spec["serviceAccountName"] == "rlscore-ray"
        assert {m["mountPath"] for m in spec["containers"][0]["volumeMounts"]} == {"/tmp", "/dev/shm"}
    # no Role or binding names the Ray account
    for obj in objects:
        if obj["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            assert all(s.get("name") != "rlscore-ray" for s in obj.get("subjects", [])), obj["metadata"]["name"]
    policy = by[("NetworkPolicy", "rlscore-ray")]["spec"]
    client = next(rule for rule in policy["ingress"] if rule.get("ports"))
    assert client["from"] == [{"podSelector": {"matchLabels": {"rlscore.io/ray-client": "true"}}}]
    assert job["metadata"]["labels"]["rlscore.io/ray-client"] == "true"
    # the Ray version the pods start is the one the image installs (pyproject's distributed extra)
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert '"ray>=2.9"' in pyproject and ray_cluster["spec"]["rayVersion"].startswith("2.")
