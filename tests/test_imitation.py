"""Teachers for the actor-critic trainers: who teaches which family, cloning their choices before
reinforcement learning, and the pull that stays afterwards."""

from pathlib import Path

import numpy as np

from agent.learn.model_io import torch_network
import pytest
import torch

from agent.learn.actor_critic import ACConfig, kickstart_weight, masked_logits, teacher_cross_entropy
from agent.learn.imitation import agreement, clone, demonstrations
from agent.learn.network import NodeScorer
from agent.learn.teachers import SIZE_BANDS, TeacherError, assign_teachers, teacher_for, world_teacher
from agent.parallel import fork_pool
from agent.sim.families import family


def test_cloning_makes_the_actor_choose_as_its_teacher_does():
    """On decisions it never trained on (other worlds), a random actor rarely picks the teacher's node
    (measured 0.09); 600 supervised steps make it agree most of the time (0.78)."""
    torch.manual_seed(0)
    teachers = {"two-d": "default-scheduler", "poisson": "most-allocated"}
    train = demonstrations("LB", teachers, worlds_per_family=8, decisions=96, min_nodes=4, max_nodes=16, seed=0)
    held_out = demonstrations("LB", teachers, worlds_per_family=2, decisions=96, min_nodes=4, max_nodes=16, seed=1)
    assert len(train) == 2 * 8 * 96 and len(held_out) == 2 * 2 * 96
    for targets in train.targets[:50]:
        assert targets.sum() == pytest.approx(1.0) and (targets >= 0).all()

    actor = NodeScorer((32, 32))
    before = agreement(actor, held_out)
    record = clone(actor, train, held_out, steps=600, batch_size=128, progress=False)
    assert before < 0.3, before
    assert record["held_out_agreement"] >= 0.7, record
    assert record["held_out_agreement"] == pytest.approx(agreement(actor, held_out), abs=1e-4)


@pytest.mark.parametrize("choice, expected", [
    ("default-scheduler", {"test2": "default-scheduler", "usage-skew": "default-scheduler"}),
    ("default-scheduler,usage-skew=load-variation-risk-balancing",
     {"test2": "default-scheduler", "usage-skew": "load-variation-risk-balancing"}),
    ("usage-skew=least-utilized", {"usage-skew": "least-utilized"}),  # test2 keeps its own best
])
def test_teacher_choices(choice, expected):
    picked = assign_teachers("LB", ("test2", "usage-skew"), choice, seeds=1, arrivals=20, workers=1)
    assert set(picked) == {"test2", "usage-skew"}
    for family_name, teacher in expected.items():
        assert picked[family_name]["teacher"] == teacher
    # the measured table stays in the record whatever was chosen
    assert "default-scheduler" in picked["test2"]["relative_objective"]


def test_the_overall_teacher_is_the_best_on_average():
    picked = assign_teachers("LB", ("test2", "usage-skew"), "overall", seeds=1, arrivals=20, workers=1)
    teachers = {p["teacher"] for p in picked.values()}
    assert len(teachers) == 1
    (teacher,) = teachers
    means = {b: np.mean([p["relative_objective"][b] for p in picked.values()])
             for b in picked["test2"]["relative_objective"]}
    assert means[teacher] == min(means.values())


def test_per_size_teachers_are_each_bands_best():
    picked = assign_teachers("EE", ("test2",), "per-size", seeds=1, arrivals=20, workers=1)
    bands = picked["test2"]["by_size"]
    assert [b["max_nodes"] for b in bands] == list(SIZE_BANDS)
    for band in bands:  # each band's teacher is the lowest of its own measured table
        assert band["teacher"] == min(band["relative_objective"], key=band["relative_objective"].get)
    assert picked["test2"]["teacher"] == [[b["max_nodes"], b["teacher"]] for b in bands]


def test_a_world_gets_its_size_bands_teacher():
    teachers = {"poisson": [[5, "most-allocated"], [20, "least-allocated"], [64, "best-fit"]], "two-d": "tetris"}
    assert [teacher_for(teachers, "poisson", n) for n in (2, 5, 6, 20, 21, 100)] == [
        "most-allocated", "most-allocated", "least-allocated", "least-allocated", "best-fit", "best-fit"]
    assert teacher_for(teachers, "two-d", 3) == "tetris"


