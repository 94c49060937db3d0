"""Input checks for the verifier: bad input raises a ValueError that names the problem."""

from __future__ import annotations

import torch

from framework.ragged_tree import RaggedTrees
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
    if probs.numel() == 0:  # no rows (a batch without drafts): nothing to check
        return
    err = (probs.sum(-1, dtype=torch.float64) - 1).abs().max()
    if err > _tolerance(probs.dtype):
        raise ValueError(f"{name} rows do not sum to 1 (worst error {float(err):.3g})")


def check_verify_inputs(tree: CandidateTree | RaggedTrees, target_probs: torch.Tensor) -> None:
    if isinstance(tree, RaggedTrees):
        check_ragged_inputs(tree, target_probs)
        return
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


def check_ragged_inputs(trees: RaggedTrees, target_probs: torch.Tensor) -> None:
    """Every failure names the request and the field (RaggedTrees' names: the engines' own)."""
    counts, tokens, T = trees.num_draft_tokens, trees.draft_token_ids, trees.draft_token_ids.shape[0]
    B = counts.numel()
    if trees.parents.shape[0] != T:
        raise ValueError(f"parents holds {trees.parents.shape[0]} entries but draft_token_ids holds {T} tokens")
    request, position = trees.request_of(), trees.positions()  # [T], [T] index within the request
    bad = ((trees.parents < -1) | (trees.parents >= position)).nonzero()
    if bad.numel():
        i = int(bad[0])
        raise ValueError(f"request {int(request[i])}: parents of its node {int(position[i])} is {int(trees.parents[i])}: "
                         "parents must point backwards within the request (-1 = the root)")
    rows = T + B if trees.law_rows is None else None
    for name, probs in (("target_probs", target_probs), ("draft_probs", trees.draft_probs)):
        if probs is not None and (probs.dim() != 2 or (rows is not None and probs.shape[0] != rows)):
            raise ValueError(f"{name} must be [T + B, V] = [{T + B}, V] (a root row per request, then its nodes'), "
                             f"got {tuple(probs.shape)}" if rows is not None else f"{name} must be [R, V], got {tuple(probs.shape)}")
    V = target_probs.shape[-1]
    if trees.draft_probs is not None and trees.draft_probs.shape != target_probs.shape:
        raise ValueError(f"draft_probs is {tuple(trees.draft_probs.shape)} but target_probs is {tuple(target_probs.shape)}")
    bad = ((tokens < 0) | (tokens >= V)).nonzero()
    if bad.numel():
        i = int(bad[0])
        raise ValueError(f"request {int(request[i])}: draft_token_ids holds {int(tokens[i])}, outside [0, {V})")
    law_rows = torch.arange(T + B, device=tokens.device) if trees.law_rows is None else trees.law_rows
    request_g = torch.repeat_interleave(torch.arange(B, device=tokens.device), counts + 1)  # [T + B]
    if law_rows.shape != (T + B,):
        raise ValueError(f"law_rows must be [T + B] = [{T + B}], got {tuple(law_rows.shape)}")
    read = torch.ones(T + B, dtype=torch.bool, device=tokens.device)  # nodes whose law the walk reads
    if trees.bonus_token_ids is not None:
        bonus = trees.bonus_token_ids.reshape(-1)
        if bonus.numel() != B:
            raise ValueError(f"bonus_token_ids must be [B, 1] = [{B}, 1], got {tuple(trees.bonus_token_ids.shape)}")
        bad = ((bonus < 0) | (bonus >= V)).nonzero()
        if bad.numel():
            raise ValueError(f"request {int(bad[0])}: bonus_token_ids holds {int(bonus[bad[0]])}, outside [0, {V})")
        read = trees.walk_layout().children[:, 0] >= 0  # leaves emit the bonus token
    bad = (read & ((law_rows < 0) | (law_rows >= target_probs.shape[0]))).nonzero()
    if bad.numel():
        g = int(bad[0])
        raise ValueError(f"request {int(request_g[g])}: law_rows points to row {int(law_rows[g])}, "
                         f"outside target_probs' {target_probs.shape[0]} rows")
    for name, probs in (("target_probs", target_probs), ("draft_probs", trees.draft_probs)):
        if probs is None:
            continue
        try:
            check_law(name, probs)  # one pass over every row; only a failure looks for its row
        except ValueError:
            row, error = _first_refused_row(name, probs)
            owners = (read & (law_rows == row)).nonzero()
            owner = f"request {int(request_g[owners[0]])}" if owners.numel() else f"row {row} (read by no request)"
            raise ValueError(f"{owner}: {error}") from None
    if trees.kind in ("iid", "wor") and T:
        parent_rows = law_rows[trees.global_parents()[trees.global_ids()]]  # [T] the law each draft was drawn from
        drawn = trees.draft_probs[parent_rows].gather(1, tokens[:, None].long())[:, 0]  # [T] each draft's own probability
        if (drawn <= 0).any():
            i = int((drawn <= 0).nonzero()[0])
            raise ValueError(f"request {int(request[i])}: a draft has zero draft_probs: it must be the law it was drawn from")


def _first_refused_row(name: str, probs: torch.Tensor) -> tuple[int, ValueError]:
    """The first row check_law refuses in probs [R, V] (which it refuses as a whole), by bisection:
    check_law judges rows one by one, so a slice fails exactly when it holds a refused row."""
    lo, hi = 0, probs.shape[0]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            check_law(name, probs[lo:mid])
            lo = mid
        except ValueError:
            hi = mid
    try:
        check_law(name, probs[lo : lo + 1])
    except ValueError as error:
        return lo, error
    raise AssertionError("check_law refused the whole but none of its rows")
