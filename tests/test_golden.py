"""The Go scorer's golden fixtures (tests/golden.py) are what the Python reference computes now: a
change to a feature, a rule or a shipped model that is not carried into
plugin-go/pkg/rlscore/testdata/golden.json.gz (`make golden`), and so into Go's TestGolden, fails here."""

import gzip
import math

import orjson
import pytest

from tests import golden

pytestmark = pytest.mark.unit

TOLERANCE = 1e-9
"""relative difference a network's output may show from one CPU to another (torch picks its kernels by
the instruction set, and the order of its sums with them); a changed feature, rule or weight moves more"""


def _difference(old, new, where: str = "") -> str | None:
    """Where `new` first differs from `old` (floats beyond TOLERANCE), with both values; None if nowhere."""
    if isinstance(old, float) or isinstance(new, float):
        numbers = all(isinstance(x, (int, float)) for x in (old, new))
        if numbers and math.isclose(old, new, rel_tol=TOLERANCE, abs_tol=TOLERANCE):
            return None
    elif isinstance(old, dict) and isinstance(new, dict):
        if old.keys() != new.keys():
            return f"{where}: keys {sorted(old)} != {sorted(new)}"
        return next((d for k in old if (d := _difference(old[k], new[k], f"{where}.{k}" if where else k))), None)
    elif isinstance(old, list) and isinstance(new, list):
        if len(old) != len(new):
            return f"{where}: {len(old)} items != {len(new)}"
        return next((d for i, (a, b) in enumerate(zip(old, new)) if (d := _difference(a, b, f"{where}[{i}]"))), None)
    elif old == new:
        return None
    return f"{where}: committed {old!r}, computed {new!r}"


def test_the_committed_golden_fixtures_are_what_python_computes_now():
    committed = orjson.loads(gzip.decompress(golden.GOLDEN.read_bytes()))
    fresh = orjson.loads(golden.build())
    assert committed["node_features"] == fresh["node_features"], "feature columns changed: run make golden"
    assert committed["models"] == fresh["models"], "a fixture model changed: run make golden"
    assert len(committed["cases"]) == len(fresh["cases"])
    for k, (old, new) in enumerate(zip(committed["cases"], fresh["cases"])):
        for key in new:
            difference = _difference(old[key], new[key], key)
            assert difference is None, f"golden case {k}: {difference}: run make golden"


@pytest.mark.parametrize(("old", "new", "found"), [
    ({"values": [-49.64534627998636]}, {"values": [-49.645346279986356]}, None),  # two CPUs' last bits
    ({"values": [4.3467]}, {"values": [4.3468]}, "values[0]: committed 4.3467, computed 4.3468"),
    ({"scores": [100]}, {"scores": [99]}, "scores[0]: committed 100, computed 99"),
    ({"rule": "most-allocated"}, {"rule": "least-allocated"}, "rule: committed 'most-allocated', computed 'least-allocated'"),
    ({"values": [1.0]}, {"values": [1.0, 2.0]}, "values: 1 items != 2"),
    ({"values": [0.0]}, {"values": [1e-6]}, "values[0]: committed 0.0, computed 1e-06"),
])
def test_only_a_cpus_rounding_passes_for_the_same_answer(old, new, found):
    assert _difference(old, new) == found