@pytest.mark.parametrize("nodes, alone", [(4, "most-allocated"), (12, "least-allocated")])
def test_demonstrations_follow_the_band_of_each_worlds_size(nodes, alone):
    banded = demonstrations("EE", {"poisson": [[5, "most-allocated"], [64, "least-allocated"]]}, 2, 40,
                            nodes, nodes, seed=3)
    single = demonstrations("EE", {"poisson": alone}, 2, 40, nodes, nodes, seed=3)
    assert len(banded) == len(single) == 80
    assert all(np.array_equal(a, b) for a, b in zip(banded.targets, single.targets))


def test_a_worlds_teacher_is_the_rule_cheapest_on_its_machines():
    """On a world of two hardware generations, packing by requests alone (MostAllocated) fills
    inefficient machines as readily as efficient ones; the per-world choice takes efficient-first
    there, and keeps the band's teacher unless another rule is cheaper by the margin."""
    world = family("hardware").world(np.random.default_rng(1), 8, False, True)
    chosen, costs = world_teacher("EE", world, 1, "most-allocated", ["efficient-first"], decisions=100, futures=2)
    assert chosen == "efficient-first", costs
    assert costs["efficient-first"] < 0.9 * costs["most-allocated"], costs  # measured 0.75
    # the same costs again (its own streams, not the caller's), and a margin no rule clears keeps the default
    kept, again = world_teacher("EE", world, 1, "most-allocated", ["efficient-first"], decisions=100, futures=2,
                                margin=1.0)
    assert kept == "most-allocated" and again == costs
    # one rule per process (as a recording runs them): the same sums, to the bit
    with fork_pool(2) as pool:
        assert world_teacher("EE", world, 1, "most-allocated", ["efficient-first"], decisions=100, futures=2,
                             pool=pool) == (chosen, costs)


def test_per_world_teachers_relabel_only_the_worlds_they_change():
    teachers = {"fragmentation": "efficient-first", "hardware": "most-allocated", "test1": "efficient-first"}
    plain = demonstrations("EE", teachers, 2, 100, 6, 6, seed=5)
    per_world = demonstrations("EE", teachers, 2, 100, 6, 6, seed=5, teacher_futures=2)
    assert len(plain) == len(per_world) == 600
    assert plain.world_teachers == {}
    # two generations of hardware: efficient-first takes over at least one world from MostAllocated
    assert per_world.world_teachers["hardware"].get("efficient-first", 0) >= 1, per_world.world_teachers
    assert sum(per_world.world_teachers["test1"].values()) == 2
    # the first family (in order) keeps its teacher and is recorded as before; later worlds share the
    # tie-breaking stream with the relabelled ones, so their ties fall differently
    assert per_world.world_teachers["fragmentation"] == {"efficient-first": 2}, per_world.world_teachers
    assert all(np.array_equal(a, b) for a, b in zip(plain.targets[:200], per_world.targets[:200]))
    assert not all(np.array_equal(a, b) for a, b in zip(plain.targets[200:400], per_world.targets[200:400]))


@pytest.mark.parametrize("choice, message", [
    ("most-effective", "unknown teacher 'most-effective'"),
    ("latency-fit", "unknown teacher 'latency-fit' for LB"),  # EL's baseline, not LB's
    ("two-d=least-allocated", "'two-d' is not one of the families"),
    ("test2=overall", "names one baseline"),
    ("test2=per-size", "names one baseline"),
])
def test_teacher_choices_that_name_nothing_are_refused_before_any_simulation(choice, message):
    with pytest.raises(TeacherError, match=message):
        assign_teachers("LB", ("test2",), choice, seeds=1, arrivals=20, workers=1)


@pytest.mark.parametrize("kickstart, floor, update, expected", [
    (1.0, 0.0, 0, 1.0),
    (1.0, 0.0, 50, 0.0),  # decayed over the first half
    (1.0, 0.2, 25, 0.6),
    (1.0, 0.2, 50, 0.2),
    (1.0, 0.2, 99, 0.2),  # the floor stays to the end
    (0.0, 0.0, 10, 0.0),
])
def test_the_pull_towards_the_teachers_decays_to_its_floor(kickstart, floor, update, expected):
    cfg = ACConfig(kickstart=kickstart, kickstart_fraction=0.5, kickstart_floor=floor)
    assert kickstart_weight(cfg, update, 100) == pytest.approx(expected)


