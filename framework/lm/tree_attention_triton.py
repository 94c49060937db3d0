"""Triton tree attention for the verify step, flash-decoding style.

Grid: (query blocks, batch x query heads, key splits). Each program reads one block of tree
queries and one split of the keys (past + tree), masks with the compact TreeMask (a validity
byte per past slot, an ancestor bitmask per query row), and keeps an online softmax in fp32.
Splits are merged with a log-sum-exp, where attention sinks (GPT-OSS: a logit per head with no value) join
the denominator once. A sliding-window layer also compares the query's and key's positions. The value head
may be narrower than the query/key head (MLA): the output tile is the value's width. K/V heads are
indexed as h // group (GQA), never repeated. Inputs may be fp32, fp16 or bf16. On a GPU, fp16/bf16 tiles
feed the tensor cores with fp32
accumulation and an fp32 online softmax; under the interpreter everything is cast to fp32 after
loading, because its bf16 arithmetic is wrong.
Block sizes are >= 16 so the same kernel compiles for a GPU.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from framework.core.tree_mask import TreeMask

BLOCK_M = 16
BLOCK_N = 32


@triton.jit
def _tree_attention_split(
    Q, K, V, PAST_VALID, TREE_BITS, Q_POS, K_POS, O_PART, LSE_PART,
    sq_b, sq_h, sq_m, sq_d,
    sk_b, sk_h, sk_n, sk_d,
    sv_b, sv_h, sv_n, sv_d,
    so_s, so_b, so_h, so_m,
    sl_s, sl_b, sl_h,
    M, S0, S, WORDS, HQ, GROUP, D, DV, split_size, scale, window,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_DIM_V: tl.constexpr,
    UPCAST: tl.constexpr, WINDOWED: tl.constexpr,
):
    pid_m, pid_bh, pid_s = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    b, h = pid_bh // HQ, pid_bh % HQ
    kvh = h // GROUP
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    offs_dv = tl.arange(0, HEAD_DIM_V)
    row_ok = offs_m < M
    d_ok = offs_d < D
    dv_ok = offs_dv < DV
    q = tl.load(Q + b * sq_b + h * sq_h + offs_m[:, None] * sq_m + offs_d[None, :] * sq_d,
                mask=row_ok[:, None] & d_ok[None, :], other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    if WINDOWED:
        q_pos = tl.load(Q_POS + b * M + offs_m, mask=row_ok, other=0)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM_V], tl.float32)
    start = pid_s * split_size
    end = tl.minimum(start + split_size, S)
    for n0 in range(start, end, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        key_ok = offs_n < end
        k = tl.load(K + b * sk_b + kvh * sk_h + offs_n[:, None] * sk_n + offs_d[None, :] * sk_d,
                    mask=key_ok[:, None] & d_ok[None, :], other=0.0)
        if UPCAST:
            k = k.to(tl.float32)
        scores = tl.dot(q, tl.trans(k)) * scale  # [BLOCK_M, BLOCK_N], fp32 accumulation

        in_past = offs_n < S0
        past_ok = tl.load(PAST_VALID + b * S0 + offs_n, mask=in_past & key_ok, other=0) != 0
        t = tl.where(in_past, 0, offs_n - S0)  # tree slot index
        word = tl.load(TREE_BITS + offs_m[:, None] * WORDS + (t // 32)[None, :],
                       mask=row_ok[:, None] & (~in_past & key_ok)[None, :], other=0)
        tree_ok = ((word >> (t % 32)[None, :]) & 1) != 0
        allowed = tl.where(in_past[None, :], past_ok[None, :], tree_ok) & key_ok[None, :] & row_ok[:, None]
        if WINDOWED:  # transformers' rule: key position > query position - window
            k_pos = tl.load(K_POS + b * S + offs_n, mask=key_ok, other=0)
            allowed = allowed & ((q_pos[:, None] - k_pos[None, :]) < window)
        scores = tl.where(allowed, scores, float("-inf"))

        m_new = tl.maximum(m_i, tl.max(scores, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row that has seen nothing yet
        p = tl.exp(scores - m_safe[:, None])
        alpha = tl.exp(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(V + b * sv_b + kvh * sv_h + offs_n[:, None] * sv_n + offs_dv[None, :] * sv_d,
                    mask=key_ok[:, None] & dv_ok[None, :], other=0.0)
        if UPCAST:
            v = v.to(tl.float32)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new

    seen_any = l_i > 0
    out = acc / tl.where(seen_any, l_i, 1.0)[:, None]
    lse = tl.where(seen_any, m_i + tl.log(tl.where(seen_any, l_i, 1.0)), float("-inf"))
    tl.store(O_PART + pid_s * so_s + b * so_b + h * so_h + offs_m[:, None] * so_m + offs_dv[None, :],
             out, mask=row_ok[:, None] & dv_ok[None, :])
    tl.store(LSE_PART + pid_s * sl_s + b * sl_b + h * sl_h + offs_m, lse, mask=row_ok)


def split_size_for(num_keys: int, parallel_rows: int, target_programs: int = 264) -> int:
    """Keys per split: enough splits to fill the GPU when the query side is small."""
    splits = max(1, min(64, target_programs // max(1, parallel_rows), triton.cdiv(num_keys, 4 * BLOCK_N)))
    return triton.cdiv(triton.cdiv(num_keys, splits), BLOCK_N) * BLOCK_N


def tree_attention_triton(
    query: torch.Tensor,  # [B, Hq, M, D]
    key: torch.Tensor,  # [B, Hkv, S, D]
    value: torch.Tensor,  # [B, Hkv, S, Dv] (MLA: Dv != D)
    mask: TreeMask,
    scaling: float,
    split_size: int | None = None,
    window: int | None = None,
    sinks: torch.Tensor | None = None,  # [Hq]
) -> torch.Tensor:
    """Same contract as the reference: -> [B, Hq, M, Dv] in query's dtype."""
    B, Hq, M, D = query.shape
    DV = value.shape[-1]
    Hkv, S = key.shape[1], key.shape[2]
    if S != mask.num_keys or Hq % Hkv:
        raise ValueError(f"tree attention: {S} keys vs mask for {mask.num_keys}; heads {Hq} vs {Hkv}")
    split = split_size or split_size_for(S, triton.cdiv(M, BLOCK_M) * B * Hq)
    splits = triton.cdiv(S, split)
    o_part = torch.empty(splits, B, Hq, M, DV, device=query.device, dtype=torch.float32)
    lse_part = torch.empty(splits, B, Hq, M, device=query.device, dtype=torch.float32)
    past_valid = mask.past_valid.to(device=query.device, dtype=torch.int8).contiguous()
    bits = mask.packed_tree().to(query.device).contiguous()
    if window is not None:
        mask.in_window(window)  # names missing positions
        q_pos = mask.query_positions.to(device=query.device, dtype=torch.int32).contiguous()  # [B, M]
        k_pos = mask.key_positions.to(device=query.device, dtype=torch.int32).contiguous()  # [B, S]
    else:
        q_pos = k_pos = past_valid  # not read
    grid = (triton.cdiv(M, BLOCK_M), B * Hq, splits)
    _tree_attention_split[grid](
        query, key, value, past_valid, bits, q_pos, k_pos, o_part, lse_part,
        *query.stride(), *key.stride(), *value.stride(),
        *o_part.stride()[:4], *lse_part.stride()[:3],
        M, mask.past_valid.shape[1], S, bits.shape[1], Hq, Hq // Hkv, D, DV, split, float(scaling),
        window or 0, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, HEAD_DIM=max(16, triton.next_power_of_2(D)),
        HEAD_DIM_V=max(16, triton.next_power_of_2(DV)),
        UPCAST=query.dtype == torch.float32 or os.environ.get("TRITON_INTERPRET") == "1", WINDOWED=window is not None,
    )
    if sinks is not None:  # one more term of the denominator, with no value: a last "split" whose output is 0
        sink = sinks.to(device=query.device, dtype=torch.float32).reshape(1, 1, Hq, 1).expand(1, B, Hq, M)
        lse_part = torch.cat([lse_part, sink], dim=0)
        o_part = torch.cat([o_part, o_part.new_zeros(1, B, Hq, M, DV)], dim=0)
    weights = torch.softmax(lse_part, dim=0)  # [splits, B, Hq, M]; empty splits weigh 0
    return (weights[..., None] * o_part).sum(0).to(query.dtype)
