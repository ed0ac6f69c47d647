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
from rlscore.core.model import AnyModel, ModelValidationError, load_model, model_path, sidecar_path
from rlscore.core.state import POLICIES
from suggestion_server import metrics

log = logging.getLogger("rlscore.models")
MAX_ERROR_CHARS = 300  # a refusal's message as reported (the loader's names the file, never its path or contents)


@dataclass
class PolicyModel:
    policy: str
    path: Path
    model: AnyModel | None = None
    error: str | None = None
    loaded_at: float | None = None
    file_stamp: tuple | None = field(default=None, repr=False)

    def status(self) -> dict:
        return {"policy": self.policy, "path": str(self.path),
                "model_version": self.model.version if self.model else None,
                "serving": "model" if self.model and self.model.heuristic is None else "heuristic",
                # the heuristic a promoted model file names, else the fallback's (no valid model)
                "heuristic": self.model.heuristic if self.model else FALLBACK_RULE[self.policy],
                "loaded_at": self.loaded_at, "error": self.error,
                "training": _training_steps(self.model)}


def _training_steps(model: AnyModel | None) -> int | None:
    """The sidecar's training steps, where it records them as a number (the sidecar is checked as a
    schema on load; this reads defensively all the same)."""
    training = model.metadata.get("training") if model is not None else None
    steps = training.get("steps") if isinstance(training, dict) else None
    return steps if isinstance(steps, int) else None


def _stat(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def file_stamp(path: Path) -> tuple | None:
    """The model file's and its sidecar's inode, mtime and size (None without a model file): a change
    to either (rewritten, or renamed over) is a new model to validate; an unchanged pair keeps the
    verdict it had."""
    model = _stat(path)
    return None if model is None else (model, _stat(sidecar_path(path)))


class ModelRegistry:
    def __init__(self, model_dir: Path):
        self.model_dir = Path(model_dir)
        self._lock = threading.Lock()
        self.policies = {p: PolicyModel(p, model_path(self.model_dir, p)) for p in POLICIES}

    def get(self, policy: str) -> AnyModel | None:
        return self.policies[policy].model

    def load(self, policy: str) -> PolicyModel:
        entry = self.policies[policy]
        stamp = file_stamp(entry.path)
        try:
            model = load_model(entry.path, expected_policy=policy, allow_heuristic=True)
        except Exception as exc:  # a refusal names the problem; anything else must not escape either
            message = str(exc) if isinstance(exc, ModelValidationError) else \
                f"{entry.path.name}: could not be loaded ({type(exc).__name__})"
            with self._lock:
                entry.error = message[:MAX_ERROR_CHARS]
                entry.file_stamp = stamp
            keeping = f"keeping {entry.model.version}" if entry.model else "serving the heuristic"
            log.error("model for %s refused (%s): %s", policy, keeping, entry.error,
                      exc_info=not isinstance(exc, ModelValidationError))
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
        """Read every policy's model (at start-up)."""
        self.reload_changed(force=True)

    def reload_changed(self, force: bool = False) -> list[str]:
        """Reload the policies whose model file or sidecar changed since the last attempt (every one
        with `force`); an unchanged file keeps its model or its refusal without being read again, so a
        burst of reloads costs the scoring path nothing."""
        changed = [p for p, e in self.policies.items() if force or file_stamp(e.path) != e.file_stamp]
        for policy in changed:
            self.load(policy)
        return changed

    def ready(self) -> bool:
        """Every policy has had a load attempt (a refused file still serves the heuristic)."""
        return all(e.file_stamp is not None or e.error is not None for e in self.policies.values())

    def degraded(self) -> list[str]:
        """The policies without a valid model (missing or refused): their fallback rule serves them."""
        return [p for p, e in self.policies.items() if e.model is None]

    def refused(self) -> list[str]:
        """The policies whose file was refused at the last attempt (the previous model, if any, serves)."""
        return [p for p, e in self.policies.items() if e.error is not None]

    def status(self) -> list[dict]:
        return [e.status() for e in self.policies.values()]
