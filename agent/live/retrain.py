"""`rlscore-retrain`: calibrate -> fine-tune -> gate -> hand over, for one policy.

What the retraining CronJob (deploy/overlays/retraining) and `make retrain` run, and what the
server's drift hook can start: a cluster profile from the window's history (rlscore-calibrate), the
serving model fine-tuned on it (rlscore-train --profile --init; from scratch when no valid model
serves), the promotion gate on held-out seeds of the profile (rlscore-gate), and, when the gate
passes, the candidate installed in the server's candidate directory, where the server stages it
(shadow, canary, serving). A refused candidate stays in the work directory and changes nothing.
Every step's output and timing is written to <work>/retrain.json.

Fine-tuning is DQN from demonstrations on the profile (agent/learn/dqn.py): the rules that do best on
the profile's own machines demonstrate, the start model's weights are where the network begins, and the
outcome reward decides where it departs from both. A start that is not a node scorer (a rule selector,
a rule's model file) is not a starting point: the candidate then learns from the demonstrations afresh.

With `--start-from` (e.g. the image's shipped model), fine-tuning starts from whichever valid model
does best on the profile, the serving one included, measured on seeds of the profile that the gate
never uses: a serving model that has gone stale is not the best starting point for its successor.

The same seeds measure the policy's rules, so that the record says how far the start is from the best
of them.

When the gate refuses the retrained candidate and fine-tuning started from a model other than the
serving one, that start model itself is judged by the same rule (its objective below the serving
model's and the best rule's), on the refused judgement's seeds: fine-tuning can make a model worse, and
the model it started from should not lose the cluster to a rule for that. When the start is refused too, the serving
model may still have fallen behind the best heuristic (on the local cluster's four like nodes a
stale model used twice the nodes best-fit did, and a retrained one only tied best-fit). Then that
heuristic, chosen on the start seeds, is judged as the candidate (rlscore-gate's rule for a
heuristic: ahead of the serving model beyond noise) and handed over in its place: the server rolls
it out like a model, and a later retrained model has to beat it. `--no-heuristic-fallback` hands
over no rule (the start model still may be).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from rlscore.core.state import POLICIES
from agent.parallel import add_ray_argument, use_ray

START_SEED_BASE = 4 * 10**6  # the profile's seeds that choose the starting model; the gate judges on others
# fine-tuning on one cluster: a few minutes (rlscore-train's options)
FINE_TUNING = ("--demo-worlds", "24", "--pretrain-steps", "1000", "--total-timesteps", "8000")


def _step(name: str, record: dict, fn):
    print(f"==> {name}", file=sys.stderr, flush=True)
    t0 = time.monotonic()
    result = fn()
    record["seconds"][name] = round(time.monotonic() - t0, 1)
    print(f"    {name}: {record['seconds'][name]} s", file=sys.stderr, flush=True)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rlscore-retrain", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--policy", required=True, type=str.upper, choices=POLICIES)
    parser.add_argument("--prometheus", required=True, help="Prometheus base URL")
    parser.add_argument("--prometheus-ca-file", type=Path, default=None,
                        help="CA bundle that signs an https Prometheus's certificate (default: the system's CAs)")
    parser.add_argument("--prometheus-insecure-skip-verify", action="store_true",
                        help="do not verify an https Prometheus's certificate")
    parser.add_argument("--kubeconfig", default=None, help="default: in-cluster, else KUBECONFIG or ~/.kube/config")
    parser.add_argument("--window", default="1h", help="history to calibrate from, e.g. 30m, 6h")
    parser.add_argument("--query", action="append", default=[], metavar="NAME=PROMQL",
                        help="handed to rlscore-calibrate: replace one of its series queries (agent/live/history.py "
                             "QUERIES), e.g. node_cpu_busy=<the server's RLSCORE_CPU_QUERY>")
    parser.add_argument("--metrics-interval", type=float, default=5.0,
                        help="how stale the server's node metrics are (its RLSCORE_REFRESH_INTERVAL_S), seconds")
    parser.add_argument("--model-dir", type=Path, default=Path("models"), help="the server's model directory")
    parser.add_argument("--candidate-dir", type=Path, default=None, help="default <model-dir>/candidates")
    parser.add_argument("--work", type=Path, default=Path("retrain"), help="profile, candidate and record go here")
    parser.add_argument("--timesteps", type=int, default=None,
                        help=f"fine-tuning's environment steps (default {FINE_TUNING[-1]})")
    parser.add_argument("--start-from", type=Path, action="append", default=[], metavar="MODEL",
                        help="another model to start from, e.g. the image's shipped one (repeatable): the best "
                             "on the profile, the serving model included, is fine-tuned")
    parser.add_argument("--seeds", type=int, default=None,
                        help="held-out seeds the gate judges on, and as many apart from them that choose the "
                             "starting model (default: rlscore-gate's, by the profile's size)")
    parser.add_argument("--margin", type=float, default=0.0, help="improvement the gate requires")
    parser.add_argument("--no-heuristic-fallback", action="store_true",
                        help="when the gate refuses the retrained candidate, do not hand over the best heuristic "
                             "in its place (even where it beats the serving model beyond noise)")
    parser.add_argument("--server", default=None, help="suggestion server URL: stage the candidate at once "
                                                       "(otherwise the server's watch finds it)")
    parser.add_argument("--token-file", type=Path, default=None, help="bearer token for the server's rollout API")
    add_ray_argument(parser)
    parser.add_argument("--actors", type=int, default=0,
                        help="with --ray-address: environment actors the fine-tuning plays on (rlscore-train --actors)")
    args = parser.parse_args(argv)
    use_ray(args.ray_address)

    from agent.evaluate import gate
    from agent.learn import train
    from rlscore.core.model import install_model
    from agent.live import calibrate

    policy, low = args.policy, args.policy.lower()
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    record: dict = {"policy": policy, "started": time.time(), "seconds": {}, "command": "rlscore-retrain " + " ".join(
        argv if argv is not None else sys.argv[1:])}
    profile = work / "cluster.yaml"
    candidate = work / f"{low}.safetensors"
    serving = args.model_dir / f"{low}.safetensors"
    started = time.monotonic()

    def finish(code: int, outcome: str) -> int:
        record["outcome"], record["seconds"]["total"] = outcome, round(time.monotonic() - started, 1)
        (work / "retrain.json").write_text(json.dumps(record, indent=2) + "\n")
        print(f"{outcome} ({record['seconds']['total']} s; see {work / 'retrain.json'})")
        return code

    calibrate_args = ["--prometheus", args.prometheus, "--window", args.window, "--out", str(profile),
                      "--name", f"retrain-{low}", "--metrics-interval", repr(args.metrics_interval)] + (
                         ["--kubeconfig", args.kubeconfig] if args.kubeconfig else [])
    calibrate_args += (["--prometheus-ca-file", str(args.prometheus_ca_file)] if args.prometheus_ca_file else []) + (
        ["--prometheus-insecure-skip-verify"] if args.prometheus_insecure_skip_verify else [])
    calibrate_args += [f"--query={q}" for q in args.query]
    if _step("calibrate", record, lambda: calibrate.main(calibrate_args)) != 0:
        return finish(2, "calibration failed")

    start, record["init"] = _step("choose start", record, lambda: choose_start(policy, [serving, *args.start_from],
                                                                                 profile, args.seeds))
    print(_describe_start(start, record["init"]), file=sys.stderr)
    train_args, record["training"] = training_args(policy, start, record["init"], profile, work, candidate.name,
                                                   args.timesteps)
    print(f"    {record['training']['reason']}", file=sys.stderr)
    if args.ray_address:
        train_args += [f"--ray-address={args.ray_address}", f"--actors={args.actors}"]
    if _step("train", record, lambda: train.main(train_args)) != 0:
        return finish(2, "training failed")

    verdict = _step("gate", record, lambda: gate.judge(policy, candidate, serving, profile, args.seeds,
                                                         margin=args.margin, progress=False))
    gate.record(candidate, verdict, "rlscore-retrain (gate)")
    record["gate"] = {"promote": verdict.promote, "reason": verdict.reason, "objective": verdict.objective,
                      "seeds": verdict.seeds, "paired": verdict.paired}
    print(f"    gate: {'PROMOTE' if verdict.promote else 'REFUSED'}: {verdict.reason}", file=sys.stderr)
    handed = "retrained"
    if not verdict.promote:
        candidate, record["start_fallback"] = _step("start fallback", record, lambda: start_fallback(
            policy, verdict, start, serving, profile, work, args.margin))
        print(f"    start fallback: {record['start_fallback']['reason']}", file=sys.stderr)
        if candidate is not None:
            handed = f"the start model {start}"
    if candidate is None:
        if args.no_heuristic_fallback:
            return finish(1, "refused by the gate; the serving model is untouched")
        candidate, record["fallback"] = _step("heuristic fallback", record, lambda: heuristic_fallback(
            policy, verdict, record["init"], serving, profile, work, args.margin))
        print(f"    fallback: {record['fallback']['reason']}", file=sys.stderr)
        if candidate is None:
            return finish(1, "refused by the gate; the serving model is untouched")
        handed = f"the heuristic {record['fallback']['heuristic']}"

    target = (args.candidate_dir or args.model_dir / "candidates") / f"{low}.safetensors"
    install_model(candidate, target)
    record["candidate"], record["handed_over"] = str(target), handed
    if args.server:
        record["staged"] = _stage(args.server, policy, args.token_file)
    if handed != "retrained":
        return finish(0, f"the retrained candidate was refused; {handed} handed over at {target} in its place")
    return finish(0, f"candidate handed over at {target}")


def training_args(policy: str, start: Path | None, start_info: dict, profile: Path, work: Path, name: str,
                  timesteps: int | None) -> tuple[list[str], dict]:
    """rlscore-train's arguments for the candidate, and why: fine-tuning from the start model where it
    is a node scorer, else learning afresh from the profile's demonstrations."""
    args = ["--policy", policy, "--profile", str(profile), "--out", str(work), "--name", name, "--log-dir", "",
            "--no-eval", "--no-progress", *FINE_TUNING]
    if timesteps is not None:
        args[args.index("--total-timesteps") + 1] = str(timesteps)
    if start is not None and not start_info.get("selector"):
        return [*args, "--init", str(start)], {"init": str(start), "reason": f"fine-tuning {start} on the profile, "
                                                                             "its best rules demonstrating"}
    why = "the start is a rule selector, not a node scorer" if start is not None else "no usable model"
    return args, {"init": None, "reason": f"learning afresh from the profile's demonstrations: {why}"}


