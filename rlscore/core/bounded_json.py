"""JSON from outside (sidecars, exported weights, Prometheus answers) read within bounds.

Python's and msgspec's decoders recurse once per level of nesting, so a few kilobytes of `[[[[...`
raise RecursionError (or exhaust the stack) inside whatever called them; and nothing stops a file
of hundreds of megabytes from being read whole. `loads` refuses both before decoding, with an error
that says which limit was crossed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

MAX_DEPTH = 64
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_OPEN = np.zeros(256, dtype=np.int8)
_OPEN[[ord("["), ord("{")]] = 1
_OPEN[[ord("]"), ord("}")]] = -1


class BoundedJSONError(ValueError):
    """The text is too large, nested too deep, or not JSON; the message says which."""


def nesting_depth(data: bytes) -> int:
    """The deepest nesting of arrays and objects in `data` (strings, which may hold brackets, skipped)."""
    structural = np.frombuffer(_STRING.sub(b'""', data), dtype=np.uint8)
    if structural.size == 0:
        return 0
    return int(max(np.cumsum(_OPEN[structural], dtype=np.int64).max(), 0))


def loads(data: bytes | str, max_bytes: int, max_depth: int = MAX_DEPTH, what: str = "JSON") -> Any:
    """`json.loads` that refuses more than `max_bytes` or deeper than `max_depth` before decoding."""
    raw = data.encode() if isinstance(data, str) else bytes(data)
    if len(raw) > max_bytes:
        raise BoundedJSONError(f"{what} is {len(raw)} bytes, over the {max_bytes}-byte limit")
    depth = nesting_depth(raw)
    if depth > max_depth:
        raise BoundedJSONError(f"{what} is nested {depth} levels deep, over the limit of {max_depth}")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise BoundedJSONError(f"{what} is not valid JSON: {str(exc)[:200]}") from None


def load_file(path: Path, max_bytes: int, max_depth: int = MAX_DEPTH, what: str | None = None) -> Any:
    """`loads` on a file, whose size is checked before it is read."""
    what = what or str(path)
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise BoundedJSONError(f"{what} is {size} bytes, over the {max_bytes}-byte limit")
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as exc:
        raise BoundedJSONError(f"{what}: cannot read: {exc.strerror or exc}") from None
    return loads(data, max_bytes, max_depth, what)
