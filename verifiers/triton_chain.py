"""A Triton path for the batched verifier: chains with point or iid children.

The two passes over the vocabulary run as Triton kernels: the acceptance ratio at each level
(p(c), or min(1, p(c)/q(c))), and the final law of each row (the leaf's p for the bonus, or
the normalised residual at the first rejection: max(p - q, 0) for iid, p without c for point;
a residual that sums to zero keeps p). The coins and the final draw come from the random source,
in the same shapes and order as the PyTorch verifier, so the same injected uniforms give the
same tokens, and the harness's enumerating source can drive it.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from framework.core.randomness import RandomSource, law_dtype
from framework.core.tree import CandidateTree
from framework.core.verification import Verification

BLOCK_V = 256
MODES = {"point": 0, "iid": 1}


@triton.jit
def _chain_ratios(P, Q, TOKENS, RATIO, K, V, stride_pb, stride_pk, stride_qb, stride_qk,
                  MODE: tl.constexpr, COMPUTE: tl.constexpr):
    b = tl.program_id(0)
    for level in range(K):
        c = tl.load(TOKENS + b * K + level)
        p_c = tl.load(P + b * stride_pb + level * stride_pk + c).to(COMPUTE)
        if MODE == 0:
            ratio = p_c
        else:
            q_c = tl.load(Q + b * stride_qb + level * stride_qk + c).to(COMPUTE)
            ratio = tl.minimum(p_c / tl.maximum(q_c, 1e-30), 1.0)  # q(c) > 0 for a drawn token
        tl.store(RATIO + b * K + level, ratio)


@triton.jit
def _residual_block(p_row, q_row, offs, c, V, MODE: tl.constexpr, COMPUTE: tl.constexpr):
    """p and the unnormalised residual on one block: p without c (point), max(p - q, 0) (iid)."""
    p = tl.load(p_row + offs, mask=offs < V, other=0.0).to(COMPUTE)
    if MODE == 0:
        residual = tl.where(offs == c, 0.0, p)
    else:
        residual = tl.maximum(p - tl.load(q_row + offs, mask=offs < V, other=0.0).to(COMPUTE), 0.0)
    return p, residual


@triton.jit
def _chain_final_law(P, Q, TOKENS, LEVEL, REJECTED, OUT, K, V, stride_pb, stride_pk, stride_qb, stride_qk,
                     MODE: tl.constexpr, COMPUTE: tl.constexpr, BLOCK_V: tl.constexpr):
    b = tl.program_id(0)
    level = tl.load(LEVEL + b)
    rejected = tl.load(REJECTED + b) != 0
    c = tl.load(TOKENS + b * K + tl.minimum(level, K - 1))
    p_row = P + b * stride_pb + level * stride_pk
    q_row = Q + b * stride_qb + level * stride_qk
    total = tl.zeros([BLOCK_V], COMPUTE)
    for v0 in range(0, V, BLOCK_V):  # pass 1: the residual's mass
        offs = v0 + tl.arange(0, BLOCK_V)
        p, residual = _residual_block(p_row, q_row, offs, c, V, MODE, COMPUTE)
        total += residual
    mass = tl.sum(total, 0)
    use_residual = rejected & (mass > 0)  # a zero-mass residual is unreachable: keep p
    for v0 in range(0, V, BLOCK_V):  # pass 2: write the final law
        offs = v0 + tl.arange(0, BLOCK_V)
        p, residual = _residual_block(p_row, q_row, offs, c, V, MODE, COMPUTE)
        law = tl.where(use_residual, residual / tl.where(mass > 0, mass, 1.0), p)
        tl.store(OUT + b * V + offs, law, mask=offs < V)


def check_triton_device(laws: torch.Tensor) -> None:
    """Triton kernels run on CUDA tensors, or anywhere under its interpreter (TRITON_INTERPRET=1, read
    when the kernels are decorated: set it before the first import of this module)."""
    if laws.device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise ValueError(f"the Triton verifier runs on CUDA tensors, and the laws are on {laws.device}: use the "
                         "PyTorch verifier there (verifier=token), or set TRITON_INTERPRET=1 before importing it "
                         "to run its kernels in Triton's interpreter (slow: for tests)")


def compute_dtype(*laws: torch.Tensor | None):
    """(Triton, torch) arithmetic dtype for these laws (framework.core.randomness.law_dtype)."""
    return (tl.float64, torch.float64) if law_dtype(*laws) == torch.float64 else (tl.float32, torch.float32)


class TritonChainVerifier:
    """Drop-in verifier (same call as TreeVerifier) for chains of point or iid children."""

    lossless = True

    def __call__(self, tree: CandidateTree, target_probs: torch.Tensor, rng: RandomSource,
                 eos_token_id: int | None = None) -> Verification:
        B, K = tree.tokens.shape
        if tree.kind not in MODES or not tree.is_chain:
            raise ValueError("the Triton verifier path handles chains with point or iid children only")
        if K == 0:
            raise ValueError("the Triton verifier path needs at least one drafted token")
        check_triton_device(target_probs)
        V, device = target_probs.shape[-1], target_probs.device
        compute_tl, compute_torch = compute_dtype(target_probs, tree.draft_probs)
        p = target_probs.contiguous()
        q = (tree.draft_probs if tree.draft_probs is not None else target_probs).contiguous()
        tokens = tree.tokens.to(device=device, dtype=torch.int64).contiguous()
        mode = MODES[tree.kind]

        ratios = torch.empty(B, K, dtype=compute_torch, device=device)
        _chain_ratios[(B,)](p, q, tokens, ratios, K, V, p.stride(0), p.stride(1), q.stride(0), q.stride(1),
                            MODE=mode, COMPUTE=compute_tl)

        # Coins: the same draws as the PyTorch verifier, [B, levels, children] and then one categorical.
        uniforms = rng.uniform((B, K + 1, tree.shape.children.shape[1]), device)
        alive = torch.ones(B, dtype=torch.bool, device=device)
        num_accepted = torch.zeros(B, dtype=torch.long, device=device)
        emits = torch.ones(B, dtype=torch.bool, device=device)
        for level in range(K):
            accepted = (uniforms[:, level, 0] < torch.where(alive, ratios[:, level], 0.0)) & alive
            num_accepted += accepted.long()
            if eos_token_id is not None:
                emits &= ~(accepted & (tokens[:, level] == eos_token_id))
                accepted &= tokens[:, level] != eos_token_id
            alive = accepted
        rejected = (num_accepted < K) & emits

        final = torch.empty(B, V, dtype=compute_torch, device=device)
        _chain_final_law[(B,)](p, q, tokens, num_accepted.contiguous(), rejected.to(torch.int8).contiguous(), final,
                               K, V, p.stride(0), p.stride(1), q.stride(0), q.stride(1),
                               MODE=mode, COMPUTE=compute_tl, BLOCK_V=BLOCK_V)
        final = torch.where(emits[:, None], final,
                            torch.nn.functional.one_hot(torch.zeros_like(num_accepted), V).to(final.dtype))
        extra = rng.categorical(final)  # [B] recovered or bonus token

        out = torch.full((B, K + 1), -1, dtype=torch.long, device=device)
        steps = torch.arange(K, device=device)[None, :]
        out[:, :K] = torch.where(steps < num_accepted[:, None], tokens, -1)
        out[torch.arange(B, device=device), num_accepted] = torch.where(emits, extra, -1)
        path = torch.where(steps < num_accepted[:, None], steps.expand(B, -1), -1)
        return Verification(out, num_accepted, path)
