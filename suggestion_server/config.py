"""Server settings, from RLSCORE_* environment variables (or a .env file) via pydantic-settings."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from rlscore.core import node_metrics
from rlscore.core.state import normalize_policy


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RLSCORE_", env_file=".env", extra="ignore")

    # Policies and models
    model_dir: Path = Field(Path("models"), description="directory holding ee.safetensors, lb.safetensors, el.safetensors")
    default_policy: str = Field("EE", description="policy when neither the request nor the pod names one")
    model_watch_interval_s: float = Field(5.0, ge=0, description="how often model files are checked for changes (0: never)")
    el_default_soft_ms: float | None = Field(
        None, gt=0, description="EL: the soft latency limit (ms) of pods without annotations; unset: such pods have "
                                "no limit (set both or neither)")
    el_default_hard_ms: float | None = Field(None, gt=0, description="EL: the hard limit (ms) of pods without annotations")

    # Staged rollout of retrained models (suggestion_server/lifecycle/rollout.py)
    candidate_dir: Path | None = Field(
        None, description="where retrained candidates (<policy>.safetensors + sidecar with a gate verdict) arrive; "
                          "default <model_dir>/candidates")
    canary_share: float = Field(0.1, gt=0, le=1, description="share of pods the candidate decides for in canary")
    rollout_auto: bool = Field(True, description="advance (or roll back) stages by themselves after enough requests")
    shadow_decisions: int = Field(200, ge=1, description="compared requests before shadow -> canary")
    canary_decisions: int = Field(500, ge=1, description="compared requests before canary -> serving")
    rollout_tolerance: float = Field(
        0.0, ge=0, le=1, description="auto-advance while the candidate's mean placement cost is at most "
                                     "serving's x (1 + this); above it the candidate is rolled back")

    # Drift (suggestion_server/lifecycle/drift.py)
    drift_profile: Path | None = Field(
        None, description="reference cluster profile for models without a training profile in their sidecar")
    drift_interval_s: float = Field(15.0, gt=0, description="how often drift is checked")
    drift_window: int = Field(500, ge=10, description="recent pods whose cpu requests are compared")
    drift_confirmations: int = Field(2, ge=1, description="checks in a row a signal must be over its threshold")
    drift_retrain_command: str | None = Field(
        None, description="run on drift (split like a shell, no shell), with RLSCORE_DRIFT_POLICY and "
                          "RLSCORE_DRIFT_REASON set, e.g. 'make retrain' or 'kubectl create job --from=...'")
    drift_retrain_cronjob: str | None = Field(
        None, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
        description="namespace/name of the retraining CronJob: on drift a Job is made from it (needs RBAC: get "
                    "cronjobs, create jobs); wins over the command")
    drift_retrain_cooldown_s: float = Field(3600.0, ge=0, description="at most one retraining per policy per this")
    usage_onset_s: float = Field(
        30.0, ge=0, le=3600, description="from a pod's binding until its cpu shows in cpu_query (the default "
                                         "query's irate needs two scrapes: 2 x Prometheus' default 15 s); a "
                                         "calibrated profile's usageOnsetSeconds")
    usage_linger_s: float = Field(
        15.0, ge=0, le=3600, description="how long a gone pod's cpu still shows in cpu_query; a calibrated "
                                         "profile's usageLingerSeconds")

    # Request limits
    max_nodes: int = Field(25_000, ge=1, description="more nodes in one request is a 413")
    max_body_bytes: int = Field(32 * 1024 * 1024, ge=1024, description="larger bodies are a 413")
    api_token: str | None = Field(
        None, description="when set, every endpoint but /healthz and /readyz needs 'Authorization: Bearer <token>'")
    allow_unauthenticated_changes: bool = Field(
        False, description="without a token: open the routes that change what serves (POST /models/reload, the "
                           "rollout API), e.g. on a trusted local cluster; closed by default")
    ready_requires_models: bool = Field(
        False, description="with true, /readyz is unready while a policy's model is refused or missing (it is served "
                           "by its fallback rule meanwhile); /readyz names such policies either way")
    header_timeout_s: float = Field(10.0, gt=0, le=300, description="a client must send a request's headers within "
                                                                   "this long, and its body within this long after")
    max_header_bytes: int = Field(64 * 1024, ge=1024, le=16 * 1024 * 1024,
                                  description="larger request headers close the connection")
    open_read_endpoints: bool = Field(
        False, description="with a token set: let GET /policies, /state, /metrics and the API docs through without it")

    # State snapshot
    refresh_interval_s: float = Field(5.0, gt=0, description="background refresh period of the node snapshot")
    stale_after_s: float = Field(30.0, gt=0, description="a snapshot older than this is refreshed on demand and flagged")
    prometheus_url: str | None = Field(None, description="e.g. http://prometheus:9090; unset disables metrics")
    prometheus_timeout_s: float = Field(2.0, gt=0, description="the whole of one query's answer must arrive "
                                                               "within this (not just each read)")
    prometheus_max_answer_bytes: int = Field(16 * 1024 * 1024, ge=1024, description="a larger answer is refused "
                                                                                   "(named in the snapshot's problems)")
    node_forget_after_s: float = Field(
        600.0, gt=0, description="a node that the Kubernetes API does not have and no metric named for this long is "
                                 "forgotten")
    max_known_nodes: int = Field(50_000, ge=1, description="nodes the server keeps state for; names beyond it "
                                                           "are ignored and counted")
    prometheus_ca_file: Path | None = Field(
        None, description="CA bundle (PEM) that signs an https Prometheus's certificate; default: the system's CAs")
    prometheus_insecure_skip_verify: bool = Field(
        False, description="do not verify an https Prometheus's certificate (a test cluster's self-signed one)")
    cpu_query: str = Field(node_metrics.CPU_QUERY,
                           description="busy cpu fraction per node (0..1)")
    # LoadVariationRiskBalancing's risk reads how much a node's cpu swings, not only its level
    cpu_stddev_query: str | None = Field(
        None, description="standard deviation of the busy cpu fraction over time, per node (0..1); default: "
                          "cpu_query's over the last 2 minutes (the simulator's 60 s time constant); '' disables")
    memory_query: str = Field(node_metrics.MEMORY_QUERY,
                              description="used memory fraction per node (0..1)")
    cpu_count_query: str = Field(node_metrics.CPU_COUNT_QUERY,
                                 description="cpus per node, used when the Kubernetes API gives no capacity")
    memory_total_query: str = Field(node_metrics.MEMORY_TOTAL_QUERY,
                                    description="memory bytes per node, used when the Kubernetes API gives none")
    latency_query: str = Field(node_metrics.LATENCY_QUERY,
                               description="node-to-user latency (ms) per node")
    # The thesis's further node metrics (node_exporter's series by default).
    network_query: str = Field(
        node_metrics.NETWORK_QUERY,
        description="bytes/s received per node")
    tcp_query: str = Field(node_metrics.TCP_QUERY,
                           description="established TCP connections per node")
    disk_query: str = Field(node_metrics.DISK_QUERY, description="used share of the root filesystem (0..1)")
    # A node's power model from Kepler: idle watts, and the active watts at the current cpu usage
    # (max = idle + active / usage). Node labels/annotations rlscore.io/power-{idle,max}-watts win.
    power_idle_query: str = Field(node_metrics.POWER_IDLE_QUERY,
                                  description="Kepler: idle watts per node ('' disables Kepler)")
    power_active_query: str = Field(node_metrics.POWER_ACTIVE_QUERY,
                                    description="Kepler: active watts per node")
    power_usage_query: str = Field(node_metrics.POWER_USAGE_QUERY,
                                   description="Kepler: cpu usage ratio (0..1) the active watts belong to")
    # Full-load watts can only be estimated while a node is busy; the history keeps what was seen
    # (after a server restart, and for nodes idle now), so the known power models do not change
    # with which nodes happen to be busy.
    power_max_history_query: str = Field(
        node_metrics.POWER_MAX_HISTORY_QUERY,
        description="Kepler: full-load watts per node from the recent past ('' disables)")
    power_max_history_interval_s: float = Field(300.0, gt=0, description="how often the power history query runs")
    kubernetes: Literal["auto", "off", "in-cluster", "kubeconfig"] = Field(
        "auto", description="where node and pod state comes from; auto tries in-cluster, then kubeconfig")
    kubeconfig: str | None = Field(None, description="path for kubernetes=kubeconfig (default: KUBECONFIG or ~/.kube/config)")
    latency_source: Literal["prometheus", "probe", "none"] = Field(
        "prometheus", description="where node-to-user latency comes from: latency_query in Prometheus, each node's "
                                  "probe over HTTP, or nowhere (EL then scores without it and says so)")
    probe_port: int = Field(9102, ge=1, le=65535, description="port of the latency probe on each node")
    probe_timeout_s: float = Field(0.5, gt=0, description="latency_source=probe: how long one probe may take")

    # Serving
    host: str = Field("0.0.0.0", description="address to listen on (rlscore-server --host)")
    port: int = Field(8000, ge=1, le=65535, description="port to listen on (rlscore-server --port)")
    workers: int = Field(1, ge=1, description="server processes (each loads the models and keeps its own state)")
    log_level: str = Field("info", description="debug, info, warning or error; the decision log is rlscore.decisions at info")
    tls_cert_file: Path | None = Field(None, description="serve HTTPS with this certificate (PEM, chain first)")
    tls_key_file: Path | None = Field(None, description="the certificate's private key (PEM)")
    tls_client_ca_file: Path | None = Field(
        None, description="mutual TLS: require client certificates signed by this CA bundle (PEM)")
    tls_reload_interval_s: float = Field(
        30.0, gt=0, description="how often changed certificate, key and CA files are loaded (rotation without restart)")

    @model_validator(mode="after")
    def _cpu_stddev_of_cpu_query(self) -> Settings:
        # derived, so a cluster that reads its cpu another way (the local cluster's cAdvisor query)
        # measures the swing of what it reads
        if self.cpu_stddev_query is None:
            self.cpu_stddev_query = node_metrics.cpu_stddev_query(self.cpu_query)
        return self

    @model_validator(mode="after")
    def _prometheus_verification(self) -> Settings:
        if self.prometheus_ca_file is not None and self.prometheus_insecure_skip_verify:
            raise ValueError("set RLSCORE_PROMETHEUS_CA_FILE or RLSCORE_PROMETHEUS_INSECURE_SKIP_VERIFY, not both")
        return self

    @model_validator(mode="after")
    def _tls_pair(self) -> Settings:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("RLSCORE_TLS_CERT_FILE and RLSCORE_TLS_KEY_FILE must be set together")
        if self.tls_client_ca_file is not None and self.tls_cert_file is None:
            raise ValueError("RLSCORE_TLS_CLIENT_CA_FILE (mutual TLS) needs RLSCORE_TLS_CERT_FILE and _KEY_FILE")
        return self

    @model_validator(mode="after")
    def _el_defaults(self) -> Settings:
        soft, hard = self.el_default_soft_ms, self.el_default_hard_ms
        if (soft is None) != (hard is None):
            raise ValueError("set RLSCORE_EL_DEFAULT_SOFT_MS and RLSCORE_EL_DEFAULT_HARD_MS together, or neither")
        if soft is not None and soft > hard:
            raise ValueError(f"RLSCORE_EL_DEFAULT_SOFT_MS ({soft}) must not exceed RLSCORE_EL_DEFAULT_HARD_MS ({hard})")
        return self

    @property
    def el_defaults(self) -> tuple[float, float] | None:
        """EL's limits for pods without annotations, or None (no limit)."""
        if self.el_default_soft_ms is None:
            return None
        return self.el_default_soft_ms, self.el_default_hard_ms

    @field_validator("default_policy")
    @classmethod
    def _policy(cls, value: str) -> str:
        return normalize_policy(value)
