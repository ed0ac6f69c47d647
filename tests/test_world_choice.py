"""agent.learn.world_choice: the hindsight best rule of each evaluated run against the rule the
teachers choose for its world without seeing the run."""

import csv
import math

import pytest

from agent.learn.teachers import world_teacher
from agent.learn.world_choice import DECISIONS, main
from agent.sim.mixed import LEADING_RULES
from agent.sim.simulator import Simulation

RULES = LEADING_RULES["EL"]  # latency-fit, latency-pack, one-step-el
RUNS = [(2**40, 22), (2**40 + 1, 39)]  # (seed, the size evaluation draws for it)


def _write(path, objectives: dict, rules=RULES):
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["scorer", "family", "nodes", "seed", "objective"])
        for (seed, nodes), by_scorer in objectives.items():
            for scorer in (*rules, "rl-twin"):
                w.writerow([scorer, "mixed", nodes, seed, by_scorer[scorer]])


@pytest.mark.parametrize("steady", [False, True])
def test_the_teachers_choice_is_read_on_the_evaluated_runs(tmp_path, capsys, steady):
    # each run's hindsight best is one-step-el; the model is level with latency-fit
    objectives = {run: {"latency-fit": 2.0, "latency-pack": 4.0, "one-step-el": 1.0, "rl-twin": 2.0} for run in RUNS}
    runs = tmp_path / "runs.csv"
    _write(runs, objectives)
    picks = [world_teacher("EL", Simulation.of_family("mixed", seed, None, limits=True).world, seed, RULES[0],
                           list(RULES), DECISIONS, 1, steady=steady) for seed, _ in RUNS]
    chosen = [rule for rule, _ in picks]
    assert main(["--policy", "EL", "--runs", str(runs), "--futures", "1", "--workers", "1",
                 *(["--steady"] if steady else [])]) == 0
    out = capsys.readouterr().out
    assert "ratios to latency-fit" in out and "hindsight best rule" in out and "x0.500" in out
    assert ("after one fill" in out) == steady
    teachers = math.exp(sum(math.log(objectives[r][c] / 2.0) for r, c in zip(RUNS, chosen)) / len(RUNS))
    line = next(x for x in out.splitlines() if x.strip().startswith("teachers' choice"))
    assert line.split()[2] == f"x{teachers:.3f}"  # geometric mean of the per-run ratios
    summed = sum(objectives[r][c] for r, c in zip(RUNS, chosen)) / (2.0 * len(RUNS))
    assert line.split()[3] == f"x{summed:.3f}"  # ratio of the sums, paired by run
    assert f"x{2.0 / teachers:.3f}" in out  # the model against the teachers' choice
    agree = sum(c == "one-step-el" for c in chosen) / len(RUNS)
    assert f"hindsight best on {agree:.0%} of the runs" in out


def test_a_steady_teacher_run_is_measured_after_one_fill():
    seed, _ = RUNS[0]
    world = Simulation.of_family("mixed", seed, None, limits=True).world
    _, from_empty = world_teacher("EL", world, seed, RULES[0], list(RULES), 64, 1)
    _, steady = world_teacher("EL", world, seed, RULES[0], list(RULES), 64, 1, steady=True)
    assert from_empty.keys() == steady.keys() and all(from_empty[r] != steady[r] for r in RULES)


def test_clear_errors_on_runs_it_cannot_read(tmp_path, capsys):
    missing = tmp_path / "missing.csv"
    _write(missing, {RUNS[0]: {"latency-fit": 1.0, "latency-pack": 1.0, "rl-twin": 1.0}}, rules=RULES[:2])
    assert main(["--policy", "EL", "--runs", str(missing), "--workers", "1"]) == 2
    assert "the runs lack one-step-el" in capsys.readouterr().err
    other = tmp_path / "summary.csv"
    other.write_text("family,scorer,objective\nmixed,latency-fit,1.0\n")
    assert main(["--policy", "EL", "--runs", str(other)]) == 2
    assert "not an rlscore-eval runs.csv" in capsys.readouterr().err
    assert main(["--policy", "EL", "--runs", str(tmp_path / "none.csv")]) == 2
    assert "none.csv" in capsys.readouterr().err


def test_a_run_of_a_runs_csv_is_rebuilt_on_the_world_it_was_measured_on():
    """A mixed world drawn at a given size is another world: the rebuilt run must be the evaluated one
    (objective to the bit), whether the evaluation drew the size or was given one (--nodes)."""
    import numpy as np

    from agent.evaluate.compare import evaluate, measure, simulation_of_run
    from rlscore.core.scoring import HeuristicScorer

    drawn, _ = evaluate("EL", [], ("mixed",), seeds=2, arrivals=40, baselines=("latency-fit",), progress=False, workers=1)
    given, _ = evaluate("EL", [], ("mixed",), seeds=1, arrivals=40, baselines=("latency-fit",), node_counts=(7,),
                        progress=False, workers=1)
    for r in (*drawn, *given):
        sim = simulation_of_run(r.family, r.seed, r.nodes, "EL")
        again, _ = measure(HeuristicScorer("latency-fit", np.random.default_rng(r.seed)), sim, r.seed, "EL", 40)
        assert (again.nodes, again.objective, again.hard_violations) == (r.nodes, r.objective, r.hard_violations)
    r = drawn[0]  # what the rebuild used to be: the same seed drawn at the run's size, another world
    assert Simulation.of_family(r.family, r.seed, r.nodes, limits=True).world != simulation_of_run(
        r.family, r.seed, r.nodes, "EL").world
