"""Token paths -> one `point` CandidateTree: shared prefixes merged, nodes kept under a budget.

The model-free proposers (prompt lookup, lookahead, REST) and the mix all find candidate
continuations as token paths with a weight. Per row, the paths go into a trie whose node score is
the summed weight of the paths through it; the best `budget` nodes are kept (a prefix scores at
least as much as its extensions, and ties go to the shorter path, so the kept set is closed under
ancestors). Children are ranked by score, which gives every node a rank path. The tree's `scores`
are each node's share of its row's total weight (what the speculation policy calibrates).

A CandidateTree has one shape for the batch: the shape is the union of the rows' rank paths (cut
to the budget by how many rows hold a rank path, then by summed score). A row that lacks a node of
the shared shape fills it with a pad token (the smallest id from `pad_token` up that its siblings
lack, so no path appears twice). That is harmless for the point rule: the node is one more
candidate chosen without looking at any coin. Because a row's shape depends on the other rows, such proposers couple rows.
"""

from __future__ import annotations

from typing import Sequence

import torch

from framework.core.tree import CandidateTree
from framework.core.tree_shape import TreeShape

Paths = Sequence[tuple[Sequence[int], float]]  # (token path after the root, weight)


def trie_scores(paths: Paths) -> dict[tuple[int, ...], float]:
    """Score of every prefix (the summed weight of the paths through it), in first-seen order."""
    score: dict[tuple[int, ...], float] = {}
    for path, weight in paths:
        path = tuple(int(t) for t in path)
        for end in range(1, len(path) + 1):
            score[path[:end]] = score.get(path[:end], 0.0) + float(weight)
    return score


def best_nodes(score: dict[tuple[int, ...], float], budget: int) -> list[tuple[int, ...]]:
    """The `budget` best token paths; ancestor-closed (see the module doc)."""
    order = {path: i for i, path in enumerate(score)}
    ranked = sorted(score, key=lambda p: (-score[p], len(p), order[p]))
    return ranked[:budget]


def rank_paths(nodes: list[tuple[int, ...]], score: dict[tuple[int, ...], float]) -> dict[tuple[int, ...], tuple[int, ...]]:
    """token path -> rank path (the rank of each node among its kept siblings, best first)."""
    children: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
    for path in nodes:  # best first already: the order within a parent is the rank
        children.setdefault(path[:-1], []).append(path)
    ranks: dict[tuple[int, ...], tuple[int, ...]] = {}
    for path in sorted(nodes, key=len):
        ranks[path] = ranks.get(path[:-1], ()) + (children[path[:-1]].index(path),)
    return ranks


def tree_from_paths(rows: Sequence[Paths], budget: int, device=None, pad_token: int = 0,
                    depth: int | None = None) -> CandidateTree:
    """rows[b]: row b's weighted token paths -> a point tree of at most `budget` nodes ([B, N]), none deeper
    than `depth` (None: as deep as the paths)."""
    if budget < 1:
        raise ValueError(f"budget must be >= 1, got {budget}")
    per_row = []  # per row: rank path -> (token, score)
    shares = []  # per row: rank path -> share of the row's weight
    for paths in rows:
        paths = [(path[:depth] if depth is not None else path, weight) for path, weight in paths]
        score = trie_scores(paths)
        nodes = best_nodes(score, budget)
        total = sum(float(w) for _, w in paths) or 1.0
        ranked = rank_paths(nodes, score)
        per_row.append({rank: (path[-1], score[path]) for path, rank in ranked.items()})
        shares.append({rank: score[path] / total for path, rank in ranked.items()})
    held: dict[tuple[int, ...], tuple[int, float]] = {}  # rank path -> (rows holding it, summed score)
    for row in per_row:
        for rank, (_, s) in row.items():
            count, total = held.get(rank, (0, 0.0))
            held[rank] = (count + 1, total + s)
    shared = sorted(held, key=lambda r: (-held[r][0], -held[r][1], len(r), r))[:budget]
    if not shared:
        return CandidateTree.empty(len(rows), device)
    shape = TreeShape.from_choices(shared)  # depth, then rank order: topological, siblings by rank
    ordered = sorted(set(shared), key=lambda c: (len(c), c))
    tokens = torch.tensor([fill_row(row, ordered, pad_token) for row in per_row], dtype=torch.long)
    scores = torch.tensor([[share.get(rank, 0.0) for rank in ordered] for share in shares], dtype=torch.float32)
    return CandidateTree(tokens.to(device), shape.parents, None, "point", scores.to(device))


def fill_row(row: dict[tuple[int, ...], tuple[int, float]], ordered: list[tuple[int, ...]], pad_token: int) -> list[int]:
    """The row's token at every rank path of the shared shape; a missing node takes the smallest id
    from pad_token up that its siblings do not hold, so no path appears twice."""
    used: dict[tuple[int, ...], set[int]] = {}  # parent rank path -> sibling tokens
    for rank in ordered:
        if rank in row:
            used.setdefault(rank[:-1], set()).add(row[rank][0])
    out = []
    for rank in ordered:
        if rank in row:
            out.append(row[rank][0])
            continue
        siblings = used.setdefault(rank[:-1], set())
        token = pad_token
        while token in siblings:
            token += 1
        siblings.add(token)
        out.append(token)
    return out


def node_paths(tree: CandidateTree) -> list[list[tuple[int, ...]]]:
    """Per row, the token path (after the root) of every node: [b][i] for node i."""
    parents = tree.parents.tolist()
    out = []
    for row in tree.tokens.tolist():
        paths: list[tuple[int, ...]] = []
        for i, parent in enumerate(parents):
            paths.append((paths[parent] if parent >= 0 else ()) + (row[i],))
        out.append(paths)
    return out
