"""A training recipe judged over its training seeds, not one run of it.

One trained model against its twin (or a rule) is one draw of the recipe: on LB's mixed worlds a
second training seed moved the DQN's ratio to its twin by 8%, more than either run's interval over
the worlds. So the recipe's effect is read from several training seeds, each paired world by world
with its own baseline, and its interval resamples both the training seeds and the worlds: the
worlds because each run saw only some, the training seeds because that is the spread a user who
retrains will meet.

Each pair is `RUNS.csv:SCORER` for the model and for its baseline (the runs.csv `rlscore-eval`
writes; the two may come from different runs, as the worlds and their seeds are the same):

    python -m agent.evaluate.recipe \\
      --pair build/s1/runs.csv:rl-cand1/lb build/s1/runs.csv:rl-cand1/lb-demonstrations \\
      --pair build/s2/runs.csv:rl-cand2/lb build/s2/runs.csv:rl-cand2/lb-demonstrations
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from agent.evaluate.goals import PAIRED_RESAMPLES, describe_paired, interval_reading, paired_ratio
from agent.evaluate.report import RunKey, RunsFileError, read_runs


class RecipeInputError(ValueError):
    """A pair names a file or a scorer that is not there, or its two sides share no world."""


def split_spec(spec: str) -> tuple[str, str]:
    """`RUNS.csv:SCORER` -> (path, scorer); scorer names have no colon, paths may."""
    path, sep, scorer = spec.rpartition(":")
    if not sep or not path or not scorer:
        raise RecipeInputError(f"{spec!r}: expected RUNS.csv:SCORER")
    return path, scorer


def scorer_runs(spec: str, metric: str = "objective", read=read_runs) -> dict[RunKey, float]:
    """`RUNS.csv:SCORER` -> the scorer's metric per world of that file; `read` is read_runs or a cached
    one (a model and its baseline mostly share a file)."""
    path, scorer = split_spec(spec)
    try:
        by_world = read(path, metric)
    except RunsFileError as e:
        raise RecipeInputError(str(e)) from e
    runs = {world: by_scorer[scorer] for world, by_scorer in by_world.items() if scorer in by_scorer}
    if not runs:
        names = sorted({name for by_scorer in by_world.values() for name in by_scorer})
        raise RecipeInputError(f"{path} has no runs of {scorer!r} (it has: {', '.join(names) or 'no rows'})")
    return runs


@dataclass(frozen=True)
class RecipeRatio:
    """The recipe's models over their baselines, summed over every training seed and world."""

    training_seeds: int
    worlds: int
    ratio: float
    ci95: tuple[float, float]
    per_seed: list[float]

    @property
    def reading(self) -> str:
        return interval_reading(*self.ci95)


def recipe_ratio(pairs: list[tuple[dict[RunKey, float], dict[RunKey, float]]],
                 resamples: int = PAIRED_RESAMPLES) -> RecipeRatio:
    """Sum of the models' metric over the sum of their baselines', on the worlds every pair ran, with a
    95% interval from a two-level bootstrap: training seeds drawn with replacement, then worlds drawn
    with replacement (the same worlds for every seed drawn, as they were run on the same worlds). A
    fixed stream, so a record reproduces."""
    if not pairs:
        raise RecipeInputError("no pairs")
    worlds = sorted(set.intersection(*(set(a) & set(b) for a, b in pairs)))
    if not worlds:
        raise RecipeInputError("the pairs share no world (same families, node counts and seeds?)")
    model = np.array([[a[w] for w in worlds] for a, _ in pairs])  # training seed x world
    base = np.array([[b[w] for w in worlds] for _, b in pairs])
    if base.sum() <= 0:
        raise RecipeInputError("the baselines' total is 0: no ratio to take")
    rng = np.random.default_rng(0)
    # the worlds first, as goals.paired_ratio draws them: one pair's interval is that pairing's
    picks = rng.integers(0, len(worlds), size=(resamples, len(worlds)))
    seeds = rng.integers(0, len(pairs), size=(resamples, len(pairs)))
    # per resample: the chosen seeds' rows, summed over the chosen worlds; in chunks of resamples, so
    # that memory stays at about a million entries however many seeds and worlds come in
    chunk = max(1, 1_000_000 // (len(pairs) * len(worlds)))
    m, b = np.empty(resamples), np.empty(resamples)
    for start in range(0, resamples, chunk):
        part = slice(start, start + chunk)
        mp, bp = model[:, picks[part]].sum(axis=2).T, base[:, picks[part]].sum(axis=2).T  # resample x seed
        m[part] = np.take_along_axis(mp, seeds[part], axis=1).sum(axis=1)
        b[part] = np.take_along_axis(bp, seeds[part], axis=1).sum(axis=1)
    ratios = m[b > 0] / b[b > 0]
    low, high = (float(x) for x in np.percentile(ratios, [2.5, 97.5]))
    per_seed = [float(mr.sum() / br.sum()) if br.sum() > 0 else math.nan for mr, br in zip(model, base)]
    return RecipeRatio(len(pairs), len(worlds), float(model.sum() / base.sum()), (low, high), per_seed)


def label(spec: str) -> str:
    """`dir/runs.csv:SCORER` -> `dir:SCORER`: enough to tell the runs apart in a report."""
    path, scorer = split_spec(spec)
    return f"{Path(path).parent.name}:{scorer}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agent.evaluate.recipe", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pair", nargs=2, action="append", required=True, metavar=("MODEL", "BASELINE"),
                        help="RUNS.csv:SCORER of one training seed's model and of its baseline (repeatable)")
    parser.add_argument("--metric", default="objective", help="a runs.csv column, lower is better")
    args = parser.parse_args(argv)
    try:
        read = functools.cache(read_runs)
        pairs = [(scorer_runs(a, args.metric, read), scorer_runs(b, args.metric, read)) for a, b in args.pair]
        total = recipe_ratio(pairs)
    except RecipeInputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for (a, b), (ma, mb) in zip(args.pair, pairs):
        print(f"{label(a)} / {label(b)}: {describe_paired(paired_ratio(ma, mb))}")
    low, high = total.ci95
    seeds = f"{total.training_seeds} training seed{'s' if total.training_seeds != 1 else ''}"
    print(f"the recipe over {seeds} x {total.worlds} worlds: x{total.ratio:.3f} "
          f"(95% {low:.3f}-{high:.3f}, training seeds and worlds resampled): {total.reading}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
