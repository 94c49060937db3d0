"""SuffixDecoding: drafts from suffix tries over the request's own text and over earlier requests' outputs.

Per row, two tries (proposers/suffix/trie.py): one over the prompt and the tokens generated so far, and the shared
global cache (proposers/suffix/cache.py), which every row's output joins as it commits. Each step, in each trie the
longest suffix of the committed text plus the root (at most max_match tokens) picks a node, and a tree grows from it
best-first by path probability, at most max_spec_factor x the match length nodes (and max_budget), none below
min_prob; the tree with the larger expected accepted length (the sum of its nodes' probabilities) is drafted. No
match drafts nothing (a plain step). Chosen by value from text, never from a coin: kind `point`.
"""

from __future__ import annotations

import math

import torch

from framework.core.path_tree import tree_from_paths
from framework.core.proposer import DecodeState
from framework.core.tree import CandidateTree
from proposers.common.token_history import TextProposer
from proposers.suffix.cache import SuffixCache
from proposers.suffix.trie import SuffixTrie


class SuffixProposer(TextProposer):
    def __init__(self, cache: SuffixCache | None = None, max_depth: int = 32, max_match: int = 16,
                 max_spec_factor: float = 1.0, max_budget: int = 32, min_prob: float = 0.1):
        """cache: the global cache of earlier outputs (None: this request's text only); max_depth: the longest
        substring the request's trie keeps (a match plus its continuation); max_match: the longest suffix matched;
        max_spec_factor: nodes per matched token; max_budget: the most nodes; min_prob: the least path probability."""
        super().__init__()
        if not 1 <= max_match < max_depth:
            raise ValueError(f"max_match must lie in 1..max_depth-1 ({max_depth - 1}), got {max_match}")
        if max_spec_factor <= 0 or max_budget < 1:
            raise ValueError(f"max_spec_factor must be > 0 and max_budget >= 1, got {max_spec_factor}, {max_budget}")
        if not 0 <= min_prob < 1:
            raise ValueError(f"min_prob must lie in [0, 1), got {min_prob}")
        if cache is not None and not isinstance(cache, SuffixCache):
            raise ValueError(f"cache must be a SuffixCache or None, got {type(cache).__name__}")
        self.cache, self.max_depth, self.max_match = cache, max_depth, max_match
        self.max_spec_factor, self.max_budget, self.min_prob = max_spec_factor, max_budget, min_prob

    def prefill(self, input_ids: torch.Tensor, target) -> None:
        if self.cache is not None:
            self.cache.bind(target.model)  # its ids must be this tokenizer's
        super().prefill(input_ids, target)
        self._restart()

    def select(self, rows: torch.Tensor) -> None:
        super().select(rows)
        self._restart()

    def join(self, other: SuffixProposer) -> None:
        if other.cache is not self.cache:
            raise ValueError("newcomers join a batch that shares their global suffix cache only")
        super().join(other)
        self.tries, self.open_nodes = self.tries + other.tries, self.open_nodes + other.open_nodes
        self.fed, self.cached = self.fed + other.fed, self.cached + other.cached
        self.sequences = self.sequences + other.sequences

    def _restart(self) -> None:
        """Fresh per-row tries (built from each row's committed text at its next step) and cache sequences
        (fed from what the row commits from now on)."""
        B, lengths = self.history.lengths.shape[0], self.history.lengths
        self.tries = [SuffixTrie(self.max_depth) for _ in range(B)]
        self.open_nodes = [[] for _ in range(B)]
        self.fed = [0] * B  # tokens of the row in its trie
        self.cached = [int(lengths[b]) for b in range(B)]  # fed to the cache: what each row commits after these
        self.sequences = [self.cache.open() for _ in range(B)] if self.cache is not None else []

    def _feed(self, b: int, row: list[int]) -> None:
        """The row's committed text not yet in its own trie."""
        self.open_nodes[b] = self.tries[b].extend(self.open_nodes[b], row[self.fed[b]:])
        self.fed[b] = len(row)

    def _draft(self, trie: SuffixTrie, context: list[int]) -> tuple[list, float]:
        node, length = trie.match(context, self.max_match)
        if node is None:
            return [], 0.0
        budget = min(self.max_budget, math.ceil(self.max_spec_factor * length))
        leaves, expected = trie.speculate(node, budget, self.min_prob)
        return leaves, expected

    def _feed_cache(self) -> None:
        """The committed text not yet in the cache, every step (the request's own tries catch up when it drafts): the
        cache learns every request's output, whether or not its steps drafted."""
        lengths = self.history.lengths
        for b, key in enumerate(self.sequences):
            end = int(lengths[b])
            if end > self.cached[b]:
                self.cache.extend(key, self.history.tokens[b, self.cached[b]:end].tolist())
                self.cached[b] = end

    def propose(self, state: DecodeState) -> CandidateTree:
        self._feed_cache()
        if not state.plan.drafts:
            return self.plain_step(state.root)
        tokens, lengths = self.history.contexts(state.root)
        rows = []
        for b in range(tokens.shape[0]):
            context = tokens[b, : int(lengths[b])].tolist()
            self._feed(b, context[:-1])  # the committed text; the root has no continuation yet
            drafts = [self._draft(self.tries[b], context)]
            if self.cache is not None:
                drafts.append(self._draft(self.cache.trie, context))
            rows.append(max(drafts, key=lambda d: d[1])[0])
        return tree_from_paths(rows, self.max_budget, state.root.device, depth=state.plan.depth)
