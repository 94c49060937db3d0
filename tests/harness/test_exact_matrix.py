"""Every lossless case matches the target's law exactly; the lossy baseline does not."""

import pytest

from framework.harness.cases import exact_cases
from framework.harness.exact import Pipeline, check_case
from verifiers import typical_verifier

CASES = exact_cases()
HEAVY = exact_cases(heavy=True)[len(CASES):]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_lossless(case):
    result = check_case(case)
    assert result.tv <= 1e-9, f"{case.name}: TV {result.tv}"
    assert not result.support_violations
    assert abs(result.mass - 1) <= 1e-9


@pytest.mark.slow
@pytest.mark.parametrize("case", HEAVY, ids=lambda c: c.name)
def test_lossless_heavy(case):
    assert check_case(case).passes(1e-9)


def test_typical_acceptance_fails_somewhere():
    lossy = Pipeline(verifier=typical_verifier())
    assert not lossy.verifier.lossless
    chains = [c for c in CASES if c.name.startswith("chain3/") and "greedy" not in c.name]
    assert any(check_case(c, lossy).tv > 1e-3 for c in chains)  # stops at the first case it fails
