"""Tokens a grammar forces, drafted for free (vLLM's fsm idea): where the constraint allows one token only,
that token is the target's too (its masked law is a point mass there), so a chain of them is accepted whole.

The chain grows from the root while the constraint allows one token in some row; the batch shares one shape,
so a row whose run ends earlier gets the first token its constraint allows at the remaining depths (a guess,
chosen blind to the verifier's coins: the point rule keeps its law). Scores: 1 for a forced node, 1 / (the
allowed count) for a guess, along the path. In a mix (proposers/mix.py) the forced chain merges with any
other part's tree. Without a constraint nothing is forced: it drafts nothing.
"""

from __future__ import annotations

import torch

from framework.core.proposer import DecodeState
from framework.core.tree import CandidateTree
from framework.core.tree_shape import TreeShape


class GrammarProposer:
    hidden_layers = ()
    couples_rows = True  # the chain's length is the longest forced run of any row

    def __init__(self, depth: int = 16):
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        self.depth = depth

    def prefill(self, input_ids: torch.Tensor, target) -> None:
        pass

    def propose(self, state: DecodeState) -> CandidateTree:
        B = state.root.shape[0]
        if state.constraint is None:  # nothing is forced without a grammar: a plain step (a mix's other parts draft)
            return CandidateTree.empty(B, state.root.device)
        depth = self.depth if state.plan.depth is None else min(self.depth, state.plan.depth)
        tokens = torch.zeros(B, depth, dtype=torch.long, device=state.root.device)
        scores = torch.ones(B, depth + 1)
        shape = TreeShape.chain(depth)
        length = 0
        for level in range(depth):
            # [B, V] after the chain so far
            allowed = state.constraint.allowed(tokens, shape, torch.tensor([level]))[:, 0]
            count = allowed.sum(-1).cpu()  # [B]
            if not bool((count == 1).any()):
                break
            tokens[:, level] = allowed.long().argmax(-1)  # the forced token, or the first allowed one
            scores[:, level + 1] = scores[:, level] / count.clamp_min(1)
            length = level + 1
        return CandidateTree(tokens[:, :length], shape.prefix(length), None, "point", scores[:, 1 : length + 1])

    def commit(self, result) -> None:
        pass

    def select(self, rows: torch.Tensor) -> None:
        pass

    def join(self, other) -> None:
        pass