def start_fallback(policy: str, refused, start: Path | None, serving: Path, profile: Path, work: Path,
                   margin: float) -> tuple[Path | None, dict]:
    """After the gate refused the retrained candidate: the model fine-tuning started from, judged as
    the candidate on the refused judgement's seeds (the serving model's and the heuristics' runs
    reused). Judged on a copy in `work`, so the verdict never touches the start's own sidecar (an
    image's shipped model); returns that copy when the gate passes it."""
    from agent.evaluate import gate
    from rlscore.core.model import install_model, sha256_of

    if start is None:
        return None, {"reason": "fine-tuning started from scratch"}
    if serving.exists() and sha256_of(start) == sha256_of(serving):
        return None, {"reason": "fine-tuning started from the serving model"}
    path = work / f"{policy.lower()}-start.safetensors"
    install_model(start, path)
    verdict = gate.judge(policy, path, serving, profile, refused.seeds, margin=margin, progress=False,
                         measured=refused.per_seed)
    gate.record(path, verdict, "rlscore-retrain (start fallback)")
    info = {"start": str(start), "promote": verdict.promote, "reason": verdict.reason,
            "objective": verdict.objective, "paired": verdict.paired}
    return (path if verdict.promote else None), info


def heuristic_fallback(policy: str, refused, start_info: dict, serving: Path, profile: Path, work: Path,
                       margin: float) -> tuple[Path | None, dict]:
    """After the gate refused the retrained candidate: the best heuristic as the candidate, when the
    serving model is behind it. The heuristic is the one the start seeds found best (chosen apart
    from the seeds that judge it), else the gate's; returns its model file when the gate passes it."""
    from agent.evaluate import gate
    from rlscore.core.rules import FALLBACK_RULE
    from rlscore.core.model import ModelValidationError, load_model, write_heuristic_model
    from rlscore.core.profile import load_profile

    name = (start_info.get("best_heuristic") or {}).get("name") or refused.best_baseline
    info: dict = {"heuristic": name}
    if name is None:
        info["reason"] = "no heuristic was measured on the profile"
        return None, info
    try:
        serving_model = load_model(serving, expected_policy=policy, allow_heuristic=True)
    except (OSError, ModelValidationError):
        serving_model = None  # the server falls back to the policy's heuristic: that is what serves
    serving_name = (serving_model.heuristic if serving_model is not None else FALLBACK_RULE[policy])
    if serving_name == name:
        info["reason"] = f"the heuristic {name} serves already"
        return None, info
    theirs = refused.objective.get(gate.SERVING if serving_model is not None else FALLBACK_RULE[policy])
    if theirs is not None and name in refused.objective and refused.objective[name] >= theirs:
        info["reason"] = (f"what serves ({theirs:.4g}) is not behind the heuristic {name} "
                          f"({refused.objective[name]:.4g}) on the gate's seeds")
        return None, info
    path = work / f"{policy.lower()}-{name}.safetensors"
    profile_record = load_profile(profile).model_dump(by_alias=True, mode="json")
    write_heuristic_model(path, name, policy, {
        "training": {"algorithm": f"the heuristic {name} (no training)", "steps": 0,
                     "chosen_on": {"seeds": start_info.get("seeds"), "seed_base": start_info.get("seed_base"),
                                   "objective": (start_info.get("best_heuristic") or {}).get("objective")}},
        "training_profile": profile_record})  # what drift compares the cluster with while it serves
    # judged on the refused candidate's seeds, whose runs of the serving model and the heuristics it reuses
    verdict = gate.judge(policy, path, serving, profile, refused.seeds, margin=margin, progress=False,
                         measured=refused.per_seed)
    gate.record(path, verdict, "rlscore-retrain (heuristic fallback)")
    info.update(promote=verdict.promote, reason=verdict.reason, objective=verdict.objective,
                paired=verdict.paired)
    return (path if verdict.promote else None), info


