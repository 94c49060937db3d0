"""Input checks for the verifier: bad input raises a ValueError that names the problem."""

from __future__ import annotations

import torch

from framework.tree import CandidateTree


def _tolerance(dtype: torch.dtype) -> float:
    return {torch.float64: 1e-6, torch.float32: 1e-3}.get(dtype, 2e-2)


def check_law(name: str, probs: torch.Tensor) -> None:
    """probs [..., V]: finite, non-negative, each row summing to 1."""
    if not probs.dtype.is_floating_point:
        raise ValueError(f"{name} must be floating point probabilities, got {probs.dtype}")
    if torch.isnan(probs).any():
        raise ValueError(f"{name} contains NaN")
    if (probs < 0).any() or torch.isinf(probs).any():
        raise ValueError(f"{name} has negative or infinite entries: pass probabilities, not logits")
    err = (probs.sum(-1, dtype=torch.float64) - 1).abs().max()
    if err > _tolerance(probs.dtype):
        raise ValueError(f"{name} rows do not sum to 1 (worst error {float(err):.3g})")


def check_verify_inputs(tree: CandidateTree, target_probs: torch.Tensor) -> None:
    B, N = tree.tokens.shape
    if target_probs.dim() != 3 or target_probs.shape[:2] != (B, N + 1):
        raise ValueError(
            f"target_probs must be [B, N+1, V] = [{B}, {N + 1}, V], got {tuple(target_probs.shape)}"
        )
    V = target_probs.shape[-1]
    check_law("target_probs", target_probs)
    if tree.tokens.numel() and (int(tree.tokens.min()) < 0 or int(tree.tokens.max()) >= V):
        raise ValueError(f"tree tokens must lie in [0, {V}), got range [{int(tree.tokens.min())}, {int(tree.tokens.max())}]")
    q = tree.draft_probs
    if q is None:
        return
    if q.shape[-1] != V:
        raise ValueError(f"draft_probs has vocabulary {q.shape[-1]} but target_probs has {V}")
    if q.device != target_probs.device:
        raise ValueError(f"draft_probs on {q.device} but target_probs on {target_probs.device}")
    check_law("draft_probs", q)
    if tree.kind in ("iid", "wor") and N:
        parent_rows = (tree.parents + 1).to(q.device)
        q_drawn = q[:, parent_rows].gather(-1, tree.tokens.to(q.device)[..., None])  # [B, N, 1]
        if (q_drawn <= 0).any():
            raise ValueError(f"a {tree.kind} child has zero draft probability: q must be the law it was drawn from")
