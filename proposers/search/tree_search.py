"""Static trees searched from measured acceptance, not written by hand (docs/design.md section 8).

Input: accept[d, r], the measured probability that the rank-r candidate at depth d+1 is the
token the target accepts there (for Medusa: head d's rank-r token equals the target's own next
token). Under the usual independence assumption, a node with rank path (r_1..r_d) is reached
with probability prod_j accept[j-1, r_j], and the expected tokens per step of a tree is
1 + the sum of its nodes' values. A child's value never exceeds its parent's, so adding nodes
greedily by value (children and next siblings of the nodes taken so far) gives, for every node
budget N, the N-node tree of largest expected value; the first N nodes taken are that tree.
The budget is then chosen by expected tokens per unit of measured `forward_tree` cost.
Any proposer that reports per-depth, per-rank acceptance can use it (Medusa, EAGLE's static tree).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import torch


@dataclass
class SearchedTree:
    choices: list[tuple[int, ...]]  # rank paths, in the order the search took them
    expected_tokens: list[float]  # [N+1]: expected tokens per step of the first n nodes (n = 0..N)

    def best_budget(self, cost: dict[int, float]) -> int:
        """The node budget (>= 1) with the most expected tokens per unit cost; cost: nodes -> measured
        cost (e.g. ms per forward_tree), interpolated linearly between the measured node counts."""
        if not self.choices:
            raise ValueError("the search took no node")
        budgets = range(1, min(len(self.choices), max(cost)) + 1)
        return max(budgets, key=lambda n: self.expected_tokens[n] / interpolate(cost, n))

    def table(self, cost: dict[int, float]) -> list[dict]:
        """Per budget: expected tokens, interpolated cost and their ratio (for reports)."""
        return [{"nodes": n, "expected_tokens": self.expected_tokens[n], "cost": interpolate(cost, n),
                 "tokens_per_cost": self.expected_tokens[n] / interpolate(cost, n)}
                for n in range(0, min(len(self.choices), max(cost)) + 1)]


def interpolate(cost: dict[int, float], n: int) -> float:
    sizes = sorted(cost)
    if n <= sizes[0]:
        return cost[sizes[0]]
    for lo, hi in zip(sizes, sizes[1:]):
        if n <= hi:
            return cost[lo] + (cost[hi] - cost[lo]) * (n - lo) / (hi - lo)
    return cost[sizes[-1]]


def grow_tree(accept: torch.Tensor, max_nodes: int) -> SearchedTree:
    """accept [D, R] probabilities -> the greedy sequence of up to max_nodes rank paths."""
    if accept.dim() != 2 or accept.numel() == 0:
        raise ValueError(f"accept must be [depth, ranks], got shape {tuple(accept.shape)}")
    if bool(((accept < 0) | (accept > 1) | accept.isnan()).any()):
        raise ValueError("accept must hold probabilities in [0, 1]")
    depth, ranks = accept.shape
    acc = accept.double().tolist()
    frontier = [(-acc[0][0], (0,), 1.0)]  # (-value, rank path, parent's value): a max-heap by value
    taken: list[tuple[int, ...]] = []
    expected = [1.0]
    while frontier and len(taken) < max_nodes:
        neg_value, path, parent_value = heapq.heappop(frontier)
        taken.append(path)
        expected.append(expected[-1] - neg_value)
        level, rank = len(path) - 1, path[-1]
        if rank + 1 < ranks:  # the next sibling
            heapq.heappush(frontier, (-parent_value * acc[level][rank + 1], path[:-1] + (rank + 1,), parent_value))
        if level + 1 < depth:  # the first child
            heapq.heappush(frontier, (neg_value * acc[level + 1][0], path + (0,), -neg_value))
    return SearchedTree(taken, expected)
