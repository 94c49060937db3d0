"""Tree topology: who is whose parent, which draft rank each node takes, and the facts derived from it.

Node indices run 0..N-1; parent -1 means "child of the root". Rows of per-node tensors
(target_probs, draft_probs, the tree-attention queries) are shifted by one: row 0 is the
root, row i+1 is node i.

A TreeShape is immutable and computes each derived view (depths, levels, children, the ancestor
mask, paths) once, on first use: a proposer that drafts a static shape builds it once and every
step's tree, the target's forward, the sampling law and the verifier read the same views.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
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
    out: list[int] = []
    for p in parents.tolist():
        out.append(1 if p < 0 else out[p] + 1)
    return torch.tensor(out, dtype=torch.long)


def row_paths(parents: torch.Tensor) -> list[list[int]]:
    """Per row (0 = root, i + 1 = node i): the node indices on its path from the root, itself last."""
    paths: list[list[int]] = [[]]
    for i, p in enumerate(parents.tolist()):
        paths.append(paths[p + 1] + [i])
    return paths


def ancestor_mask(parents: torch.Tensor) -> torch.Tensor:
    """mask[i, j]: row j is row i or one of its ancestors, rows 0 = root.  # [N+1, N+1] bool"""
    return mask_of(row_paths(parents))


def mask_of(paths: list[list[int]]) -> torch.Tensor:
    """The ancestor mask from each row's path (row_paths)."""
    rows = [row for row, path in enumerate(paths) for _ in range(len(path) + 1)]
    cols = [col for path in paths for col in (0, *(i + 1 for i in path))]
    mask = torch.zeros(len(paths), len(paths), dtype=torch.bool)
    mask[rows, cols] = True
    return mask


def children_lists(parents: torch.Tensor) -> list[list[int]]:
    """Per row (0 = root, i + 1 = node i): its children's node indices, in sibling order."""
    kids: list[list[int]] = [[] for _ in range(parents.numel() + 1)]
    for i, p in enumerate(parents.tolist()):
        kids[p + 1].append(i)
    return kids


def children_table(parents: torch.Tensor) -> torch.Tensor:
    """table[row, k]: node index of the k-th child of row (0 = root), -1 padded.  # [N+1, C]"""
    return padded(children_lists(parents))


def padded(lists: list[list[int]]) -> torch.Tensor:
    """Lists of node indices as one table [len, longest (at least 1)], -1 padded."""
    table = torch.full((len(lists), max(1, max(map(len, lists)))), -1, dtype=torch.long)
    for row, items in enumerate(lists):
        table[row, : len(items)] = torch.tensor(items, dtype=torch.long)
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


@dataclass(frozen=True, eq=False)
class TreeShape:
    """A tree's topology plus, per node, which rank among its parent's draft candidates it takes.

    Proposers fill a shape with tokens: rank r of a node means "the r-th child drawn" (iid/wor)
    or "the r-th most likely token" (point, e.g. Medusa choices). Ranks default to 0 (a shape
    known only by its parents). The derived views are computed once and shared: never write
    into them.
    """

    parents: torch.Tensor  # [N] long, on the CPU
    ranks: torch.Tensor | None = field(default=None)  # [N] long

    def __post_init__(self) -> None:
        check_parents(self.parents)
        object.__setattr__(self, "parents", self.parents.long().cpu())
        if self.ranks is None:
            object.__setattr__(self, "ranks", torch.zeros_like(self.parents))
        if self.ranks.shape != self.parents.shape:
            raise ValueError("ranks must have the same shape as parents")

    @property
    def num_nodes(self) -> int:
        return self.parents.numel()

    @cached_property
    def depth(self) -> torch.Tensor:
        """[N] depth of each node (the root's children: 1)."""
        return depths(self.parents)

    @cached_property
    def max_depth(self) -> int:
        """The deepest node's depth; 0 for no nodes."""
        return int(self.depth.max()) if self.num_nodes else 0

    @cached_property
    def levels(self) -> list[torch.Tensor]:
        """levels[d - 1]: the node indices at depth d, in index order."""
        return [(self.depth == d).nonzero().flatten() for d in range(1, self.max_depth + 1)]

    @cached_property
    def root_paths(self) -> list[list[int]]:
        """Per row (0 = root, i + 1 = node i): the node indices on its path from the root, itself last."""
        return row_paths(self.parents)

    @cached_property
    def ancestors(self) -> torch.Tensor:
        """[N+1, N+1] bool, row 0 = root: row i sees row j iff j is i or one of its ancestors."""
        return mask_of(self.root_paths)

    @cached_property
    def child_lists(self) -> list[list[int]]:
        """Per row (0 = root): its children's node indices, in sibling order."""
        return children_lists(self.parents)

    @cached_property
    def children(self) -> torch.Tensor:
        """[N+1, C] node index of the k-th child of each row (0 = root), -1 padded."""
        return padded(self.child_lists)

    @cached_property
    def path_table(self) -> torch.Tensor:
        """[N+1, max(depth, 1)] the node indices from the root to each row (0 = root), -1 padded."""
        return padded(self.root_paths)

    @cached_property
    def paths(self) -> list[list[int]]:
        """Root-to-leaf node index lists, leaves in index order."""
        return root_to_leaf_paths(self.parents)

    @cached_property
    def is_chain(self) -> bool:
        return bool(torch.equal(self.parents, torch.arange(-1, self.num_nodes - 1)))

    def prefix(self, num_nodes: int) -> TreeShape:
        """The shape of its first num_nodes nodes (whole levels of a level-ordered shape), built once."""
        if num_nodes == self.num_nodes:
            return self
        cache = self.__dict__.setdefault("_prefixes", {})
        if num_nodes not in cache:
            cache[num_nodes] = TreeShape(self.parents[:num_nodes], self.ranks[:num_nodes])
        return cache[num_nodes]

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