@pytest.mark.parametrize("extra, message", [
    (["--kickstart-floor", "1.5"], "--kickstart-floor must be in 0..1.0"),
    (["--imitation-steps", "-1"], "--imitation-steps must be >= 0"),
    (["--teacher", "nobody"], "unknown teacher 'nobody'"),
    (["--timesteps", "0", "--imitation-steps", "0"], "--timesteps 0 needs teachers to clone"),
    (["--timesteps", "0", "--algo", "dqn"], "--timesteps must be >= 1"),
    (["--learning-rate", "0"], "--learning-rate must be > 0"),
    (["--critic-warmup", "1.5"], "--critic-warmup is a share of the run, 0..1"),
    (["--torch-threads", "0"], "--torch-threads must be 1..256"),
    (["--teacher-futures", "-1"], "--teacher-futures must be >= 0"),
    (["--dagger-rounds", "-1"], "--dagger-rounds and --dagger-steps must be >= 0"),
    (["--dagger-rounds", "1", "--imitation-steps", "0"], "--dagger-rounds continues cloning"),
    (["--imitation-worlds", "0"], "--imitation-worlds must be >= 1"),
    (["--extra-worlds", "test2=many@3-5"], "'test2=many@3-5': expected FAMILY=WORLDS@MIN-MAX, e.g. test2=32@3-5"),
    (["--extra-worlds", "test2=4"], "expected FAMILY=WORLDS@MIN-MAX"),
    (["--extra-worlds", "nowhere=4@3-5"], "'nowhere' is not one of the families trained on"),
    (["--families", "test1", "--extra-worlds", "test2=4@3-5"], "'test2' is not one of the families trained on (test1)"),
    (["--extra-worlds", "test2=0@3-5"], "the number of worlds must be >= 1"),
    (["--extra-worlds", "test2=4@5-3"], "the node range must lie within 2-64"),
    (["--extra-worlds", "test2=4@1-3"], "the node range must lie within 2-64"),
    (["--extra-worlds", "test2=4@3-65"], "the node range must lie within 2-64"),
    # options that act only through the teachers, where there are none: refused, not dropped
    (["--algo", "dqn", "--extra-worlds", "test2=4@3-5"], "--extra-worlds set how the teachers teach"),
    (["--kickstart", "0", "--imitation-worlds", "3", "--imitation-anneal"],
     "--imitation-worlds, --imitation-anneal set how the teachers teach, and there are none here (--kickstart 0)"),
    (["--algo", "dqn", "--teacher", "most-allocated"], "--teacher set how the teachers teach, and there are none "
                                                       "here (dqn has no teachers)"),
    (["--policy", "EL", "--init", str(Path(__file__).resolve().parents[1] / "models" / "el.safetensors"),
      "--dagger-rounds", "1"], "fine-tuning starts from the model, not from teachers"),
])
def test_the_command_line_refuses_bad_teacher_settings(tmp_path, capsys, extra, message):
    from agent.learn.train import main

    assert main(["--policy", "LB", "--out", str(tmp_path), "--log-dir", "", "--no-progress", *extra]) == 2
    assert message in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # nothing written


def test_pick_ships_the_better_candidate_and_keeps_earlier_ones_on_record(tmp_path):
    """`shipped pick --keep-earlier`: two freshly trained and evaluated candidates compete; a candidate
    the previous sidecar recorded under another name stays in the record, never shipped."""
    import json

    from agent.evaluate.shipped import evaluate_shipped_model, pick
    from rlscore.core.model import sidecar_path
    from agent.learn.train import config_for, run, save_trained

    paths = []
    for seed in (1, 2):
        cfg = config_for("ppo", policy="LB", total_timesteps=1024, seed=seed, families=("test2",), log_dir="",
                         progress=False, out=str(tmp_path), env_workers=0)
        network, record = run(cfg, "ppo")
        path = save_trained(cfg, network, record, tmp_path / f"lb-ppo-{seed}.safetensors")
        evaluate_shipped_model(path, seeds=1, arrivals=30, progress=False, families=("test2",))
        paths.append(path)
    target = tmp_path / "shipped" / "lb.safetensors"
    target.parent.mkdir()
    earlier = {"file": "lb-dqn.safetensors", "algorithm": "double DQN", "goals_met": "0/7", "shipped": True,
               "mean_objective_vs_best_baseline": 3.0, "training_seconds": 1.0}
    sidecar_path(target).write_text(json.dumps({"candidates": [earlier]}))

    best = pick(target, paths, keep_earlier=True)
    standings = [json.loads(sidecar_path(p).read_text())["evaluation"] for p in paths]
    expected = min(range(2), key=lambda i: (-standings[i]["goals_met"], standings[i]["mean_objective_vs_best_baseline"]))
    assert best == paths[expected]
    assert target.read_bytes() == best.read_bytes()
    candidates = json.loads(sidecar_path(target).read_text())["candidates"]
    assert [c["file"] for c in candidates] == ["lb-ppo-1.safetensors", "lb-ppo-2.safetensors", "lb-dqn.safetensors"]
    assert [c["shipped"] for c in candidates] == [expected == 0, expected == 1, False]
    assert "not re-run" in candidates[2]["earlier"]