def choose_start(policy: str, models: list[Path], profile: Path, seeds: int | None = None) -> tuple[Path | None, dict]:
    """The model fine-tuning starts from: of those the loader takes, the one with the lowest objective
    on `seeds` worlds of the profile (START_SEED_BASE, apart from the gate's; as many as the gate runs
    by default: on a small cluster a few seeds cannot tell the models apart); None (from scratch)
    when none is usable. The policy's heuristics run on the same worlds, so that the record says
    how far the start is from the best of them. Returns the start and what was measured."""
    from agent.evaluate.compare import baselines_for, evaluate, summarize
    from rlscore.core.model import LoadedSelector, ModelValidationError, load_model
    from rlscore.core.scoring import ModelScorer
    from rlscore.core.profile import load_profile
    from agent.sim.cluster_profile import profile_world, register_profile

    usable, refused = {}, {}
    for path in dict.fromkeys(models):
        try:
            usable[path] = load_model(path, expected_policy=policy)
        except (OSError, ModelValidationError) as exc:
            refused[str(path)] = str(exc)
    if not usable:
        return None, {"chosen": None, "reason": "from scratch: no usable model", "refused": refused}
    from agent.evaluate.gate import default_seeds

    loaded = load_profile(profile)
    seeds = seeds if seeds is not None else default_seeds(profile_world(loaded).size)
    family = register_profile(loaded)
    scorers = [ModelScorer(model, name=str(path)) for path, model in usable.items()]
    heuristics = tuple(b for b in baselines_for(policy) if b != "random")
    results, _ = evaluate(policy, scorers, (family,), seeds, baselines=heuristics, progress=False,
                          seed_base=START_SEED_BASE)
    measured = {row["scorer"]: round(row["objective"], 6) for row in summarize(results)}
    objective = {str(p): measured[str(p)] for p in usable}
    chosen = min(usable, key=lambda p: objective[str(p)])
    best = min(heuristics, key=lambda h: measured[h])
    return chosen, {"chosen": str(chosen), "selector": isinstance(usable[chosen], LoadedSelector),
                    "objective": objective,
                    "best_heuristic": {"name": best, "objective": measured[best]}, "seeds": seeds,
                    "seed_base": START_SEED_BASE, "refused": refused}


