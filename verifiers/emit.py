"""The output of a rule that picks one node of the tree: its path's tokens, then one more token."""

from __future__ import annotations

from dataclasses import replace

import torch

from framework.core.randomness import RandomSource
from framework.core.tree import CandidateTree
from framework.core.verification import Verification


def emit_path(tree: CandidateTree, stop_row: torch.Tensor, final: torch.Tensor, rng: RandomSource,
              eos_token_id: int | None) -> Verification:
    """The path root -> each row's stop node (stop_row [B]: 0 = the root, i + 1 = node i), then one token
    drawn from its final law [B, V]; an accepted EOS ends the row, nothing drawn after it."""
    tokens = tree.tokens.to(final.device)
    B, N = tokens.shape
    device = tokens.device
    max_depth = tree.shape.max_depth
    path = tree.shape.path_table.to(device)[stop_row]  # [B, depth]: each row's path from the root
    accepted = (path >= 0).sum(1)
    path_tokens = torch.where(path >= 0, tokens.gather(1, path.clamp_min(0)), -1)  # [B, depth]
    emits = torch.ones(B, dtype=torch.bool, device=device)
    if eos_token_id is not None:
        is_eos = path_tokens == eos_token_id
        first = torch.where(is_eos.any(1), is_eos.long().argmax(1), path.shape[1])
        emits = first >= accepted
        accepted = torch.minimum(accepted, first + 1)
        keep = torch.arange(path.shape[1], device=device)[None, :] < accepted[:, None]
        path, path_tokens = torch.where(keep, path, -1), torch.where(keep, path_tokens, -1)
        final[~emits] = 0
        final[~emits, 0] = 1  # a placeholder law, one certain outcome: its draw is dropped
    extra = rng.categorical(final)  # [B]
    out = torch.full((B, N + 1), -1, dtype=torch.long, device=device)
    out[:, : path.shape[1]] = path_tokens
    out[torch.arange(B, device=device), accepted] = torch.where(emits, extra, -1)
    return Verification(out, accepted, path[:, :max_depth])


class NodePicker:
    """Base of the rules that pick one node of the tree (block, traversal): their output is its path."""

    lossless = True

    def committed_path(self, path: torch.Tensor) -> torch.Tensor:
        """The accepted nodes [B, depth] handed to the KV commit (a hook: the tokens are decided already)."""
        return path

    def emit(self, tree: CandidateTree, stop_row: torch.Tensor, final: torch.Tensor, rng: RandomSource,
             eos_token_id: int | None) -> Verification:
        result = emit_path(tree, stop_row, final, rng, eos_token_id)
        return replace(result, path=self.committed_path(result.path))