@pytest.mark.parametrize("warmup, actor_moves", [(1.0, False), (0.0, True)])
def test_after_cloning_the_actor_waits_for_the_critic(monkeypatch, warmup, actor_moves):
    """During the critic's warm-up PPO leaves the cloned actor exactly as cloning left it."""
    import agent.learn.imitation as imitation
    from agent.learn.train import config_for, run

    cloned = {}
    real_clone = imitation.clone

    def clone_and_keep(actor, *args, **kwargs):
        record = real_clone(actor, *args, **kwargs)
        cloned.update({k: v.clone() for k, v in actor.state_dict().items()})
        return record

    monkeypatch.setattr(imitation, "clone", clone_and_keep)
    cfg = config_for("ppo", policy="LB", total_timesteps=2048, seed=1, families=("test2",), log_dir="",
                     progress=False, env_workers=0, kickstart=1.0, teachers={"test2": "least-allocated"},
                     imitation_steps=20, imitation_worlds=1, imitation_decisions=32,
                     critic_warmup_fraction=warmup)
    actor, record = run(cfg, "ppo")
    assert cloned, "the actor was not cloned"
    same = all(torch.equal(cloned[k], v) for k, v in actor.state_dict().items())
    assert same != actor_moves
    assert record["training"]["imitation"]["steps"] == 20


@pytest.mark.parametrize("warmup, actor_moves", [(None, True), ("1", False), ("0", True)])
def test_fine_tuning_from_a_model_file_waits_for_the_critic(tmp_path, warmup, actor_moves):
    """A model file holds the actor, not its critic: from --init, PPO first trains the critic alone
    (INIT_CRITIC_WARMUP of the run unless --critic-warmup says otherwise)."""
    from rlscore.core.model import load_model
    from agent.learn.train import INIT_CRITIC_WARMUP, main

    assert 0 < INIT_CRITIC_WARMUP < 1
    shipped = Path(__file__).resolve().parents[1] / "models" / "el.safetensors"  # a node scorer (the shipped EE and LB are selectors)
    args = ["--policy", "EL", "--algo", "ppo", "--families", "test2", "--init", str(shipped), "--timesteps", "2048",
            "--out", str(tmp_path), "--log-dir", "", "--no-eval", "--no-progress"]
    assert main(args + (["--critic-warmup", warmup] if warmup is not None else [])) == 0
    before, after = load_model(shipped).weights, load_model(tmp_path / "el.safetensors").weights
    same = all(np.array_equal(before[k], v) for k, v in after.items())
    assert same != actor_moves


def test_dagger_records_the_actors_own_states_with_the_teachers_labels():
    """With an actor, the same worlds are scheduled by the actor and labelled by the teacher: an
    actor cloned from the opposite rule (pack, where the teacher spreads) meets states the teacher's
    run never shows -- fewer nodes busy -- and disagrees with the labels on most of them."""
    from rlscore.core.features import NODE_FEATURES

    torch.manual_seed(0)
    spread = {"poisson": "least-allocated"}
    teacher_run = demonstrations("LB", spread, worlds_per_family=2, decisions=64, min_nodes=6, max_nodes=10, seed=0)
    packer = NodeScorer((32, 32))
    pack_demos = demonstrations("LB", {"poisson": "most-allocated"}, worlds_per_family=4, decisions=64, min_nodes=6,
                                max_nodes=10, seed=5)
    clone(packer, pack_demos, pack_demos, steps=300, batch_size=128, progress=False)

    own = demonstrations("LB", spread, worlds_per_family=2, decisions=64, min_nodes=6, max_nodes=10, seed=9,
                         actor=packer, like=teacher_run)
    assert own.worlds == teacher_run.worlds and len(own) == len(teacher_run)
    # each world's first decision is on an empty cluster either way; later ones part
    firsts = [w * 64 for w in range(len(own.worlds))]
    assert all(np.array_equal(own.nodes[i], teacher_run.nodes[i]) for i in firsts)
    active = NODE_FEATURES.index("active")
    busy = lambda demos: np.mean([d[:, active].mean() for d in demos.nodes])  # noqa: E731
    assert busy(own) < 0.8 * busy(teacher_run), (busy(own), busy(teacher_run))
    assert all(t.sum() == pytest.approx(1.0) for t in own.targets)
    assert agreement(packer, own) < 0.5 < agreement(packer, pack_demos)


