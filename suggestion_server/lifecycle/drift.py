"""Drift: is the cluster the server serves still the one its model was trained for?

The reference is the cluster profile stored with the serving model (`training_profile` in its
sidecar, written by rlscore-train --profile), or RLSCORE_DRIFT_PROFILE. Every `interval` the server
compares what it sees with it, on three signals, each with a documented threshold:

- usage: the cpu the cluster's pods use per cpu they request (measured utilization x capacity over
  the requests whose use the metrics could show when they were read, all nodes with such pods:
  NodeTable's `requested_showing`, after RLSCORE_USAGE_ONSET_S and RLSCORE_USAGE_LINGER_S) against
  the profile's expectation (its pod classes' mean usage, weighted by requested cpu-time), as the
  median of the last USAGE_CHECKS checks. Without the onset a burst of new pods, requested before
  their use shows, read as pods using less (x0.64 where the shift was x3, in the retraining e2e).
  Drift when the ratio leaves [1/USAGE_RATIO, USAGE_RATIO]: pods using 3x their requests is a ratio
  of about 3.
- requests: the population stability index (PSI) of the cpu requests of the last `window` pods
  scored against the profile's pod mix, in power-of-two bins. Drift above PSI_THRESHOLD (0.25, the
  usual "major shift").
- latency: the mean absolute change of each named node's latency relative to the profile's mean
  latency (by distribution when the profile names no nodes). Drift above LATENCY_THRESHOLD (0.25).

A signal must be over its threshold at `confirmations` checks in a row; then the policy is flagged
(metric rlscore_drift_flagged, /policies, a log line) and, where configured, retraining starts (at
most once per cooldown): in a cluster a Job made from the retraining CronJob (`retrain_cronjob`,
namespace/name, as `kubectl create job --from=cronjob/...` makes it), elsewhere `retrain_command`
runs; both with RLSCORE_DRIFT_POLICY and RLSCORE_DRIFT_REASON set. The realized objective (active
nodes, power, hot-node share) read back from the metrics is exported beside it.
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rlscore.core.profile import ClusterProfile, ProfileError, load_profile
from rlscore.core.objectives import HOT_UTILIZATION
from rlscore.core.state import POLICIES
from suggestion_server import metrics

log = logging.getLogger("rlscore.drift")
USAGE_RATIO = 1.5
USAGE_CHECKS = 5  # the usage signal is the median of this many checks (at least 3)
PSI_THRESHOLD = 0.25
LATENCY_THRESHOLD = 0.25
REQUEST_BINS = np.array([0.0, 75, 150, 300, 600, 1200, 2400, 4800, 9600, np.inf])  # millicores
MIN_REQUESTS = 50  # fewer recent requests than this: no verdict on the request mix
PSI_FLOOR = 1e-3  # an empty bin counts as this share


@dataclass
class Reference:
    """What the profile says the cluster looks like."""

    source: str
    usage_factor: float
    request_shares: np.ndarray  # per REQUEST_BINS bin
    latency_by_node: dict[str, float]
    latencies: np.ndarray

    @classmethod
    def of_profile(cls, profile: ClusterProfile, source: str) -> Reference:
        classes = profile.workload.pod_classes
        weights = np.array([c.weight for c in classes], dtype=float)
        cpu = np.array([np.mean(c.cpu_millicores) for c in classes])
        alive = weights * cpu * np.array([c.lifetime_scale for c in classes])  # requested cpu-time
        usage = float(alive @ np.array([np.mean(c.usage) for c in classes]) / alive.sum())
        shares = np.zeros(len(REQUEST_BINS) - 1)
        for c, w in zip(classes, weights / weights.sum()):
            for choice in c.cpu_millicores:
                shares[np.searchsorted(REQUEST_BINS, choice, side="right") - 1] += w / len(c.cpu_millicores)
        named = {name: float(lat) for g in profile.nodes for name, lat in zip(g.names, g.latency_ms)}
        latencies = np.sort([float(lat) for g in profile.nodes for lat in g.latency_ms])
        return cls(source, usage, shares, named, latencies)


def psi(expected: np.ndarray, observed: np.ndarray) -> float:
    e = np.maximum(expected / max(expected.sum(), 1e-12), PSI_FLOOR)
    o = np.maximum(observed / max(observed.sum(), 1e-12), PSI_FLOOR)
    return float(np.sum((o - e) * np.log(o / e)))


@dataclass
class Signal:
    value: float | None
    threshold: str
    over: bool
    detail: str

    def status(self) -> dict:
        return {"value": None if self.value is None else round(self.value, 4), "threshold": self.threshold,
                "over": self.over, "detail": self.detail}


@dataclass
class PolicyDrift:
    policy: str
    reference: Reference | None = None
    signals: dict[str, Signal] = field(default_factory=dict)
    streak: dict[str, int] = field(default_factory=dict)
    flagged: bool = False
    flagged_since: float | None = None
    last_retrain: float | None = None
    retrain: str | None = None  # what the last trigger did

    def status(self) -> dict:
        return {"reference": self.reference.source if self.reference else None, "flagged": self.flagged,
                "flagged_since": self.flagged_since, "signals": {k: s.status() for k, s in self.signals.items()},
                "retrain": self.retrain}


class DriftMonitor:
    def __init__(self, registry, table, profile_path: Path | None = None, window: int = 500,
                 confirmations: int = 2, retrain_command: str | None = None, retrain_cooldown_s: float = 3600.0,
                 retrain_cronjob: str | None = None, api_client=None):
        self.registry, self.table = registry, table
        self.retrain_cronjob, self.api_client = retrain_cronjob, api_client
        self.profile_path = profile_path
        self.confirmations = max(1, confirmations)
        self.retrain_command = shlex.split(retrain_command) if retrain_command else None
        self.retrain_cooldown_s = retrain_cooldown_s
        self.requests: deque[float] = deque(maxlen=window)
        self.usage_ratios: deque[float] = deque(maxlen=USAGE_CHECKS)  # live usage per request, per check
        self.policies = {p: PolicyDrift(p) for p in POLICIES}
        self.realized: dict[str, float | None] = {}
        self._fallback: Reference | None = None
        self._by_model: dict[str, Reference | None] = {}  # model version -> its training profile's
        self._fallback_error: str | None = None

    def observe(self, cpu_request_millicores: float) -> None:
        self.requests.append(float(cpu_request_millicores))

    def _reference(self, policy: str) -> Reference | None:
        """The serving model's training profile, else the configured profile file, else none."""
        model = self.registry.get(policy)
        if model is not None and isinstance(model.metadata.get("training_profile"), dict):
            if model.version not in self._by_model:
                try:
                    profile = ClusterProfile.model_validate(model.metadata["training_profile"])
                    self._by_model[model.version] = Reference.of_profile(
                        profile, f"training profile {profile.name} of {model.version}")
                except ValueError as exc:
                    log.error("drift %s: the training profile in %s is invalid: %s", policy, model.version, exc)
                    self._by_model[model.version] = None
            return self._by_model[model.version]
        if self.profile_path is not None and self._fallback is None and self._fallback_error is None:
            try:
                profile = load_profile(self.profile_path)
                self._fallback = Reference.of_profile(profile, f"profile {profile.name} ({self.profile_path})")
            except ProfileError as exc:
                self._fallback_error = str(exc)
                log.error("drift: %s", exc)
        return self._fallback

    def check(self) -> dict[str, PolicyDrift]:
        names, col = self.table.snapshot(("in_api", "cpu_capacity", "cpu_capacity_metrics", "cpu_utilization",
                                          "requested_showing", "cpu_requested", "pods", "latency_ms",
                                          "power_idle_watts", "power_max_watts", "power_idle_metrics",
                                          "power_max_metrics"))
        live = self._live(names, col)
        for policy, d in self.policies.items():
            reference = d.reference = self._reference(policy)
            if reference is None:
                d.signals = {}
                continue
            d.signals = self._signals(reference, live)
            over = [name for name, s in d.signals.items() if s.over]
            for name in d.signals:
                d.streak[name] = d.streak.get(name, 0) + 1 if name in over else 0
                metrics.DRIFT_SCORE.labels(policy, name).set(d.signals[name].value
                                                             if d.signals[name].value is not None else float("nan"))
            confirmed = [n for n in over if d.streak[n] >= self.confirmations]
            if confirmed and not d.flagged:
                d.flagged, d.flagged_since = True, time.time()
                reason = "; ".join(f"{n}: {d.signals[n].detail}" for n in confirmed)
                log.warning("drift %s flagged against %s: %s", policy, reference.source, reason)
                metrics.DRIFT_EVENTS.labels(policy).inc()
                self._retrain(d, reason)
            elif not over and d.flagged:
                d.flagged, d.flagged_since = False, None
                log.info("drift %s cleared: every signal within its threshold again", policy)
            metrics.DRIFT_FLAGGED.labels(policy).set(1.0 if d.flagged else 0.0)
        return self.policies

    def _live(self, names: list[str], col: dict[str, np.ndarray]) -> dict:
        in_api = col["in_api"] == 1.0
        capacity = np.where(np.isnan(col["cpu_capacity"]), col["cpu_capacity_metrics"], col["cpu_capacity"])
        util, requested = col["cpu_utilization"], col["requested_showing"]
        busy = in_api & (requested > 0) & np.isfinite(util) & np.isfinite(capacity)
        if busy.any():
            self.usage_ratios.append(float((util[busy] * capacity[busy]).sum() / requested[busy].sum()))
        usage = float(np.median(self.usage_ratios)) if len(self.usage_ratios) >= 3 else None
        latency = {n: float(v) for n, v, ok in zip(names, col["latency_ms"], in_api) if ok and np.isfinite(v)}
        # the realized objective, as the metrics show it now
        active = in_api & (col["pods"] > 0)
        idle = np.where(np.isnan(col["power_idle_watts"]), col["power_idle_metrics"], col["power_idle_watts"])
        peak = np.where(np.isnan(col["power_max_watts"]), col["power_max_metrics"], col["power_max_watts"])
        known = active & np.isfinite(idle) & np.isfinite(peak) & np.isfinite(util)
        self.realized = {
            "active_nodes": float(active.sum()),
            "power_watts": float((idle[known] + (peak[known] - idle[known]) * util[known]).sum()) if known.any() else None,
            "hot_node_share": float((active & (util > HOT_UTILIZATION)).sum() / max(in_api.sum(), 1)),
        }
        for key, value in self.realized.items():
            metrics.REALIZED.labels(key).set(float("nan") if value is None else value)
        return {"usage": usage, "latency": latency, "requests": np.array(self.requests)}

    def _signals(self, ref: Reference, live: dict) -> dict[str, Signal]:
        out = {}
        usage = live["usage"]
        if usage is None:
            out["usage"] = Signal(None, f"ratio within 1/{USAGE_RATIO}..{USAGE_RATIO}", False,
                                  f"fewer than 3 of the last {USAGE_CHECKS} checks saw nodes with pods and metrics")
        else:
            ratio = usage / max(ref.usage_factor, 1e-9)
            out["usage"] = Signal(ratio, f"ratio within 1/{USAGE_RATIO}..{USAGE_RATIO}",
                                  not 1 / USAGE_RATIO <= ratio <= USAGE_RATIO,
                                  f"pods use {usage:.2f} of their cpu request, the profile {ref.usage_factor:.2f} "
                                  f"(x{ratio:.2f})")
        requests = live["requests"]
        if len(requests) < MIN_REQUESTS:
            out["requests"] = Signal(None, f"PSI <= {PSI_THRESHOLD}", False,
                                     f"{len(requests)} requests seen, {MIN_REQUESTS} needed")
        else:
            counts = np.histogram(requests, REQUEST_BINS)[0].astype(float)
            value = psi(ref.request_shares, counts)
            out["requests"] = Signal(value, f"PSI <= {PSI_THRESHOLD}", value > PSI_THRESHOLD,
                                     f"PSI {value:.3f} of the last {len(requests)} pods' cpu requests")
        latency = live["latency"]
        common = [n for n in ref.latency_by_node if n in latency]
        scale = max(float(ref.latencies.mean()), 1e-9) if ref.latencies.size else 1.0
        if common:
            change = float(np.mean([abs(latency[n] - ref.latency_by_node[n]) for n in common])) / scale
            detail = f"named nodes' latency moved {change:.0%} of the profile's mean ({len(common)} nodes)"
        elif latency and ref.latencies.size:
            q = np.linspace(0, 1, 11)
            change = float(np.mean(np.abs(np.quantile(list(latency.values()), q) - np.quantile(ref.latencies, q)))) / scale
            detail = f"the latency distribution moved {change:.0%} of the profile's mean"
        else:
            change, detail = None, "no latency known"
        out["latency"] = Signal(change, f"<= {LATENCY_THRESHOLD}", change is not None and change > LATENCY_THRESHOLD,
                                detail)
        return out

    def _retrain(self, d: PolicyDrift, reason: str) -> None:
        if self.retrain_command is None and self.retrain_cronjob is None:
            d.retrain = "not configured (RLSCORE_DRIFT_RETRAIN_CRONJOB or RLSCORE_DRIFT_RETRAIN_COMMAND)"
            return
        now = time.time()
        if d.last_retrain is not None and now - d.last_retrain < self.retrain_cooldown_s:
            d.retrain = f"skipped: the last one started {now - d.last_retrain:.0f} s ago (cooldown)"
            return
        if self.retrain_cronjob is not None:
            try:
                job = job_from_cronjob(self.api_client, self.retrain_cronjob, d.policy, reason)
            except Exception as exc:  # no API, no such CronJob, no permission
                d.retrain = f"no Job created from {self.retrain_cronjob}: {type(exc).__name__}: {str(exc)[:200]}"
                log.error("drift %s: %s", d.policy, d.retrain)
                return
            d.last_retrain, d.retrain = now, f"created Job {job} from CronJob {self.retrain_cronjob}"
            metrics.DRIFT_RETRAINS.labels(d.policy).inc()
            log.warning("drift %s: %s", d.policy, d.retrain)
            return
        env = {**os.environ, "RLSCORE_DRIFT_POLICY": d.policy, "RLSCORE_DRIFT_REASON": reason}
        try:
            subprocess.Popen(self.retrain_command, env=env, stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            d.retrain = f"failed to start {self.retrain_command[0]}: {exc}"
            log.error("drift %s: retraining not started: %s", d.policy, exc)
            return
        d.last_retrain = now
        d.retrain = f"started {shlex.join(self.retrain_command)} at {now:.0f}"
        metrics.DRIFT_RETRAINS.labels(d.policy).inc()
        log.warning("drift %s: retraining started: %s", d.policy, shlex.join(self.retrain_command))

    def status(self) -> dict:
        return {"confirmations": self.confirmations, "window": self.requests.maxlen,
                "thresholds": {"usage_ratio": USAGE_RATIO, "requests_psi": PSI_THRESHOLD,
                               "latency_change": LATENCY_THRESHOLD},
                "realized": self.realized, "policies": {p: d.status() for p, d in self.policies.items()}}


def job_from_cronjob(api_client, cronjob: str, policy: str, reason: str) -> str:
    """A Job from the CronJob's template, owned by it (what `kubectl create job --from=cronjob/...`
    does), with the drifted policy and the reason in its containers' environment; its name."""
    from kubernetes import client

    if api_client is None:
        raise RuntimeError("the server has no Kubernetes API (RLSCORE_KUBERNETES)")
    namespace, _, name = cronjob.partition("/")
    batch = client.BatchV1Api(api_client)
    cron = batch.read_namespaced_cron_job(name, namespace)
    spec = cron.spec.job_template.spec
    for container in spec.template.spec.containers:
        container.env = [e for e in (container.env or []) if e.name not in ("RLSCORE_DRIFT_POLICY", "RLSCORE_DRIFT_REASON")]
        container.env += [client.V1EnvVar(name="RLSCORE_DRIFT_POLICY", value=policy),
                          client.V1EnvVar(name="RLSCORE_DRIFT_REASON", value=reason[:1000])]
    template_labels = (cron.spec.job_template.metadata.labels if cron.spec.job_template.metadata else None) or {}
    job = client.V1Job(
        metadata=client.V1ObjectMeta(
            generate_name=f"{name[:40]}-drift-", namespace=namespace,
            labels={**template_labels, "rlscore.io/drift-policy": policy},
            annotations={"cronjob.kubernetes.io/instantiate": "rlscore-drift", "rlscore.io/drift-reason": reason[:250]},
            owner_references=[client.V1OwnerReference(api_version="batch/v1", kind="CronJob", name=name,
                                                      uid=cron.metadata.uid)]),
        spec=spec)
    return batch.create_namespaced_job(namespace, job).metadata.name
