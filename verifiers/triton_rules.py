"""The Triton path for trees: the lossless child rules with their passes over V as Triton kernels.

The walk is TreeVerifier's, unchanged (the same coins in the same shapes and order, so the same
injected uniforms give the same tokens, and the harness's enumerating source drives it); only
the rules' arithmetic runs in kernels, a tile of 16 tested rows per program:
  - the acceptance ratio: r(c) (point), min(1, r(c) / q(c)) (iid, wor);
  - the law after a rejection, in two passes (the residual's mass, then the normalised write):
    r without c (point), max(r - q, 0) (iid, wor), and for wor q without c; a residual of zero
    mass is unreachable (p == q): the row keeps its law, as the PyTorch rules do.
PyTorch reference: verifiers/rules.py (tests/verifiers/test_triton_tree.py compares them).
"""

from __future__ import annotations

from dataclasses import replace

import torch
import triton
import triton.language as tl

from verifiers.rules import NodeLaw
from verifiers.tree_verifier import TreeVerifier
from verifiers.triton_chain import check_triton_device, compute_dtype

BLOCK_V = 256  # the vocabulary's tile (smaller vocabularies take the next power of two, at least 16)
BLOCK_ROWS = 16  # rows per program: a [16, BLOCK_V] tile per step of the loop over V
POINT, IID, WOR = 0, 1, 2


