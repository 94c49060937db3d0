"""The global suffix cache: earlier requests' outputs, in one suffix trie, bounded in tokens.

Each request's output is one sequence, extended as its tokens commit. Past `max_tokens` the oldest sequences are
evicted whole (their counts replayed out of the trie); a sequence that alone would pass the bound stops growing
there. One cache is shared by every proposer its config builds (the Hydra partial holds the one instance), so later
requests draft from earlier ones.
"""

from __future__ import annotations

from collections import OrderedDict
from itertools import count

from proposers.suffix.trie import SuffixTrie


class SuffixCache:
    def __init__(self, max_tokens: int = 1_000_000, max_depth: int = 64):
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        self.trie, self.max_tokens = SuffixTrie(max_depth), max_tokens
        self.sequences: OrderedDict[int, list[int]] = OrderedDict()  # id -> its tokens, oldest first
        self.open_nodes: dict[int, list] = {}
        self.tokens, self.evicted, self._ids = 0, 0, count()

    def open(self) -> int:
        """A new sequence (a request's output); its id."""
        key = next(self._ids)
        self.sequences[key], self.open_nodes[key] = [], self.trie.open()
        return key

    def extend(self, key: int, tokens: list[int]) -> None:
        """Append `tokens` to sequence `key`, evicting the oldest others to stay within max_tokens."""
        if key not in self.sequences:
            return  # evicted while it was still growing: the rest of it is not kept either
        while self.tokens + len(tokens) > self.max_tokens and next(iter(self.sequences)) != key:
            self._evict(next(iter(self.sequences)))
        room = self.max_tokens - self.tokens
        tokens = tokens[:room]
        self.open_nodes[key] = self.trie.extend(self.open_nodes[key], tokens)
        self.sequences[key] += tokens
        self.tokens += len(tokens)

    def _evict(self, key: int) -> None:
        tokens = self.sequences.pop(key)
        del self.open_nodes[key]
        self.trie.extend(self.trie.open(), tokens, sign=-1)
        self.tokens -= len(tokens)
        self.evicted += 1
