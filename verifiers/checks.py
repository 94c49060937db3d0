"""Input checks for the verifier: bad input raises a ValueError that names the field (and the request).

Cost: a law table is read twice (its row sums, its row minima), whatever its size; NaN and infinite
entries show up in the sums, so no pass of its own looks for them. Only a refused row is looked at
closely. At a 256k vocabulary the checks cost 0.6x the verification they guard (11x when each check
read the table again; experiments/bench_verifier.py); engines that build their inputs themselves pass
validate=False.
"""

from __future__ import annotations

import torch

from framework.core.ragged_tree import RaggedTrees
from framework.core.randomness import law_dtype
from framework.core.tree import CandidateTree


def _tolerance(dtype: torch.dtype) -> float:
    return {torch.float64: 1e-6, torch.float32: 1e-3}.get(dtype, 2e-2)


def refused_rows(probs: torch.Tensor) -> torch.Tensor:
    """[rows] bool: the rows of probs [..., V] (flattened) that are not a law: a NaN, a negative or
    infinite entry, or a sum away from 1. Two passes: the sums (NaN and inf carry into them) and the minima."""
    table = probs.reshape(-1, probs.shape[-1])
    total = table.sum(-1, dtype=law_dtype(table))  # [rows]
    lowest = table.amin(-1)  # [rows]
    return ~((lowest >= 0) & ((total - 1).abs() <= _tolerance(probs.dtype)))  # NaN compares False: refused


def why_refused(probs_row: torch.Tensor) -> str:
    """What is wrong with one refused row [V]."""
    if torch.isnan(probs_row).any():
        return "contains NaN"
    if (probs_row < 0).any() or torch.isinf(probs_row).any():
        return "has negative or infinite entries: pass probabilities, not logits"
    return f"does not sum to 1 (it sums to {float(probs_row.sum(dtype=torch.float64)):.6g})"


def check_law(name: str, probs: torch.Tensor, owner=None) -> None:
    """probs [..., V]: floating point, each row a law. owner(row) -> who holds a refused row of the
    flattened table ("request 3", say), or None for a row nobody reads, which is then let pass."""
    if not probs.dtype.is_floating_point:
        raise ValueError(f"{name} must be floating point probabilities, got {probs.dtype}")
    if probs.shape[-1] == 0:
        raise ValueError(f"{name} has an empty vocabulary (its last dimension is 0)")
    if probs.numel() == 0:  # no rows (a batch without drafts): nothing to check
        return
    table = probs.reshape(-1, probs.shape[-1])
    for row in refused_rows(table).nonzero().flatten().tolist():
        holder = "" if owner is None else owner(row)
        if holder is not None:
            raise ValueError(f"{holder + ': ' if holder else ''}{name} row {row} {why_refused(table[row])}")


def check_device(name: str, tensor: torch.Tensor | None, device: torch.device) -> None:
    if tensor is not None and tensor.device != device:
        raise ValueError(f"{name} is on {tensor.device} but target_probs on {device}: "
                         "every tensor of one verification must be on the same device")


def check_materialised(name: str, value) -> None:
    """A tensor with values to read: not on the meta device (shapes only), not nested (ragged rows)."""
    if isinstance(value, torch.Tensor) and value.is_nested:
        raise ValueError(f"{name} is a nested tensor: give rows of one length (ragged requests: verifiers.adapters)")
    if isinstance(value, torch.Tensor) and value.is_meta:
        raise ValueError(f"{name} is on the meta device: it holds no values to verify")


def check_verify_inputs(tree: CandidateTree | RaggedTrees, target_probs: torch.Tensor) -> None:
    if not isinstance(target_probs, torch.Tensor):
        raise ValueError(f"target_probs must be a tensor, got {type(target_probs).__name__}")
    check_materialised("target_probs", target_probs)
    for name in ("tokens", "draft_probs"):
        check_materialised(f"the tree's {name}", getattr(tree, name, None))
    if isinstance(tree, RaggedTrees):
        check_ragged_inputs(tree, target_probs)
        return
    if not isinstance(tree, CandidateTree):
        raise ValueError(f"verify takes a CandidateTree or RaggedTrees, got {type(tree).__name__}")
    B, N = tree.tokens.shape
    if target_probs.dim() != 3 or target_probs.shape[:2] != (B, N + 1):
        raise ValueError(
            f"target_probs must be [B, N+1, V] = [{B}, {N + 1}, V], got {tuple(target_probs.shape)}"
        )
    V = target_probs.shape[-1]
    check_law("target_probs", target_probs, owner=lambda row: f"request {row // (N + 1)}")
    if tree.tokens.numel() and (int(tree.tokens.min()) < 0 or int(tree.tokens.max()) >= V):
        raise ValueError(f"tree tokens must lie in [0, {V}), "
                         f"got range [{int(tree.tokens.min())}, {int(tree.tokens.max())}]")
    q = tree.draft_probs
    if q is None:
        return
    if q.shape[-1] != V:
        raise ValueError(f"draft_probs has vocabulary {q.shape[-1]} but target_probs has {V}")
    check_device("draft_probs", q, target_probs.device)
    check_law("draft_probs", q, owner=lambda row: f"request {row // (N + 1)}")
    if tree.kind in ("iid", "wor") and N:
        parent_rows = (tree.parents + 1).to(q.device)  # [N]
        batch = torch.arange(B, device=q.device)[:, None]
        q_drawn = q[batch, parent_rows[None, :], tree.tokens.to(q.device)]  # [B, N]: no copy of whole rows
        if (q_drawn <= 0).any():
            b = int((q_drawn <= 0).nonzero()[0, 0])
            raise ValueError(f"request {b}: a {tree.kind} child has zero draft probability: "
                             "q must be the law it was drawn from")


