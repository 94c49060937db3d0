"""Token paths -> one `point` CandidateTree: shared prefixes merged, nodes kept under a budget.

The model-free proposers (prompt lookup, lookahead, REST) and the mix all find candidate
continuations as token paths with a weight. Per row, the paths go into a trie whose node score is
the summed weight of the paths through it; the best `budget` nodes are kept (a prefix scores at
least as much as its extensions, and ties go to the shorter path, then to the path seen first, so the
kept set is closed under ancestors). Children are ranked by score, which gives every node a rank path.
The tree's `scores` are each node's share of its row's total weight (what the speculation policy calibrates).

A CandidateTree has one shape for the batch: the shape is the union of the rows' rank paths (cut
to the budget by how many rows hold a rank path, then by summed score). A row that lacks a node of
the shared shape fills it with a pad token (the smallest id from `pad_token` up that its siblings
lack, so no path appears twice). That is harmless for the point rule: the node is one more
candidate chosen without looking at any coin. Because a row's shape depends on the other rows,
such proposers couple rows.

Every step is an array operation over all rows' paths at once (a trie level is one `np.unique` of
(parent, token) keys): the cost follows the number of paths, not a Python loop per row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from framework.core.tree import CandidateTree
from framework.core.tree_shape import TreeShape

Paths = Sequence[tuple[Sequence[int], float]]  # (token path after the root, weight)


@dataclass
class WeightedPaths:
    """Every row's candidate paths: tokens [B, P, D] (a path's tokens, then -1) and weights [B, P]
    (> 0; 0 marks no path)."""

    tokens: torch.Tensor  # [B, P, D]
    weights: torch.Tensor  # [B, P]

    @staticmethod
    def from_rows(rows: Sequence[Paths]) -> WeightedPaths:
        longest = max((len(path) for paths in rows for path, _ in paths), default=0)
        width = max((len(paths) for paths in rows), default=0)
        tokens = torch.full((len(rows), width, max(longest, 1)), -1, dtype=torch.long)
        weights = torch.zeros(len(rows), width, dtype=torch.float64)
        for b, paths in enumerate(rows):
            for p, (path, weight) in enumerate(paths):
                tokens[b, p, : len(path)] = torch.as_tensor(list(path), dtype=torch.long)
                weights[b, p] = float(weight)
        return WeightedPaths(tokens, weights)

    @staticmethod
    def cat(parts: Sequence[WeightedPaths]) -> WeightedPaths:
        """The paths of every part, in parts' order, per row."""
        depth = max(part.tokens.shape[2] for part in parts)
        return WeightedPaths(torch.cat([to_depth(part.tokens, depth) for part in parts], dim=1),
                             torch.cat([part.weights.double() for part in parts], dim=1))


def to_depth(paths: torch.Tensor, depth: int) -> torch.Tensor:
    """Token paths [..., D] padded with -1 to [..., depth] (depth >= D)."""
    return torch.nn.functional.pad(paths, (0, depth - paths.shape[-1]), value=-1)


@dataclass
class Trie:
    """Every row's prefix nodes, flattened over the batch ([M] numpy arrays each)."""

    row: np.ndarray
    parent: np.ndarray  # the parent's index in the trie, -1 at depth 1 (level by level: parents first)
    token: np.ndarray
    depth: np.ndarray
    score: np.ndarray  # summed weight of the paths through the node
    first: np.ndarray  # when the node was first seen (path, then depth): the tie-break


def build_trie(paths: WeightedPaths, budget: int) -> Trie:
    """Every row's prefix nodes that may be among its best `budget`, level by level. A node kept in the end is
    among the `budget` best of its depth in its row (by score, then first seen), and so is its parent: each
    level keeps only those, and the next level reads only the paths through them."""
    B, P, D = paths.tokens.shape
    levels = np.ascontiguousarray(paths.tokens.cpu().numpy().transpose(2, 0, 1).reshape(D, B * P))  # [D, B P]
    weights = paths.weights.cpu().double().numpy().reshape(B * P)
    present = np.logical_and.accumulate((levels >= 0) & (weights > 0), axis=0)  # a path ends at its first -1
    span = int(levels.max()) + 2 if levels.size else 1
    parent = np.arange(B * P) // P  # depth 1's key: the row
    parts, offset = [], 0
    for d in range(D):
        at = np.flatnonzero(present[d])  # paths (b P + p) through kept nodes so far, row-major
        if not at.size:
            break
        # row-major: a key's first occurrence is in its first path
        keys, where, inverse = np.unique(parent[at] * span + levels[d, at], return_index=True, return_inverse=True)
        row = at[where] // P
        score = np.bincount(inverse, weights[at], minlength=keys.size)
        first = (at[where] % P) * D + d
        order = np.lexsort((first, -score, row))
        kept = np.zeros(keys.size, dtype=bool)
        kept[order] = positions_in_groups(row[order]) < budget
        node = np.where(kept, offset + np.cumsum(kept) - 1, -1)  # kept nodes' indices in the trie
        parts.append([a[kept] for a in (row, keys // span if d else np.full(keys.size, -1), keys % span,
                                        np.full(keys.size, d + 1), score, first)])
        parent = np.full(B * P, -1, dtype=np.int64)
        parent[at] = node[inverse.reshape(-1)]
        if d + 1 < D:
            present[d + 1 :] &= parent >= 0
        offset += int(kept.sum())
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return Trie(empty, empty, empty, empty, empty.astype(np.float64), empty)
    return Trie(*(np.concatenate(column) for column in zip(*parts)))


def lexsort(*keys: np.ndarray) -> np.ndarray:
    """The order sorting by keys[0], then keys[1], ... (each [M])."""
    return np.lexsort(keys[::-1])


