"""`rlscore-train`: train one policy by DQN from demonstrations (agent/learn/dqn.py) and write it, with
its sidecar, to models/.

Every hyper-parameter of DQNConfig is an option (`--n-step 8`, `--demonstrations-only`, ...), with its
docstring as help. The sidecar records them all, the seed, the wall time, the git commit, the model's
checksum and (unless --no-eval) the evaluation on held-out seeds against every rule of the policy.

    rlscore-train --policy EE                      # the shipped recipe (~10-20 minutes on 2 cores)
    rlscore-train --policy LB --demonstrations-only --name lb-demonstrations.safetensors
    rlscore-train --policy EE --profile cluster.yaml --init models/ee.safetensors   # fine-tune on a cluster
    rlscore-train --policy LB --total-timesteps 120000 --members 4   # four runs distilled into one network
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import sys
import time
import typing
from pathlib import Path

from agent.learn.dqn import DQNConfig
from agent.parallel import add_ray_argument, use_ray
from rlscore.core.state import POLICIES

# set by the command line's own options (or not options at all)
NOT_OPTIONS = {"policy", "out", "progress", "init", "profile", "extra_metadata", "teachers"}


def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each dataclass field, as cleanrl's configs document them."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        body = ast.parse(inspect.getsource(klass)).body[0].body
        for node, following in zip(body, body[1:]):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)):
                docs[node.target.id] = " ".join(str(following.value.value).split())
    return docs


def _tuple_of(kind):
    def parse(text: str) -> tuple:
        items = tuple(x.strip() for x in text.split(",") if x.strip())
        try:
            return tuple(kind(x) for x in items)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected a comma-separated list") from None
    return parse


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlscore-train", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--policy", required=True, type=str.upper, choices=POLICIES)
    parser.add_argument("--init", type=Path, default=None, help="fine-tune this model instead of starting afresh")
    parser.add_argument("--profile", type=Path, default=None,
                        help="train on this cluster profile (rlscore-calibrate's output) instead of the scenario "
                             "families; its best rules teach")
    parser.add_argument("--out", default="models", help="output directory")
    parser.add_argument("--name", default=None, help="file name (default <policy>.safetensors, with "
                                                      "--demonstrations-only <policy>-demonstrations.safetensors)")
    parser.add_argument("--no-eval", action="store_true", help="skip the evaluation recorded in the sidecar")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--teacher", action="append", default=[], metavar="FAMILY=RULE",
                        help="teach this family's worlds by this rule instead of its default (repeatable); a family "
                             "without one (mixed) has each world's teacher picked on its own machines")
    add_ray_argument(parser)
    docs = field_docs(DQNConfig)
    hints = typing.get_type_hints(DQNConfig)
    for f in dataclasses.fields(DQNConfig):
        if f.name in NOT_OPTIONS:
            continue
        flag, kind = "--" + f.name.replace("_", "-"), hints[f.name]
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        options = {"default": default, "help": docs.get(f.name, "")}
        if kind is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, **options)
        elif typing.get_origin(kind) is tuple:
            item = typing.get_args(kind)[0]
            parser.add_argument(flag, type=_tuple_of(item), **{**options, "default": default})
        else:
            parser.add_argument(flag, type=kind, **options)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    use_ray(args.ray_address)
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(DQNConfig) if f.name not in NOT_OPTIONS}
    extra: dict = {}
    if args.profile is not None:
        if args.families:
            parser.error("--profile and --families exclude each other")
        from agent.sim.cluster_profile import profile_world, register_profile
        from rlscore.core.profile import ProfileError, load_profile
        try:
            profile = load_profile(args.profile)
        except ProfileError as exc:
            print(f"rlscore-train: --profile: {exc}", file=sys.stderr)
            return 2
        size = len(profile_world(profile).nodes)
        values.update(families=(register_profile(profile),), min_nodes=size, max_nodes=max(size, 2))
        # stored with the model: what it was trained for (the server's drift check compares with it)
        extra["training_profile"] = profile.model_dump(by_alias=True, mode="json")
    init = None
    if args.init is not None:
        from agent.learn.model_io import torch_network
        from agent.learn.network import NodeScorer
        from rlscore.core.model import ModelValidationError, load_model
        try:
            start = load_model(args.init, expected_policy=args.policy)
        except ModelValidationError as exc:
            print(f"rlscore-train: --init: {exc}", file=sys.stderr)
            return 2
        init = torch_network(start)
        if getattr(start, "anchor", None) is not None:
            print(f"rlscore-train: --init: {args.init} is anchored on a rule selector: train it afresh with --anchor",
                  file=sys.stderr)
            return 2
        if not isinstance(init, NodeScorer):
            print(f"rlscore-train: --init: {args.init} is a rule selector, not a node scorer: train afresh",
                  file=sys.stderr)
            return 2
        values["hidden"] = tuple(init.hidden)
    if args.anchor:
        from agent.learn.anchor import SelectorAnchor
        from rlscore.core.model import ModelValidationError
        try:
            SelectorAnchor(args.anchor, args.policy, 1.0)  # refused here, before any work is done
        except ModelValidationError as exc:
            print(f"rlscore-train: --anchor: {exc}", file=sys.stderr)
            return 2
    if args.teacher:
        from agent.learn.dqn import TEACHERS
        from agent.sim.families import family
        from rlscore.core.rules import RULES
        teachers = dict(TEACHERS[args.policy])
        for item in args.teacher:
            name, _, rule = (part.strip() for part in item.partition("="))
            if not rule or rule not in RULES:
                parser.error(f"--teacher {item!r}: expected FAMILY=RULE with a rule of {', '.join(sorted(RULES))}")
            try:
                family(name)
            except ValueError as exc:
                parser.error(f"--teacher {item!r}: {exc}")
            teachers[name] = rule
        values["teachers"] = teachers
    try:
        cfg = DQNConfig(policy=args.policy, out=args.out, progress=not args.no_progress, init=str(args.init or ""),
                        profile=str(args.profile or ""), extra_metadata=extra, **values)
    except ValueError as exc:
        print(f"rlscore-train: {exc}", file=sys.stderr)
        return 2
    from agent.learn.dqn import train
    from agent.learn.model_io import save_model

    # the twin never takes the DQN's (or the shipped model's) file unless told to
    twin = "-demonstrations" if cfg.demonstrations_only else ""
    path = Path(args.out) / (args.name or f"{cfg.policy.lower()}{twin}.safetensors")
    started = time.time()
    if cfg.members > 1:
        from agent.learn.distill import distil_runs
        network, record = distil_runs(cfg, init, path.with_name(path.stem + "-members"))
    else:
        network, record = train(cfg, init)
    record["training"]["wall_seconds"] = round(time.time() - started, 1)
    record["training"]["command"] = "rlscore-train " + " ".join(argv if argv is not None else sys.argv[1:])
    anchor = None
    if cfg.anchor:
        from agent.learn.anchor import SelectorAnchor
        anchor = SelectorAnchor(cfg.anchor, cfg.policy, cfg.anchor_weight, cfg.anchor_on)
    save_model(path, network, cfg.policy, {**record, **cfg.extra_metadata}, anchor)
    if not args.no_eval:
        # how the policy does against the rules on held-out seeds, in the sidecar
        from agent.evaluate.shipped import evaluate_shipped_model
        evaluate_shipped_model(path, progress=cfg.progress, families=cfg.families or None)
    training = record["training"]
    print(f"wrote {path} ({training['wall_seconds']} s, {training['gradient_steps']} gradient steps, "
          f"{training['interaction_steps']} environment steps)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
