"""Lookahead's n-gram pool, for every row at once: what the Jacobi window's columns closed (and the prompt's own
n-grams), asked by first token for the newest distinct continuations."""

from __future__ import annotations

import torch

from framework.core.path_tree import lexsort, positions_in_groups
from framework.core.rows import cat_rows
from proposers.ngram.match import first_distinct


class NgramPool:
    """Every row's pooled n-grams, oldest first: grams [B, T, N] (-1 rows: none). An n-gram pooled again counts
    as new. Asked for a first token, a row answers its `keep` newest distinct tails, what a per-token list of
    the newest `keep` tails (moved to the front when seen again) would hold: so older ones are dropped
    when the pool doubles."""

    def __init__(self, grams: torch.Tensor, keep: int):
        self.grams, self.keep = grams.clone(), keep
        self.compacted = 0
        self.compact()

    def remember(self, grams: torch.Tensor) -> None:
        """grams [B, K, N], oldest first."""
        self.grams = torch.cat([self.grams, grams], dim=1)
        if self.grams.shape[1] >= max(64, 2 * self.compacted):
            self.compact()

    def newest_tails(self, first: torch.Tensor) -> torch.Tensor:
        """first [B] -> [B, keep, N-1]: the newest distinct tails of each row's n-grams that start with it,
        -1 padded."""
        B, T, N = self.grams.shape
        if T == 0:
            return torch.full((B, self.keep, N - 1), -1, dtype=torch.long)
        newest = self.grams.flip(1)  # [B, T, N] newest first
        return first_distinct(newest[:, :, 1:], newest[:, :, 0] == first[:, None], self.keep)[0]

    def compact(self) -> None:
        """Keep per row and first token the `keep` newest distinct n-grams (in their order): nothing else can be
        asked for."""
        B, T, N = self.grams.shape
        if T == 0:
            return
        row = torch.arange(B)[:, None].expand(B, T).reshape(-1)
        when = torch.arange(T).repeat(B)
        flat = self.grams.reshape(B * T, N)
        _, gram_id = torch.unique(torch.cat([row[:, None], flat], dim=1), dim=0, return_inverse=True)
        newest_copy = torch.full((int(gram_id.max()) + 1,), -1, dtype=torch.long).scatter_reduce(
            0, gram_id, when, "amax")
        distinct = (when == newest_copy[gram_id]) & (flat[:, 0] >= 0)
        _, first_id = torch.unique(torch.stack([row, flat[:, 0]], dim=1), dim=0, return_inverse=True)
        order = torch.from_numpy(lexsort(first_id.numpy(), -when.numpy()))  # per (row, first token): newest first
        rank = torch.full((B * T,), T, dtype=torch.long)
        kept_order = order[distinct[order]]
        rank[kept_order] = torch.from_numpy(positions_in_groups(first_id[kept_order].numpy()))
        keep = (distinct & (rank < self.keep)).view(B, T)
        width = int(keep.sum(dim=1).max())
        slot = keep.long().cumsum(dim=1) - 1  # kept entries stay in their order, left-aligned
        grams = torch.full((B, width, N), -1, dtype=torch.long)
        grams[torch.arange(B)[:, None].expand(B, T)[keep], slot[keep]] = self.grams[keep]
        self.grams, self.compacted = grams, width

    def select(self, rows: torch.Tensor) -> None:
        self.grams = self.grams[rows]

    def join(self, other: NgramPool) -> None:
        self.grams = cat_rows(self.grams, other.grams, fill=-1)  # -1 rows: none
