"""Side rows: inputs a proposer appends to the target's forward that are not candidates.

Lookahead decoding runs its Jacobi window in the very forward that verifies the tree. A side
row has its own token and position (an offset from the committed length, like a tree node's
depth) and sees the whole committed past, the tree rows it names and the side rows it names.
Tree rows never see side rows, so the tree's logits are what they would be without them. The
side rows' logits go back to the proposer; their KV is never committed (HFTarget.commit keeps
the root and the accepted nodes only) and the verifier never sees them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class SideRows:
    tokens: torch.Tensor  # [B, S] token ids
    depth: torch.Tensor  # [S] position offset from the committed length (the root's is 0)
    sees_tree: torch.Tensor  # [S, N+1] bool: which tree rows (row 0 = root) each side row sees
    sees_side: torch.Tensor  # [S, S] bool: which side rows each side row sees (itself included)

    def __post_init__(self) -> None:
        S = self.tokens.shape[1] if self.tokens.dim() == 2 else -1
        if S < 0 or self.depth.shape != (S,) or self.sees_side.shape != (S, S) or self.sees_tree.dim() != 2 \
                or self.sees_tree.shape[0] != S:
            raise ValueError(
                f"side rows need tokens [B, S], depth [S], sees_tree [S, N+1], sees_side [S, S]; got "
                f"{tuple(self.tokens.shape)}, {tuple(self.depth.shape)}, {tuple(self.sees_tree.shape)}, "
                f"{tuple(self.sees_side.shape)}"
            )
        if S and int(self.depth.min()) < 0:
            raise ValueError("side-row depths must be >= 0 (offsets from the committed length)")

    @property
    def num_rows(self) -> int:
        return self.tokens.shape[1]


def forward_mask(tree_mask: torch.Tensor, side: SideRows | None) -> torch.Tensor:
    """tree_mask [N+1, N+1] -> [N+1+S, N+1+S]: tree rows see the tree only; side rows their pattern."""
    if side is None:
        return tree_mask
    T, S = tree_mask.shape[0], side.num_rows
    if side.sees_tree.shape[1] != T:
        raise ValueError(f"side rows name {side.sees_tree.shape[1]} tree rows but the tree has {T} (root included)")
    top = torch.cat([tree_mask, torch.zeros(T, S, dtype=torch.bool)], dim=1)
    bottom = torch.cat([side.sees_tree.cpu().bool(), side.sees_side.cpu().bool()], dim=1)
    return torch.cat([top, bottom], dim=0)