def test_dagger_rounds_continue_cloning_on_the_actors_states():
    from agent.learn.train import config_for, run

    cfg = config_for("ppo", policy="LB", total_timesteps=0, seed=1, families=("test2",), log_dir="",
                     progress=False, env_workers=0, kickstart=1.0, teachers={"test2": "one-step-lb"},
                     imitation_steps=40, imitation_worlds=2, imitation_decisions=32, dagger_rounds=2)
    _, record = run(cfg, "ppo")
    rounds = record["training"]["imitation"]["dagger"]
    assert [r["round"] for r in rounds] == [1, 2]
    assert all(r["decisions"] == 2 * 32 and r["steps"] == 20 and 0 <= r["agreement_on_own_states"] <= 1
               for r in rounds)
    assert "2 DAgger rounds of 20" in record["training"]["algorithm"]


def test_the_demonstration_worlds_are_drawn_as_the_shipped_clones_were():
    """Each world's size is drawn as it starts, after the previous world's decisions drew from the
    same generator: drawing them all first (as DAgger's change once did) gave other worlds, so
    `make train` no longer reproduced the shipped clones. Sizes measured at a1b5d50."""
    demos = demonstrations("LB", {"poisson": "one-step-lb", "churn": "one-step-lb"}, worlds_per_family=3,
                           decisions=40, min_nodes=2, max_nodes=64, seed=1, node_draw="log-uniform")
    assert [nodes for _, _, nodes in demos.worlds] == [11, 13, 60, 37, 18, 2]
    assert [len(n) for n in demos.nodes[::40]] == [11, 13, 60, 37, 18, 2]


@pytest.mark.parametrize("algo, extra", [
    ("ppo", {"kickstart": 1.0, "teachers": {"test2": "one-step-lb"}, "imitation_steps": 20,
             "imitation_worlds": 1, "imitation_decisions": 32,
             "num_envs": 4, "num_steps": 32, "env_workers": 0}),
    ("dqn", {"learning_starts": 64}),
])
def test_a_network_trained_blind_to_inputs_ships_without_reading_them(tmp_path, algo, extra):
    """Cloning, PPO and DQN all leave the blind inputs unread, and the sidecar says which they are."""
    from rlscore.core.features import input_columns
    from rlscore.core.model import load_model
    from agent.learn.train import config_for, run, save_trained

    cfg = config_for(algo, policy="LB", total_timesteps=256, seed=1, families=("test2",), log_dir="",
                     progress=False, out=str(tmp_path), blind_to=("latency", "power"), **extra)
    actor, record = run(cfg, algo)
    served = load_model(save_trained(cfg, actor, record))
    assert torch_network(served).blind_columns() == input_columns(("latency", "power"))
    assert served.metadata["training"]["hyperparameters"]["blind_to"] == ["latency", "power"]


@pytest.mark.parametrize("worlds, anneal", [(2, True), (1, False)])
def test_cloning_data_and_step_size_follow_the_command_line(tmp_path, worlds, anneal):
    """--imitation-worlds sets how many worlds per family the teachers record, --imitation-anneal
    whether the step size decays; the sidecar says which."""
    from rlscore.core.model import load_model
    from agent.learn.train import main

    args = ["--policy", "LB", "--algo", "ppo", "--families", "test2", "--teacher", "one-step-lb",
            "--timesteps", "0", "--imitation-steps", "20", "--imitation-worlds", str(worlds),
            "--imitation-anneal" if anneal else "--no-imitation-anneal",
            "--out", str(tmp_path), "--log-dir", "", "--no-eval", "--no-progress"]
    assert main(args) == 0
    training = load_model(tmp_path / "lb.safetensors", expected_policy="LB").metadata["training"]
    imitation = training["imitation"]
    assert imitation["demonstrations"] == worlds * training["hyperparameters"]["imitation_decisions"]
    assert imitation["anneal"] is anneal and training["hyperparameters"]["imitation_anneal"] is anneal
    assert training["hyperparameters"]["imitation_worlds"] == worlds


