"""A suffix array over token ids, and the range of suffixes that start with a pattern.

Built by prefix doubling: after the round with span k, every suffix has the rank of its first 2k
tokens; ranks are refined until all differ, each round one argsort of a combined int64 key
(O(n log n) per round, about log2 of the longest repeat rounds). A suffix that runs out of tokens
sorts before every extension of it, as in Python's list order, which the pattern search relies on.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence

import numpy as np


def suffix_array(tokens: np.ndarray, on_round: Callable[[int], None] | None = None) -> np.ndarray:
    """tokens [n] (any ints) -> [n] int64: the start of each suffix, in lexicographic order."""
    tokens = np.asarray(tokens)
    n = tokens.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if n >= 2**31:
        raise ValueError(f"suffix_array takes fewer than 2**31 tokens, got {n}")
    rank = np.unique(tokens, return_inverse=True)[1].reshape(-1).astype(np.int64)  # [n] dense, 0-based
    span = 1
    while True:
        second = np.zeros(n, dtype=np.int64)  # 0 = "ran out": before every real rank (shifted by 1)
        second[: n - span] = rank[span:] + 1
        key = rank * (n + 1) + second  # < n * (n + 1) + n < 2**63 for n < 2**31
        order = np.argsort(key)  # equal keys get one rank: stability is not needed
        sorted_key = key[order]
        rank = np.empty(n, dtype=np.int64)
        rank[order] = np.concatenate([[0], np.cumsum(sorted_key[1:] != sorted_key[:-1])])
        if on_round is not None:
            on_round(span)
        if rank[order[-1]] == n - 1 or span >= n:  # all distinct: the order is final
            return order
        span *= 2


def match_range(tokens: np.ndarray, suffixes: np.ndarray, pattern: Sequence[int]) -> tuple[int, int]:
    """[lo, hi): the rows of `suffixes` whose suffix starts with `pattern` (lo == hi: none)."""
    pattern = [int(t) for t in pattern]
    m = len(pattern)

    def head(row: int) -> list[int]:  # the suffix's first m tokens; order-preserving cut
        start = int(suffixes[row])
        return tokens[start : start + m].tolist()

    lo = bisect.bisect_left(range(len(suffixes)), pattern, key=head)
    hi = bisect.bisect_right(range(lo, len(suffixes)), pattern, key=head) + lo
    return lo, hi
