"""The server's reference tables, generated from the code: every RLSCORE_* setting (suggestion_server.
config.Settings) and every metric the server and the scheduler plugin export. `make docs` writes them
into docs/operations.md between their markers; tests/test_docs.py fails when they are out of date.

    python -m suggestion_server.reference settings|metrics
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from prometheus_client import REGISTRY

from suggestion_server import metrics  # noqa: F401  (registers the server's metrics)
from suggestion_server.config import Settings

ROOT = Path(__file__).resolve().parents[1]
PLUGIN_METRICS = ROOT / "plugin-go" / "pkg" / "rlscore" / "metrics.go"


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def settings_table() -> str:
    lines = ["| variable | default | what it sets |", "|---|---|---|"]
    for name, field in Settings.model_fields.items():
        default = field.default
        shown = "unset" if default is None else f"`{default}`"
        lines.append(f"| `RLSCORE_{name.upper()}` | {_cell(shown)} | {_cell(field.description or '')} |")
    return "\n".join(lines)


def metrics_table() -> str:
    lines = ["| metric | type | labels | what it counts | exported by |", "|---|---|---|---|---|"]
    rows = []
    for collector in list(REGISTRY._collector_to_names):  # the server's own, by their names
        for family in collector.describe() if hasattr(collector, "describe") else ():
            if family.name.startswith("rlscore_"):
                kind = "counter" if family.type == "counter" else family.type
                name = family.name + ("_total" if kind == "counter" else "")
                labels = ", ".join(getattr(collector, "_labelnames", ()))
                rows.append((name, kind, labels, family.documentation, "server"))
    source = PLUGIN_METRICS.read_text()
    for kind, body, labels in re.findall(r"metrics\.New(\w+?)(?:Vec)?\(&metrics\.\w+Opts\{(.*?)\n\t\}(?:, \[\]string\{(.*?)\})?\)",
                                         source, re.S):
        name = re.search(r'Name:\s*"(\w+)"', body)
        help_ = "".join(re.findall(r'"([^"]*)"', re.search(r"Help:(.*?)StabilityLevel", body, re.S).group(1)))
        rows.append((f"rlscore_{name.group(1)}", kind.lower(), labels.replace('"', ""), help_, "scheduler plugin"))
    for name, kind, labels, help_, by in sorted(set(rows)):
        lines.append(f"| `{name}` | {kind} | {_cell(labels)} | {_cell(help_)} | {by} |")
    return "\n".join(lines)


TABLES = {"settings": settings_table, "metrics": metrics_table}


OPERATIONS = ROOT / "docs" / "operations.md"


def main(argv: list[str] | None = None) -> int:
    """`settings` or `metrics`: print the table; `--write`: write both into docs/operations.md."""
    args = sys.argv[1:] if argv is None else argv
    if args == ["--write"]:
        from rlscore.generated import write_section

        for name, table in TABLES.items():
            write_section(OPERATIONS, name, table())
        return 0
    if len(args) != 1 or args[0] not in TABLES:
        print(f"usage: python -m suggestion_server.reference {'|'.join(TABLES)}|--write", file=sys.stderr)
        return 2
    print(TABLES[args[0]]())
    return 0


if __name__ == "__main__":
    sys.exit(main())
