"""A /suggest body decoded into what scoring needs: the pod, the policy, the node names and the
state columns the request gives.

pydantic's `SuggestRequest` is the contract: the schema, its lax coercions (a numeric string for a
float), every error message. Validating a 1 000-node body with it took 2.6 ms and reading its node
objects into columns another 0.8 ms, more than scoring them. Here msgspec decodes the body with strict
types only (0.4 ms; it refuses numbers beyond a float's range, as pydantic does), and the node rules
are checked at once over all nodes: names with one regular-expression match over all of them, ranges
on the columns. A body that breaks any of it goes to pydantic. So the fast path only ever answers
bodies pydantic accepts, with the same values, and every refusal is pydantic's (checked on random
bodies in tests/server/test_suggest_body.py).
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Union

import msgspec
import numpy as np

from suggestion_server.http.compact import MAX_NAME, valid_names
from suggestion_server.http.schemas import PodIn, SuggestRequest, first_duplicate, policy_field
from suggestion_server.node_state.node_table import MAX_COUNT, MAX_LATENCY_MS, MAX_QUANTITY, MAX_WATTS
from suggestion_server.node_state.snapshot import FIELDS, FRACTION_FIELDS

# the rows of `given`: the node objects' state fields, in snapshot.FIELDS's order
STATE_FIELDS = tuple(key for key, _ in FIELDS)
INTEGER_FIELDS = ("max_pods", "pods")
POSITIVE_FIELDS = ("cpu_capacity_millicores", "memory_capacity_bytes", "max_pods", "power_max_watts")
_POSITIVE = np.array([STATE_FIELDS.index(f) for f in POSITIVE_FIELDS])
_IDLE, _PEAK = STATE_FIELDS.index("power_idle_watts"), STATE_FIELDS.index("power_max_watts")
# NodeIn's upper bound of each field, one per row of `given`; the integers near theirs go to pydantic
# (as floats, 2**63 + 1 and 2**63 are one number)
_UPPER = np.array([1.0 if f in FRACTION_FIELDS else MAX_WATTS if f.endswith("_watts") else
                   MAX_LATENCY_MS if f == "latency_ms" else MAX_QUANTITY for f in STATE_FIELDS])[:, None]
_INTEGER = np.array([STATE_FIELDS.index(f) for f in INTEGER_FIELDS])

# NodeIn's types (a field left out is NaN, as an explicit null becomes); the name last, so that a
# node's tuple minus its last item is its row of state
_Node = msgspec.defstruct(
    "_Node", [(f, Union[int, None] if f in INTEGER_FIELDS else Union[float, None], math.nan) for f in STATE_FIELDS]
    + [("name", str)], kw_only=True, gc=False)
# the pod as raw JSON for PodIn: its annotations need pydantic's rules and messages
_Body = msgspec.defstruct("_Body", [("pod", msgspec.Raw), ("nodes", list[Union[str, _Node]]),
                                    ("policy", Union[str, None], None)], gc=False)
_DECODER = msgspec.json.Decoder(_Body)
_NAME_ONLY = (None,) * len(STATE_FIELDS)
_as_tuple = msgspec.structs.astuple
_READ_MODEL = operator.attrgetter(*STATE_FIELDS)  # a NodeIn's row of state


@dataclass(frozen=True)
class SuggestBody:
    pod: PodIn
    policy: str | None
    names: list[str]
    # (len(STATE_FIELDS), nodes): what the request gives, NaN where it gives nothing; None: names only
    given: np.ndarray | None


def decode(data: bytes) -> SuggestBody:
    """The body's content; raises pydantic's ValidationError (located under the body's fields) when
    it breaks the contract."""
    return _fast(data) or from_model(SuggestRequest.model_validate_json(data))


def from_model(request: SuggestRequest) -> SuggestBody:
    nodes = request.nodes
    names = [node if isinstance(node, str) else node.name for node in nodes]
    given = _columns([_NAME_ONLY if isinstance(node, str) else _READ_MODEL(node) for node in nodes], len(nodes))
    return SuggestBody(request.pod, request.policy, names, given)


def _fast(data: bytes) -> SuggestBody | None:
    """The body decoded by msgspec, or None where pydantic must decide."""
    try:
        body = _DECODER.decode(data)
        pod = PodIn.model_validate_json(bytes(body.pod))
        policy = policy_field(body.policy)
    except (msgspec.DecodeError, ValueError, RecursionError):  # pydantic's ValidationError is a ValueError
        return None
    nodes = body.nodes
    if not nodes:
        return None
    if all(map(str.__instancecheck__, nodes)):
        names, given = nodes, None
    else:
        names = [node if isinstance(node, str) else node.name for node in nodes]
        given = _columns([_NAME_ONLY if isinstance(node, str) else _as_tuple(node)[:-1] for node in nodes], len(nodes))
        if given is not None and not _in_range(given):
            return None
    if max(map(len, names)) > MAX_NAME or not valid_names(names) or first_duplicate(names) is not None:
        return None
    return SuggestBody(pod, policy, names, given)


def _in_range(given: np.ndarray) -> bool:
    """NodeIn's bounds over all nodes at once (NaN, a field left out, compares False)."""
    return not ((given < 0).any() or (given[_POSITIVE] == 0).any() or (given > _UPPER).any()
                or (given[_INTEGER] >= float(MAX_COUNT)).any() or (given[_PEAK] < given[_IDLE]).any())


def _columns(rows: list[tuple], count: int) -> np.ndarray | None:
    """One row per node in, one contiguous column per field out (None -> NaN); None when no node
    gives any field."""
    block = np.array(rows, dtype=np.float64).reshape(count, len(STATE_FIELDS))
    if np.isnan(block).all():
        return None
    return np.ascontiguousarray(block.T)
