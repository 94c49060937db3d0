"""How a proposer picks the children of one node from its processed law q.

Shared by every proposer that drafts from a distribution, so that the `kind` it declares is
true of the draws it made: "iid" keeps duplicates and draw order, "wor" draws without
replacement in draw order, "point" takes the top-k by value (ties: lowest id first).
"""

from __future__ import annotations

import torch

from framework.core.randomness import RandomSource


def top_tokens(q: torch.Tensor, k: int, rng: RandomSource | None = None) -> torch.Tensor:
    """q [B, V] -> the k most likely ids [B, k], stable on ties; uses no coins."""
    return q.sort(dim=-1, descending=True, stable=True).indices[:, :k]


def draw_iid(q: torch.Tensor, k: int, rng: RandomSource) -> torch.Tensor:
    return rng.categorical(q[:, None, :].expand(-1, k, -1))  # [B, k]


def draw_without_replacement(q: torch.Tensor, k: int, rng: RandomSource) -> torch.Tensor:
    """k draws without replacement, in draw order. Where q's support runs out (greedy, top-k),
    the remaining slots repeat the last draw: the verifier treats them as dead (q_k(c) = 0)."""
    draws: list[torch.Tensor] = []
    for i in range(k):
        if draws:
            exhausted = q.sum(-1) <= 0  # [B]
            if bool(exhausted.any()):
                repeat_last = torch.nn.functional.one_hot(draws[-1], q.shape[-1]).to(q.dtype)
                q = torch.where(exhausted[:, None], repeat_last, q)
        token = rng.categorical(q)  # [B]
        draws.append(token)
        if i + 1 < k:  # the law left for the next draw (a copy once: the caller's q is not touched)
            q = q.scatter(-1, token[:, None], 0.0) if i == 0 else q.scatter_(-1, token[:, None], 0.0)
    return torch.stack(draws, dim=1)


DRAWERS = {"point": top_tokens, "iid": draw_iid, "wor": draw_without_replacement}


def draw_children(q: torch.Tensor, k: int, kind: str, rng: RandomSource, point_mass: bool = False) -> torch.Tensor:
    """q [B, V] -> k children [B, k] of the given kind.

    point_mass: the caller knows each row of q is one atom (a greedy law). Every iid or wor draw
    is then that atom whatever the coin (wor repeats it once the support runs out), so none is spent.
    """
    if kind not in DRAWERS:
        raise ValueError(f"unknown kind of children {kind!r} (have {sorted(DRAWERS)})")
    if point_mass and kind != "point":
        return q.argmax(-1, keepdim=True).expand(-1, k)
    return DRAWERS[kind](q, k, rng)
