"""The Triton tree-attention kernel against its PyTorch reference (CPU: TRITON_INTERPRET=1)."""

import itertools

import pytest
import torch

from framework.core.tree import CandidateTree
from framework.core.tree_mask import TreeMask
from framework.core.tree_shape import ancestor_mask
from framework.lm.models import tiny_random_model
from framework.lm.target import HFTarget
from framework.lm.tree_attention import tree_attention_reference
from framework.lm.tree_attention_triton import tree_attention_triton
from verifiers import Verification


def random_parents(n: int, generator: torch.Generator) -> torch.Tensor:
    """A random topologically ordered tree of n nodes."""
    return torch.tensor([int(torch.randint(-1, i, (1,), generator=generator)) for i in range(n)], dtype=torch.long)


def case(prefix, nodes, group, head_dim, dtype, seed=0, batch=2, kv_heads=2):
    g = torch.Generator().manual_seed(seed)
    tree = ancestor_mask(random_parents(nodes, g))  # [M, M], M = nodes + 1
    M = nodes + 1
    past_valid = torch.rand(batch, prefix, generator=g) > 0.25  # holes, as after ragged commits
    q = torch.randn(batch, kv_heads * group, M, head_dim, generator=g)
    k = torch.randn(batch, kv_heads, prefix + M, head_dim, generator=g)
    v = torch.randn(batch, kv_heads, prefix + M, head_dim, generator=g)
    return [x.to(dtype) for x in (q, k, v)], TreeMask(past_valid, tree), head_dim**-0.5


def compare(prefix, nodes, group, head_dim, split=None):
    (q, k, v), mask, scale = case(prefix, nodes, group, head_dim, torch.float32)
    out = tree_attention_triton(q, k, v, mask, scale, split_size=split)
    ref = tree_attention_reference(q, k, v, mask.dense(), scale)
    assert out.shape == ref.shape
    assert (out - ref).abs().max() <= 2e-5, (prefix, nodes, group, head_dim)


# Every value of every axis appears; the full cross product runs under -m slow. The two dearest
# covering cases (in the interpreter) run under -m slow only: their values appear in the others.
HEAVY = pytest.mark.slow
COVER = [
    (0, 1, 1, 16), (1, 8, 2, 16), (17, 3, 4, 64), (300, 7, 2, 16), (17, 64, 1, 64),
    pytest.param(300, 1, 4, 16, marks=HEAVY), (0, 33, 2, 64), pytest.param(1, 64, 4, 16, marks=HEAVY), (300, 16, 1, 64),
]


@pytest.mark.parametrize("prefix, nodes, group, head_dim", COVER)
def test_kernel_equals_reference_fp32(prefix, nodes, group, head_dim):
    compare(prefix, nodes, group, head_dim)


@pytest.mark.parametrize("prefix, nodes, group, head_dim", COVER[:4])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sdpa_backend_equals_reference(prefix, nodes, group, head_dim, dtype):
    from framework.lm.tree_attention import sdpa_backend

    (q, k, v), mask, scale = case(prefix, nodes, group, head_dim, dtype)
    ref = tree_attention_reference(q, k, v, mask.dense(), scale)
    assert (sdpa_backend(q, k, v, mask, scale) - ref).abs().max() <= (1e-12 if dtype == torch.float64 else 2e-5)


@pytest.mark.parametrize("head_dim, value_dim", [(12, 8), (24, 16), (16, 40)])
def test_a_value_head_of_another_width_on_every_backend(head_dim, value_dim):
    """MLA (DeepSeek-V3): the query/key head (the rope part on top) is wider than the value head. The output is
    linear in the value's columns, so it is the same-width reference's over values padded with zeros, cut back;
    SDPA and the kernel (split across programs, non-power-of-two widths) give it too."""
    from framework.lm.tree_attention import sdpa_backend

    (q, k, _), mask, scale = case(40, 7, 2, head_dim, torch.float32)
    v = torch.randn(*k.shape[:3], value_dim, generator=torch.Generator().manual_seed(7))
    padded = torch.nn.functional.pad(v, (0, max(0, head_dim - value_dim)))
    wide = (q, k) if value_dim <= head_dim else (torch.nn.functional.pad(q, (0, value_dim - head_dim)),
                                                  torch.nn.functional.pad(k, (0, value_dim - head_dim)))
    want = tree_attention_reference(*wide, padded, mask.dense(), scale)[..., :value_dim]
    ref = tree_attention_reference(q, k, v, mask.dense(), scale)
    assert ref.shape == (*q.shape[:3], value_dim) and (ref - want).abs().max() <= 1e-6
    assert (sdpa_backend(q, k, v, mask, scale) - ref).abs().max() <= 2e-5
    assert (tree_attention_triton(q, k, v, mask, scale, split_size=32) - ref).abs().max() <= 2e-5


