"""Proposers read the target through the Target role (framework/core/target.py: model, dtype, tree_backend, the
forwards' features), never through an implementation's insides (`target.lm`: HFTarget's cached model)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# the tree search's cost table times HFTarget's forwards itself (a measurement over the implementation, not a role)
MEASURES_THE_IMPLEMENTATION = {"proposers/search/tree_cost.py"}


def reaches_past_the_target(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if re.search(r"\btarget\.lm\b", line)]


def test_no_proposer_reaches_past_the_target_role():
    found = {str(p.relative_to(ROOT)): reaches_past_the_target(p.read_text())
             for p in (ROOT / "proposers").rglob("*.py")}
    found = {path: lines for path, lines in found.items() if lines and path not in MEASURES_THE_IMPLEMENTATION}
    assert not found, f"proposers read HFTarget's insides instead of the Target role: {found}"


def test_the_check_sees_a_reach_past_the_role():
    assert reaches_past_the_target("        model = target.lm.model\n") == ["model = target.lm.model"]
    assert not reaches_past_the_target("        model = target.model\n")
