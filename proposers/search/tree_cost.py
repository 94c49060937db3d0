"""Measured cost of the target's `forward_tree` by node count, on this machine (for tree search).

Every call sees the same cache (the pending slots are dropped after it); sizes (or targets) are
interleaved call by call so that a noisy machine slows them alike; the median is kept.
"""

from __future__ import annotations

import statistics
import time

import torch

from framework.lm.target import HFTarget


def time_forwards(cases: dict, repeats: int) -> dict:
    """cases: name -> (HFTarget after a prefill, its root [B], tree). ms per forward_tree (median of `repeats`
    after two warm-up rounds), interleaved call by call."""
    times = {name: [] for name in cases}
    for rep in range(repeats + 2):
        for name, (target, root, tree) in cases.items():
            start = time.perf_counter()
            target.forward_tree(root, tree)
            elapsed = time.perf_counter() - start
            target.lm.drop_pending()
            if rep >= 2:
                times[name].append(elapsed)
    return {name: 1e3 * statistics.median(t) for name, t in times.items()}


def prefilled(model, prompt_len: int, seed: int = 0) -> tuple[HFTarget, torch.Tensor]:
    """An HFTarget after a random prompt_len-token prefill (the same prompt for every model), and a root [1]."""
    gen = torch.Generator().manual_seed(seed)
    prompt = torch.randint(model.config.vocab_size, (1, prompt_len), generator=gen)
    target = HFTarget(model)
    target.prefill(prompt)
    return target, prompt[:, -1]


def forward_tree_cost(model, sizes=(0, 1, 8, 16, 32, 64), prompt_len: int = 256, repeats: int = 20,
                      seed: int = 0) -> dict[int, float]:
    """ms per forward_tree with N nodes (prefixes of a breadth-first binary tree), after one prefill: the
    target's own measurement (HFTarget.forward_costs), which the goodput policy uses too."""
    target, _ = prefilled(model, prompt_len, seed)
    return {n: 1e3 * seconds for n, seconds in target.forward_costs(sizes, repeats).items()}
