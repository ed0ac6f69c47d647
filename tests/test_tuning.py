"""Tuning kube-scheduler's score weights: cluster profiles, simulated trials, the optuna baselines,
the RL tuner (learning on a table, save/load) and `rlscore-tune` end to end on a small cluster."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from rlscore.core.profile import ClusterProfile, ProfileError, load_profile, save_profile
from agent.sim.cluster_profile import profile_world, world_profile
from agent.sim.families import FAMILIES
from agent.tune import cli
from agent.tune.baselines import METHODS, tune
from agent.tune.clusters import draw
from agent.tune.kube_scores import DEFAULT, ScoreConfig
from agent.tune.rl_tuner import DOMAIN_FEATURES, RLTuner, TrainConfig, domain_features, evaluate_on_table, train_on_table
from agent.tune.search_space import CATALOGUE
from agent.tune.trials import TRIAL_REPLAYS, TuningTask

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_profile_round_trip_gives_the_same_world(name, tmp_path):
    world = FAMILIES[name].world(np.random.default_rng(4), None, True, False)
    path = save_profile(world_profile(world, name), tmp_path / "cluster.yaml")
    assert profile_world(load_profile(path)) == world


def test_power_known_for_some_nodes_only_round_trips():
    world = FAMILIES["one-pool"].world(np.random.default_rng(4), 6)
    assert any(world.power_hidden) and not all(world.power_hidden)
    doc = yaml.safe_load(world_profile(world, "pool").to_yaml())
    assert [h for g in doc["nodes"] for h in g["powerHidden"]] == list(world.power_hidden)
    doc["nodes"][0]["powerHidden"] = doc["nodes"][0]["powerHidden"][:-1]
    with pytest.raises(ValueError, match=r"powerHidden \(5\) and latencyMs \(6\) must align"):
        ClusterProfile.model_validate(doc)


def _profile_doc() -> dict:
    world = FAMILIES["poisson"].world(np.random.default_rng(1), 3, False, False)
    return yaml.safe_load(world_profile(world, "small").to_yaml())


@pytest.mark.parametrize("change, message", [
    (lambda d: d.pop("nodeTypes"), "nodeTypes"),
    (lambda d: d["nodes"][0].update(type="gpu"), "undefined node types: gpu"),
    (lambda d: d["nodeTypes"][0].update(powerMaxWatts=1.0), "below powerIdleWatts"),
    (lambda d: d["nodes"][0].update(latencyMs=[-3.0]), "latencies"),
    (lambda d: d["workload"]["podClasses"][0].update(usage=[0.9, 0.2]), "usage"),
    (lambda d: d["workload"]["podClasses"][0].update(cpuMillicores=[0]), "cpu requests"),
    (lambda d: d["workload"].update(arrivals="bursty"), "workload.arrivals"),
    (lambda d: d.update(color="blue"), "color"),
    (lambda d: d["workload"]["podClasses"][0].update(latencyLimitsMs=[[30, 20]]), "soft <= hard"),
    (lambda d: d["dynamics"].update(backgroundCpu=[0.1, 0.05]), "backgroundCpu must be"),
    (lambda d: d["dynamics"].update(backgroundCpu=[0.1, 0.95]), "backgroundCpu must be"),
    (lambda d: d["dynamics"].update(backgroundCpu=[0.1]), "backgroundCpu"),
    (lambda d: d["dynamics"].update(usageOnsetSeconds=-1), "usageOnsetSeconds"),
    (lambda d: d["dynamics"].update(usageLingerSeconds="soon"), "usageLingerSeconds"),
])
def test_invalid_profiles_are_refused_with_the_field_named(change, message, tmp_path):
    doc = _profile_doc()
    change(doc)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ProfileError, match=message):
        load_profile(path)


def test_unreadable_profiles_are_refused(tmp_path):
    with pytest.raises(ProfileError, match="cannot read"):
        load_profile(tmp_path / "missing.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ProfileError, match="expected a mapping"):
        load_profile(tmp_path / "list.yaml")
    (tmp_path / "broken.yaml").write_text("nodes: [\n")
    with pytest.raises(ProfileError, match="not valid YAML"):
        load_profile(tmp_path / "broken.yaml")


def _small_task(policy: str = "EE", arrivals: int = 60) -> TuningTask:
    world = FAMILIES["poisson"].world(np.random.default_rng(2), 6, policy == "EL", False)
    return TuningTask(world, policy, seed=5, arrivals=arrivals)


def test_trials_are_deterministic_and_packing_saves_energy():
    task = _small_task()
    pack = ScoreConfig("MostAllocated", balanced_weight=0)
    assert task.improvement(DEFAULT) == 0.0
    first = task.objective(pack)
    assert task.simulated == 2 * task.replays  # default and pack, each replay once
    again = TuningTask(task.world, "EE", seed=5, arrivals=60).objective(pack)
    assert first == again
    assert task.improvement(pack) > 0.05, "packing should draw clearly less power than spreading"


def test_a_trial_is_the_mean_of_its_replays_and_fresh_replays_are_others():
    task = _small_task("LB")
    spread = ScoreConfig("LeastAllocated", balanced_weight=0)
    assert task.seeds == (5, 6, 7)
    single = [TuningTask(task.world, "LB", seed=s, arrivals=60, replays=1).objective(spread) for s in task.seeds]
    assert task.objective(spread) == pytest.approx(np.mean(single))
    assert len(set(single)) > 1, "the replays should differ, or averaging them buys nothing"
    fresh = task.fresh_seeds(4)
    assert len(set(fresh)) == 4 and not set(fresh) & set(task.seeds)
    # out of sample: the default's objective on the same fresh replays is the reference
    default_fresh = np.mean([task.replay(DEFAULT, s) for s in fresh])
    expected = (default_fresh - np.mean([task.replay(spread, s) for s in fresh])) / default_fresh
    assert task.improvement(spread, fresh) == pytest.approx(expected)
    with pytest.raises(ValueError, match="needs >= 1 replay"):
        TuningTask(task.world, "LB", seed=5, replays=0)
    with pytest.raises(ValueError, match="unknown policy 'XX'"):
        TuningTask(task.world, "XX", seed=5)
    # EL's trials average the most replays (each replay is a lottery over where strict pods land)
    assert TuningTask(task.world, "EL", seed=5).replays == TRIAL_REPLAYS["EL"] > TRIAL_REPLAYS["EE"]


@pytest.mark.parametrize("method", METHODS)
def test_optuna_baselines_reproduce_with_a_seed(method):
    task = _small_task()
    a = tune(task, method, 3, seed=1)
    b = tune(TuningTask(task.world, "EE", 5, 60), method, 3, seed=1)
    assert a.configs == b.configs and len(a.configs) == 3
    assert a.improvements == b.improvements


def test_rl_tuner_learns_which_configuration_suits_which_domain():
    """A table where the best entry depends on the policy: the trained tuner's first pick is the
    right one, far better than picking at random."""
    rng = np.random.default_rng(0)
    k, n = len(CATALOGUE), 120
    domains = np.zeros((n, len(DOMAIN_FEATURES)), dtype=np.float32)
    table = rng.uniform(-0.3, 0.05, (n, k))
    for i in range(n):
        policy = i % 3
        domains[i, policy] = 1.0
        domains[i, 3] = rng.uniform(0.3, 0.8)
        table[i, (7, 19, 28)[policy]] = rng.uniform(0.25, 0.35)
    cfg = TrainConfig(trials=1, iterations=400, clusters_per_batch=32, seed=3)
    net, history = train_on_table(domains[:90], table[:90], cfg)
    learned = evaluate_on_table(net, domains[90:], table[90:], trials=1)
    assert learned > 0.24, history
    random_pick = float(np.mean(np.maximum(table[90:], 0).mean(axis=1)))
    assert random_pick < 0.05


def test_tuner_save_load_and_refusals(tmp_path):
    net, _ = train_on_table(np.zeros((6, len(DOMAIN_FEATURES)), np.float32), np.zeros((6, len(CATALOGUE))),
                            TrainConfig(iterations=2, clusters_per_batch=2))
    path = RLTuner(net, CATALOGUE, {"note": "test"}).save(tmp_path / "tuner.pt")
    loaded = RLTuner.load(path)
    assert loaded.catalogue == CATALOGUE and loaded.metadata["note"] == "test"
    with pytest.raises(ValueError, match="no such tuner file"):
        RLTuner.load(tmp_path / "none.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"not a tuner")
    with pytest.raises(ValueError, match="not a tuner file"):
        RLTuner.load(tmp_path / "junk.safetensors")


def test_domain_features_are_coarse_and_finite():
    for policy in ("EE", "LB", "EL"):
        for i in range(6):
            cluster = draw(policy, i, held_out=True)
            features = domain_features(cluster.world, policy)
            assert features.shape == (len(DOMAIN_FEATURES),) and np.all(np.isfinite(features))


def test_rlscore_tune_writes_a_profile_the_chosen_weights_reproduce(tmp_path, capsys):
    world = FAMILIES["poisson"].world(np.random.default_rng(3), 5, False, False)
    profile = save_profile(world_profile(world, "five-nodes"), tmp_path / "in.yaml")
    net, _ = train_on_table(np.zeros((6, len(DOMAIN_FEATURES)), np.float32), np.zeros((6, len(CATALOGUE))),
                            TrainConfig(iterations=2, clusters_per_batch=2))
    tuner = RLTuner(net, CATALOGUE).save(tmp_path / "tuner.pt")
    out = tmp_path / "out"
    code = cli.main(["--policy", "EE", "--profile", str(profile), "--trials", "2", "--arrivals", "40",
                     "--method", "all", "--tuner", str(tuner), "--out", str(out)])
    assert code == 0
    record = json.loads((out / "tuning.json").read_text())
    assert set(record["methods"]) == {"rl", "random", "bo", "tpe"}
    assert all(len(m["trials"]) == 2 for m in record["methods"].values())
    chosen = ScoreConfig.from_dict(record["chosen"])
    assert record["improvement"] == max(m["best_improvement"] for m in record["methods"].values())
    # the written profile carries the chosen weights
    doc = yaml.safe_load((out / "rl-tuned.yaml").read_text())
    tuned = next(p for p in doc["profiles"] if p["schedulerName"] == "rl-tuned")
    strategy = tuned["pluginConfig"][0]["args"]["scoringStrategy"]
    assert strategy["type"] == chosen.strategy
    assert [r["weight"] for r in strategy["resources"]] == [chosen.cpu_weight, chosen.memory_weight]
    assert profile_world(load_profile(out / "cluster.yaml")) == world
    # the prediction in the record is the objective of a fresh replay with those weights
    replay = TuningTask(world, "EE", record["replay_seed"], 40, replays=record["replays"]).objective(chosen)
    assert replay == pytest.approx(record["predicted_objective"])
    assert "rl-tuned" in capsys.readouterr().out


def test_rlscore_tune_keeps_the_default_weights_when_the_winner_fails_on_fresh_replays(tmp_path, capsys):
    """On this small usage-skew cluster random search's best configuration gains 21% in its two
    trials and loses 72% on ten fresh replays: the written profile keeps the default weights."""
    out = tmp_path / "out"
    args = ["--policy", "LB", "--family", "usage-skew", "--nodes", "5", "--cluster-seed", "2", "--trials", "2",
            "--arrivals", "40", "--method", "random", "--out", str(out)]
    assert cli.main(args) == 0
    record = json.loads((out / "tuning.json").read_text())
    assert record["methods"]["random"]["best_improvement"] > 0.1
    assert record["improvement_on_fresh_replays"] < 0
    assert ScoreConfig.from_dict(record["chosen"]) == DEFAULT and record["improvement"] == 0.0
    assert "default weights kept" in (out / "rl-tuned.yaml").read_text()
    # trusting the trials (--check-replays 0) writes the trials' winner
    assert cli.main([*args, "--check-replays", "0", "--out", str(tmp_path / "trusted")]) == 0
    trusted = json.loads((tmp_path / "trusted" / "tuning.json").read_text())
    assert ScoreConfig.from_dict(trusted["chosen"]) != DEFAULT and trusted["improvement_on_fresh_replays"] is None
    capsys.readouterr()


@pytest.mark.parametrize("bad", [["--replays", "0"], ["--check-replays", "-1"], ["--trials", "0"]])
def test_rlscore_tune_refuses_bad_counts_before_simulating(bad, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--policy", "LB", "--method", "random", "--out", str(tmp_path), *bad])
    assert exc.value.code == 2
    assert "must be >= 1, --check-replays >= 0" in capsys.readouterr().err


def test_train_tuner_refuses_zero_replays(capsys):
    from agent.tune import train_tuner

    with pytest.raises(SystemExit) as exc:
        train_tuner.main(["--replays", "0"])
    assert exc.value.code == 2 and "--replays" in capsys.readouterr().err


def test_rlscore_tune_refuses_a_bad_profile(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: ClusterProfile\nname: x\n")
    with pytest.raises(SystemExit) as exc:
        cli.main(["--policy", "LB", "--profile", str(bad), "--method", "random"])
    assert exc.value.code == 2
    assert "invalid cluster profile" in capsys.readouterr().err


def test_the_comparison_measures_room_and_choices_on_fresh_replays():
    """agent.tune.compare on one small held-out cluster: the room is the configuration that did best
    in the trials, re-measured on replays no trial ran on, and so is every method's choice."""
    from agent.tune import compare

    cluster = draw("LB", 0, held_out=True, nodes=(4, 6))
    out = compare.compare_cluster(cluster, trials=2, sampler_seeds=(0,), fresh_replays=3,
                                  tuner=RLTuner.load(ROOT / "models" / "tuner.pt"), models={})
    task = cluster.task()  # a new task: nothing cached, so every figure below is simulated again
    fresh = task.fresh_seeds(3)
    assert out["trial_replays"] == TRIAL_REPLAYS["LB"] and out["fresh_replays"] == 3
    room_config = ScoreConfig.from_dict(out["room_config"])
    assert out["room_in_sample"] == pytest.approx(max(task.improvement(room_config), 0.0))
    # the room's configuration did at least as well in the trials as every catalogue entry and every choice
    tried = [task.improvement(c) for c in CATALOGUE] + [m["best_in_trials"] for m in out["methods"].values()]
    assert out["room_in_sample"] >= max(tried) - 1e-12
    assert out["room"] == pytest.approx(max(task.improvement(room_config, fresh), 0.0)
                                        if out["room_in_sample"] > 0 else 0.0)
    for method in ("rl", *METHODS):
        chosen = out["methods"][method]["chosen"][0]
        config = next((c for c in (*CATALOGUE, DEFAULT) if c.label == chosen), None)
        if config is not None:  # the samplers may choose outside the catalogue
            assert out["methods"][method]["out_of_sample"] == pytest.approx(task.improvement(config, fresh))


def test_shipped_tuner_reproduces_its_record():
    """models/tuner.pt: loads, was trained within 20 minutes, and on the validation clusters of its
    table (the split its training made) the greedy tuner scores what the sidecar says, above picking
    at random from the catalogue."""
    tuner = RLTuner.load(ROOT / "models" / "tuner.pt")
    meta = tuner.metadata
    assert meta["wall_seconds"] < 20 * 60
    hp = meta["hyperparameters"]
    saved = np.load(ROOT / "models" / meta["table"])
    domains, table = saved["domains"], saved["table"]
    assert table.shape == (hp["clusters"], len(CATALOGUE))
    order = np.random.default_rng(hp["seed"]).permutation(len(table))
    val = order[:meta["validation_mean_best_improvement"]["clusters"]]
    figures = meta["validation_mean_best_improvement"]
    got = evaluate_on_table(tuner.net, domains[val], table[val], hp["trials"])
    assert got == pytest.approx(figures["rl_tuner_greedy"], abs=1e-6)
    assert got > figures["random_catalogue_picks"]
    assert (ROOT / "models" / "tuner.pt").stat().st_size < 1_000_000
