"""A tuned `ScoreConfig` as a KubeSchedulerConfiguration profile the stock kube-scheduler runs.

The profile starts from the scheduler's defaults and changes only the resource scoring: the
NodeResourcesFit plugin weight and scoring strategy (with resource weights and, for
RequestedToCapacityRatio, its shape), and the NodeResourcesBalancedAllocation weight, or disables it
everywhere when its weight is 0. plugin-go's TestTunedExamplesLoad and TestTunedProfileScoresMatchPython
load the file with kube-scheduler's
own loader and checks the scores it gives against `kube_scores.node_scores`.
"""

from __future__ import annotations

from typing import Any

import yaml

from agent.tune.kube_scores import ScoreConfig

PROFILE_NAME = "rl-tuned"
RLSCORE_URL = "http://rlscore-suggestion-server.rlscore-system.svc:8000/suggest"


def profile(config: ScoreConfig, scheduler_name: str = PROFILE_NAME, suggestion_url: str = RLSCORE_URL
            ) -> dict[str, Any]:
    strategy: dict[str, Any] = {
        "type": config.strategy,
        "resources": [{"name": "cpu", "weight": config.cpu_weight}, {"name": "memory", "weight": config.memory_weight}],
    }
    if config.strategy == "RequestedToCapacityRatio":
        strategy["requestedToCapacityRatio"] = {
            "shape": [{"utilization": u, "score": s} for u, s in config.shape]}
    score_enabled = [{"name": "NodeResourcesFit", "weight": config.fit_weight}]
    plugins: dict[str, Any] = {}
    if config.balanced_weight:
        score_enabled.append({"name": "NodeResourcesBalancedAllocation", "weight": config.balanced_weight})
    else:
        plugins["multiPoint"] = {"disabled": [{"name": "NodeResourcesBalancedAllocation"}]}
    plugin_config: list[dict[str, Any]] = [{"name": "NodeResourcesFit", "args": {"scoringStrategy": strategy}}]
    if config.rlscore_weight:
        plugins["multiPoint"] = {**plugins.get("multiPoint", {}),
                                 "enabled": [{"name": "RLScore", "weight": config.rlscore_weight}]}
        plugin_config.append({"name": "RLScore", "args": {"suggestionURL": suggestion_url, "inProcess": True}})
    plugins["score"] = {"enabled": score_enabled}
    return {"schedulerName": scheduler_name, "plugins": plugins, "pluginConfig": plugin_config}


def kube_scheduler_configuration(config: ScoreConfig, scheduler_name: str = PROFILE_NAME,
                                 comment: str | None = None) -> str:
    """The whole configuration file: the default profile plus the tuned one beside it."""
    doc = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": False},
        "profiles": [{"schedulerName": "default-scheduler"}, profile(config, scheduler_name)],
    }
    text = yaml.safe_dump(doc, sort_keys=False)
    if comment:
        text = "".join(f"# {line}\n" if line else "#\n" for line in comment.splitlines()) + text
    return text