def positions_in_groups(sorted_groups: np.ndarray) -> np.ndarray:
    """[M] group ids in sorted order -> each one's position within its group."""
    index = np.arange(sorted_groups.size)
    starts = np.ones(sorted_groups.size, dtype=bool)
    starts[1:] = sorted_groups[1:] != sorted_groups[:-1]
    return index - np.maximum.accumulate(np.where(starts, index, 0))


def tree_from_paths(rows: WeightedPaths | Sequence[Paths], budget: int, device=None, pad_token: int = 0,
                    depth: int | None = None) -> CandidateTree:
    """Row b's weighted token paths -> a point tree of at most `budget` nodes ([B, N]), none deeper than
    `depth` (None: as deep as the paths)."""
    if budget < 1:
        raise ValueError(f"budget must be >= 1, got {budget}")
    paths = rows if isinstance(rows, WeightedPaths) else WeightedPaths.from_rows(rows)
    B = paths.tokens.shape[0]
    if depth is not None:
        paths = WeightedPaths(paths.tokens[:, :, :depth], paths.weights)
    trie = build_trie(paths, budget)
    M = trie.row.size
    if not M:
        return CandidateTree.empty(B, device)
    # each row's best `budget` nodes
    order = lexsort(trie.row, -trie.score, trie.depth, trie.first)
    kept = order[positions_in_groups(trie.row[order]) < budget]
    # rank among kept siblings (a row's depth-1 nodes are siblings under the row's root)
    sibling_group = np.where(trie.parent >= 0, trie.parent, M + trie.row)
    by_rank = kept[lexsort(sibling_group[kept], -trie.score[kept], trie.first[kept])]
    rank = np.full(M, -1, dtype=np.int64)
    rank[by_rank] = positions_in_groups(sibling_group[by_rank])
    # rank paths, level by level: ids in (length, lexicographic) order, shared by the rows
    path_id = np.full(M, -1, dtype=np.int64)
    rank_parent, rank_last, offset = [], [], 0
    for d in range(1, int(trie.depth.max()) + 1):
        at = kept[trie.depth[kept] == d]
        if not at.size:
            break
        above = path_id[trie.parent[at]] if d > 1 else np.zeros_like(at)
        keys, inverse = np.unique(above * (budget + 1) + rank[at], return_inverse=True)
        path_id[at] = offset + inverse.reshape(-1)
        rank_parent.append(keys // (budget + 1) if d > 1 else np.full(keys.size, -1))
        rank_last.append(keys % (budget + 1))
        offset += keys.size
    rank_parent, rank_last = np.concatenate(rank_parent), np.concatenate(rank_last)
    holders = np.bincount(path_id[kept], minlength=offset)
    summed = np.bincount(path_id[kept], trie.score[kept], minlength=offset)
    shared = np.sort(lexsort(-holders, -summed, np.arange(offset))[:budget])  # ids: (length, rank path) order
    choices: dict[int, tuple[int, ...]] = {}
    for gid, parent, last in zip(shared.tolist(), rank_parent[shared].tolist(), rank_last[shared].tolist()):
        choices[gid] = (choices[parent] if parent >= 0 else ()) + (last,)
    shape = TreeShape.from_choices(list(choices.values()))  # nodes in (length, rank path) order: `shared`'s
    column = np.full(offset, -1, dtype=np.int64)
    column[shared] = np.arange(shared.size)
    placed = kept[column[path_id[kept]] >= 0]
    row, col = trie.row[placed], column[path_id[placed]]
    tokens = np.full((B, shared.size), -1, dtype=np.int64)
    tokens[row, col] = trie.token[placed]
    total = paths.weights.cpu().double().numpy().sum(axis=1)  # [B]
    scores = np.zeros((B, shared.size), dtype=np.float32)
    scores[row, col] = trie.score[placed] / np.where(total > 0, total, 1.0)[row]
    tokens = fill_pads(torch.from_numpy(tokens), shape, pad_token)
    return CandidateTree(tokens.to(device), shape.parents, None, "point", torch.from_numpy(scores).to(device))


def fill_pads(tokens: torch.Tensor, shape: TreeShape, pad_token: int) -> torch.Tensor:
    """tokens [B, N], -1 where a row lacks the node -> each missing node takes the smallest id from pad_token up
    that its siblings do not hold (the k-th missing sibling the k-th such id), so no path appears twice."""
    missing = tokens < 0
    if not bool(missing.any()):
        return tokens
    out = tokens.clone()
    for kids in shape.child_lists:
        if not kids:
            continue
        held = tokens[:, kids]  # [B, s]
        candidates = pad_token + torch.arange(len(kids) + 1)  # s + 1 ids hold a free one for every missing sibling
        free = ~(held[:, :, None] == candidates).any(dim=1)  # [B, s + 1]
        free_ids = candidates[(~free).long().argsort(dim=1, stable=True)]  # free ids first, ascending
        kth = missing[:, kids].long().cumsum(dim=1) - 1  # [B, s]
        out[:, kids] = torch.where(missing[:, kids], free_ids.gather(1, kth.clamp_min(0)), held)
    return out


def node_token_paths(tree: CandidateTree) -> torch.Tensor:
    """[B, N, D]: each node's token path after the root, -1 padded."""
    table = tree.shape.path_table[1:].to(tree.tokens.device)  # [N, D] node indices from the root's child
    gathered = tree.tokens[:, table.clamp_min(0)]  # [B, N, D]
    return torch.where(table >= 0, gathered, -1)


def node_paths(tree: CandidateTree) -> list[list[tuple[int, ...]]]:
    """Per row, the token path (after the root) of every node: [b][i] for node i."""
    return [[tuple(t for t in path if t >= 0) for path in row] for row in node_token_paths(tree).tolist()]
