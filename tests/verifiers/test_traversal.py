"""Traversal verification: block verification on chains, never fewer accepted than the token rule (against
the oracle's bound). Its exact law on every tree of the harness is tests/verifiers/test_verifier_contract.py's."""

import pytest
import torch

from framework.core.randomness import ReplaySource
from framework.core.tree import CandidateTree
from harness.oracle import ToyLaws, best_acceptance, rule_acceptance
from verifiers import LOSSLESS, verify
from verifiers.block import BlockVerifier
from verifiers.traversal import TraversalVerifier

TRAVERSAL = TraversalVerifier()
def test_on_a_chain_it_is_block_verification():
    """Same law as block verification, same acceptance: both reach the oracle's bound on chains."""
    laws = ToyLaws(3, 1)
    assert rule_acceptance(TRAVERSAL, [-1, 0, 1], laws) == pytest.approx(rule_acceptance(BlockVerifier(), [-1, 0, 1],
                                                                                         laws), abs=1e-12)
    assert rule_acceptance(TRAVERSAL, [-1, 0, 1], laws) == pytest.approx(best_acceptance([-1, 0, 1], laws), abs=1e-7)


@pytest.mark.parametrize("kind", ["iid", "wor"])
@pytest.mark.parametrize("parents", [[-1, -1, 0, 0], [-1, 0, -1, 2]])
@pytest.mark.parametrize("seed", [0, 1])
def test_more_than_the_token_rule_on_trees_and_within_the_bound(parents, seed, kind):
    laws = ToyLaws(3, seed)
    ours, token = rule_acceptance(TRAVERSAL, parents, laws, kind), rule_acceptance(LOSSLESS, parents, laws, kind)
    assert token + 1e-3 < ours <= best_acceptance(parents, laws, kind) + 1e-9


def test_p_equals_q_accepts_the_deepest_path_without_nan():
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(4, 5, 6, generator=g, dtype=torch.float64), -1)
    tokens = torch.multinomial(p[:, 0], 2, replacement=True, generator=g)
    # node 0's two children
    tokens = torch.cat([tokens, torch.multinomial(p[:, 1], 2, replacement=True, generator=g)], 1)
    tree = CandidateTree(tokens, torch.tensor([-1, -1, 0, 0]), p, "iid")
    draws = [torch.rand(4, 5, 1, generator=g, dtype=torch.float64), torch.rand(4, generator=g, dtype=torch.float64)]
    out = verify(tree, p, rng=ReplaySource(draws), verifier=TRAVERSAL)
    assert out.num_accepted.tolist() == [2] * 4 and out.path[:, 0].eq(0).all()  # the first leaf: weight 1
    assert (out.tokens[:, 2] >= 0).all()