def _describe_start(start: Path | None, info: dict) -> str:
    # the loader's reasons name the file alone (they reach HTTP clients too); here the path helps
    lines = [f"    not a starting point: {path}: {reason.removeprefix(Path(path).name + ': ')}"
             for path, reason in info["refused"].items()]
    if start is None:
        lines.append("    starting from scratch: no usable model")
    else:
        measured = sorted(info["objective"].items(), key=lambda kv: kv[1])
        best = info["best_heuristic"]
        lines.append(f"    starting from {start} (objective on the profile: " + ", ".join(
            f"{p} {v:.4g}" for p, v in measured) + f"; best heuristic {best['name']} {best['objective']:.4g})")
    return "\n".join(lines)


def _stage(server: str, policy: str, token_file: Path | None) -> str:
    import httpx

    headers = {}
    if token_file is not None:
        headers["Authorization"] = f"Bearer {token_file.read_text().strip()}"
    try:
        r = httpx.post(f"{server.rstrip('/')}/v1/rollout/{policy}/candidate", headers=headers, timeout=30)
    except httpx.HTTPError as exc:
        return f"the server was not reached ({exc}); its candidate watch will stage it"
    if r.status_code == 200:
        return f"staged: {r.json().get('stage')}"
    return f"the server answered {r.status_code}: {r.text[:300]}"


if __name__ == "__main__":
    sys.exit(main())
