"""A suffix array over token ids, and the range of suffixes that start with a pattern.

Built by prefix doubling: after the round with span k, every suffix has the rank of its first 2k
tokens; ranks are refined until all differ, each round one argsort of a combined int64 key
(O(n log n) per round, about log2 of the longest repeat rounds). A suffix that runs out of tokens
sorts before every extension of it, as in Python's list order, which the pattern search relies on.
"""

from __future__ import annotations

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


def bounds(corpus: np.ndarray, suffixes: np.ndarray, patterns: np.ndarray, lengths: np.ndarray,
           upper: bool = False, lo: np.ndarray | None = None, hi: np.ndarray | None = None) -> np.ndarray:
    """Binary search of many patterns at once. corpus and suffixes [n] (the corpus's last token is below every
    pattern token: a suffix that runs out reads it), patterns [Q, m] of which the first lengths[q] count ->
    [Q]: the first row of `suffixes` whose suffix is not below the pattern (upper: above it; a suffix that
    starts with the pattern is neither), searched within rows [lo, hi) (default: all)."""
    Q, span = patterns.shape[0], np.arange(patterns.shape[1])
    counts = span < lengths[:, None]  # [Q, m]
    lo = np.zeros(Q, dtype=np.int64) if lo is None else lo.astype(np.int64)
    hi = np.full(Q, suffixes.shape[0], dtype=np.int64) if hi is None else hi.astype(np.int64)
    active = np.flatnonzero(lo < hi)
    while active.size:
        mid = (lo[active] + hi[active]) // 2
        head = corpus.take(suffixes[mid][:, None] + span, mode="clip")  # [A, m]
        pattern = patterns[active]
        differs = (head != pattern) & counts[active]
        first = differs.argmax(axis=1)  # the first position that differs (0 when none does)
        differ, at = differs.any(axis=1), np.arange(active.size)
        below = differ & (head[at, first] < pattern[at, first])
        right = below | (upper & ~differ)
        lo[active] = np.where(right, mid + 1, lo[active])
        hi[active] = np.where(right, hi[active], mid)
        active = active[lo[active] < hi[active]]
    return lo


def match_range(tokens: np.ndarray, suffixes: np.ndarray, pattern: Sequence[int]) -> tuple[int, int]:
    """[lo, hi): the rows of `suffixes` whose suffix starts with `pattern` (lo == hi: none)."""
    below = min(int(np.min(tokens, initial=0)), min(pattern, default=0)) - 1  # read where a suffix runs out
    corpus = np.append(np.asarray(tokens, dtype=np.int64), below)
    query, length = np.asarray([list(pattern)], dtype=np.int64).reshape(1, -1), np.asarray([len(pattern)])
    return int(bounds(corpus, suffixes, query, length)[0]), int(bounds(corpus, suffixes, query, length, upper=True)[0])


class PrefixIndex:
    """The first `width` tokens of every suffix packed into one int64, in suffix-array order (so sorted): the rows
    that start with a pattern's first `width` tokens are one np.searchsorted away, and a longer pattern is
    bisected within them only. For a corpus of token ids >= 0 ending with a separator below them (-1)."""

    def __init__(self, corpus: np.ndarray, suffixes: np.ndarray):
        self.corpus, self.suffixes = corpus, suffixes
        self.base = int(corpus.max()) + 2  # token + 1: the separator packs as 0, below every token, as it sorts
        self.width = max(1, 63 // self.base.bit_length())  # base ** width < 2 ** 63
        self.keys = np.zeros(suffixes.shape[0], dtype=np.int64)
        for j in range(self.width):
            self.keys = self.keys * self.base + corpus.take(suffixes.astype(np.int64) + j, mode="clip") + 1

    def bounds(self, patterns: np.ndarray, lengths: np.ndarray, upper: bool = False) -> np.ndarray:
        """As bounds() above, for patterns of token ids >= 0."""
        packed = np.minimum(lengths, self.width)
        low = np.zeros(patterns.shape[0], dtype=np.int64)
        high = np.zeros(patterns.shape[0], dtype=np.int64)
        for j in range(self.width):  # past a pattern's end: the least and the greatest of what may follow
            token = patterns[:, j] + 1 if j < patterns.shape[1] else np.zeros(patterns.shape[0], dtype=np.int64)
            low = low * self.base + np.where(j < packed, token, 0)
            high = high * self.base + np.where(j < packed, token, self.base - 1)
        lo, hi = np.searchsorted(self.keys, low, "left"), np.searchsorted(self.keys, high, "right")  # the bucket
        longer = lengths > self.width
        start = np.where(longer, lo, hi if upper else lo)  # a pattern no longer than the key is its bucket
        return bounds(self.corpus, self.suffixes, patterns, lengths, upper, start, np.where(longer, hi, start))
