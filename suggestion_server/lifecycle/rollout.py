"""Staged rollout of a retrained model, per policy: shadow, then canary, then serving.

A candidate (`<candidate_dir>/<policy>.safetensors`, put there by rlscore-gate --promote-to or the retrain
job) is staged only when its sidecar carries a passing gate verdict for exactly that file. In
*shadow* it scores every request beside the serving model (or the heuristic serving in its place)
without deciding anything; in *canary* it decides for a stable share of pods (by a hash of
namespace/name, so a retried pod meets the same model). In both stages each request is scored by
both, and the server counts how often they pick the same node and what each one's pick costs on the
policy's objective (agent.sim.outcomes.placement_costs). *Promotion* installs the candidate as the
serving model, keeping the one it replaces for a rollback.

Stages advance through the authenticated API (POST /v1/rollout/{policy}/promote, /rollback) and,
with auto-advance on, after `shadow_decisions` / `canary_decisions` compared requests when the
candidate's mean cost is not above the serving model's (x 1 + tolerance); otherwise, and whenever the
candidate fails to score, it is rolled back. The stage survives restarts in `rollout.json`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rlscore.core import bounded_json
from rlscore.core.model import HeuristicModel, LoadedModel, ModelValidationError, install_model, load_model, sha256_of, sidecar_path, write_atomically
from rlscore.core.scoring import to_node_scores
from rlscore.core.objectives import placement_costs
from rlscore.core.state import POLICIES, NodeState, PodRequest
from suggestion_server import metrics
from suggestion_server.lifecycle.registry import file_stamp

MAX_STATE_BYTES = 4 * 1024 * 1024
log = logging.getLogger("rlscore.rollout")
NONE, SHADOW, CANARY = "none", "shadow", "canary"
STAGES = (NONE, SHADOW, CANARY)
HISTORY = 50  # transitions kept per policy


class RolloutError(ValueError):
    """A rollout step that cannot be taken; the message says why (the API answers it as a 409)."""


def canary_fraction(namespace: str, name: str) -> float:
    """Where a pod falls in [0, 1): stable across restarts and replicas of the server."""
    digest = hashlib.sha256(f"{namespace}/{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


@dataclass
class PolicyRollout:
    policy: str
    stage: str = NONE
    candidate: LoadedModel | HeuristicModel | None = None
    since: float | None = None
    compared: int = 0  # requests scored by both in this stage
    agreed: int = 0  # ... on which both picked the same node
    cost: dict[str, float] = field(default_factory=lambda: {"serving": 0.0, "candidate": 0.0})
    decided_by_candidate: int = 0
    history: list[dict] = field(default_factory=list)

    def mean_cost(self, who: str) -> float | None:
        return self.cost[who] / self.compared if self.compared else None

    def status(self) -> dict:
        return {"stage": self.stage, "candidate_version": self.candidate.version if self.candidate else None,
                "since": self.since, "compared": self.compared,
                "agreement": round(self.agreed / self.compared, 4) if self.compared else None,
                "mean_placement_cost": {k: (round(v, 6) if (v := self.mean_cost(k)) is not None else None)
                                        for k in self.cost},
                "decided_by_candidate": self.decided_by_candidate, "history": self.history[-HISTORY:]}


@dataclass
class Comparison:
    """What the rollout did with one request."""

    stage: str
    scored_by: str  # serving | candidate
    agreed: bool | None
    scores: np.ndarray
    version: str | None
    reason: str | None = None


class RolloutManager:
    def __init__(self, registry, model_dir: Path, candidate_dir: Path | None, canary_share: float = 0.1,
                 auto: bool = True, shadow_decisions: int = 200, canary_decisions: int = 500,
                 tolerance: float = 0.0):
        self.registry = registry
        self.model_dir = Path(model_dir)
        self.candidate_dir = Path(candidate_dir) if candidate_dir else self.model_dir / "candidates"
        self.previous_dir = self.model_dir / "previous"
        self.state_file = self.candidate_dir / "rollout.json"
        self.canary_share, self.auto, self.tolerance = canary_share, auto, tolerance
        self.min_compared = {SHADOW: shadow_decisions, CANARY: canary_decisions}
        self.policies = {p: PolicyRollout(p) for p in POLICIES}
        self._stamps: dict[str, tuple | None] = {p: None for p in POLICIES}
        for p in POLICIES:
            self._export_stage(p)

    # --- files -------------------------------------------------------------------------------------

    def candidate_path(self, policy: str) -> Path:
        return self.candidate_dir / f"{policy.lower()}.safetensors"

    def serving_path(self, policy: str) -> Path:
        return self.registry.policies[policy].path

    def previous_path(self, policy: str) -> Path:
        return self.previous_dir / f"{policy.lower()}.safetensors"

    def restore(self) -> None:
        """Pick up the stages saved before a restart; a candidate whose file is gone or changed is dropped."""
        if not self.state_file.exists():
            return
        try:
            saved = bounded_json.load_file(self.state_file, MAX_STATE_BYTES, what="rollout state")
            if not isinstance(saved, dict):
                raise bounded_json.BoundedJSONError("not a JSON object")
        except bounded_json.BoundedJSONError as exc:
            log.error("rollout state %s unreadable (%s): every policy starts without a candidate", self.state_file, exc)
            return
        for policy, entry in (saved.get("policies") or {}).items():
            if policy not in self.policies or not isinstance(entry, dict):
                continue
            r = self.policies[policy]
            r.history = list(entry.get("history") or [])[-HISTORY:]
            if entry.get("stage") in (SHADOW, CANARY):
                try:
                    r.candidate = self._verified_candidate(policy)
                except RolloutError as exc:
                    self._transition(r, NONE, "restart", f"candidate dropped on restart: {exc}", save=False)
                    continue
                if r.candidate.version != entry.get("candidate_version"):
                    r.candidate = None
                    self._transition(r, NONE, "restart", "the candidate file changed while the server was down",
                                     save=False)
                    continue
                r.stage, r.since = entry["stage"], entry.get("since")
                self._stamps[policy] = file_stamp(self.candidate_path(policy))
                self._export_stage(policy)

    def _save(self) -> None:
        state = {"policies": {p: {"stage": r.stage, "since": r.since, "history": r.history[-HISTORY:],
                                  "candidate_version": r.candidate.version if r.candidate else None}
                              for p, r in self.policies.items()}}
        try:
            self.candidate_dir.mkdir(parents=True, exist_ok=True)
            write_atomically(self.state_file, (json.dumps(state, indent=2) + "\n").encode())
        except OSError as exc:  # a read-only model volume: the stages live until the next restart
            log.warning("rollout state not saved to %s: %s", self.state_file, exc)

    # --- transitions -------------------------------------------------------------------------------

    def _verified_candidate(self, policy: str) -> LoadedModel | HeuristicModel:
        path = self.candidate_path(policy)
        if not path.exists():
            raise RolloutError(f"no candidate at {path}")
        try:
            digest = sha256_of(path)
            model = load_model(path, expected_policy=policy, allow_heuristic=True)
        except (OSError, ModelValidationError) as exc:
            raise RolloutError(f"the candidate fails the loader's validation: {exc}") from None
        except Exception as exc:  # nothing a candidate file holds may escape
            raise RolloutError(f"the candidate could not be loaded ({type(exc).__name__})") from None
        verdict = model.metadata.get("gate")
        if not isinstance(verdict, dict):
            raise RolloutError(f"{sidecar_path(path)} has no gate verdict: run rlscore-gate on it first")
        if verdict.get("candidate_sha256") != digest:
            raise RolloutError("the gate verdict is for another file (sha256 differs): run rlscore-gate again")
        if verdict.get("promote") is not True:
            raise RolloutError(f"the gate refused it: {verdict.get('reason', 'no reason recorded')}")
        return model

    def stage_candidate(self, policy: str, trigger: str) -> dict:
        r = self.policies[policy]
        if r.stage != NONE:
            raise RolloutError(f"{policy} already has a candidate in {r.stage} "
                               f"({r.candidate.version if r.candidate else '?'}): promote or roll it back first")
        self._stamps[policy] = file_stamp(self.candidate_path(policy))
        model = self._verified_candidate(policy)
        serving = self.registry.get(policy)
        if serving is not None and serving.version == model.version:
            raise RolloutError(f"the candidate {model.version} is the model already serving")
        r.candidate = model
        self._transition(r, SHADOW, trigger, f"candidate {model.version}: {model.metadata['gate'].get('reason', '')}")
        return r.status()

    def promote(self, policy: str, trigger: str, reason: str = "") -> dict:
        r = self.policies[policy]
        if r.stage == NONE:
            raise RolloutError(f"{policy} has no candidate to promote")
        if r.stage == SHADOW:
            self._transition(r, CANARY, trigger, reason or f"canary for {self.canary_share:.0%} of pods")
            return r.status()
        self._install(r, trigger, reason)
        return r.status()

    def rollback(self, policy: str, trigger: str, reason: str = "") -> dict:
        r = self.policies[policy]
        if r.stage != NONE:
            version = r.candidate.version if r.candidate else "?"
            r.candidate = None
            self._transition(r, NONE, trigger, reason or f"candidate {version} rolled back")
            return r.status()
        previous = self.previous_path(policy)
        if not previous.exists():
            raise RolloutError(f"{policy} has no candidate and no previous model to roll back to")
        current = self.registry.get(policy)
        install_model(previous, self.serving_path(policy))
        entry = self.registry.load(policy)
        self._transition(r, NONE, trigger, reason or f"serving model {current.version if current else 'heuristic'} "
                                                     f"replaced by the previous one, "
                                                     f"{entry.model.version if entry.model else 'refused'}")
        return r.status()

    def _install(self, r: PolicyRollout, trigger: str, reason: str) -> None:
        """The candidate becomes the serving model; the one it replaces is kept in previous/."""
        policy, candidate = r.policy, r.candidate
        assert candidate is not None
        serving = self.serving_path(policy)
        if serving.exists():
            self.previous_dir.mkdir(parents=True, exist_ok=True)
            install_model(serving, self.previous_path(policy))
        install_model(self.candidate_path(policy), serving)
        entry = self.registry.load(policy)
        if entry.model is None or entry.model.version != candidate.version:
            # the file changed or was refused on the way: put the previous model back
            if self.previous_path(policy).exists():
                install_model(self.previous_path(policy), serving)
                self.registry.load(policy)
            r.candidate = None
            self._transition(r, NONE, trigger, f"install failed ({entry.error or 'another file was loaded'}); "
                                               f"the previous model serves")
            raise RolloutError(f"installing {candidate.version} failed: {entry.error or 'another file was loaded'}")
        r.candidate = None
        self._transition(r, NONE, trigger, reason or f"{candidate.version} promoted to serving", to_label="serving")

    def _transition(self, r: PolicyRollout, stage: str, trigger: str, reason: str, save: bool = True,
                    to_label: str | None = None) -> None:
        before = r.stage
        event = {"at": round(time.time(), 3), "from": before, "to": to_label or stage, "trigger": trigger,
                 "reason": reason, "compared": r.compared,
                 "agreement": round(r.agreed / r.compared, 4) if r.compared else None,
                 "mean_placement_cost": {k: r.mean_cost(k) for k in r.cost}}
        r.history = (r.history + [event])[-HISTORY:]
        r.stage, r.since = stage, time.time()
        r.compared = r.agreed = r.decided_by_candidate = 0
        r.cost = {"serving": 0.0, "candidate": 0.0}
        metrics.ROLLOUT_TRANSITIONS.labels(r.policy, to_label or stage, trigger).inc()
        self._export_stage(r.policy)
        log.info("rollout %s: %s -> %s (%s): %s", r.policy, before, to_label or stage, trigger, reason)
        if save:
            self._save()

    def _export_stage(self, policy: str) -> None:
        stage = self.policies[policy].stage
        for s in STAGES:
            metrics.ROLLOUT_STAGE.labels(policy, s).set(1.0 if s == stage else 0.0)

    # --- serving -----------------------------------------------------------------------------------

    def active(self, policy: str) -> bool:
        return self.policies[policy].stage != NONE

    def stages(self) -> dict[str, str]:
        """Each policy's stage, for the in-process scorer: it leaves a policy in shadow or canary to
        this server, the one place both models score and the canary share is drawn."""
        return {p: r.stage for p, r in self.policies.items()}

    def consider(self, policy: str, nodes: NodeState, pod: PodRequest, pod_key: tuple[str, str],
                 serving_scores: np.ndarray, serving_version: str | None) -> Comparison:
        """Score with the candidate too, count the comparison, and say who decides this pod."""
        r = self.policies[policy]
        candidate = r.candidate
        assert candidate is not None
        try:
            values = candidate.q_values(nodes, pod)
            if not np.all(np.isfinite(values)):
                raise ValueError("non-finite Q-values")
        except (RuntimeError, ValueError) as exc:
            stage = r.stage
            r.candidate = None
            self._transition(r, NONE, "auto", f"candidate {candidate.version} failed to score: {exc}")
            return Comparison(stage, "serving", None, serving_scores, serving_version, f"candidate rolled back: {exc}")
        scores = to_node_scores(values)
        top_serving, top_candidate = int(np.argmax(serving_scores)), int(np.argmax(scores))
        agreed = top_serving == top_candidate
        every = placement_costs(policy, nodes, pod)
        costs = {"serving": float(every[top_serving]), "candidate": float(every[top_candidate])}
        r.compared += 1
        r.agreed += agreed
        for who, c in costs.items():
            r.cost[who] += c
            metrics.ROLLOUT_COST.labels(policy, who).inc(c)
        metrics.ROLLOUT_COMPARED.labels(policy, r.stage).inc()
        if agreed:
            metrics.ROLLOUT_AGREED.labels(policy, r.stage).inc()
        stage = r.stage
        by_candidate = stage == CANARY and canary_fraction(*pod_key) < self.canary_share
        if by_candidate:
            r.decided_by_candidate += 1
        metrics.ROLLOUT_DECIDED.labels(policy, "candidate" if by_candidate else "serving").inc()
        result = Comparison(stage, "candidate" if by_candidate else "serving", agreed,
                            scores if by_candidate else serving_scores,
                            candidate.version if by_candidate else serving_version)
        if self.auto and r.compared >= self.min_compared[stage]:
            self._auto_step(r)
        return result

    def _auto_step(self, r: PolicyRollout) -> None:
        mine, theirs = r.mean_cost("candidate"), r.mean_cost("serving")
        summary = (f"after {r.compared} requests: agreement {r.agreed / r.compared:.1%}, mean placement cost "
                   f"{mine:.4g} vs serving {theirs:.4g}")
        if mine <= theirs * (1.0 + self.tolerance) + 1e-12:
            try:
                self.promote(r.policy, "auto", summary)
            except RolloutError as exc:
                log.error("rollout %s: automatic promotion failed: %s", r.policy, exc)
        else:
            self.rollback(r.policy, "auto", "costs more than serving " + summary)

    def watch(self) -> list[str]:
        """Stage new or changed candidate files (with a passing gate verdict) for policies without one."""
        staged = []
        for policy, r in self.policies.items():
            stamp = file_stamp(self.candidate_path(policy))
            if stamp is None or stamp == self._stamps[policy] or r.stage != NONE:
                continue
            try:
                self.stage_candidate(policy, "watch")
                staged.append(policy)
            except RolloutError as exc:
                log.error("rollout %s: candidate not staged: %s", policy, exc)
                metrics.ROLLOUT_REFUSED.labels(policy).inc()
                r.history = (r.history + [{"at": round(time.time(), 3), "from": NONE, "to": NONE,
                                           "trigger": "watch", "reason": f"not staged: {exc}"}])[-HISTORY:]
        return staged

    def status(self) -> dict:
        return {"canary_share": self.canary_share, "auto": self.auto, "tolerance": self.tolerance,
                "min_compared": self.min_compared, "candidate_dir": str(self.candidate_dir),
                "policies": {p: r.status() for p, r in self.policies.items()}}
