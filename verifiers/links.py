"""Trees held as sibling links (SGLang's `retrive_next_token` / `retrive_next_sibling`), put in our order.

An engine's tree builder fills a fixed number of slots S per request: slot 0 is the root (the last
verified token), the others drafts, linked by first child and next sibling (-1 = none). It may leave
slots unused (linked from nowhere), and its slots need not be in any order. The verifier wants each
request's nodes topologically ordered, siblings in the caller's order (for iid/wor children that is
the draw order, which the rules depend on). `order_links` computes, for every request at once:
breadth-first order, siblings as linked, unreachable slots left out, and optionally no node deeper
than a cap (a whole level is kept or dropped: a shape fixed before any coin, so the law stays exact).
Every step is a tensor operation over [B, S]; the loops run once per level and once per sibling rank.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from framework.core.ragged_tree import depth_caps
from framework.core.tree import integers


@dataclass
class LinkedOrder:
    """Each request's kept nodes, in breadth-first order with siblings as linked."""

    slots: torch.Tensor  # [B, S-1] the caller's slot of each kept node (0-based node index), -1 padded
    parents: torch.Tensor  # [B, S-1] each kept node's parent as a node index (-1 = the root), -1 padded
    counts: torch.Tensor  # [B] kept nodes per request


def _check_links(first_child: torch.Tensor, next_sibling: torch.Tensor) -> None:
    if first_child.dim() != 2 or first_child.shape != next_sibling.shape:
        raise ValueError(f"first_child and next_sibling must both be [B, S] (slot 0 = the root), "
                         f"got {tuple(first_child.shape)} and {tuple(next_sibling.shape)}")
    B, S = first_child.shape
    for name, links in (("first_child", first_child), ("next_sibling", next_sibling)):
        bad = ((links < -1) | (links >= S) | (links == 0)).nonzero()
        if bad.numel():
            b, s = bad[0].tolist()
            raise ValueError(f"request {b}: {name}[{s}] = {int(links[b, s])} is not a draft slot in [1, {S}) or -1")
    rooted = (next_sibling[:, 0] >= 0).nonzero()
    if rooted.numel():
        b = int(rooted[0])
        raise ValueError(f"request {b}: slot 0 is the root, which has no siblings, but next_sibling[0] = "
                         f"{int(next_sibling[b, 0])}")
    incoming = torch.zeros(B, S + 1, dtype=torch.long, device=first_child.device)  # column S counts the -1s
    for links in (first_child, next_sibling):
        incoming.scatter_add_(1, torch.where(links >= 0, links, S), torch.ones_like(links))
    bad = (incoming[:, :S] > 1).nonzero()
    if bad.numel():
        b, s = bad[0].tolist()
        raise ValueError(f"request {b}: slot {s} is linked from two places: the links do not form a tree")


def order_links(first_child, next_sibling, max_depth=None) -> LinkedOrder:
    """first_child, next_sibling [B, S] (slot 0 = the root) -> LinkedOrder.

    max_depth: an int or [B]: no kept node deeper than it (the engine's num_speculative_tokens)."""
    first_child = integers("first_child", first_child)
    next_sibling = integers("next_sibling", next_sibling, first_child.device)
    _check_links(first_child, next_sibling)
    B, S = first_child.shape
    device = first_child.device
    # Each slot has at most one incoming link, so every write below sets a slot once.
    parent = torch.full((B, S), -1, dtype=torch.long, device=device)  # parent slot (the root's: -1)
    rank = torch.zeros(B, S, dtype=torch.long, device=device)  # index among its siblings
    depth = torch.zeros(B, S, dtype=torch.long, device=device)
    reached = torch.zeros(B, S, dtype=torch.bool, device=device)
    reached[:, 0] = True
    frontier = reached.clone()  # slots reached at the last round: their links are followed next
    while bool(frontier.any()):
        b, s = frontier.nonzero(as_tuple=True)
        frontier = torch.zeros_like(reached)
        for child, child_parent, child_rank, child_depth in (
            (first_child[b, s], s, torch.zeros_like(s), depth[b, s] + 1),  # a first child: rank 0, one level down
            (next_sibling[b, s], parent[b, s], rank[b, s] + 1, depth[b, s]),  # a next sibling: same parent, next rank
        ):
            linked = child >= 0
            bb, target = b[linked], child[linked]
            parent[bb, target], rank[bb, target], depth[bb, target] = (child_parent[linked], child_rank[linked],
                                                                       child_depth[linked])
            frontier[bb, target] = True
        reached |= frontier
    keep = reached.clone()
    keep[:, 0] = False  # the root is no node
    if max_depth is not None:
        keep &= depth <= depth_caps(max_depth, B, device)[:, None]
    # Breadth-first: by depth, then the parent's place, then the sibling rank. A node's key needs its
    # parent's place, known once the level above is placed: one stable sort per level.
    place = torch.full((B, S), -1, dtype=torch.long, device=device)  # node index of each kept slot
    place_of_parent = torch.full((B, S), -1, dtype=torch.long, device=device)
    placed = torch.zeros(B, dtype=torch.long, device=device)
    big = S * S + S
    for level in range(1, int(depth[keep].max()) + 1 if bool(keep.any()) else 1):
        at_level = keep & (depth == level)
        parent_place = torch.where(parent > 0, place.gather(1, parent.clamp_min(0)), -1)  # [B, S] (the root: -1)
        key = torch.where(at_level, (parent_place + 1) * S + rank, big)
        order = key.argsort(dim=1, stable=True)  # [B, S] slots of this level first, in order
        count = at_level.sum(1)  # [B]
        position = torch.arange(S, device=device)[None, :].expand(B, S)
        taken = position < count[:, None]
        b, k = taken.nonzero(as_tuple=True)
        slot = order[b, k]
        place[b, slot] = placed[b] + k
        place_of_parent[b, slot] = parent_place[b, slot]
        placed += count
    N = S - 1
    slots = torch.full((B, N), -1, dtype=torch.long, device=device)
    parents = torch.full((B, N), -1, dtype=torch.long, device=device)
    b, s = keep.nonzero(as_tuple=True)
    slots[b, place[b, s]] = s
    parents[b, place[b, s]] = place_of_parent[b, s]
    return LinkedOrder(slots, parents, placed)
