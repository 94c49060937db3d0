"""Block verification: more accepted than the token rule, the token rule on trees (said once). Its exact
law on the harness's chains is tests/verifiers/test_verifier_contract.py's."""

import warnings

import pytest
import torch

from framework.core.randomness import TorchSource
from framework.core.tree import CandidateTree
from harness.enumerate import enumerate_law
from verifiers import LOSSLESS, verify
from verifiers.block import BlockVerifier

BLOCK = BlockVerifier()


def expected_accepted(verifier, p, q, K=2):
    """Exact mean accepted length for a context-free draft q and target p (drafts and coins enumerated)."""
    def run(source):
        B = source.batch_size
        tokens = torch.stack([source.categorical(q.expand(B, -1)) for _ in range(K)], 1)  # [B, K]
        tree = CandidateTree.chain(tokens, q.expand(B, K + 1, -1).contiguous(), "iid")
        return verify(tree, p.expand(B, K + 1, -1).contiguous(), rng=source, verifier=verifier).num_accepted.tolist()

    return sum(k * w for k, w in enumerate_law(run).items())


def test_the_papers_binary_example():
    """Target (1/3, 2/3), draft (2/3, 1/3), blocks of 2: the token rule accepts 10/9 tokens, block 11/9."""
    p, q = torch.tensor([1 / 3, 2 / 3], dtype=torch.float64), torch.tensor([2 / 3, 1 / 3], dtype=torch.float64)
    assert expected_accepted(LOSSLESS, p, q) == pytest.approx(10 / 9, abs=1e-12)
    assert expected_accepted(BLOCK, p, q) == pytest.approx(11 / 9, abs=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_never_fewer_than_the_token_rule(seed):
    g = torch.Generator().manual_seed(seed)
    p, q = (torch.softmax(torch.randn(3, generator=g, dtype=torch.float64) * 2, 0) for _ in range(2))
    assert expected_accepted(BLOCK, p, q, K=3) >= expected_accepted(LOSSLESS, p, q, K=3) - 1e-12


def test_trees_go_to_the_token_rule_said_once():
    tree = CandidateTree(torch.tensor([[1, 2]]), torch.tensor([-1, -1]))
    p = torch.full((1, 3, 4), 0.25)
    verifier = BlockVerifier()
    with pytest.warns(UserWarning, match="token rule"):
        ours = verify(tree, p, rng=TorchSource(seed=0), verifier=verifier)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        verify(tree, p, rng=TorchSource(seed=0), verifier=verifier)  # said once
    assert torch.equal(ours.tokens, verify(tree, p, rng=TorchSource(seed=0)).tokens)
