"""The harness has teeth: each planted bug makes at least one exact case fail.

The fast run checks each mutant on its witness (a cheap case known to catch it); `-m slow`
searches the whole matrix, as `python -m experiments.mutants` does.
"""

import pytest

from harness.cases import exact_cases
from harness.mutants import mutants
from harness.report import run_case, run_mutant

CASES = exact_cases()
BY_NAME = {case.name: case for case in CASES}


# The two slowest witnesses (5-7 s) run with -m slow, beside the whole matrix; the loop mutants catch a
# deduplicated draw in the default tier too, and multidraft keeps its rho-one witness there.
SLOW_WITNESSES = {"iid-deduplicated", "multidraft-residual-of-one-draft"}


@pytest.mark.parametrize("mutant", [pytest.param(m, marks=[pytest.mark.slow] if m.name in SLOW_WITNESSES else [])
                                    for m in mutants()], ids=lambda m: m.name)
def test_mutant_is_caught_by_its_witness(mutant):
    case = BY_NAME[mutant.witness]
    assert run_case(case, mutant.clean).passed, f"the mutant's own clean rule must pass {case.name}"
    result = run_mutant(mutant, [case], clean_checked=True)
    assert result.caught, f"{mutant.name} survived its witness {case.name}"


@pytest.mark.slow
@pytest.mark.parametrize("mutant", mutants(), ids=lambda m: m.name)
def test_mutant_is_caught(mutant):
    result = run_mutant(mutant, CASES)
    assert result.caught, f"{mutant.name} survived {result.cases_run} cases"


def test_enough_distinct_bugs():
    assert len({m.name for m in mutants()}) >= 10
