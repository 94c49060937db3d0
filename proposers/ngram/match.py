"""N-gram search of a token sequence: where else does its ending occur, and what came next.

Shared by prompt lookup (the prompt and the generated text) and by lookahead's pool seeding.
"""

from __future__ import annotations

import numpy as np


def check_ngram_range(min_ngram: int, max_ngram: int) -> None:
    if min_ngram < 1:
        raise ValueError(f"min_ngram must be >= 1, got {min_ngram}")
    if max_ngram < min_ngram:
        raise ValueError(f"the n-gram min ({min_ngram}) exceeds the n-gram max ({max_ngram})")


def continuations(
    sequence: list[int] | np.ndarray, min_ngram: int, max_ngram: int, length: int, max_matches: int
) -> list[tuple[tuple[int, ...], int]]:
    """Earlier occurrences of the sequence's last n tokens, longest n first, most recent first;
    returns (the up to `length` tokens that followed, n) for at most `max_matches` distinct
    continuations. A sequence shorter than n + 1 has no match at that n."""
    seq = np.asarray(sequence, dtype=np.int64)
    L, found, seen = seq.shape[0], [], set()
    for n in range(min(max_ngram, L - 1), min_ngram - 1, -1):
        windows = np.lib.stride_tricks.sliding_window_view(seq[: L - 1], n)  # starts 0 .. L-1-n
        starts = np.flatnonzero((windows == seq[L - n :]).all(axis=1))
        for start in starts[::-1]:  # most recent first
            follow = tuple(seq[start + n : start + n + length].tolist())
            if follow not in seen:
                seen.add(follow)
                found.append((follow, n))
                if len(found) >= max_matches:
                    return found
    return found
