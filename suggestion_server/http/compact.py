"""The compact wire format of POST /v1/scores, the scheduler plugin's hot path.

/suggest's JSON is easy for people and scripts, but at a thousand nodes per pod decoding a JSON
list of names and encoding a JSON object of scores costs more than scoring them. Here:

- request body: one line of JSON (`ScoresHeader`: the pod and an optional policy), then the node
  names, one per line (`\\n`), no trailing newline; content type `application/x-rlscore-names`;
- response body: one byte per node, its score 0..100, in request order; content type
  `application/octet-stream`; the rest of /suggest's answer travels in `X-Rlscore-*` headers
  (policy, model version, source, degraded, reasons as a JSON list of ASCII strings).
"""

from __future__ import annotations

import json
import re

from pydantic import ValidationError

from suggestion_server.http.schemas import DNS_SUBDOMAIN, PATTERN_MESSAGES, ScoresHeader, first_duplicate

CONTENT_TYPE = "application/x-rlscore-names"
SCORES_CONTENT_TYPE = "application/octet-stream"
MAX_NAME = 253
_LABEL = rb"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_NAME = rb"%s(?:\.%s)*" % (_LABEL, _LABEL)
# every name at once: one C-level match instead of one per name
_NAMES = re.compile(rb"%s(?:\n%s)*" % (_NAME, _NAME))
_ONE_NAME = re.compile(_NAME)


class CompactError(ValueError):
    """A body that does not follow the format; `loc` names where, as /suggest's 422s do."""

    def __init__(self, loc: list, message: str):
        super().__init__(message)
        self.loc, self.message = loc, message


def parse(body: bytes) -> tuple[ScoresHeader, list[str]]:
    head, newline, rest = body.partition(b"\n")
    try:
        header = ScoresHeader.model_validate_json(head)
    except ValidationError as exc:
        first = exc.errors()[0]
        message = PATTERN_MESSAGES.get((first.get("ctx") or {}).get("pattern"), first.get("msg", ""))
        raise CompactError(["body", "header", *first.get("loc", ())], message) from None
    if not newline or not rest:
        raise CompactError(["body", "nodes"], "no node names: the header line must be followed by one name per line")
    if _NAMES.fullmatch(rest) is None:
        raise CompactError(["body", "nodes"], _first_bad_name(rest))
    names = rest.decode("ascii").split("\n")
    duplicate = first_duplicate(names)
    if duplicate is not None:
        raise CompactError(["body", "nodes"], f"duplicate node name {duplicate!r}")
    if max(map(len, names)) > MAX_NAME:
        longest = max(names, key=len)
        raise CompactError(["body", "nodes"], f"node name {longest[:40]!r}... is longer than {MAX_NAME} characters")
    return header, names


def valid_names(names: list[str]) -> bool:
    """Every name a Kubernetes node name (length aside), with one match over all of them."""
    joined = "\n".join(names)
    return joined.count("\n") == len(names) - 1 and _NAMES.fullmatch(joined.encode()) is not None


def _first_bad_name(rest: bytes) -> str:
    for i, raw in enumerate(rest.split(b"\n")):
        if _ONE_NAME.fullmatch(raw) is None:
            shown = raw[:60].decode("ascii", "backslashreplace")
            return f"node {i} ({shown!r}) {PATTERN_MESSAGES[DNS_SUBDOMAIN]}" if raw else f"node {i} is an empty line"
    return "node names must be separated by single newlines"


MAX_REASONS_HEADER = 8192


def headers(policy: str, version: str | None, source: str, degraded: bool, reasons: list[str]) -> dict[str, str]:
    encoded = json.dumps(reasons, ensure_ascii=True, separators=(",", ":"))
    while len(encoded) > MAX_REASONS_HEADER and reasons:  # the full list is in /suggest and the logs
        reasons = reasons[:-1]
        encoded = json.dumps([*reasons, "(more reasons left out)"], ensure_ascii=True, separators=(",", ":"))
    return {"x-rlscore-policy": policy, "x-rlscore-model-version": version or "", "x-rlscore-source": source,
            "x-rlscore-degraded": "true" if degraded else "false",
            "x-rlscore-reasons": encoded}
