"""A depth-bounded suffix trie with occurrence counts: what SuffixDecoding drafts from.

Every substring of the added sequences, up to `max_depth` tokens long, is a path from the root; a node's count
is how often its substring occurs. Adding a token extends each open suffix (one per start within the last
`max_depth - 1` tokens) by one node: O(max_depth) per token. Removing a sequence replays it with -1 (the global
cache evicts so), and nodes that reach zero go.

Drafting (SuffixDecoding, Oliaro et al. 2025): the longest suffix of the context found in the trie (at most
`max_match` tokens) picks a node; from there a tree grows best-first by path probability, each child's
probability its parent's times its share of the parent's children's counts, until `budget` nodes (the proposer
sizes it by the match length) or until the best remaining path falls below `min_prob`.
"""

from __future__ import annotations

import heapq
from itertools import count


class Node:
    __slots__ = ("children", "count", "depth")

    def __init__(self, depth: int):
        self.children: dict[int, Node] = {}
        self.count = 0
        self.depth = depth


class SuffixTrie:
    def __init__(self, max_depth: int):
        if max_depth < 2:
            raise ValueError(f"max_depth must be >= 2 (a match and one token after it), got {max_depth}")
        self.max_depth, self.root = max_depth, Node(0)

    def open(self) -> list[Node]:
        """The open suffixes of a new sequence: none yet (the root stands for the empty one)."""
        return []

    def extend(self, open_nodes: list[Node], tokens, sign: int = 1) -> list[Node]:
        """Add (sign 1) or remove (sign -1) `tokens` after the sequence whose open suffixes are `open_nodes`;
        returns the open suffixes after them."""
        for token in tokens:
            grown = []
            for node in [self.root, *open_nodes]:
                if node.depth >= self.max_depth:
                    continue
                child = node.children.get(token)
                if child is None:
                    if sign < 0:
                        raise ValueError(f"removing a substring the trie does not hold (token {token})")
                    child = node.children[token] = Node(node.depth + 1)
                child.count += sign
                if child.count == 0:
                    del node.children[token]
                else:
                    grown.append(child)
            open_nodes = grown
        return open_nodes

    def match(self, context: list[int], max_match: int) -> tuple[Node | None, int]:
        """The node of the longest suffix of `context` the trie holds (at most max_match tokens) that has a
        continuation, and its length; (None, 0) when even the last token has none."""
        for length in range(min(max_match, len(context), self.max_depth - 1), 0, -1):
            node = self.root
            for token in context[len(context) - length:]:
                node = node.children.get(token)
                if node is None:
                    break
            if node is not None and node.children:
                return node, length
        return None, 0

    @staticmethod
    def speculate(node: Node, budget: int, min_prob: float) -> tuple[list[tuple[list[int], float]], float]:
        """The best `budget` continuations of `node` by path probability (>= min_prob), as the leaves of the tree
        they make, [(tokens, probability)], and the tree's expected accepted length (its probabilities' sum)."""
        tie = count()
        frontier = [(-1.0, next(tie), node, [])]
        chosen: list[tuple[list[int], float, bool]] = []  # (path, probability, has a chosen child)
        parent_of: dict[int, int] = {}
        while frontier and len(chosen) < budget:
            negative, _, at, path = heapq.heappop(frontier)
            probability = -negative
            if at is not node:
                if probability < min_prob:
                    break
                chosen.append([path, probability, False])
                if id(at) in parent_of:
                    chosen[parent_of[id(at)]][2] = True
            here = len(chosen) - 1
            total = sum(child.count for child in at.children.values())
            for token, child in at.children.items():
                if at is not node:
                    parent_of[id(child)] = here
                heapq.heappush(frontier, (-probability * child.count / total, next(tie), child, path + [token]))
        return [(path, probability) for path, probability, inner in chosen if not inner], sum(p for _, p, _ in chosen)
