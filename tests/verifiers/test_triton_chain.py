"""The Triton chain path matches the PyTorch verifier; the exact harness on it is
tests/verifiers/test_verifier_contract.py's."""

import pytest
import torch

from framework.core.randomness import ReplaySource
from framework.core.tree import CandidateTree
from verifiers import LOSSLESS, verify
from verifiers.triton_chain import TritonChainVerifier

TRITON = TritonChainVerifier()


def inputs(B, K, V, kind, seed, peaked=False, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    scale = 6.0 if peaked else 2.0
    p = torch.softmax(torch.randn(B, K + 1, V, generator=g) * scale, -1).to(dtype)
    q = torch.softmax(torch.randn(B, K + 1, V, generator=g) * scale, -1).to(dtype)
    tokens = torch.multinomial(q[:, :K].reshape(-1, V).float(), 1, generator=g).reshape(B, K)
    if kind == "point":
        p[:, 1] = q[:, 1]  # some rows accept often, some reject
        return CandidateTree.chain(tokens), p
    return CandidateTree.chain(tokens, q, kind), p


# The default run takes six of the twelve: every pair of values of two axes (kind, size, eos) appears.
PAIRWISE = {("point", 1, None), ("iid", 1, 3), ("point", 4, 3), ("iid", 4, None), ("point", 3, None), ("iid", 3, 3)}


@pytest.mark.parametrize("eos, K, V, kind", [
    pytest.param(eos, K, V, kind, id=f"{eos}-{K}-{V}-{kind}",
                 marks=() if (kind, K, eos) in PAIRWISE else pytest.mark.slow)
    for kind in ("point", "iid") for K, V in ((1, 7), (4, 50), (3, 300)) for eos in (None, 3)])
def test_same_uniforms_same_tokens(kind, K, V, eos):
    tree, p = inputs(64, K, V, kind, seed=K * V)
    g = torch.Generator().manual_seed(1)
    draws = [torch.rand(64, K + 1, 1, generator=g, dtype=torch.float64),
             torch.rand(64, generator=g, dtype=torch.float64)]
    ours = verify(tree, p, rng=ReplaySource(list(draws)), eos_token_id=eos, verifier=TRITON)
    ref = verify(tree, p, rng=ReplaySource(list(draws)), eos_token_id=eos, verifier=LOSSLESS)
    assert torch.equal(ours.tokens, ref.tokens)
    assert torch.equal(ours.num_accepted, ref.num_accepted)
    assert torch.equal(ours.path, ref.path)


def test_p_equals_q_never_nan():
    tree, p = inputs(16, 3, 20, "iid", seed=5)
    res = verify(CandidateTree.chain(tree.tokens, p, "iid"), p, generator=torch.Generator().manual_seed(0),
                 verifier=TRITON)
    assert (res.num_accepted == 3).all() and (res.tokens >= 0).all()


def test_trees_and_wor_are_refused():
    tree, p = inputs(2, 2, 5, "iid", seed=0)
    with pytest.raises(ValueError, match="chains with point or iid"):
        verify(CandidateTree(tree.tokens, torch.tensor([-1, -1]), tree.draft_probs, "iid"), p, verifier=TRITON)
    with pytest.raises(ValueError, match="chains with point or iid"):
        verify(CandidateTree.chain(tree.tokens, tree.draft_probs, "wor"), p, verifier=TRITON)
