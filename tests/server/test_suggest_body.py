"""The /suggest body's fast decoder (msgspec) against the contract (pydantic's SuggestRequest) on
random bodies, valid and not: it may leave a body to pydantic, never accept one pydantic refuses,
and where it answers, its answer is pydantic's."""

from __future__ import annotations

import json

import numpy as np
import pytest
from pydantic import ValidationError

from suggestion_server.http import suggest_body
from suggestion_server.http.schemas import NodeIn, SuggestRequest
from suggestion_server.http.suggest_body import STATE_FIELDS

# raw JSON fragments per kind of field: valid values, edges, and what the contract refuses or coerces
FRACTIONS = ["0", "-0.0", "1", "0.5", "1e-300", "0.999999"]
POSITIVE = ["1", "1e-300", "250", "8000.0", "9e8", "4096", "64.25"]
INTEGERS = ["1", "110", "4096", "9007199254740993"]
VALID = {field: FRACTIONS if "utilization" in field else INTEGERS if field in ("max_pods", "pods")
         else POSITIVE if field in ("cpu_capacity_millicores", "memory_capacity_bytes", "power_max_watts")
         else FRACTIONS + POSITIVE for field in STATE_FIELDS}
VALID["pods"] = ["0", *INTEGERS]
ODD_NUMBERS = ["0", "-0.0", "-1", "-1e-9", "1.0000001", "1e999", "-1e999", "\"5\"", "\"0.5\"", "\"x\"", "true", "false", "null",
               "[]", "{}", "110.5", "110.0", "123456789012345678901234567890",
               # the upper bounds (NodeIn): 1e9 W and ms, 2**63 for quantities and counts
               "1e9", "1000000000.5", "9e18", "9223372036854775807", "9223372036854775808", "9223372036854775809", "1e19", "1.7e308"]
NAMES = ["node-a", "n1", "a.b-c", "x" * 253, "kwok-node-0", "a" * 63 + "." + "b" * 63]
ODD_NAMES = ["", "Node-A", "node-a\n", "a\nb", "-a", "a-", "a..b", "x" * 254, "n\u00e9", " a", "a_b", 5, None, "a\u0000"]
POLICIES = ["EE", "lb", " el ", None]
ODD_POLICIES = ["XX", 3, ""]


def _field(rng: np.random.Generator, field: str, odd: float) -> str:
    return str(rng.choice(ODD_NUMBERS if rng.random() < odd else VALID[field]))


def _name(rng: np.random.Generator, k: int, odd: float) -> str:
    if rng.random() < odd / 3:
        return json.dumps(ODD_NAMES[rng.integers(len(ODD_NAMES))])
    return json.dumps(f"{NAMES[rng.integers(len(NAMES))][:240]}{k}" if rng.random() < 0.99 else NAMES[0])


def _node(rng: np.random.Generator, k: int, odd: float) -> str:
    if rng.random() < 0.2:
        return _name(rng, k, odd)
    parts = [f'"name": {_name(rng, k, odd)}'] if rng.random() >= odd / 5 else []
    for field in STATE_FIELDS:
        if rng.random() < 0.5:
            parts.append(f'"{field}": {_field(rng, field, odd)}')
    if rng.random() < 0.05:
        parts.append('"unknown_field": {"a": [1, 2]}')
    if rng.random() < odd / 3:
        parts.append(f'"power_idle_watts": 500, "power_max_watts": {rng.choice(["100", "500", "900"])}')
    rng.shuffle(parts)
    return "{" + ", ".join(parts) + "}"


