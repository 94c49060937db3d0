"""Multi-draft (k-sequential selection): the token rule at k = 1, more accepted than the token rule among
siblings of one node (against the oracle's bound). Its exact law on the harness's i.i.d. trees is
tests/verifiers/test_verifier_contract.py's."""

import pytest
import torch

from framework.core.randomness import ReplaySource
from framework.core.tree import CandidateTree
from harness.oracle import ToyLaws, best_acceptance, rule_acceptance
from verifiers import LOSSLESS, verify
from verifiers.multidraft import _accepted_mass, _needed, multidraft_verifier, sequential_scale

MULTIDRAFT = multidraft_verifier()
def test_the_scale_is_feasible_and_one_for_a_single_draft():
    g = torch.Generator().manual_seed(0)
    p, q = (torch.softmax(torch.randn(64, 50, generator=g, dtype=torch.float64) * 2, -1) for _ in range(2))
    k = torch.randint(1, 6, (64,), generator=g)
    rho = sequential_scale(p, q, k)
    assert (rho >= _needed(_accepted_mass(p, q, rho), k.double()) - 1e-12).all()  # p_res is a law
    assert (rho <= k).all() and torch.equal(sequential_scale(p, q, torch.ones(64, dtype=torch.long)),
                                            torch.ones(64, dtype=torch.float64))


def test_on_a_chain_it_is_the_token_rule():
    g = torch.Generator().manual_seed(1)
    p, q = (torch.softmax(torch.randn(32, 4, 9, generator=g, dtype=torch.float64), -1) for _ in range(2))
    tokens = torch.multinomial(q[:, :3].reshape(-1, 9), 1, generator=g).view(32, 3)
    tree = CandidateTree.chain(tokens, q, "iid")
    draws = [torch.rand(32, 4, 1, generator=g, dtype=torch.float64), torch.rand(32, generator=g, dtype=torch.float64)]
    ours = verify(tree, p, rng=ReplaySource(list(draws)), verifier=MULTIDRAFT)
    assert torch.equal(ours.tokens, verify(tree, p, rng=ReplaySource(list(draws))).tokens)


@pytest.mark.parametrize("parents", [[-1, -1], [-1, -1, -1]])
@pytest.mark.parametrize("seed", [0, 1])
def test_more_than_the_token_rule_among_siblings_and_within_the_bound(parents, seed):
    laws = ToyLaws(3, seed)
    ours, token = rule_acceptance(MULTIDRAFT, parents, laws), rule_acceptance(LOSSLESS, parents, laws)
    assert token + 1e-3 < ours <= best_acceptance(parents, laws) + 1e-9


@pytest.mark.parametrize("k", [2, 3])
def test_the_first_token_follows_p_exactly_among_k_siblings(k):
    """One node, k i.i.d. children, V = 4: every draft and coin enumerated, the emitted token's law is p."""
    from harness.enumerate import enumerate_law

    g = torch.Generator().manual_seed(k)
    p, q = (torch.softmax(torch.randn(4, generator=g, dtype=torch.float64) * 2, 0) for _ in range(2))

    def run(source):
        B = source.batch_size
        tokens = torch.stack([source.categorical(q.expand(B, -1)) for _ in range(k)], 1)  # [B, k]
        tree = CandidateTree(tokens, torch.full((k,), -1), q.expand(B, k + 1, -1).contiguous(), "iid")
        return verify(tree, p.expand(B, k + 1, -1).contiguous(), rng=source, verifier=MULTIDRAFT).tokens[:, 0].tolist()

    law = enumerate_law(run)
    assert max(abs(law.get(x, 0.0) - float(p[x])) for x in range(4)) < 1e-12