def test_prefix_split_across_programs():
    compare(300, 8, 2, 16, split=64)  # five key splits, merged by log-sum-exp


@pytest.mark.slow
@pytest.mark.parametrize("prefix, nodes, group, head_dim",
                         list(itertools.product([0, 1, 17, 300], [1, 7, 32, 64], [1, 2, 4], [16, 64])))
def test_kernel_equals_reference_full_grid(prefix, nodes, group, head_dim):
    compare(prefix, nodes, group, head_dim)


@pytest.mark.parametrize("prefix, nodes, group, head_dim",
                         [(17, 8, 2, 64), (300, 8, 2, 16), pytest.param(300, 8, 4, 16, marks=HEAVY), (0, 64, 1, 64)])
def test_fp16_error_within_twice_pytorch(prefix, nodes, group, head_dim):
    (q, k, v), mask, scale = case(prefix, nodes, group, head_dim, torch.float32, seed=1)
    exact = tree_attention_reference(q, k, v, mask.dense(), scale)  # fp32 ground truth
    q16, k16, v16 = (x.half() for x in (q, k, v))
    kernel = tree_attention_triton(q16, k16, v16, mask, scale)
    rep = lambda x: x.repeat_interleave(group, dim=1)  # plain PyTorch at fp16 repeats K/V
    torch_fp16 = torch.nn.functional.scaled_dot_product_attention(q16, rep(k16), rep(v16), attn_mask=mask.dense(),
                                                                  scale=scale)
    kernel_err = (kernel.float() - exact).abs().max()
    torch_err = (torch_fp16.float() - exact).abs().max()
    assert kernel.dtype == torch.float16
    assert kernel_err <= 2 * torch_err + 1e-3, (kernel_err, torch_err)


def windowed_case(prefix, nodes, group, head_dim, dtype=torch.float32, seed=0):
    """case() with every slot's position: committed slots 0, 1, ... over the valid ones, a node at the row's
    committed length plus its depth."""
    (q, k, v), mask, scale = case(prefix, nodes, group, head_dim, dtype, seed)
    committed = mask.past_valid.long().cumsum(1) - 1  # [B, S0]
    depth = mask.tree.long().sum(1) - 1  # [M] ancestors above each node
    queries = mask.past_valid.long().sum(1, keepdim=True) + depth[None, :]  # [B, M]
    return (q, k, v), TreeMask(mask.past_valid, mask.tree, queries, torch.cat([committed, queries], 1)), scale


