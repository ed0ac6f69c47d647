"""The docs describe the product as it is: the README stays short and undated, the generated sections
(the shipped policies' figures from their sidecars, every setting, every metric) are what the code and
the models say now (`make docs` rewrites them), and every make target and file the docs name exists."""

import re
from pathlib import Path

import pytest

from agent.evaluate.report import readme_table
from rlscore.generated import replace_section
from suggestion_server.reference import metrics_table, settings_table

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DOCS = {p.name: p.read_text() for p in (ROOT / "docs").glob("*.md")}
DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")


def test_the_readme_is_short_and_undated():
    assert len(README.splitlines()) <= 300
    assert not DATE.findall(README)


def test_the_docs_carry_no_dated_history():
    dated = {name: DATE.findall(text) for name, text in DOCS.items() if DATE.findall(text)}
    assert not dated, f"dated history belongs in CHANGELOG.md: {dated}"


@pytest.mark.parametrize("path, name, generate", [
    ("docs/operations.md", "settings", settings_table),
    ("docs/operations.md", "metrics", metrics_table),
    ("README.md", "policies", readme_table),
])
def test_generated_sections_are_current(path, name, generate):
    text = (ROOT / path).read_text()
    assert replace_section(text, name, generate()) == text, f"{path}'s {name} section is stale: run make docs"


def test_every_make_target_and_file_the_docs_name_exists():
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][\w-]*):", makefile, re.M))
    for text in [README, *DOCS.values()]:
        for target in re.findall(r"`make ([a-z][\w-]*)", text):
            assert target in targets, f"make {target}"
        for link in re.findall(r"\]\(((?:docs/)?[\w./-]+\.md)\)", text):
            assert (ROOT / link).exists() or (ROOT / "docs" / link).exists(), link


@pytest.mark.parametrize("seeds", ["evaluation", "holdout"])
def test_a_mixed_row_read_from_the_goals_is_the_ablations_reading(seeds):
    """A model shipped without an ablation has its README row from its goals: the LB sidecar has both,
    measured on the same runs, and they agree cell by cell."""
    import json

    from agent.evaluate.report import _cells_from_goals

    meta = json.loads((ROOT / "models" / "lb.json").read_text())
    ablation, from_goals = meta["ablation"][seeds], _cells_from_goals(meta[seeds])
    assert set(from_goals) == set(ablation) == {"mixed", "mixed-wide"}
    for family, cell in ablation.items():
        assert from_goals[family] == {"best_rule": cell["best_rule"], "vs_best_rule": cell["vs_best_rule"]}
