"""Every lossless rule stays exact when the tree's shape is decided from the draws so far (a confidence
cut, a stop token), and the check catches a drafter that prunes drawn children by their value."""

import warnings

import pytest

from harness.adaptive import adaptive_tv, confidence_cut, stop_token
from harness.oracle import ToyLaws
from verifiers import LOSSLESS
from verifiers.block import BlockVerifier
from verifiers.multidraft import multidraft_verifier
from verifiers.traversal import TraversalVerifier

RULES = {"token": LOSSLESS, "block": BlockVerifier(), "traversal": TraversalVerifier(),
         "multidraft": multidraft_verifier()}
SHAPES = {  # name -> (how the shape grows, the kind of children, tier: harness.cases.TIERS)
    "chain-confidence-cut": (confidence_cut(0.5, 3), "iid", "core"),
    "chain-stop-token": (stop_token(0, 3), "iid", "core"),
    "tree-stop-token/iid": (stop_token(0, 2, branching=2), "iid", "slow"),  # seconds each; the wor tree is a fraction
    "tree-stop-token/wor": (stop_token(0, 2, branching=2), "wor", "core"),
}
CELLS = [pytest.param(rule, shape, id=f"{rule}-{shape}", marks=() if SHAPES[shape][2] == "core" else pytest.mark.slow)
         for shape in SHAPES for rule in RULES]


@pytest.mark.parametrize("rule,shape", CELLS)
def test_a_shape_decided_from_the_draws_so_far_keeps_every_rule_exact(rule, shape):
    expand, kind, _ = SHAPES[shape]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # block on trees: the token rule
        assert adaptive_tv(RULES[rule], ToyLaws(3, 1), kind, expand, depth=3) < 1e-9


def test_pruning_a_drawn_child_by_its_value_is_caught():
    """Dropping a sampled child because of what it is (say, a value-based re-ranking of sampled nodes)
    changes the law the survivors were drawn from."""
    def drop_zeros(path, token):
        return token == 0

    tv = adaptive_tv(LOSSLESS, ToyLaws(3, 1), "iid", confidence_cut(0.0, 2), depth=2, prune=drop_zeros)
    assert tv > 1e-3