def check_ragged_inputs(trees: RaggedTrees, target_probs: torch.Tensor) -> None:
    """Every failure names the request and the field (RaggedTrees' names: the engines' own)."""
    device = target_probs.device
    for name in ("draft_token_ids", "parents", "num_draft_tokens", "draft_probs", "law_rows", "bonus_token_ids"):
        check_device(name, getattr(trees, name), device)
    counts, tokens, T = trees.num_draft_tokens, trees.draft_token_ids, trees.draft_token_ids.shape[0]
    B = counts.numel()
    if trees.parents.shape[0] != T:
        raise ValueError(f"parents holds {trees.parents.shape[0]} entries but draft_token_ids holds {T} tokens")
    request, position = trees.request_of(), trees.positions()  # [T], [T] index within the request
    bad = ((trees.parents < -1) | (trees.parents >= position)).nonzero()
    if bad.numel():
        i = int(bad[0])
        raise ValueError(f"request {int(request[i])}: parents of its node {int(position[i])} "
                         f"is {int(trees.parents[i])}: "
                         "parents must point backwards within the request (-1 = the root)")
    rows = T + B if trees.law_rows is None else None
    for name, probs in (("target_probs", target_probs), ("draft_probs", trees.draft_probs)):
        if probs is not None and (probs.dim() != 2 or (rows is not None and probs.shape[0] != rows)):
            raise ValueError(f"{name} must be [T + B, V] = [{T + B}, V] (a root row per request, then its nodes'), "
                             f"got {tuple(probs.shape)}" if rows is not None
                             else f"{name} must be [R, V], got {tuple(probs.shape)}")
    V = target_probs.shape[-1]
    if V == 0:
        raise ValueError("target_probs has an empty vocabulary (its last dimension is 0)")
    if trees.draft_probs is not None and trees.draft_probs.shape != target_probs.shape:
        raise ValueError(f"draft_probs is {tuple(trees.draft_probs.shape)} "
                         f"but target_probs is {tuple(target_probs.shape)}")
    bad = ((tokens < 0) | (tokens >= V)).nonzero()
    if bad.numel():
        i = int(bad[0])
        raise ValueError(f"request {int(request[i])}: draft_token_ids holds {int(tokens[i])}, outside [0, {V})")
    law_rows = torch.arange(T + B, device=device) if trees.law_rows is None else trees.law_rows
    request_g = torch.repeat_interleave(torch.arange(B, device=device), counts + 1)  # [T + B]
    if law_rows.shape != (T + B,):
        raise ValueError(f"law_rows must be [T + B] = [{T + B}], got {tuple(law_rows.shape)}")
    read = torch.ones(T + B, dtype=torch.bool, device=device)  # nodes whose law the walk reads
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

    def owner(row: int) -> str | None:  # the first request that reads this row, or None: nobody reads it
        readers = (read & (law_rows == row)).nonzero()
        return f"request {int(request_g[readers[0]])}" if readers.numel() else None

    for name, probs in (("target_probs", target_probs), ("draft_probs", trees.draft_probs)):
        if probs is not None:
            check_law(name, probs, owner)
    if trees.kind in ("iid", "wor") and T:
        parent_rows = law_rows[trees.global_parents()[trees.global_ids()]]  # [T] the law each draft was drawn from
        drawn = trees.draft_probs[parent_rows, tokens.long()]  # [T] each draft's own probability
        if (drawn <= 0).any():
            i = int((drawn <= 0).nonzero()[0])
            raise ValueError(f"request {int(request[i])}: a draft has zero draft_probs: "
                             "it must be the law it was drawn from")
