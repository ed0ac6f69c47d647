"""The Go scorer's golden fixtures (tests/golden.py) are what the Python reference computes now: a
change to a feature, a rule or a shipped model that is not carried into
plugin-go/pkg/rlscore/testdata/golden.json.gz (`make golden`), and so into Go's TestGolden, fails here."""

import gzip

import orjson
import pytest

from tests import golden

pytestmark = pytest.mark.unit


def test_the_committed_golden_fixtures_are_what_python_computes_now():
    committed = orjson.loads(gzip.decompress(golden.GOLDEN.read_bytes()))
    fresh = orjson.loads(golden.build())
    assert committed["node_features"] == fresh["node_features"], "feature columns changed: run make golden"
    assert committed["models"] == fresh["models"], "a fixture model changed: run make golden"
    assert len(committed["cases"]) == len(fresh["cases"])
    for k, (old, new) in enumerate(zip(committed["cases"], fresh["cases"])):
        for key in new:
            assert old[key] == new[key], f"golden case {k}: {key} differs from what Python computes: run make golden"
