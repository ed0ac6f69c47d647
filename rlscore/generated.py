"""Sections of the docs generated from the code or the models' sidecars, between `<!-- name:start -->`
and `<!-- name:end -->`: written by `make docs`, checked by tests/test_docs.py, so they never drift."""

from __future__ import annotations

import re
from pathlib import Path


def replace_section(text: str, name: str, content: str) -> str:
    """`text` with the section `name` holding `content`; ValueError when the markers are missing."""
    pattern = re.compile(rf"(<!-- {re.escape(name)}:start -->\n).*?(<!-- {re.escape(name)}:end -->)", re.S)
    if not pattern.search(text):
        raise ValueError(f"no <!-- {name}:start --> ... <!-- {name}:end --> section")
    return pattern.sub(lambda m: m.group(1) + content.rstrip("\n") + "\n" + m.group(2), text, count=1)


def write_section(path: Path, name: str, content: str) -> bool:
    """Write the section into the file; True when it changed."""
    old = path.read_text()
    new = replace_section(old, name, content)
    if new != old:
        path.write_text(new)
    return new != old