def brute_force(q, k, v, mask, scale, window, sinks):
    """One query at a time, one key at a time: who it may see, written out (not the reference's masks)."""
    B, Hq, M, D = q.shape
    group, out = Hq // k.shape[1], torch.zeros_like(q, dtype=torch.float64)
    S0 = mask.past_valid.shape[1]
    for b, h, i in itertools.product(range(B), range(Hq), range(M)):
        seen = [j for j in range(k.shape[2])
                if (mask.past_valid[b, j] if j < S0 else mask.tree[i, j - S0])
                and (window is None or mask.query_positions[b, i] - mask.key_positions[b, j] < window)]
        logits = torch.stack([(q[b, h, i].double() @ k[b, h // group, j].double()) * scale for j in seen])
        total = torch.logsumexp(torch.cat([logits, sinks[h:h + 1].double()]) if sinks is not None else logits, 0)
        out[b, h, i] = sum(torch.exp(logit - total) * v[b, h // group, j].double() for logit, j in zip(logits, seen))
    return out


@pytest.mark.parametrize("window", [None, 1, 3, 9])
@pytest.mark.parametrize("with_sinks", [False, True])
def test_windows_and_sinks_agree_on_every_backend(window, with_sinks):
    """Sliding windows (a node sees keys fewer than `window` positions behind its own) and GPT-OSS's sinks: the
    reference against a one-key-at-a-time brute force, and SDPA and the kernel (split across programs) against it."""
    from framework.lm.tree_attention import sdpa_backend

    (q, k, v), mask, scale = windowed_case(13, 7, 2, 16)
    sinks = torch.randn(q.shape[1], generator=torch.Generator().manual_seed(5)) if with_sinks else None
    ref = tree_attention_reference(q, k, v, mask.dense(window), scale, sinks)
    assert (ref.double() - brute_force(q, k, v, mask, scale, window, sinks)).abs().max() <= 1e-5
    assert (sdpa_backend(q, k, v, mask, scale, window, sinks) - ref).abs().max() <= 2e-5
    assert (tree_attention_triton(q, k, v, mask, scale, split_size=32, window=window, sinks=sinks)
            - ref).abs().max() <= 2e-5
    if window == 1:  # each row sees only itself, with or without a sink's share
        assert torch.isfinite(ref).all()


def test_a_window_without_positions_is_named():
    (q, k, v), mask, scale = case(5, 3, 1, 16, torch.float32)
    with pytest.raises(ValueError, match="positions"):
        tree_attention_triton(q, k, v, mask, scale, window=4)


def test_packed_bits_round_trip():
    g = torch.Generator().manual_seed(3)
    tree = torch.rand(5, 70, generator=g) > 0.5
    words = TreeMask(torch.zeros(1, 0, dtype=torch.bool), tree).packed_tree()
    assert words.shape == (5, 3) and words.dtype == torch.int32
    unpacked = ((words.to(torch.int64)[:, :, None] >> torch.arange(32)) & 1).reshape(5, 96)[:, :70].bool()
    assert torch.equal(unpacked, tree)


def accepted(path, num_accepted):
    return Verification(torch.full((len(path), 1), -1), torch.tensor(num_accepted), torch.tensor(path))


def test_hf_target_on_the_triton_path():
    """A tiny Llama forced onto the kernel gives the reference path's tree logits; two rows that
    commit different counts read strided views of the preallocated KV buffers, holes masked."""
    model = tiny_random_model("llama", seed=4, init_std=0.3)
    logits = {}
    for backend in ("reference", "triton"):
        target = HFTarget(model, backend=backend)
        target.prefill(torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6], [2, 7, 1, 8, 2, 8, 1, 8]]))
        tree = CandidateTree.from_parents(torch.tensor([[10, 11, 12, 13, 14], [15, 16, 17, 18, 19]]), [-1, -1, 0, 0, 2])
        logits[backend] = target.forward_tree(torch.tensor([5, 6]), tree).logits
        target.commit(accepted([[0, 2, 4], [1, -1, -1]], [3, 1]))
        logits[backend + "/after commit"] = target.forward_tree(
            torch.tensor([7, 3]), CandidateTree.chain(torch.tensor([[8, 9], [4, 4]]))).logits
    assert (logits["triton"] - logits["reference"]).abs().max() <= 1e-4
    assert (logits["triton/after commit"] - logits["reference/after commit"]).abs().max() <= 1e-4


def test_unknown_backend_is_named():
    with pytest.raises(ValueError, match="backend"):
        HFTarget(tiny_random_model("llama"), backend="cuda-magic")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_kernel_on_gpu_full_size(dtype):
    """On a GPU (compiled, not interpreted): 32/8 heads, head dim 128, an 8k prefix, 64 nodes."""
    (q, k, v), mask, scale = case(8192, 64, 4, 128, torch.float32, batch=1, kv_heads=8)
    q, k, v = (x.cuda() for x in (q, k, v))
    mask = TreeMask(mask.past_valid.cuda(), mask.tree.cuda())
    exact = tree_attention_reference(q, k, v, mask.dense(), scale)
    kernel = tree_attention_triton(q.to(dtype), k.to(dtype), v.to(dtype), mask, scale).float()
    rep = lambda x: x.to(dtype).repeat_interleave(4, dim=1)
    plain = torch.nn.functional.scaled_dot_product_attention(q.to(dtype), rep(k), rep(v), attn_mask=mask.dense(),
                                                             scale=scale).float()
    assert (kernel - exact).abs().max() <= 2 * (plain - exact).abs().max() + 1e-3