def random_body(rng: np.random.Generator) -> bytes:
    """Half the bodies clean, the others with something odd in a tenth of their fields."""
    odd = 0.0 if rng.random() < 0.5 else 0.1
    nodes = [_node(rng, k, odd) for k in range(int(rng.integers(0 if rng.random() < 0.02 else 1, 12)))]
    pod = {"name": "web-1", "namespace": "default", "cpu_request_millicores": 250}
    if rng.random() < odd:
        pod = rng.choice([{"name": "Bad"}, {"namespace": "x"}, {"name": "p", "annotations": {"bad key!": "v"}},
                          {"name": "p", "cpu_request_millicores": -5}, "pod"])
    parts = [f'"pod": {json.dumps(pod)}', f'"nodes": [{", ".join(nodes)}]']
    policy = POLICIES[rng.integers(len(POLICIES))] if rng.random() >= odd else ODD_POLICIES[rng.integers(3)]
    if rng.random() < 0.5:
        parts.append(f'"policy": {json.dumps(policy)}')
    if rng.random() < odd / 5:
        parts.pop(int(rng.integers(2)))
    return ("{" + ", ".join(parts) + "}").encode()


def _same(fast: suggest_body.SuggestBody, reference: suggest_body.SuggestBody) -> None:
    assert fast.names == reference.names
    assert fast.policy == reference.policy
    assert fast.pod == reference.pod
    if reference.given is None:
        assert fast.given is None
    else:
        assert fast.given is not None
        np.testing.assert_array_equal(fast.given, reference.given)  # NaN equals NaN here


def test_fast_decoder_answers_only_as_pydantic_would():
    rng = np.random.default_rng(7)
    fast_answers = fast_refusals = refused = 0
    for _ in range(6000):
        data = random_body(rng)
        try:
            reference = suggest_body.from_model(SuggestRequest.model_validate_json(data))
        except ValidationError:
            reference = None
        fast = suggest_body._fast(data)
        if fast is not None:
            assert reference is not None, f"the fast path accepted a body pydantic refuses: {data!r}"
            _same(fast, reference)
            fast_answers += 1
        elif reference is not None:
            fast_refusals += 1  # left to pydantic: a coercion msgspec does not make, or a pydantic rule
        if reference is None:
            refused += 1
            with pytest.raises(ValidationError):
                suggest_body.decode(data)
        else:
            _same(suggest_body.decode(data), reference)
    # the draw exercises all three outcomes
    assert fast_answers > 1500 and fast_refusals > 50 and refused > 1500, (fast_answers, fast_refusals, refused)


def test_fast_decoder_takes_the_typical_body():
    """A scheduler's body (every node with its state, numbers as JSON numbers) takes the fast path."""
    nodes = [{"name": f"node-{k}", "cpu_capacity_millicores": 8000, "memory_capacity_bytes": 3.2e10, "max_pods": 110,
              "cpu_requested_millicores": 1250.5, "memory_requested_bytes": 1e9, "pods": 7, "cpu_utilization": 0.31,
              "memory_utilization": 0.2, "latency_ms": 12.5, "power_idle_watts": 60, "power_max_watts": 220,
              "network_receive_bytes_per_s": 1e5, "tcp_established": 40, "disk_utilization": 0.5}
             for k in range(50)] + ["node-by-name"]
    data = json.dumps({"pod": {"name": "p", "annotations": {"rlscore.io/latency-hard-ms": "30"}}, "nodes": nodes,
                       "policy": "el"}).encode()
    fast = suggest_body._fast(data)
    assert fast is not None
    _same(fast, suggest_body.from_model(SuggestRequest.model_validate_json(data)))
    assert fast.policy == "EL" and fast.names[-1] == "node-by-name"
    assert fast.given.shape == (len(STATE_FIELDS), 51) and np.isnan(fast.given[:, -1]).all()
    assert fast.given[STATE_FIELDS.index("max_pods"), 0] == 110.0


def test_the_fast_decoder_knows_every_node_field():
    """A field added to NodeIn must be added to snapshot.FIELDS too: the fast decoder builds its node
    struct from FIELDS, and would otherwise accept the field unchecked where pydantic validates it."""
    assert STATE_FIELDS == tuple(name for name in NodeIn.model_fields if name != "name")
