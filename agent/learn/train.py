"""`rlscore-train`: train one policy with DQN, A2C or PPO, or fit a rule selector, and write it, with its
sidecar, to models/.

The sidecar records every hyper-parameter, the seed, the wall time, the git commit, the model's
checksum and (unless --no-eval) the evaluation on held-out seeds against the baselines.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from rlscore.core.features import input_columns
from rlscore.core.model import MAX_HIDDEN_UNITS, ModelValidationError, load_model
from agent.learn.model_io import save_model, torch_network
from agent.learn.network import NodeScorer
from agent.learn.rewards import REWARD_VARIANTS
from agent.sim.families import FAMILIES, NODE_DRAWS
from rlscore.core.state import POLICIES

ALGORITHMS = ("dqn", "a2c", "ppo", "selector")
# Options a rule selector has no use for: it is fitted to its teachers' decisions, from scratch, on every
# input (agent.learn.selector); given with --algo selector, they are refused rather than dropped.
NOT_FOR_A_SELECTOR = ("kickstart", "kickstart_floor", "kickstart_fraction", "imitation_anneal", "dagger_rounds",
                  "dagger_steps", "extra_worlds", "critic_warmup", "blind_to", "init")


def config_for(algo: str, **values):
    """The algorithm's config dataclass, filled with `values`."""
    if algo == "dqn":
        from agent.learn.dqn import DQNConfig
        return DQNConfig(**values)
    if algo == "selector":
        from agent.learn.selector import SelectorConfig
        return SelectorConfig(**values)
    from agent.learn.actor_critic import ACConfig
    return ACConfig(algo=algo, **values)


def run(cfg, algo: str, init: NodeScorer | None = None) -> tuple[NodeScorer, dict]:
    if algo == "dqn":
        from agent.learn.dqn import train
    elif algo == "selector":
        from agent.learn.selector import train
    else:
        from agent.learn.actor_critic import train
    return train(cfg, init)


def save_trained(cfg, network: NodeScorer, record: dict, path: Path | None = None) -> Path:
    path = path or Path(cfg.out) / f"{cfg.policy.lower()}.safetensors"
    return save_model(path, network, cfg.policy, {**record, **cfg.extra_metadata})


def _families(text: str) -> tuple[str, ...]:
    names = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [n for n in names if n not in FAMILIES]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown family {bad}: expected some of {', '.join(FAMILIES)}")
    return names


def _widths(text: str) -> tuple[int, ...]:
    try:
        widths = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        widths = ()
    if not 1 <= len(widths) <= 8 or not all(1 <= w <= MAX_HIDDEN_UNITS for w in widths):
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated layer widths, each 1-{MAX_HIDDEN_UNITS}, at most 8 layers")
    return widths


def _inputs(text: str) -> tuple[str, ...]:
    if text.strip().lower() == "none":
        return ()
    names = tuple(x.strip() for x in text.split(",") if x.strip())
    try:
        input_columns(names)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return names


