"""N-gram search of token sequences: where else does each one's ending occur, and what came next.

Used by prompt lookup (the prompt and the generated text), for every row of the batch at once.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from framework.core.path_tree import WeightedPaths


def check_ngram_range(min_ngram: int, max_ngram: int) -> None:
    if min_ngram < 1:
        raise ValueError(f"min_ngram must be >= 1, got {min_ngram}")
    if max_ngram < min_ngram:
        raise ValueError(f"the n-gram min ({min_ngram}) exceeds the n-gram max ({max_ngram})")


def batched_continuations(tokens: torch.Tensor, lengths: torch.Tensor, min_ngram: int, max_ngram: int, length: int,
                          max_matches: int) -> WeightedPaths:
    """tokens [B, C] (row b: its first lengths[b] tokens) -> per row, the earlier occurrences of its last n tokens,
    longest n first, most recent first: (the up to `length` tokens that followed, weight n) for at most
    `max_matches` distinct continuations ([B, max_matches, length], -1 padded; weight 0: none). A row shorter
    than n + 1 has no match at that n."""
    B, C = tokens.shape
    rows = torch.arange(B)[:, None]
    follows, weights = [], []  # candidates in priority order: n down, start down
    for n in range(max_ngram, min_ngram - 1, -1):
        if C < n + 1:
            continue
        query = tokens[rows, (lengths[:, None] - n + torch.arange(n)).clamp_min(0)]  # [B, n] the last n tokens
        starts = torch.arange(C - n - 1, -1, -1)  # [S] most recent first
        windows = tokens.unfold(1, n, 1)[:, starts]  # [B, S, n]
        found = (windows == query[:, None]).all(-1) & (starts <= lengths[:, None] - 1 - n)  # [B, S]
        at = starts[:, None] + n + torch.arange(length)  # [S, length] what followed
        follow = tokens[:, at.clamp_max(C - 1)]  # [B, S, length]
        follow = torch.where(at < lengths[:, None, None], follow, -1)
        follows.append(follow)
        weights.append(torch.where(found, float(n), 0.0))
    if not follows:
        return WeightedPaths(torch.full((B, max_matches, length), -1, dtype=torch.long),
                             torch.zeros(B, max_matches, dtype=torch.float64))
    follow, weight = torch.cat(follows, dim=1), torch.cat(weights, dim=1).double()  # [B, K, length], [B, K]
    # [B, max_matches, length], [B, max_matches] x 2
    chosen, pick, has = first_distinct(follow, weight > 0, max_matches)
    return WeightedPaths(chosen, torch.where(has, weight.gather(1, pick), 0.0))


def first_distinct(candidates: torch.Tensor, live: torch.Tensor,
                   count: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """candidates [B, K, L] in priority order, live [B, K] -> per row, the first `count` live candidates no earlier
    pick equals: them [B, count, L] (-1 where none is left), their indices [B, count] and whether each exists
    [B, count]."""
    B = candidates.shape[0]
    chosen, picks, found = [], [], []
    for _ in range(count):  # the first candidate left per row; its copies go
        pick = live.long().argmax(dim=1)  # [B]
        first = candidates[torch.arange(B), pick]  # [B, L]
        has = live.any(dim=1)
        chosen.append(torch.where(has[:, None], first, -1))
        picks.append(pick)
        found.append(has)
        live = live & ~(candidates == first[:, None]).all(dim=-1)
    return torch.stack(chosen, dim=1), torch.stack(picks, dim=1), torch.stack(found, dim=1)


def continuations(sequence: Sequence[int], min_ngram: int, max_ngram: int, length: int,
                  max_matches: int) -> list[tuple[tuple[int, ...], int]]:
    """One sequence's (continuation, n) pairs, as batched_continuations finds them."""
    tokens = torch.tensor([list(sequence)], dtype=torch.long).reshape(1, -1)
    found = batched_continuations(tokens, torch.tensor([tokens.shape[1]]), min_ngram, max_ngram, length, max_matches)
    return [(tuple(t for t in path if t >= 0), int(w))
            for path, w in zip(found.tokens[0].tolist(), found.weights[0].tolist())
            if w > 0]
