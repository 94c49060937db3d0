"""Bugs planted in the target adapter, for the harness through the real loop (framework/harness/real.py).

Each is an HFTarget with one part replaced by a realistic mistake; `exact_loop_law(...,
target_factory=mutant)` must move the law away from the target's.
"""

from __future__ import annotations

import torch

from framework.target import HFTarget


class SideRowsKeptAtCommit(HFTarget):
    """Bug: the side rows' KV (lookahead's window) is committed after the accepted path, as if it
    were text: later tokens attend to guesses at positions that are not theirs."""

    def forward_tree(self, tree, side=None):
        self.side_count = 0 if side is None else side.num_rows
        self.tree_rows = tree.num_nodes + 1
        return super().forward_tree(tree, side)

    def commit(self, result) -> None:
        B, S = result.path.shape[0], self.side_count
        accepted = result.num_accepted.tolist()
        width = result.path.shape[1] + 1 + S
        slots = torch.zeros(B, width, dtype=torch.long)
        for b in range(B):
            row = [0] + [p + 1 for p in result.path[b, : accepted[b]].tolist()] + list(range(self.tree_rows, self.tree_rows + S))
            slots[b, : len(row)] = torch.tensor(row)
        self.lm.keep(slots, result.num_accepted + 1 + S)