def test_extra_worlds_add_one_familys_worlds_in_a_size_range(tmp_path):
    """--extra-worlds: the family's teachers record that many more worlds, every one within the range,
    cloned with the rest; the sidecar says how many decisions they added and which sizes they had."""
    from rlscore.core.model import load_model
    from agent.learn.train import main

    args = ["--policy", "LB", "--algo", "ppo", "--families", "test2,poisson", "--teacher", "one-step-lb",
            "--timesteps", "0", "--imitation-steps", "20", "--imitation-worlds", "1", "--extra-worlds", "test2=3@3-4",
            "--out", str(tmp_path), "--log-dir", "", "--no-eval", "--no-progress"]
    assert main(args) == 0
    training = load_model(tmp_path / "lb.safetensors", expected_policy="LB").metadata["training"]
    decisions = training["hyperparameters"]["imitation_decisions"]
    assert training["hyperparameters"]["extra_worlds"] == [["test2", 3, 3, 4]]
    [extra] = training["imitation"]["extra_worlds"]
    assert extra["family"] == "test2" and extra["decisions"] == 3 * decisions
    assert len(extra["nodes"]) == 3 and all(3 <= n <= 4 for n in extra["nodes"])
    assert training["imitation"]["demonstrations"] == (2 + 3) * decisions  # one world per family, then three


@pytest.mark.parametrize("anneal", [True, False])
def test_annealed_cloning_takes_ever_smaller_steps(anneal):
    """With anneal, the step size of each Adam step falls linearly from the learning rate towards 0;
    without, it stays put."""
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    demos = demonstrations("LB", {"test2": "one-step-lb"}, 1, 32, 3, 3, seed=1)
    seen = []
    handle = register_optimizer_step_pre_hook(lambda opt, args, kwargs: seen.append(opt.param_groups[0]["lr"]))
    try:
        record = clone(NodeScorer((8, 8)), demos, demos, steps=10, batch_size=8, learning_rate=0.01,
                       anneal=anneal, progress=False)
    finally:
        handle.remove()
    expected = [0.01 * (1 - k / 10) for k in range(10)] if anneal else [0.01] * 10
    assert seen == pytest.approx(expected)
    assert record["anneal"] is anneal


def test_a_cloning_batch_in_parts_has_the_whole_batchs_gradient():
    """Cut into like-sized parts, each padded to its own largest candidate set, the batch yields the
    same decisions and the same gradient as when padded as one, with far less padding."""
    demos = demonstrations("LB", {"test1": "one-step-lb", "poisson": "one-step-lb"}, 3, 48, 2, 64, seed=4,
                           node_draw="log-uniform")
    index = np.random.default_rng(0).integers(0, len(demos), 96)
    nodes, pod, mask, targets = demos.batch(index)
    for row, i in enumerate(index[:20]):  # the recorded decision, then padding the mask leaves out
        k = len(demos.nodes[i])
        assert int(mask[row].sum()) == k and not mask[row, k:].any()
        np.testing.assert_array_equal(nodes[row, :k].numpy(), demos.nodes[i])
        np.testing.assert_array_equal(targets[row, :k].numpy(), demos.targets[i])
        np.testing.assert_array_equal(pod[row].numpy(), demos.pods[i])

    def gradient(batches):
        torch.manual_seed(0)
        actor = NodeScorer((16, 16))
        for b_nodes, b_pod, b_mask, b_targets in batches:
            logits = masked_logits(actor(b_nodes, b_pod, b_mask))
            (teacher_cross_entropy(logits, b_targets).sum() / len(index)).backward()
        return [p.grad for p in actor.parameters()]

    parts = demos.chunks(index, 3)
    assert sum(len(m) for _, _, m, _ in parts) == len(index)
    widths = [m.shape[1] for _, _, m, _ in parts]
    assert widths == sorted(widths) and widths[-1] == mask.shape[1]  # like-sized sets together
    assert sum(m.numel() for _, _, m, _ in parts) < 0.7 * mask.numel(), "the parts should carry far less padding"
    for whole, in_parts in zip(gradient([(nodes, pod, mask, targets)]), gradient(parts)):
        torch.testing.assert_close(in_parts, whole, rtol=1e-4, atol=1e-6)
