"""Half-precision and mixed-dtype laws: the rules compute in float32 (float64 if a law is), whatever comes in.

A bfloat16 law is a law with bfloat16 values: verifying it must decide exactly as verifying the same
values held in float32 (same coins, same tokens). Summed in bfloat16, the inverse-CDF draw stopped
growing after a few hundred tokens of a uniform law.
"""

import pytest
import torch

from framework.core.randomness import inverse_cdf
from framework.core.tree import CandidateTree
from verifiers import verify
from verifiers.adapters import flat_trees, ragged_chains
from verifiers.block import BlockVerifier
from verifiers.multidraft import multidraft_verifier
from verifiers.traversal import TraversalVerifier

HALF = [torch.bfloat16, torch.float16]


def test_half_precision_draw_reaches_the_whole_vocabulary():
    V, draws = 4096, 4000
    u = torch.rand(draws, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    for dtype in HALF:
        uniform = torch.full((draws, V), 1.0 / V, dtype=dtype)
        tokens = inverse_cdf(uniform, u)
        assert torch.equal(tokens, inverse_cdf(uniform.float(), u))
        assert tokens.unique().numel() > 0.5 * V  # a bfloat16 running sum reached about 500


def half_tree(kind: str, dtype, B=64, V=300, seed=0):
    """A 2 x 2 tree drawn from q, and p, both rounded to `dtype` and renormalised there."""
    g = torch.Generator().manual_seed(seed)
    parents = [-1, -1, 0, 0, 1, 1]
    p = torch.softmax(torch.randn(B, 7, V, generator=g) * 3, -1).to(dtype)
    q = torch.softmax(torch.randn(B, 7, V, generator=g) * 3, -1).to(dtype)
    rows = torch.tensor(parents) + 1
    tokens = torch.multinomial(q[:, rows].float().reshape(-1, V), 1, generator=g).reshape(B, 6)
    if kind == "wor":
        tokens[:, 1::2] = (tokens[:, 0::2] + 1) % V
        q = (q.float() + 1e-3).to(dtype)
    return CandidateTree.from_parents(tokens, parents, q, kind), p


def widened_tree(tree: CandidateTree, dtype) -> CandidateTree:
    return CandidateTree(tree.tokens, tree.parents, tree.draft_probs.to(dtype), tree.kind)


VERIFIERS = {"token": None, "traversal": TraversalVerifier(), "multidraft": multidraft_verifier()}


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("name", list(VERIFIERS))
@pytest.mark.parametrize("kind", ["iid", "wor"])
def test_half_precision_laws_decide_as_their_float32_values(dtype, name, kind):
    tree, p = half_tree(kind, dtype)
    kwargs = {} if VERIFIERS[name] is None else {"verifier": VERIFIERS[name]}
    half = verify(tree, p, torch.Generator().manual_seed(3), validate=False, **kwargs)
    wide = verify(widened_tree(tree, torch.float32), p.float(), torch.Generator().manual_seed(3), validate=False,
                  **kwargs)
    assert torch.equal(half.tokens, wide.tokens) and torch.equal(half.path, wide.path)
    assert (half.num_accepted < 6).any()  # rejections happened: the residual draws were exercised


@pytest.mark.parametrize("dtype", HALF)
def test_half_precision_chains_block_and_ragged(dtype):
    g = torch.Generator().manual_seed(5)
    B, K, V = 32, 3, 200
    p = torch.softmax(torch.randn(B, K + 1, V, generator=g) * 3, -1)
    q = torch.softmax(torch.randn(B, K + 1, V, generator=g) * 3, -1)
    tokens = torch.multinomial(q[:, :K].reshape(-1, V), 1, generator=g).reshape(B, K)
    tree = CandidateTree.chain(tokens, q.to(dtype), "iid")
    for verifier in (BlockVerifier(), None):
        kwargs = {} if verifier is None else {"verifier": verifier}
        half = verify(tree, p.to(dtype), torch.Generator().manual_seed(1), validate=False, **kwargs)
        wide = verify(widened_tree(tree, torch.float32), p.to(dtype).float(), torch.Generator().manual_seed(1),
                      validate=False, **kwargs)
        assert torch.equal(half.tokens, wide.tokens)
    # the engines' shapes: vLLM's flat chains and SGLang-style flat trees
    flat_p, flat_q = p[:, :K].reshape(-1, V), q[:, :K].reshape(-1, V)
    bonus = torch.randint(V, (B, 1), generator=g)
    half = ragged_chains(tokens.reshape(-1), [K] * B, flat_q.to(dtype), flat_p.to(dtype), bonus,
                         torch.Generator().manual_seed(2))
    wide = ragged_chains(tokens.reshape(-1), [K] * B, flat_q.to(dtype).float(), flat_p.to(dtype).float(), bonus,
                         torch.Generator().manual_seed(2), validate=False)
    assert torch.equal(half, wide)
    table_p, table_q = p.reshape(-1, V).to(dtype), q.reshape(-1, V).to(dtype)
    parents = torch.tensor([-1, 0, 1] * B)
    half = flat_trees(tokens.reshape(-1), [K] * B, parents, table_q, table_p,
                      generator=torch.Generator().manual_seed(4))
    wide = flat_trees(tokens.reshape(-1), [K] * B, parents, table_q.float(), table_p.float(),
                      generator=torch.Generator().manual_seed(4), validate=False)
    assert torch.equal(half.tokens, wide.tokens)


def test_mixed_dtypes_compute_in_the_wider_one():
    """float64 draft laws beside a float32 target crashed at the first rejection (index_copy_)."""
    tree, p = half_tree("iid", torch.float32)
    mixed = verify(widened_tree(tree, torch.float64), p, torch.Generator().manual_seed(3))
    wide = verify(widened_tree(tree, torch.float64), p.double(), torch.Generator().manual_seed(3))
    assert torch.equal(mixed.tokens, wide.tokens) and (mixed.num_accepted < 6).any()


def test_triton_paths_take_half_precision_laws():
    """Under the interpreter: the Triton rules (tree walk) and the fused chain path decide as PyTorch does."""
    from verifiers.triton_chain import TritonChainVerifier
    from verifiers.triton_rules import triton_tree_verifier

    tree, p = half_tree("iid", torch.bfloat16, B=16, V=40)
    ref = verify(tree, p, torch.Generator().manual_seed(3))
    assert torch.equal(verify(tree, p, torch.Generator().manual_seed(3), verifier=triton_tree_verifier()).tokens,
                       ref.tokens)
    chain = CandidateTree.chain(tree.tokens[:, :2], tree.draft_probs[:, :3], "iid")
    ref = verify(chain, p[:, :3], torch.Generator().manual_seed(3), validate=False)
    ours = verify(chain, p[:, :3], torch.Generator().manual_seed(3), validate=False, verifier=TritonChainVerifier())
    assert torch.equal(ours.tokens, ref.tokens)
