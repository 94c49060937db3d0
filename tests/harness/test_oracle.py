"""The optimality oracle: an LP bound that block verification reaches on chains (its paper's optimality
claim, checked independently) and that no rule exceeds."""

import itertools
import warnings

import numpy as np
import pytest

from harness.oracle import ToyLaws, best_acceptance, draw_mass, rule_acceptance
from verifiers import LOSSLESS, typical_verifier
from verifiers.block import BlockVerifier
from verifiers.traversal import TraversalVerifier


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


@pytest.mark.parametrize("parents", [[-1, -1], [-1, -1, 0, 0], [-1, 0, 1]])
@pytest.mark.parametrize("seed", [0, 1])
def test_on_point_trees_the_token_rule_is_the_best_any_lossless_rule_can_do(parents, seed):
    """A tree drawn blind to the coins (EAGLE-2's top-k, Medusa, n-grams): node v can be accepted at
    most P(path to v) of the time, and the token rule accepts it exactly that often; no rule gains."""
    laws = ToyLaws(3, seed)
    best = best_acceptance(parents, laws, "point")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for rule in (LOSSLESS, BlockVerifier(), TraversalVerifier()):
            assert rule_acceptance(rule, parents, laws, "point") == pytest.approx(best, abs=1e-7)


def test_wor_trees_are_drawn_without_replacement():
    """The draw law of a wor tree: siblings never repeat, and the masses sum to one."""
    laws = ToyLaws(3, 0)
    parents = [-1, -1, 0]
    total = sum(draw_mass(parents, t, laws, "wor") for t in itertools.product(range(3), repeat=3))
    assert total == pytest.approx(1.0, abs=1e-12)
    assert draw_mass(parents, (1, 1, 0), laws, "wor") == 0.0
    assert draw_mass(parents, (1, 1, 0), laws, "iid") > 0.0


@pytest.mark.parametrize("seed", [0, 1])
def test_on_wor_trees_no_rule_beats_the_bound_and_one_level_leaves_room(seed):
    laws = ToyLaws(3, seed)
    best = best_acceptance([-1, -1], laws, "wor")
    token = rule_acceptance(LOSSLESS, [-1, -1], laws, "wor")
    assert rule_acceptance(TraversalVerifier(), [-1, -1], laws, "wor") == pytest.approx(token, abs=1e-12)
    assert token < best - 1e-2  # the recursive rule leaves room among wor siblings


@pytest.mark.parametrize("kind", ["iid", "wor"])
def test_the_six_node_binary_tree_is_feasible(kind):
    """The LP said infeasible here (a redundant row's rounding), though the token rule is a feasible point."""
    parents, laws = [-1, -1, 0, 0, 1, 1], ToyLaws(3, 0)
    assert rule_acceptance(LOSSLESS, parents, laws, kind) <= best_acceptance(parents, laws, kind) + 1e-9
