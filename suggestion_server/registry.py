"""The loaded policies. A model replaces the serving one only after the agent's loader validated
it; a bad file leaves the previous model (or the heuristic) serving and is reported. A model file may
name a heuristic (the retraining loop's fallback when the best rule beats the model): it serves as
that heuristic, reported as such."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from rlscore.core.rules import FALLBACK_RULE
from rlscore.core.model import HeuristicModel, LoadedModel, ModelValidationError, load_model
from rlscore.core.state import POLICIES
from suggestion_server import metrics

log = logging.getLogger("rlscore.models")


@dataclass
class PolicyModel:
    policy: str
    path: Path
    model: LoadedModel | HeuristicModel | None = None
    error: str | None = None
    loaded_at: float | None = None
    file_stamp: tuple[float, int] | None = field(default=None, repr=False)

    def status(self) -> dict:
        return {"policy": self.policy, "path": str(self.path),
                "model_version": self.model.version if self.model else None,
                "serving": "model" if self.model and self.model.heuristic is None else "heuristic",
                # the heuristic a promoted model file names, else the fallback's (no valid model)
                "heuristic": self.model.heuristic if self.model else FALLBACK_RULE[self.policy],
                "loaded_at": self.loaded_at, "error": self.error,
                "training": (self.model.metadata.get("training", {}).get("steps") if self.model else None)}


def file_stamp(path: Path) -> tuple[float, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime, st.st_size


class ModelRegistry:
    def __init__(self, model_dir: Path):
        self.model_dir = Path(model_dir)
        self._lock = threading.Lock()
        self.policies = {p: PolicyModel(p, self.model_dir / f"{p.lower()}.safetensors") for p in POLICIES}

    def get(self, policy: str) -> LoadedModel | HeuristicModel | None:
        return self.policies[policy].model

    def load(self, policy: str) -> PolicyModel:
        entry = self.policies[policy]
        stamp = file_stamp(entry.path)
        try:
            model = load_model(entry.path, expected_policy=policy, allow_heuristic=True)
        except ModelValidationError as exc:
            with self._lock:
                entry.error = str(exc)
                entry.file_stamp = stamp
            keeping = f"keeping {entry.model.version}" if entry.model else "serving the heuristic"
            log.error("model for %s refused (%s): %s", policy, keeping, exc)
            metrics.MODEL_LOAD_FAILURES.labels(policy).inc()
            return entry
        with self._lock:
            old = entry.model
            entry.model, entry.error, entry.loaded_at, entry.file_stamp = model, None, time.time(), stamp
        if old is not None and old.version != model.version:
            metrics.MODEL_INFO.remove(policy, old.version)
        metrics.MODEL_INFO.labels(policy, model.version).set(1)
        log.info("model for %s loaded: %s from %s", policy, model.version, entry.path)
        return entry

    def load_all(self) -> None:
        for policy in POLICIES:
            self.load(policy)

    def reload_changed(self) -> list[str]:
        """Reload the policies whose file changed (mtime or size) since the last attempt."""
        changed = [p for p, e in self.policies.items() if file_stamp(e.path) != e.file_stamp]
        for policy in changed:
            self.load(policy)
        return changed

    def ready(self) -> bool:
        """Every policy has had a load attempt (a refused file still serves the heuristic)."""
        return all(e.file_stamp is not None or e.error is not None for e in self.policies.values())

    def status(self) -> list[dict]:
        return [e.status() for e in self.policies.values()]
