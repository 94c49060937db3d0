"""Batch rows from two states put one after the other: what a request admitted into a running batch needs.

A running batch and a batch of newcomers (prefilled apart, on the same models) become one batch: every per-row
tensor is concatenated along the batch, the one with fewer columns padded (with a value its reader ignores).
"""

from __future__ import annotations

import torch


def cat_rows(first: torch.Tensor | None, second: torch.Tensor | None, fill=0) -> torch.Tensor | None:
    """[B1, W1, ...] then [B2, W2, ...] -> [B1 + B2, max(W1, W2), ...], the narrower padded with `fill` after its
    columns (1-D: plain concatenation); None with None is None."""
    if first is None and second is None:
        return None
    if first is None or second is None:
        raise ValueError("one side of a join holds this state and the other does not")
    if first.dim() == 1:
        return torch.cat([first, second.to(first.device)])
    width = max(first.shape[1], second.shape[1])
    padded = [torch.cat([t, t.new_full((t.shape[0], width - t.shape[1], *t.shape[2:]), fill)], dim=1)
              if t.shape[1] < width else t for t in (first, second.to(first.device))]
    return torch.cat(padded)


Run = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # hidden [B, A, L, H], tokens [B, A], count [B] (left-aligned)


def join_runs(first: list[Run], second: list[Run], left_aligned, rows: tuple[int, int]) -> list[Run]:
    """Two batches' waiting runs of committed positions (each a list, run after run per row) -> one list for the
    joined batch: each side's runs merged (left_aligned), the side with none given empty rows."""
    if not first and not second:
        return []
    merged = [left_aligned(runs) if runs else None for runs in (first, second)]
    shape = next(m for m in merged if m is not None)
    for side, B in enumerate(rows):
        if merged[side] is None:
            hidden, tokens, count = shape
            merged[side] = (hidden.new_zeros(B, 1, *hidden.shape[2:]), tokens.new_zeros(B, 1), count.new_zeros(B))
    (h1, t1, c1), (h2, t2, c2) = merged
    return [(cat_rows(h1, h2), cat_rows(t1, t2), cat_rows(c1, c2))]
