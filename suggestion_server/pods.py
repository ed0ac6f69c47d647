"""What the server reads from the pod: its policy, its latency limits and its workload's cpu usage per
request, from the annotations."""

from __future__ import annotations

import math

from rlscore.core.state import PodRequest, as_served, normalize_policy
from suggestion_server.http.schemas import PodIn

ANNOTATION_POLICY = "rlscore.io/policy"
ANNOTATION_SOFT = "rlscore.io/latency-soft-ms"
ANNOTATION_HARD = "rlscore.io/latency-hard-ms"
# cpu the pod's workload uses per cpu it requests (e.g. VPA's target over the request): 0.3 for a
# batch job that asks for three times what it uses, 3 for a hog; headroom-informed reads it
ANNOTATION_USAGE_RATIO = "rlscore.io/cpu-usage-ratio"
MAX_USAGE_RATIO = 100.0
# The thesis's manifests used these; read when the prefixed ones are absent.
THESIS_SOFT = "latencySoftConstraint"
THESIS_HARD = "latencyHardConstraint"


class RequestFieldError(ValueError):
    """A request field that parses but does not make sense; becomes a 422 naming `loc`."""

    def __init__(self, loc: tuple[str, ...], message: str):
        super().__init__(message)
        self.loc = loc
        self.message = message


def resolve_policy(requested: str | None, pod: PodIn, default: str) -> str:
    """Request field > pod annotation > server default."""
    if requested:
        return requested
    annotated = pod.annotations.get(ANNOTATION_POLICY)
    if annotated is None:
        return default
    try:
        return normalize_policy(annotated)
    except ValueError as exc:
        raise RequestFieldError(("body", "pod", "annotations", ANNOTATION_POLICY), str(exc)) from None


def _positive_number(pod: PodIn, key: str, unit: str, most: float = math.inf, suffix: str = "") -> float:
    """The annotation `key` as a finite number > 0 and <= `most` (`suffix` allowed after it), else a
    422 naming it."""
    raw = pod.annotations[key]
    try:
        value = float(raw.strip().removesuffix(suffix))
    except ValueError:
        raise RequestFieldError(("body", "pod", "annotations", key), f"{key}={raw!r} is not a number of {unit}") from None
    if not math.isfinite(value) or not 0 < value <= most:
        bound = "" if math.isinf(most) else f" and <= {most:g}"
        raise RequestFieldError(("body", "pod", "annotations", key),
                                f"{key}={raw!r} must be a finite number of {unit} > 0{bound}")
    return value


def _limit(pod: PodIn, primary: str, fallback: str) -> float | None:
    key = primary if primary in pod.annotations else fallback if fallback in pod.annotations else None
    return None if key is None else _positive_number(pod, key, "milliseconds", suffix="ms")


def _usage_ratio(pod: PodIn) -> float | None:
    if ANNOTATION_USAGE_RATIO not in pod.annotations:
        return None
    return _positive_number(pod, ANNOTATION_USAGE_RATIO, "cpu used per cpu requested", MAX_USAGE_RATIO)


def pod_request(pod: PodIn, policy: str, el_defaults: tuple[float, float] | None) -> PodRequest:
    """The pod as the scorer sees it. Latency annotations are validated for every policy but only
    EL uses them (EE and LB were trained, and are measured, on pods without limits); EL pods
    without limits get the configured defaults."""
    soft = _limit(pod, ANNOTATION_SOFT, THESIS_SOFT)
    hard = _limit(pod, ANNOTATION_HARD, THESIS_HARD)
    if soft is not None and hard is not None and soft > hard:
        raise RequestFieldError(("body", "pod", "annotations"),
                                f"latency soft limit {soft} ms exceeds the hard limit {hard} ms")
    request = PodRequest(pod.cpu_request_millicores, pod.memory_request_bytes, soft, hard, _usage_ratio(pod))
    return as_served(request, policy, el_defaults)