@triton.jit
def _ratio_kernel(R, Q, TOKENS, OUT, A, stride_r, stride_q, tiny,
                  MODE: tl.constexpr, COMPUTE: tl.constexpr, BLOCK_ROWS: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    live = rows < A
    c = tl.load(TOKENS + rows, mask=live, other=0)
    r_c = tl.load(R + rows * stride_r + c, mask=live, other=0.0).to(COMPUTE)
    if MODE == 0:
        ratio = r_c
    else:
        q_c = tl.load(Q + rows * stride_q + c, mask=live, other=1.0).to(COMPUTE)
        ratio = tl.minimum(r_c / tl.maximum(q_c, tiny), 1.0)  # q(c) > 0 for a drawn token
    tl.store(OUT + rows, ratio, mask=live)


@triton.jit
def _tile(BASE, rows, stride, offs, live, V, COMPUTE: tl.constexpr):
    """[BLOCK_ROWS, BLOCK_V] of a [rows, V] table, zeros outside."""
    mask = live[:, None] & (offs[None, :] < V)
    return tl.load(BASE + rows[:, None] * stride + offs[None, :], mask=mask, other=0.0).to(COMPUTE), mask


@triton.jit
def _residual(R, Q, rows, stride_r, stride_q, offs, c, live, V, MODE: tl.constexpr, COMPUTE: tl.constexpr):
    """The unnormalised law after rejecting c (and r itself), on one tile."""
    r, mask = _tile(R, rows, stride_r, offs, live, V, COMPUTE)
    if MODE == 0:
        return tl.where(offs[None, :] == c[:, None], 0.0, r), r, mask
    q, _ = _tile(Q, rows, stride_q, offs, live, V, COMPUTE)
    return tl.maximum(r - q, 0.0), r, mask


@triton.jit
def _reject_kernel(R, Q, TOKENS, R_OUT, Q_OUT, A, V, stride_r, stride_q, stride_ro, stride_qo,
                   MODE: tl.constexpr, COMPUTE: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_V: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    live = rows < A
    c = tl.load(TOKENS + rows, mask=live, other=-1)
    total = tl.zeros([BLOCK_ROWS], COMPUTE)
    for v0 in range(0, V, BLOCK_V):  # pass 1: each row's residual mass
        offs = v0 + tl.arange(0, BLOCK_V)
        new, r, mask = _residual(R, Q, rows, stride_r, stride_q, offs, c, live, V, MODE, COMPUTE)
        total += tl.sum(new, 1)
    keep = total > 0  # else unreachable (p == q): the row keeps r
    denominator = tl.where(keep, total, 1.0)
    for v0 in range(0, V, BLOCK_V):  # pass 2: write it, normalised
        offs = v0 + tl.arange(0, BLOCK_V)
        new, r, mask = _residual(R, Q, rows, stride_r, stride_q, offs, c, live, V, MODE, COMPUTE)
        law = tl.where(keep[:, None], new / denominator[:, None], r)
        tl.store(R_OUT + rows[:, None] * stride_ro + offs[None, :], law.to(R_OUT.dtype.element_ty), mask=mask)
    if MODE == 2:  # without replacement: the next draw's q loses c (point's residual, applied to q)
        q_total = tl.zeros([BLOCK_ROWS], COMPUTE)
        for v0 in range(0, V, BLOCK_V):
            offs = v0 + tl.arange(0, BLOCK_V)
            new_q, q, mask = _residual(Q, Q, rows, stride_q, stride_q, offs, c, live, V, 0, COMPUTE)
            q_total += tl.sum(new_q, 1)
        q_keep = q_total > 0
        q_denominator = tl.where(q_keep, q_total, 1.0)
        for v0 in range(0, V, BLOCK_V):
            offs = v0 + tl.arange(0, BLOCK_V)
            new_q, q, mask = _residual(Q, Q, rows, stride_q, stride_q, offs, c, live, V, 0, COMPUTE)
            law = tl.where(q_keep[:, None], new_q / q_denominator[:, None], q)
            tl.store(Q_OUT + rows[:, None] * stride_qo + offs[None, :], law.to(Q_OUT.dtype.element_ty), mask=mask)


def _rows_contiguous(x: torch.Tensor) -> torch.Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


class TritonRule:
    """One kind's lossless rule (docs/design.md section 4) with its arithmetic in Triton kernels."""

    lossless = True

    def __init__(self, mode: int):
        self.mode = mode

    def accept_probability(self, law: NodeLaw, token: torch.Tensor) -> torch.Tensor:
        check_triton_device(law.r)  # every rejection follows a test: one check serves both kernels
        r = _rows_contiguous(law.r)
        q = r if law.q is None else _rows_contiguous(law.q)
        out = torch.empty(r.shape[0], dtype=r.dtype, device=r.device)
        if r.shape[0]:
            _ratio_kernel[(triton.cdiv(r.shape[0], BLOCK_ROWS),)](
                r, q, token.contiguous(), out, r.shape[0], r.stride(0), q.stride(0), torch.finfo(q.dtype).tiny,
                MODE=self.mode, COMPUTE=compute_dtype(r)[0], BLOCK_ROWS=BLOCK_ROWS)
        return out

    def after_reject(self, law: NodeLaw, token: torch.Tensor) -> NodeLaw:
        r = _rows_contiguous(law.r)
        q = r if law.q is None else _rows_contiguous(law.q)
        new_r = torch.empty_like(r)
        new_q = torch.empty_like(q) if self.mode == WOR else new_r
        if r.shape[0]:
            _reject_kernel[(triton.cdiv(r.shape[0], BLOCK_ROWS),)](
                r, q, token.contiguous(), new_r, new_q, r.shape[0], r.shape[1], r.stride(0), q.stride(0),
                new_r.stride(0), new_q.stride(0),
                MODE=self.mode, COMPUTE=compute_dtype(r)[0], BLOCK_ROWS=BLOCK_ROWS,
                BLOCK_V=min(BLOCK_V, max(16, triton.next_power_of_2(r.shape[1]))))
        return replace(law, r=new_r, q=new_q if self.mode == WOR else law.q)


TRITON_RULES = {"point": TritonRule(POINT), "iid": TritonRule(IID), "wor": TritonRule(WOR)}


def triton_tree_verifier() -> TreeVerifier:
    """The verifier for trees (and chains) of point, iid and wor children, on the Triton rules."""
    return TreeVerifier(TRITON_RULES)
