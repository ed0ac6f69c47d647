"""The server's Prometheus metrics (GET /metrics)."""

import functools

from prometheus_client import Counter, Gauge, Histogram

REQUESTS = Counter("rlscore_suggest_requests_total", "Answered /suggest requests.", ["policy", "source"])
LATENCY = Histogram("rlscore_suggest_duration_seconds", "Time to answer /suggest.", ["policy", "source"],
                    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0))


@functools.cache
def answered(policy: str, source: str) -> tuple[Counter, Histogram]:
    """The answered-requests counter and latency histogram of one (policy, source): looked up once,
    not per request (labels() takes a lock and builds a key)."""
    return REQUESTS.labels(policy, source), LATENCY.labels(policy, source)


SELECTOR_RULES = Counter("rlscore_selector_rules_total", "Answers of a rule selector, by the hand-written rule it "
                         "picked.", ["policy", "rule"])


@functools.cache
def selector_rule(policy: str, rule: str) -> Counter:
    return SELECTOR_RULES.labels(policy, rule)


INVALID = Counter("rlscore_suggest_invalid_requests_total", "Rejected /suggest requests.", ["status"])
FALLBACKS = Counter("rlscore_fallbacks_total", "Answers from the heuristic instead of the model.",
                    ["policy", "reason"])
DEGRADED = Counter("rlscore_degraded_total", "Answers made with missing or stale node state.", ["reason"])
SNAPSHOT_AGE = Gauge("rlscore_snapshot_age_seconds", "Age of the node state snapshot.")
SNAPSHOT_NODES = Gauge("rlscore_snapshot_nodes", "Nodes in the state snapshot.")
KNOWN_NODES = Gauge("rlscore_known_nodes", "Nodes the server keeps state for (the node table's rows).")
PROMETHEUS_ERRORS = Counter("rlscore_prometheus_errors_total", "Prometheus queries that failed, by field and reason "
                            "(error, timeout, too_large, malformed).", ["field", "reason"])
MODEL_INFO = Gauge("rlscore_model_info", "The serving model per policy (value 1).", ["policy", "version"])
MODEL_LOAD_FAILURES = Counter("rlscore_model_load_failures_total", "Model files refused by validation.",
                              ["policy"])
# Staged rollout (suggestion_server/lifecycle/rollout.py): mean placement cost = cost_total / compared_total.
ROLLOUT_STAGE = Gauge("rlscore_rollout_stage", "1 for the rollout stage each policy is in (none, shadow, canary).",
                      ["policy", "stage"])
ROLLOUT_COMPARED = Counter("rlscore_rollout_compared_total", "Requests scored by both the serving model and "
                           "the candidate.", ["policy", "stage"])
ROLLOUT_AGREED = Counter("rlscore_rollout_agreed_total", "Compared requests on which both picked the same node.",
                         ["policy", "stage"])
ROLLOUT_COST = Counter("rlscore_rollout_placement_cost_total", "Sum of the placement cost (the policy's objective, "
                       "one step) of each one's pick.", ["policy", "model"])
ROLLOUT_DECIDED = Counter("rlscore_rollout_decisions_total", "Requests during a rollout, by who decided.",
                          ["policy", "model"])
ROLLOUT_TRANSITIONS = Counter("rlscore_rollout_transitions_total", "Rollout stage changes.",
                              ["policy", "to", "trigger"])
ROLLOUT_REFUSED = Counter("rlscore_rollout_refused_total", "Candidate files not staged (no passing gate verdict, "
                          "invalid file).", ["policy"])
# Drift (suggestion_server/lifecycle/drift.py)
DRIFT_SCORE = Gauge("rlscore_drift_signal", "Each drift signal's value against the serving model's training "
                    "profile (usage: ratio; requests: PSI; latency: relative change).", ["policy", "signal"])
DRIFT_FLAGGED = Gauge("rlscore_drift_flagged", "1 while drift is flagged for the policy.", ["policy"])
DRIFT_EVENTS = Counter("rlscore_drift_events_total", "Times drift was flagged.", ["policy"])
DRIFT_RETRAINS = Counter("rlscore_drift_retrains_total", "Retraining runs started on drift.", ["policy"])
REALIZED = Gauge("rlscore_realized", "The realized objective from the node metrics: active nodes, power (W), "
                 "hot-node share.", ["measure"])
