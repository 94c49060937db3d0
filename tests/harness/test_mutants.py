"""The harness has teeth: each planted bug makes at least one exact case fail."""

import pytest

from framework.harness.cases import exact_cases
from framework.harness.mutants import mutants
from framework.harness.report import run_mutant

CASES = exact_cases()


@pytest.mark.parametrize("mutant", mutants(), ids=lambda m: m.name)
def test_mutant_is_caught(mutant):
    result = run_mutant(mutant, CASES)
    assert result.caught, f"{mutant.name} survived {result.cases_run} cases"


def test_enough_distinct_bugs():
    assert len({m.name for m in mutants()}) >= 10
