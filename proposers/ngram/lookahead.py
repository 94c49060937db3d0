"""Lookahead decoding (Fu et al., 2024): a Jacobi window and an n-gram pool, in one forward per step.

The window holds up to N-1 levels of W guessed tokens. Token (l, i) sits at offset l + i + 1 from
the root and sees the committed past, the root, level 0 up to column i and its own column's levels
1..l: together one consecutive sequence, so its output is one Jacobi update of the next position.
The window rides as side rows in the target's verify forward (framework/core/side_rows.py). Each step
the top level's outputs (argmax) become a new level; once the window is full, column i yields the
n-gram (level 0..N-2 of column i, new token i), pooled under its first token, and the oldest level
drops. Candidates are the up to G pooled n-grams that start with the root, merged into one tree.

The window and pool are functions of the committed text and the target's logits of earlier
forwards, never of a verifier coin: the tree is `point`, exact through the point rule.
"""

from __future__ import annotations

import random

import torch

from framework.core.path_tree import WeightedPaths, tree_from_paths
from framework.core.prompts import prompt_rows
from framework.core.proposer import DecodeState
from framework.core.side_rows import SideRows
from framework.core.tree import CandidateTree
from proposers.common.token_history import TextProposer
from proposers.ngram.pool import NgramPool


def window_pattern(levels: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """depth [S] and sees_side [S, S] of a window of `levels` x `width` (row level * width + i)."""
    level = torch.arange(levels).repeat_interleave(width)  # [S]
    i = torch.arange(width).repeat(levels)  # [S]
    first_level_left = (level[None, :] == 0) & (i[None, :] <= i[:, None])
    own_column_below = (i[None, :] == i[:, None]) & (level[None, :] >= 1) & (level[None, :] <= level[:, None])
    return level + i + 1, first_level_left | own_column_below


class LookaheadProposer(TextProposer):
    def __init__(self, window: int = 5, ngram: int = 3, guesses: int = 5, pool_from_prompt: bool = False,
                 seed: int = 0):
        """window W, ngram N, guesses G (n-grams verified per step, also kept per first token in the
        pool). pool_from_prompt: seed the pool with the prompt's own n-grams."""
        super().__init__()
        for name, value in (("window (W)", window), ("ngram (N)", ngram), ("guesses (G)", guesses)):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if ngram < 2:
            raise ValueError(f"ngram (N) must be >= 2: a 1-gram has no continuation to propose, got {ngram}")
        self.W, self.N, self.G, self.pool_from_prompt, self.seed = window, ngram, guesses, pool_from_prompt, seed
        self.levels = torch.zeros(0, 0, window, dtype=torch.long)  # [B, levels, W]
        self.pool: NgramPool | None = None  # the n-grams seen, per row
        self.max_positions: int | None = None
        self.patterns: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def prefill(self, input_ids: torch.Tensor, target) -> None:
        super().prefill(input_ids, target)
        self.max_positions = target.max_positions
        rows = input_ids.cpu()
        pick = random.Random(self.seed)  # the window starts as prompt tokens: a guess, blind to every coin
        self.levels = torch.tensor([[[pick.choice(row) for _ in range(self.W)]] for row in prompt_rows(rows)],
                                   dtype=torch.long)
        grams = rows.unfold(1, self.N, 1) if self.pool_from_prompt and rows.shape[1] >= self.N \
            else torch.zeros(rows.shape[0], 0, self.N, dtype=torch.long)
        self.pool = NgramPool(grams.masked_fill((grams < 0).any(-1, keepdim=True), -1), self.G)  # none over padding

    def propose(self, state: DecodeState) -> CandidateTree:
        if not state.plan.drafts:  # the window waits too: the engine asks no side rows of a plain step
            return self.plain_step(state.root)
        tails = self.pool.newest_tails(self.history.note_root(state.root))  # [B, G, N-1], newest first
        weights = (self.G - torch.arange(self.G, dtype=torch.float64)) * (tails[:, :, 0] >= 0)  # newest weighs most
        return tree_from_paths(WeightedPaths(tails, weights), self.G * (self.N - 1), state.root.device,
                               depth=state.plan.depth)

    def side_rows(self, tree: CandidateTree) -> SideRows | None:
        B, levels, W = self.levels.shape
        if levels not in self.patterns:
            self.patterns[levels] = window_pattern(levels, W)
        depth, sees_side = self.patterns[levels]
        longest = int(self.history.lengths.max())  # the root's position, at most
        if self.max_positions is not None and longest + int(depth.max()) >= self.max_positions:
            return None  # no room left in the context: plain verification only, the window waits
        sees_tree = torch.zeros(depth.numel(), tree.num_nodes + 1, dtype=torch.bool)
        sees_tree[:, 0] = True  # the root only: the window guesses what follows the committed text
        return SideRows(self.levels.reshape(B, levels * W).to(tree.tokens.device), depth, sees_tree, sees_side)

    def observe_side(self, logits: torch.Tensor) -> None:
        """logits [B, levels * W, V]: the top level's outputs become the next level."""
        B, levels, W = self.levels.shape
        new = logits[:, (levels - 1) * W :].argmax(-1).cpu()  # [B, W]
        # full window: every column closes an n-gram (pooled left to right), the oldest level goes
        if levels == self.N - 1:
            self.pool.remember(torch.cat([self.levels, new[:, None]], dim=1).transpose(1, 2))  # [B, W, N]
            self.levels = self.levels[:, 1:]
        self.levels = torch.cat([self.levels, new[:, None]], dim=1)

    def join(self, other: LookaheadProposer) -> None:
        super().join(other)
        levels = min(self.levels.shape[1], other.levels.shape[1])  # the window is a guess: the newest levels stay
        self.levels = torch.cat([self.levels[:, self.levels.shape[1] - levels:],
                                 other.levels[:, other.levels.shape[1] - levels:]])
        self.pool.join(other.pool)

    def select(self, rows: torch.Tensor) -> None:
        super().select(rows)
        self.levels = self.levels[rows.cpu()]
        self.pool.select(rows.cpu())

