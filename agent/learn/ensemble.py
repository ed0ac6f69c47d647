"""Several trained scorers served as one: the mean of their values, as a single wider NodeScorer.

Clones of the same teachers from different seeds depart from them on different decisions (a
clone's goals move by 2-3 per seed range from chance alone, docs/training.md); the mean of their
logits departs only where they agree to. DeepSets layers pool each channel on its own, so networks
of the same depth placed side by side are one network: the first layer stacks their output
channels, the hidden layers are block-diagonal (a block never reads another's channels), and the
last layer takes the mean of their outputs. The result is an ordinary NodeScorer (hidden widths
summed), so the server, the export and the plugin's in-process scorer serve it unchanged.

    python -m agent.learn.ensemble models/lb.pt /tmp/cand/lb-s1.pt /tmp/cand/lb-s2.pt
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from agent.learn.model_io import LoadedModel, ModelValidationError, load_model, save_model, sidecar_path
from agent.learn.network import NodeScorer


def mean_network(networks: list[NodeScorer]) -> NodeScorer:
    """One NodeScorer whose output is the mean of the given networks' outputs (same depth and inputs)."""
    if not networks:
        raise ValueError("an ensemble needs at least one network")
    depth = {len(n.hidden) for n in networks}
    inputs = {(n.node_features, n.pod_features) for n in networks}
    if len(depth) != 1 or len(inputs) != 1:
        raise ValueError(f"networks differ in depth {sorted(depth)} or inputs {sorted(inputs)}: they cannot be "
                         "placed side by side")
    widths = [n.hidden for n in networks]
    combined = NodeScorer(tuple(sum(w[i] for w in widths) for i in range(len(widths[0]))),
                          networks[0].node_features, networks[0].pod_features)
    last = len(combined.layers) - 1
    with torch.no_grad():
        for index, layer in enumerate(combined.layers):
            for name in ("Lambda", "Gamma", "Delta"):
                parts = [getattr(n.layers[index], name).weight for n in networks]
                if index == 0:
                    weight = torch.cat(parts, dim=0)  # every member reads the same inputs
                elif index == last:
                    weight = torch.cat(parts, dim=1) / len(networks)  # the mean of the members' outputs
                else:
                    weight = torch.block_diag(*parts)
                getattr(layer, name).weight.copy_(weight)
            biases = [n.layers[index].Lambda.bias for n in networks]
            layer.Lambda.bias.copy_(torch.stack(biases).mean(dim=0) if index == last else torch.cat(biases))
    return combined.eval()


def save_ensemble(out: Path, members: list[Path]) -> Path:
    """Write the mean of the member models to `out`, its sidecar recording each member's training."""
    loaded = [load_model(path) for path in members]
    if any(not isinstance(m, LoadedModel) for m in loaded):
        raise ModelValidationError("an ensemble is made of trained models, not of a file naming a heuristic")
    policies = {m.policy for m in loaded}
    if len(policies) != 1:
        raise ModelValidationError(f"members hold different policies: {sorted(policies)}")
    network = mean_network([m.network for m in loaded])
    trainings = [m.metadata.get("training", {}) for m in loaded]
    training = {
        "algorithm": "mean of " + "; ".join(t.get("algorithm", "?") for t in trainings),
        "command": " && ".join(t.get("command", "?") for t in trainings)
                   + f" && python -m agent.learn.ensemble {out} " + " ".join(map(str, members)),
        "members": [{"file": path.name, "sha256": m.metadata.get("sha256"), "training": t}
                    for path, m, t in zip(members, loaded, trainings)],
        # the members are trained one after the other: the ensemble's training is their sum
        "seconds": sum(float(t.get("seconds", 0.0)) for t in trainings),
        "wall_seconds": sum(float(t.get("wall_seconds", 0.0)) for t in trainings),
        "steps": sum(int(t.get("steps", 0)) for t in trainings),
        "seed": [t.get("seed") for t in trainings],
        "hyperparameters": {"members": [t.get("hyperparameters", {}) for t in trainings]},
        "git_commit": [t.get("git_commit") for t in trainings],
    }
    return save_model(out, network, loaded[0].policy, {"training": training})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agent.learn.ensemble", description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the ensemble's model file (its sidecar is written beside it)")
    parser.add_argument("members", type=Path, nargs="+", help="trained model files of one policy")
    args = parser.parse_args(argv)
    if args.out.resolve() in {m.resolve() for m in args.members}:
        print(f"error: {args.out} is also a member; write the ensemble to another file", file=sys.stderr)
        return 2
    try:
        path = save_ensemble(args.out, args.members)
    except (ModelValidationError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    meta = json.loads(sidecar_path(path).read_text())
    print(f"wrote {path}: {meta['policy']}, hidden {load_model(path).network.hidden}, "
          f"{len(args.members)} members, {meta['training']['wall_seconds']:.0f} s of training in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
