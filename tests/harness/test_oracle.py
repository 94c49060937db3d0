"""The optimality oracle: an LP bound that block verification reaches on chains (its paper's optimality
claim, checked independently) and that no rule exceeds."""

import warnings

import numpy as np
import pytest

from framework.harness.oracle import ToyLaws, best_acceptance, rule_acceptance
from verifiers import LOSSLESS, typical_verifier
from verifiers.block import BlockVerifier


class ContextFree(ToyLaws):
    def p(self, prefix):
        return np.array([1 / 3, 2 / 3])

    def q(self, prefix):
        return np.array([2 / 3, 1 / 3])


def test_the_binary_example_bound():
    laws = ContextFree(2)
    assert best_acceptance([-1, 0], laws) == pytest.approx(11 / 9, abs=1e-9)
    assert rule_acceptance(LOSSLESS, [-1, 0], laws) == pytest.approx(10 / 9, abs=1e-12)


@pytest.mark.parametrize("parents", [[-1, 0], [-1, 0, 1]])
@pytest.mark.parametrize("seed", [0, 1])
def test_block_reaches_the_bound_on_chains_and_the_token_rule_does_not(parents, seed):
    laws = ToyLaws(3, seed)
    best = best_acceptance(parents, laws)
    assert rule_acceptance(BlockVerifier(), parents, laws) == pytest.approx(best, abs=1e-7)
    assert rule_acceptance(LOSSLESS, parents, laws) < best - 1e-3


@pytest.mark.parametrize("parents", [[-1, -1], [-1, -1, 0, 0]])
def test_no_lossless_rule_beats_the_bound_on_trees(parents):
    laws = ToyLaws(3, 0)
    best = best_acceptance(parents, laws)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for rule in (LOSSLESS, BlockVerifier()):
            assert rule_acceptance(rule, parents, laws) <= best + 1e-9


def test_a_lossy_rule_can_exceed_the_bound():
    """The bound holds for lossless rules only: typical acceptance, which is not, passes it here."""
    laws = ToyLaws(3, 0, target_scale=0.3)  # flat targets: typical acceptance takes nearly every draft
    assert rule_acceptance(typical_verifier(), [-1, 0], laws) > best_acceptance([-1, 0], laws) + 1e-3
