"""The numpy forms of the compiled loops (what serves where numba is not installed, rlscore[serve])
against the compiled ones, on random inputs with NaN, infinities and ties: the forward pass's layer
to ~1e-12 (its sums run in another order), the scores and the snapshot's passes exactly. The features'
numpy reference is held to the compiled loop in tests/test_features.py."""

import numpy as np
import pytest

from rlscore.core import kernels
from suggestion_server.node_state import snapshot
from suggestion_server.node_state.node_table import COLUMNS

pytestmark = pytest.mark.unit

if not kernels.COMPILED:  # pragma: no cover
    pytest.skip("numba is not installed: nothing compiled to compare with", allow_module_level=True)


@pytest.mark.parametrize("n, m, extra, out", [(1, 3, 0, 2), (7, 48, 3, 64), (300, 64, 0, 64)])
def test_the_numpy_layer_equals_the_compiled_one(n, m, extra, out):
    rng = np.random.default_rng(n)
    x = rng.normal(size=(n, m))
    x[0, 0] = -0.0
    ext = rng.normal(size=extra)
    lam, gam, delta = (rng.normal(size=(m + extra, out)) for _ in range(3))
    bias = rng.normal(size=out)
    for relu in (False, True):
        top_c, mean_c = kernels.relu_column_max_mean(x.copy(), relu)
        top_n, mean_n = kernels._relu_column_max_mean_numpy(x.copy(), relu)
        np.testing.assert_array_equal(top_c, top_n)
        np.testing.assert_allclose(mean_c, mean_n, rtol=0, atol=1e-12)
        pooled_c = kernels._pooled(top_c, mean_c, ext, lam, bias, gam, delta)
        pooled_n = kernels._pooled_numpy(top_c, mean_c, ext, lam, bias, gam, delta)
        np.testing.assert_allclose(pooled_c, pooled_n, rtol=0, atol=1e-10)


def test_the_numpy_scores_equal_the_compiled_ones():
    rng = np.random.default_rng(0)
    for _ in range(300):
        values = rng.choice([0.0, 1.0, 2.5, np.nan, np.inf, -np.inf, 1.0 + 1e-10], size=int(rng.integers(1, 12)))
        values = np.where(rng.random(values.size) < 0.5, rng.normal(size=values.size), values)
        compiled_scores, compiled_finite = kernels.node_scores(values, 100)
        numpy_scores, numpy_finite = kernels.node_scores_numpy(values, 100)
        assert compiled_scores.tolist() == numpy_scores.tolist() and compiled_finite == numpy_finite, values


def test_the_numpy_snapshot_passes_equal_the_compiled_ones():
    rng = np.random.default_rng(1)
    for _ in range(50):
        n = int(rng.integers(1, 40))
        data = rng.uniform(0, 5000, size=(len(COLUMNS), n + 1))
        data[rng.random(data.shape) < 0.3] = np.nan
        data[COLUMNS.index("in_api")] = rng.choice([1.0, np.nan], n + 1)
        rows = rng.integers(0, n + 1, size=int(rng.integers(1, 20))).astype(np.intp)
        states = [np.full((len(snapshot.STATE), rows.size), -1.0) for _ in range(2)]
        assert snapshot._resolve(data, rows, states[0]) == snapshot._resolve_numpy(data, rows, states[1])
        np.testing.assert_array_equal(states[0], states[1])
        given = rng.uniform(0, 1, size=(len(snapshot.FIELDS), rows.size))
        given[rng.random(given.shape) < 0.7] = np.nan
        snapshot._merge_given(states[0], given, snapshot._S_GIVEN)
        snapshot._merge_given_numpy(states[1], given, snapshot._S_GIVEN)
        np.testing.assert_array_equal(states[0], states[1])
        for need_latency in (False, True):
            for need_power in (False, True):
                copies = [s.copy() for s in states]
                assert snapshot._check(copies[0], need_latency, need_power) == \
                    snapshot._check_numpy(copies[1], need_latency, need_power)
                np.testing.assert_array_equal(copies[0], copies[1])
