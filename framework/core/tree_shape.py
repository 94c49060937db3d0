"""Static tree topology: who is whose parent, and which draft rank each node takes.

Node indices run 0..N-1; parent -1 means "child of the root". Rows of per-node tensors
(target_probs, draft_probs, the tree-attention queries) are shifted by one: row 0 is the
root, row i+1 is node i.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch


def check_parents(parents: torch.Tensor) -> None:
    """Raise ValueError unless `parents` is a topologically ordered parent array."""
    if parents.dim() != 1:
        raise ValueError(f"parents must be 1-D [N], got shape {tuple(parents.shape)}")
    if parents.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"parents must be an integer tensor, got {parents.dtype}")
    idx = torch.arange(parents.numel(), device=parents.device)
    bad = (parents < -1) | (parents >= idx)
    if bool(bad.any()):
        i = int(bad.nonzero()[0, 0])
        raise ValueError(
            f"parents are not topological: node {i} has parent {int(parents[i])} "
            "(each parent must be -1 or an earlier node)"
        )


def depths(parents: torch.Tensor) -> torch.Tensor:
    """Depth of each node, root's children at depth 1.  # [N]"""
    out = torch.zeros(parents.numel(), dtype=torch.long)
    for i, p in enumerate(parents.tolist()):
        out[i] = 1 if p < 0 else out[p] + 1
    return out


def ancestor_mask(parents: torch.Tensor) -> torch.Tensor:
    """mask[i, j]: row j is row i or one of its ancestors, rows 0 = root.  # [N+1, N+1] bool"""
    n = parents.numel()
    mask = torch.zeros(n + 1, n + 1, dtype=torch.bool)
    mask[0, 0] = True
    for i, p in enumerate(parents.tolist()):
        mask[i + 1] = mask[p + 1]
        mask[i + 1, i + 1] = True
    return mask


def children_table(parents: torch.Tensor) -> torch.Tensor:
    """table[row, k]: node index of the k-th child of row (0 = root), -1 padded.  # [N+1, C]"""
    kids: list[list[int]] = [[] for _ in range(parents.numel() + 1)]
    for i, p in enumerate(parents.tolist()):
        kids[p + 1].append(i)
    width = max(1, max(len(k) for k in kids))
    table = torch.full((len(kids), width), -1, dtype=torch.long)
    for row, k in enumerate(kids):
        table[row, : len(k)] = torch.tensor(k, dtype=torch.long)
    return table


def root_to_leaf_paths(parents: torch.Tensor) -> list[list[int]]:
    """Node indices from the root's child down to each leaf, leaves in index order."""
    plist = parents.tolist()
    is_parent = set(plist)
    paths = []
    for leaf in range(len(plist)):
        if leaf in is_parent:
            continue
        path, node = [], leaf
        while node >= 0:
            path.append(node)
            node = plist[node]
        paths.append(path[::-1])
    return paths


@dataclass(frozen=True)
class TreeShape:
    """A tree's topology plus, per node, which rank among its parent's draft candidates it takes.

    Proposers fill a shape with tokens: rank r of a node means "the r-th child drawn" (iid/wor)
    or "the r-th most likely token" (point, e.g. Medusa choices).
    """

    parents: torch.Tensor  # [N] long
    ranks: torch.Tensor  # [N] long

    def __post_init__(self) -> None:
        check_parents(self.parents)
        if self.ranks.shape != self.parents.shape:
            raise ValueError("ranks must have the same shape as parents")

    @property
    def num_nodes(self) -> int:
        return self.parents.numel()

    @staticmethod
    def chain(length: int) -> TreeShape:
        if length < 0:
            raise ValueError(f"chain length must be >= 0, got {length}")
        return TreeShape(torch.arange(-1, length - 1), torch.zeros(length, dtype=torch.long))

    @staticmethod
    def full(branching: int, depth: int) -> TreeShape:
        """Every node down to `depth` has `branching` children (a root with k children: depth=1)."""
        if branching < 1 or depth < 0:
            raise ValueError(f"need branching >= 1 and depth >= 0, got {branching}, {depth}")
        parents, ranks, frontier = [], [], [-1]
        for _ in range(depth):
            nxt = []
            for p in frontier:
                for r in range(branching):
                    parents.append(p)
                    ranks.append(r)
                    nxt.append(len(parents) - 1)
            frontier = nxt
        return TreeShape(torch.tensor(parents, dtype=torch.long), torch.tensor(ranks, dtype=torch.long))

    @staticmethod
    def from_choices(choices: Sequence[Sequence[int]]) -> TreeShape:
        """Medusa-style choices: each entry is a path of top-k ranks, e.g. (0,), (1,), (0, 2).

        Every prefix of a path must itself be a choice. Nodes are ordered by depth, then
        lexicographically, which is topological and keeps siblings in rank order.
        """
        paths = sorted({tuple(int(r) for r in c) for c in choices}, key=lambda c: (len(c), c))
        index = {}
        parents, ranks = [], []
        for path in paths:
            if len(path) == 0 or min(path) < 0:
                raise ValueError(f"choice {path} must be a non-empty path of ranks >= 0")
            parent = path[:-1]
            if parent and parent not in index:
                raise ValueError(f"choice {path} has no parent choice {parent}")
            index[path] = len(parents)
            parents.append(index[parent] if parent else -1)
            ranks.append(path[-1])
        return TreeShape(torch.tensor(parents, dtype=torch.long), torch.tensor(ranks, dtype=torch.long))
