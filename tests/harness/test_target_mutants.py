"""Bugs in the target adapter (positions, KV commit, side rows) are caught through the real loop."""

import pytest

from framework.harness.target_mutants import target_mutants
from framework.target import HFTarget


@pytest.mark.parametrize("mutant", target_mutants(), ids=lambda m: m.name)
def test_target_mutant_is_caught_by_its_witness(mutant):
    assert mutant.witness(HFTarget) <= 1e-9, f"the clean adapter must pass {mutant.name}'s witness"
    assert mutant.witness(mutant.target) > 1e-6, f"{mutant.name} survived its witness"
