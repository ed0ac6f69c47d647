"""agent.evaluate.recipe: a recipe's effect over several training seeds, from rlscore-eval's runs.csv."""

import csv
import math
import subprocess
import sys
from pathlib import Path

import pytest

from agent.evaluate.goals import paired_ratio
from agent.evaluate.recipe import RecipeInputError, recipe_ratio, scorer_runs

BIN = Path(sys.executable).parent


def recipe(*args):
    return subprocess.run([sys.executable, "-m", "agent.evaluate.recipe", *args], capture_output=True, text=True, check=False,
                          timeout=120)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """A real runs.csv: LB's rules on four seeds of a small world."""
    out = tmp_path_factory.mktemp("eval")
    ev = subprocess.run([str(BIN / "rlscore-eval"), "--policy", "LB", "--no-model", "--families", "poisson", "--nodes",
                         "3", "--seeds", "4", "--arrivals", "60", "--workers", "1", "--out", str(out), "--no-progress"],
                        capture_output=True, text=True, timeout=300, check=False)
    assert ev.returncode == 0, ev.stderr
    return out / "runs.csv"


def test_the_recipe_ratio_is_the_pooled_sum_of_every_seed_and_world(runs):
    a, b = scorer_runs(f"{runs}:least-allocated"), scorer_runs(f"{runs}:headroom-balance")
    assert len(a) == 4 and all(v > 0 for v in a.values())
    total = recipe_ratio([(a, b), (b, a)])
    assert total.worlds == 4 and total.training_seeds == 2
    assert total.ratio == pytest.approx((sum(a.values()) + sum(b.values())) / (sum(b.values()) + sum(a.values())))
    assert total.per_seed == pytest.approx([sum(a.values()) / sum(b.values()), sum(b.values()) / sum(a.values())])
    same = recipe_ratio([(a, a), (a, a)])
    assert same.ratio == 1.0 and same.ci95 == (1.0, 1.0) and same.reading == "tie"


def test_training_seeds_that_disagree_widen_the_interval_past_each_seeds_own():
    """Seed 1 is 10% ahead on every world, seed 2 10% behind: each is beyond noise on its own, the
    recipe is not; three seeds that agree are."""
    worlds = {(s, "mixed", "random"): 1.0 + 0.1 * (s % 7) for s in range(64)}
    ahead = {w: 0.9 * v for w, v in worlds.items()}
    behind = {w: 1.1 * v for w, v in worlds.items()}
    assert paired_ratio(ahead, worlds)["reading"] == "ahead" and paired_ratio(behind, worlds)["reading"] == "behind"
    split = recipe_ratio([(ahead, worlds), (behind, worlds)])
    assert split.ratio == pytest.approx(1.0) and split.reading == "tie"
    low, high = split.ci95
    assert low <= 0.9 + 1e-9 and high >= 1.1 - 1e-9
    agree = recipe_ratio([(ahead, worlds)] * 3)
    assert agree.reading == "ahead" and agree.ratio == pytest.approx(0.9)


def test_only_the_worlds_every_pair_ran_count():
    one = {(s, "mixed", "random"): 1.0 for s in range(8)}
    other = {(s, "mixed", "random"): 2.0 for s in range(4, 12)}
    total = recipe_ratio([(one, one), (other, other)])
    assert total.worlds == 4 and total.ratio == 1.0


def test_the_command_prints_each_seed_and_the_recipe(runs):
    out = recipe("--pair", f"{runs}:least-allocated", f"{runs}:headroom-balance",
                 "--pair", f"{runs}:least-allocated", f"{runs}:least-allocated")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith(f"{runs.parent.name}:least-allocated / {runs.parent.name}:headroom-balance: paired over 4")
    assert "x1.000 (95% 1.000-1.000)" in lines[1]
    assert lines[2].startswith("the recipe over 2 training seeds x 4 worlds: x")


@pytest.mark.parametrize("spec, message", [
    ("{runs}:rl-lb", "has no runs of 'rl-lb' (it has: balanced-allocation, "),
    ("{runs}", "expected RUNS.csv:SCORER"),
    ("{missing}:rl-lb", "No such file"),
    ("{nan}:rl-lb", "rl-lb has objective=nan on mixed seed 7"),
    ("{text}:rl-lb", "rl-lb has objective='fast', not a number"),
    ("{seed}:rl-lb", "rl-lb has seed='seven', not an integer"),
    ("{columns}:rl-lb", "has no column 'family', 'nodes': not an rlscore-eval runs.csv?"),
    ("{size}:rl-lb", "rl-lb has nodes='random', not an integer"),
    ("{twice}:rl-lb", "lists rl-lb twice on mixed seed 7 at 12 nodes"),
])
def test_bad_input_is_named(runs, tmp_path, spec, message):
    nan, text, seed, size, twice = (tmp_path / f"{name}.csv" for name in ("nan", "text", "seed", "size", "twice"))
    for path, rows in ((nan, [("12", "7", "nan")]), (text, [("12", "7", "fast")]), (seed, [("12", "seven", "1.5")]),
                       (size, [("random", "7", "1.5")]), (twice, [("12", "7", "1.5"), ("12", "7", "1.6")])):
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["scorer", "family", "nodes", "seed", "objective"])
            w.writerows(["rl-lb", "mixed", nodes, world_seed, value] for nodes, world_seed, value in rows)
    columns = tmp_path / "columns.csv"
    columns.write_text("scorer,seed,objective\nrl-lb,7,1.5\n")
    spec = spec.format(runs=runs, missing=tmp_path / "none.csv", nan=nan, text=text, seed=seed, columns=columns,
                       size=size, twice=twice)
    with pytest.raises(RecipeInputError, match=None) as e:
        scorer_runs(spec)
    assert message in str(e.value)
    out = recipe("--pair", spec, f"{runs}:least-allocated")
    assert out.returncode == 2 and message in out.stderr and not out.stdout


def test_pairs_without_a_shared_world_are_refused(runs, tmp_path):
    other = tmp_path / "other.csv"
    other.write_text("scorer,family,nodes,seed,objective\nrl-lb,mixed,12,7,1.5\n")
    out = recipe("--pair", f"{runs}:least-allocated", f"{other}:rl-lb")
    assert out.returncode == 2 and "share no world" in out.stderr
    assert not math.isnan(scorer_runs(f"{other}:rl-lb")[(7, "mixed", 12)])


def test_one_pair_reads_as_rlscore_eval_pairs_a_model_with_a_rule(runs):
    """Worlds resample in seed order, as rlscore-eval's pairing by seed does: one pair's recipe
    interval is that pairing's, to the digit."""
    a, b = scorer_runs(f"{runs}:least-allocated"), scorer_runs(f"{runs}:headroom-balance")
    by_seed = paired_ratio({seed: v for (seed, _, _), v in a.items()}, {seed: v for (seed, _, _), v in b.items()})
    one = recipe_ratio([(a, b)])
    assert (round(one.ratio, 4), [round(x, 4) for x in one.ci95]) == (by_seed["ratio"], by_seed["ci95"])
