"""The constraint role: which tokens may come next (a grammar), per batch row, along every tree path.

A constraint holds one state per row: the tokens the loop has emitted so far, and nothing else. The engine
asks it for the mask at every tree row (each node's own path, walked from the committed state and rolled
back: the state itself never moves while a step is judged), applies it to the target's law at every node
and at the bonus position (framework/core/sampling.py), and advances it by the emitted tokens only after
verification: a rejected path never reaches the state. A proposer that draws from a law takes its q after
the same mask (the draft never spends a draw on a token the target cannot take).

Why pruning is exact: a node whose token the mask forbids at its parent has p = 0 there, so every lossless
rule rejects it; for a `point` tree (children chosen blind to the verifier's coins) its removal is a choice
blind to the coins too, and the residual after rejecting a token of p = 0 is p itself. Trees of drawn
children (iid / wor) keep every node: their rules count the draws (docs/design.md section 4).
"""

from __future__ import annotations

from typing import Protocol

import torch

from framework.core.tree import CandidateTree
from framework.core.tree_shape import TreeShape


class Constraint(Protocol):
    vocab_size: int

    def start(self, batch_size: int) -> None:
        """A fresh state per row (nothing emitted yet)."""
        ...

    def allowed(self, tokens: torch.Tensor, shape: TreeShape, rows: torch.Tensor | None = None) -> torch.Tensor:
        """tokens [B, N] of a tree of `shape` -> [B, R, V] bool: what may follow each of the tree rows `rows`
        (0 = the root, i + 1 = node i; None: all N + 1), after the committed tokens and that row's own path.
        A row whose path the constraint already forbids is unreachable: it gets every token (never read)."""
        ...

    def advance(self, tokens: torch.Tensor) -> None:
        """tokens [B, K] emitted per row (-1: none), in order. A token the constraint forbids is an error."""
        ...

    def select(self, rows: torch.Tensor) -> None:
        """Keep the rows `rows` [B'] in that order (repeats copy a row's state)."""
        ...

    def join(self, other) -> None:
        """Append the rows of `other` (the same constraint, started on newcomers) after these."""
        ...


def root_mask(constraint: Constraint, batch_size: int, device=None) -> torch.Tensor:
    """[B, V]: what may come first after the committed tokens (a tree with no nodes)."""
    empty = CandidateTree.empty(batch_size, device)
    return constraint.allowed(empty.tokens, empty.shape)[:, 0]


def forbidden_nodes(tree: CandidateTree, allowed: torch.Tensor) -> torch.Tensor:
    """allowed [B, N+1, V] -> [B, N] bool: nodes whose token, or an ancestor's, is forbidden at its parent."""
    parent_rows = (tree.parents + 1).to(allowed.device)  # [N]
    ok = allowed[:, parent_rows].gather(2, tree.tokens.to(allowed.device)[..., None]).squeeze(2)  # [B, N]
    # [N, N] node i sees its ancestors and itself
    ancestors = tree.shape.ancestors[1:, 1:].to(allowed.device, torch.float32)
    return (ancestors @ (~ok).float().transpose(0, 1)).transpose(0, 1) > 0


def prune_forbidden(tree: CandidateTree, allowed: torch.Tensor) -> tuple[CandidateTree, torch.Tensor]:
    """A point tree without the nodes every row's constraint forbids, and their masks [B, N'+1, V] (the tree as
    it was when nothing goes). Trees of drawn children are kept whole."""
    if tree.kind != "point" or tree.num_nodes == 0:
        return tree, allowed
    gone = forbidden_nodes(tree, allowed).all(0)  # [N]
    if not bool(gone.any()):
        return tree, allowed
    kept = (~gone).nonzero().flatten().cpu()  # closed under ancestors: a forbidden parent forbids its subtree
    rows = torch.cat([torch.zeros(1, dtype=torch.long), kept + 1]).to(allowed.device)
    return tree.keep_nodes(kept), allowed[:, rows]
