"""Turn a validated request into scores: the policy's model when one is loaded and its output is
finite, otherwise the heuristic of the same intent. A rule selector's answer is the rule it picked, and
says which (counted in rlscore_selector_rules_total, named in the decision log)."""

from __future__ import annotations

import numpy as np

from rlscore.core.rules import MAX_NODE_SCORE, FALLBACK_RULE
from rlscore.core.kernels import node_scores
from rlscore.core.model import LoadedSelector
from rlscore.core.scoring import HeuristicScorer, to_node_scores
from rlscore.core.state import NodeState, PodRequest
from suggestion_server import metrics
from suggestion_server.lifecycle.registry import ModelRegistry
from suggestion_server.node_state.snapshot import unknown_for


# Rules served as a model (named by a model file, or picked by a rule selector) that read an optional
# column, and what they assume where it is unknown: the answer is not degraded (the rule is defined
# there), but the reasons say what it could not see.
UNSEEN_BY_RULE = {"load-variation-risk-balancing": ("cpu_utilization_stddev", "cpu swing",
                                                    "scored as steady (RLSCORE_CPU_STDDEV_QUERY)")}
# The same for a rule that reads a pod field: the reason it gives where the pod leaves it unknown.
UNSEEN_OF_POD = {"headroom-informed": ("cpu_usage_ratio", ("the pod has no rlscore.io/cpu-usage-ratio: "
                                                           "headroom-informed scored it as headroom-balance"))}


def score_nodes(policy: str, nodes: NodeState, pod: PodRequest, registry: ModelRegistry,
                rng: np.random.Generator) -> tuple[np.ndarray, str, str | None, list[str], str | None]:
    """(integer scores 0..100, source, model version, reasons: why a fallback, or what a served rule
    could not see, the hand-written rule that scored: a selector's pick or a served heuristic, None for a
    node scorer)."""
    model = registry.get(policy)
    reasons: list[str] = []
    if model is not None:
        try:
            values, rule = model.decide(nodes, pod)
        except (RuntimeError, ValueError) as exc:  # a tensor that does not fit, a numerical error
            values, rule = None, None
            reasons.append(f"model {model.version} failed: {exc}")
            metrics.FALLBACKS.labels(policy, "model_error").inc()
        if isinstance(model, LoadedSelector) and rule is not None:
            metrics.selector_rule(policy, rule).inc()
        if rule in UNSEEN_BY_RULE:
            column, what, assumed = UNSEEN_BY_RULE[rule]
            unknown = np.isnan(getattr(nodes, column))
            if unknown.any():
                reasons.append(f"{unknown_for(unknown, nodes.names, what)}: {rule} {assumed}")
        if rule in UNSEEN_OF_POD and getattr(pod, UNSEEN_OF_POD[rule][0]) is None:
            reasons.append(UNSEEN_OF_POD[rule][1])
        if values is not None:
            scores, all_finite = node_scores(values, MAX_NODE_SCORE)
            if all_finite:  # a model file naming a heuristic serves that heuristic: its source says so
                return scores, "model" if model.heuristic is None else "heuristic", model.version, reasons, rule
            reasons.append(f"model {model.version} gave non-finite Q-values")
            metrics.FALLBACKS.labels(policy, "non_finite").inc()
    else:
        error = registry.policies[policy].error
        reasons.append(f"no valid {policy} model" + (f" ({error})" if error else ""))
        metrics.FALLBACKS.labels(policy, "no_model").inc()
    heuristic = HeuristicScorer(FALLBACK_RULE[policy], rng)
    return to_node_scores(heuristic.values(nodes, pod)), "heuristic", None, reasons, heuristic.name