def _parser() -> argparse.ArgumentParser:
    from agent.learn.actor_critic import ACConfig
    from agent.learn.dqn import DQNConfig

    parser = argparse.ArgumentParser(prog="rlscore-train", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--policy", required=True, type=str.upper, choices=POLICIES)
    parser.add_argument("--algo", default="ppo", choices=ALGORITHMS,
                        help="dqn, a2c or ppo train a node scorer; selector fits a rule selector to the teachers "
                             "(agent/learn/selector.py: a network that picks which hand-written rule places each pod)")
    parser.add_argument("--reward", default="outcome", choices=REWARD_VARIANTS,
                        help="outcome: the objective over time; stepwise: wave 1's; thesis: the original")
    parser.add_argument("--no-shaping", action="store_true", help="outcome reward without potential-based shaping")
    parser.add_argument("--gamma", type=float, default=0.99, help="discount per decision")
    parser.add_argument("--timesteps", type=int, default=None,
                        help="placement decisions (default per algorithm; 0 with a2c/ppo: the teachers' clone "
                             "alone, no reinforcement learning)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--families", type=_families, default=None,
                        help="comma-separated scenario families (default: every family of the policy)")
    parser.add_argument("--node-draw", default="uniform", choices=NODE_DRAWS,
                        help="how each episode's cluster size (2..64 nodes) is drawn")
    parser.add_argument("--init", type=Path, default=None, help="fine-tune this model instead of starting afresh")
    parser.add_argument("--hidden", type=_widths, default=None,
                        help="equivariant layer widths, e.g. 128,128 (default 64,64; with --init: the model's own)")
    parser.add_argument("--blind-to", type=_inputs, default=None,
                        help="comma-separated inputs the network may not read: groups (latency, power, "
                             "extra-metrics) or feature names (default per policy: DEFAULT_BLIND_TO in "
                             "agent/learn/train.py; 'none' for none)")
    parser.add_argument("--profile", type=Path, default=None,
                        help="train on this cluster profile (rlscore-calibrate) instead of the scenario families")
    parser.add_argument("--kickstart", type=float, default=None,
                        help="a2c/ppo: initial weight of the pull towards each family's best baseline, "
                             "decaying to --kickstart-floor over --kickstart-fraction of the run (default 1.0 for a2c/ppo; 0 learns "
                             "from scratch)")
    parser.add_argument("--kickstart-fraction", type=float, default=0.8,
                        help="share of the run over which the pull towards the teachers decays to --kickstart-floor")
    parser.add_argument("--kickstart-floor", type=float, default=None,
                        help=f"weight the pull keeps for the rest of the run (default {DEFAULT_KICKSTART_FLOOR})")
    parser.add_argument("--imitation-steps", type=int, default=None,
                        help="a2c/ppo with teachers: supervised steps on the teachers' own trajectories before "
                             f"reinforcement learning (default {DEFAULT_IMITATION_STEPS} when kickstarting; 0: none)")
    parser.add_argument("--imitation-worlds", type=int, default=None,
                        help="worlds per family the teachers schedule: a2c/ppo with teachers, for the cloning "
                             "data (default: ACConfig.imitation_worlds, 12); a selector, for its fitting data "
                             "(default per policy: SELECTOR_WORLDS in agent/learn/selector.py)")
    parser.add_argument("--imitation-anneal", action=argparse.BooleanOptionalAction, default=None,
                        help="decay the cloning step size linearly to 0 (default: constant)")
    parser.add_argument("--dagger-rounds", type=int, default=0,
                        help="a2c/ppo with teachers: after cloning, rounds in which the actor schedules the "
                             "imitation worlds itself and the teachers label its decisions (DAgger; none by "
                             "default: measured on LB and EL it did worse, docs/training.md)")
    parser.add_argument("--dagger-steps", type=int, default=0,
                        help="supervised steps per DAgger round (default: half of --imitation-steps)")
    parser.add_argument("--critic-warmup", type=float, default=None,
                        help="after cloning or from --init: share of the run in which only the critic learns "
                             f"(default 0 after cloning, {INIT_CRITIC_WARMUP} from --init)")
    parser.add_argument("--learning-rate", type=float, default=None,
                        help="Adam step size (default per algorithm: dqn 5e-4; a2c/ppo 3e-4, annealed to 0)")
    parser.add_argument("--teacher", default=None,
                        help="per-family: each family's best baseline; per-size: each family's best per "
                             "cluster-size band (2-5, 6-20, 21+ nodes); overall: the one baseline best on "
                             "average over the families (consistent targets where families look alike); or a "
                             "baseline's name; `family=baseline` entries override one family (default per policy: "
                             "DEFAULT_TEACHER in agent/learn/train.py)")
    parser.add_argument("--extra-worlds", action="append", default=None, metavar="FAMILY=WORLDS@MIN-MAX",
                        help="a2c/ppo with teachers, repeatable: more cloning worlds of one family within a "
                             "size range, taught by that family's teachers, e.g. test2=32@3-5 (none by default; "
                             "ACConfig.extra_worlds says what it did for EE)")
    parser.add_argument("--teacher-futures", type=int, default=None,
                        help="per-world teachers: each imitation world is taught by the teachers' rule that does "
                             "best on its machines over this many arrival streams, where it beats the family's "
                             "teacher by more than 2%% (0: the family's or size band's teacher; default per policy: "
                             "DEFAULT_TEACHER_FUTURES in agent/learn/train.py; a selector: 0, "
                             "SelectorConfig.teacher_futures in agent/learn/selector.py)")
    parser.add_argument("--torch-threads", type=int, default=None,
                        help=f"most torch threads for the updates (default: a2c/ppo {ACConfig.torch_threads}, "
                             f"dqn {DQNConfig.torch_threads}); cloning takes "
                             "fewer while other work holds the cores, with the same weights (agent/learn/threads.py); "
                             "PPO's and DQN's weights depend on it")
    parser.add_argument("--out", default="models", help="output directory for <policy>.safetensors + .json")
    parser.add_argument("--name", default=None, help="file name (default <policy>.safetensors)")
    parser.add_argument("--log-dir", default="runs", help="TensorBoard logs ('' disables)")
    parser.add_argument("--no-eval", action="store_true", help="skip the evaluation recorded in the sidecar")
    parser.add_argument("--no-progress", action="store_true")
    return parser


# What fits the 15-minute budget on the 2-core reference machine (teacher picking included):
# PPO/A2C ~330 decisions/s while kickstarting, DQN ~42 (one environment, an update per decision).
DEFAULT_TIMESTEPS = {"dqn": 20_000, "a2c": 200_000, "ppo": 200_000, "selector": 0}
# Fine-tuning a trained model on one cluster's profile: a few minutes.
FINE_TUNE_TIMESTEPS = {"dqn": 4_000, "a2c": 40_000, "ppo": 40_000, "selector": 0}
# A model file holds the actor, not its critic: from --init, PPO's first advantages would come from a
# random critic. Fine-tuning the shipped EE on a 20-node churn profile for 3 000 steps without a
# warm-up made it 3% worse than where it started.
INIT_CRITIC_WARMUP = 0.25
DEFAULT_KICKSTART = 1.0
DEFAULT_KICKSTART_FLOOR = 0.2
# Supervised steps of cloning, per policy. LB's teacher on most families is now one-step-lb, whose
# choice turns on the whole candidate set's request imbalance: 10 000 steps copied it on 87.4% of
# held-out decisions (3 000: 85.9%) and met 16 goals against 15 (mean 1.015 of the best baseline
# against 1.072; docs/training.md), in 585 s of training.
DEFAULT_IMITATION_STEPS = {"EE": 3000, "LB": 10_000, "EL": 3000}
# LB: each family's best rule on training seeds, headroom-balance on usage-skew and one-step-lb elsewhere.
# The picking also chose headroom-balance on poisson, by less than 1% (1.045 vs 1.055 of the best per
# seed); taught so, the selector picked it on one-pool's alike-looking worlds too and was x1.029 of
# one-step-lb there (95% 1.002-1.061) and x1.021 on poisson at 3 nodes, so poisson keeps one-step-lb.
# Until 2026-11-28 usage-skew's teacher was LoadVariationRiskBalancing by override: the picking chose
# TargetLoadPacking (which packs) there while every other LB teacher spread, and cloned together they
# made the LB network fill a half-full node before an empty one (docs/training.md).
# EE: per size band, since which packing rule is best changes with the cluster's size (test2: one-step-ee
# up to 5 nodes, where MostAllocated is 1.10 of the best per seed), with two overrides where the picking's
# 10 seeds per band decide a coin flip (48 training seeds per band, 2026-11-28, docs/training.md "EE's
# teachers on 48 seeds"). test2: one-step-ee is best in the bands up to 5 and up to 20 nodes
# (MostAllocated 1.145 and 1.046 of the best per seed, one-step-ee 1.015 and 1.004) and ties it above; on
# 10 seeds the 6-20 band tied and the first of the tied rules, MostAllocated, taught it. hardware-unknown:
# MostAllocated and best-fit lie within 1% of each other in every band (one-step-ee 0.3% ahead of both
# above 20 nodes, 2-4% behind below), and which one the picking named changed with the seeds; with no
# power model efficient-first *is* MostAllocated, so MostAllocated teaches (the goal there is "no worse
# than MostAllocated"), and best-fit leaves the selector's rules.
# EL: per size band too; cloned with log-uniform sizes it met 41/44 goals (mean 0.985 of the best
# baseline, 8 evaluation seeds) where the per-family clone met 38/44 (1.118) and the stop-21 one 40/44.
DEFAULT_TEACHER = {"EE": "per-size,test2=one-step-ee,hardware-unknown=most-allocated",
                   "LB": "per-family,poisson=one-step-lb", "EL": "per-size"}
# EE: per-world teachers too (3 streams; agent.learn.teachers.world_teacher): 31/33 goals, mean 1.007
# of the best baseline (8 evaluation seeds), where the per-size clone met 30/33 (1.009); over training
# seeds 1-3, 29.7 goals on average against 28.7. Which packing rule wins a world depends on its
# machines. LB (17/23; usage-skew's LVRB replaced on 8 of 12 worlds) and EL (36/44) did worse with
# them (docs/training.md).
DEFAULT_TEACHER_FUTURES = {"EE": 3, "LB": 0, "EL": 0}
# Inputs each policy's network is trained blind to (rlscore.core.features.INPUT_GROUPS). LB's objective and
# its teachers read neither latency nor power, but its clone did: on one node pool its choices followed
# which nodes' power is known. Blind to power alone it met 19/23 goals on the evaluation seeds (mean
# 1.011 of the best baseline) and 21/23 on the hold-out seeds (training seed 1; seed 2: 16/23). Blind to
# latency too it met 18 and 19/23 (seeds 1 and 2) but lost usage-skew by 16-19%: there the clone uses
# each node's latency as a fixed order of preference among nodes that look alike (with latency shuffled
# at every decision, the power-blind clone's usage-skew objective goes from 0.482 to 0.612;
# docs/training.md). EE blind to latency met 29/33, where the same recipe reading it met 30/33
# (measured 2026-11-25) and the shipped EE 31/33: EE reads everything still.
DEFAULT_BLIND_TO: dict[str, tuple[str, ...]] = {"EE": (), "LB": ("power",), "EL": ()}


# Options that only act through the teachers (with --kickstart > 0); given without them, refused.
TEACHER_OPTIONS = ("kickstart_fraction", "kickstart_floor", "imitation_steps", "imitation_worlds",
                   "imitation_anneal", "teacher", "teacher_futures", "dagger_rounds", "dagger_steps",
                   "extra_worlds")


def _teacher_options_given(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    given = [name for name in TEACHER_OPTIONS if getattr(args, name) != parser.get_default(name)]
    return ["--" + name.replace("_", "-") for name in given]


def parse_extra_worlds(specs: list[str] | tuple[str, ...], trained_on: tuple[str, ...], min_nodes: int,
                       max_nodes: int) -> list[list]:
    """`FAMILY=WORLDS@MIN-MAX` entries as ACConfig.extra_worlds; ValueError names the bad entry."""
    parsed = []
    for spec in specs:
        family_name, _, rest = spec.partition("=")
        count, _, span = rest.partition("@")
        low, _, high = span.partition("-")
        try:
            worlds, low_n, high_n = int(count), int(low), int(high)
        except ValueError:
            raise ValueError(f"{spec!r}: expected FAMILY=WORLDS@MIN-MAX, e.g. test2=32@3-5") from None
        family_name = family_name.strip()
        if family_name not in trained_on:
            raise ValueError(f"{spec!r}: {family_name!r} is not one of the families trained on "
                             f"({', '.join(trained_on)})")
        if worlds < 1:
            raise ValueError(f"{spec!r}: the number of worlds must be >= 1")
        if not min_nodes <= low_n <= high_n <= max_nodes:
            raise ValueError(f"{spec!r}: the node range must lie within {min_nodes}-{max_nodes} and start at its "
                             "lower end")
        parsed.append([family_name, worlds, low_n, high_n])
    return parsed


def default_teacher(policy: str, families: tuple[str, ...]) -> str:
    """DEFAULT_TEACHER without its overrides for families not trained on: a cluster profile is a family
    of its own, and LB's usage-skew override (until 2026-11-28) made `rlscore-train --policy LB --profile ...
    --kickstart 1` refuse to start."""
    parts = [p for p in DEFAULT_TEACHER[policy].split(",") if "=" not in p or p.split("=")[0].strip() in families]
    return ",".join(parts)


def _selector_refusals(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """The options given that a rule selector has no use for."""
    given = [name for name in NOT_FOR_A_SELECTOR if getattr(args, name) != parser.get_default(name)]
    if args.timesteps not in (None, 0):
        given.append("timesteps")
    return ["--" + name.replace("_", "-") for name in given]


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    selector = args.algo == "selector"
    if selector and (refused := _selector_refusals(parser, args)):
        print(f"rlscore-train: {', '.join(refused)}: a rule selector is fitted afresh to its teachers' decisions, on "
              "every input, with no reinforcement learning (agent/learn/selector.py); leave them out", file=sys.stderr)
        return 2
    fine_tune = args.init is not None and args.profile is not None
    timesteps = args.timesteps if args.timesteps is not None else (
        FINE_TUNE_TIMESTEPS if fine_tune else DEFAULT_TIMESTEPS)[args.algo]
    if args.learning_rate is not None and not args.learning_rate > 0:
        print("rlscore-train: --learning-rate must be > 0", file=sys.stderr)
        return 2
    if args.critic_warmup is not None and not 0 <= args.critic_warmup <= 1:
        print("rlscore-train: --critic-warmup is a share of the run, 0..1", file=sys.stderr)
        return 2
    if timesteps < 0 or (timesteps == 0 and args.algo == "dqn"):
        print("rlscore-train: --timesteps must be >= 1 (0 with a2c/ppo: the teachers' clone alone)", file=sys.stderr)
        return 2
    if args.torch_threads is not None and not 1 <= args.torch_threads <= 256:
        print("rlscore-train: --torch-threads must be 1..256", file=sys.stderr)
        return 2
    if args.hidden is not None and args.init is not None:
        print("rlscore-train: --hidden and --init exclude each other (fine-tuning keeps the model's widths)",
              file=sys.stderr)
        return 2
    families, sizes, extra = args.families or (), {}, {}
    if args.profile is not None:
        if args.families:
            print("rlscore-train: --profile and --families exclude each other", file=sys.stderr)
            return 2
        from rlscore.core.profile import ProfileError, load_profile
        from agent.sim.cluster_profile import profile_world, register_profile
        try:
            profile = load_profile(args.profile)
        except ProfileError as exc:
            print(f"rlscore-train: --profile: {exc}", file=sys.stderr)
            return 2
        families = (register_profile(profile),)
        size = len(profile_world(profile).nodes)
        sizes = {"min_nodes": size, "max_nodes": size}
        # stored with the model: what it was trained for (the server's drift check compares with it)
        extra = {"training_profile": profile.model_dump(by_alias=True, mode="json")}
    init = None
    if args.init is not None:
        try:
            init = torch_network(load_model(args.init, expected_policy=args.policy))
        except ModelValidationError as exc:
            print(f"rlscore-train: --init: {exc}", file=sys.stderr)
            return 2
        if not isinstance(init, NodeScorer):
            print(f"rlscore-train: --init: {args.init} is a rule selector; a selector is fitted afresh to its teachers "
                  "(--algo selector), not fine-tuned", file=sys.stderr)
            return 2
    cfg = config_for(args.algo, policy=args.policy, total_timesteps=timesteps, seed=args.seed, reward=args.reward,
                     shaping=not args.no_shaping, gamma=args.gamma, node_draw=args.node_draw,
                     families=families, out=args.out, log_dir=args.log_dir,
                     progress=not args.no_progress, init=str(args.init or ""), profile=str(args.profile or ""),
                     extra_metadata=extra, **sizes,
                     blind_to=() if selector else (args.blind_to if args.blind_to is not None
                                                   else DEFAULT_BLIND_TO[args.policy]),
                     **({"hidden": tuple(init.hidden)} if init is not None else {}),
                     **({"hidden": args.hidden} if args.hidden is not None else {}),
                     **({"learning_rate": args.learning_rate} if args.learning_rate is not None else {}),
                     **({"torch_threads": args.torch_threads} if args.torch_threads is not None else {}))
    if init is not None:
        cfg.critic_warmup_fraction = args.critic_warmup if args.critic_warmup is not None else INIT_CRITIC_WARMUP
    started = time.time()
    # a trained model is already past what the teachers know: fine-tuning starts from it, not from them
    default_kickstart = DEFAULT_KICKSTART if args.algo != "dqn" and args.init is None else 0.0
    kickstart = args.kickstart if args.kickstart is not None else default_kickstart
    if selector and args.imitation_steps is not None and args.imitation_steps < 1:
        print("rlscore-train: --imitation-steps must be >= 1 for a rule selector (its gradient steps)", file=sys.stderr)
        return 2
    if not selector and timesteps == 0 and (kickstart <= 0 or args.imitation_steps == 0):
        print("rlscore-train: --timesteps 0 needs teachers to clone (--kickstart > 0, --imitation-steps > 0)",
              file=sys.stderr)
        return 2
    if kickstart <= 0 and (ignored := _teacher_options_given(parser, args)):
        # without the pull there are no teachers, and these options would be dropped without a word
        why = ("dqn has no teachers" if args.algo == "dqn" else
               f"--kickstart {kickstart:g}" if args.kickstart is not None else
               "fine-tuning starts from the model, not from teachers")
        print(f"rlscore-train: {', '.join(ignored)} set how the teachers teach, and there are none here ({why}): "
              "give --kickstart > 0 with a2c/ppo, or leave them out", file=sys.stderr)
        return 2
    uses_teachers = selector or kickstart > 0
    if args.imitation_worlds is not None and args.imitation_worlds < 1:
        print("rlscore-train: --imitation-worlds must be >= 1", file=sys.stderr)
        return 2
    if selector:
        if args.imitation_steps is not None:
            cfg.imitation_steps = args.imitation_steps
        from agent.learn.selector import SELECTOR_WORLDS
        cfg.imitation_worlds = (args.imitation_worlds if args.imitation_worlds is not None
                                else SELECTOR_WORLDS[args.policy])
    elif kickstart > 0:
        if args.algo == "dqn":
            print("rlscore-train: --kickstart applies to a2c and ppo", file=sys.stderr)
            return 2
        cfg.kickstart_floor = args.kickstart_floor if args.kickstart_floor is not None else DEFAULT_KICKSTART_FLOOR
        if not 0 <= cfg.kickstart_floor <= kickstart:
            print(f"rlscore-train: --kickstart-floor must be in 0..{kickstart} (the --kickstart weight)", file=sys.stderr)
            return 2
        cfg.imitation_steps = (args.imitation_steps if args.imitation_steps is not None
                               else DEFAULT_IMITATION_STEPS[args.policy])
        if cfg.imitation_steps < 0:
            print("rlscore-train: --imitation-steps must be >= 0", file=sys.stderr)
            return 2
        if args.imitation_worlds is not None:
            cfg.imitation_worlds = args.imitation_worlds
        if args.imitation_anneal is not None:
            cfg.imitation_anneal = args.imitation_anneal
        cfg.dagger_rounds, cfg.dagger_steps = args.dagger_rounds, args.dagger_steps
        if cfg.dagger_rounds < 0 or cfg.dagger_steps < 0:
            print("rlscore-train: --dagger-rounds and --dagger-steps must be >= 0", file=sys.stderr)
            return 2
        if cfg.dagger_rounds and not cfg.imitation_steps:
            print("rlscore-train: --dagger-rounds continues cloning: it needs --imitation-steps > 0", file=sys.stderr)
            return 2
    if uses_teachers:
        default_futures = cfg.teacher_futures if selector else DEFAULT_TEACHER_FUTURES[args.policy]
        teacher_futures = args.teacher_futures if args.teacher_futures is not None else default_futures
        if teacher_futures < 0:
            print("rlscore-train: --teacher-futures must be >= 0", file=sys.stderr)
            return 2
        from agent.learn.teachers import TeacherError, assign_teachers
        from agent.sim.families import families_for
        trained_on = families or families_for(args.policy)
        try:
            extra_worlds = parse_extra_worlds(args.extra_worlds or [], trained_on, cfg.min_nodes, cfg.max_nodes)
        except ValueError as exc:
            print(f"rlscore-train: --extra-worlds {exc}", file=sys.stderr)
            return 2
        print("picking teachers (every baseline on training seeds) ...", file=sys.stderr)
        try:
            picked = assign_teachers(args.policy, trained_on, args.teacher or default_teacher(args.policy, trained_on))
        except TeacherError as exc:
            print(f"rlscore-train: --teacher: {exc}", file=sys.stderr)
            return 2
        cfg.teachers = {family: p["teacher"] for family, p in picked.items()}
        cfg.teacher_futures = teacher_futures
        if not selector:
            cfg.kickstart, cfg.kickstart_fraction = kickstart, args.kickstart_fraction
            cfg.extra_worlds = extra_worlds
            if args.critic_warmup is not None:
                cfg.critic_warmup_fraction = args.critic_warmup
        print("teachers: " + ", ".join(f"{f}: {t}" for f, t in cfg.teachers.items()), file=sys.stderr)
    network, record = run(cfg, args.algo, init)
    record["training"]["wall_seconds"] = round(time.time() - started, 1)  # teacher picking included
    if uses_teachers:
        record["training"]["teachers"] = picked
    record["training"]["command"] = "rlscore-train " + " ".join(argv if argv is not None else sys.argv[1:])
    path = save_trained(cfg, network, record, Path(args.out) / args.name if args.name else None)
    if not args.no_eval:
        # Record how the policy does against the baselines on held-out seeds, in the sidecar.
        from agent.evaluate.shipped import evaluate_shipped_model
        evaluate_shipped_model(path, progress=not args.no_progress, families=families or None)
    training = record["training"]
    rate = f", {training['steps_per_second']} environment steps/s" if training["steps"] else ""  # none when fitted
    print(f"wrote {path} ({training['wall_seconds']} s{rate})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
