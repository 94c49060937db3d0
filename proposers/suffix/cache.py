"""The global suffix cache: earlier requests' outputs, in one suffix trie, bounded in tokens.

Each request's output is one sequence, extended as its tokens commit. Past `max_tokens` the oldest sequences are
evicted whole (their counts replayed out of the trie); a sequence that alone would pass the bound stops growing
there. One cache is shared by every proposer its config builds (the Hydra partial holds the one instance), so later
requests draft from earlier ones; a measurement that keeps its cells apart builds each cell's on a `renewed` copy.
With a `path`, the cache starts from that file and writes itself there as each new request opens; it holds token
ids, so it remembers the tokenizer they came from and refuses another.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from itertools import count
from pathlib import Path

import torch

from framework.core import files
from framework.lm.text import tokenizer_of
from proposers.rest.datastore import tokenizer_fingerprint
from proposers.suffix.trie import SuffixTrie


def vocabulary_fingerprint(model) -> str:
    """What the cache's ids mean: the target tokenizer's fingerprint, else (token-id targets) its vocabulary size."""
    tokenizer = tokenizer_of(model)
    return tokenizer_fingerprint(tokenizer) if tokenizer is not None else f"vocabulary:{model.config.vocab_size}"


class SuffixCache:
    def __init__(self, max_tokens: int = 1_000_000, max_depth: int = 64, path: str | Path | None = None):
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        self.trie, self.max_tokens = SuffixTrie(max_depth), max_tokens
        self.sequences: OrderedDict[int, list[int]] = OrderedDict()  # id -> its tokens, oldest first
        self.open_nodes: dict[int, list] = {}
        self.tokens, self.evicted, self._ids = 0, 0, count()
        self.path, self.fingerprint = (Path(path).expanduser() if path is not None else None), None
        self.stored: dict | None = None  # the file as it was read (renewed copies start from it)
        self.bound: weakref.WeakSet = weakref.WeakSet()  # the models whose tokenizer was checked
        if self.path is not None and self.path.exists():
            self._load()

    def renewed(self) -> SuffixCache:
        """An empty cache of the same bounds holding what the file held when this one was built; it writes no
        file (framework.core.proposer.SharedStore)."""
        copy = SuffixCache(self.max_tokens, self.trie.max_depth)
        if self.stored is not None:
            copy._fill(self.stored)
        return copy

    def bind(self, model) -> None:
        """Refuse a target whose tokenizer is not the one the cached ids came from (the first one bound, or the
        file's)."""
        if model in self.bound:
            return  # checked: a tokenizer's fingerprint takes tens of ms, and every request binds
        seen = vocabulary_fingerprint(model)
        if self.fingerprint is not None and seen != self.fingerprint:
            where = f" in {self.path}" if self.path is not None else ""
            raise ValueError(f"the suffix cache{where} holds token ids of another tokenizer ({self.fingerprint[:24]}) "
                             f"than this target's ({seen[:24]}); give it another path, or delete the file")
        self.fingerprint = seen
        self.bound.add(model)

    def open(self) -> int:
        """A new sequence (a request's output); its id. The earlier ones are complete: saved, with a path."""
        if self.path is not None and self.fingerprint is not None:
            self.save()
        return self._new_sequence()

    def _new_sequence(self) -> int:
        key = next(self._ids)
        self.sequences[key], self.open_nodes[key] = [], self.trie.open()
        return key

    def extend(self, key: int, tokens: list[int]) -> None:
        """Append `tokens` to sequence `key`, evicting the oldest others to stay within max_tokens."""
        if key not in self.sequences:
            return  # evicted while it was still growing: the rest of it is not kept either
        while self.tokens + len(tokens) > self.max_tokens and next(iter(self.sequences)) != key:
            self._evict(next(iter(self.sequences)))
        tokens = tokens[: self.max_tokens - self.tokens]
        self.open_nodes[key] = self.trie.extend(self.open_nodes[key], tokens)
        self.sequences[key] += tokens
        self.tokens += len(tokens)

    def save(self) -> None:
        files.save_torch({"fingerprint": self.fingerprint, "max_depth": self.trie.max_depth,
                          "sequences": [torch.tensor(s, dtype=torch.int32) for s in self.sequences.values()]},
                         self.path)

    def _load(self) -> None:
        try:
            stored = torch.load(self.path, weights_only=True)
        except Exception as error:  # noqa: BLE001 - any unreadable file is named the same way
            raise ValueError(f"{self.path} is not a suffix cache: {type(error).__name__}: {error}") from error
        if not isinstance(stored, dict) or not {"fingerprint", "sequences"} <= set(stored):
            raise ValueError(f"{self.path} is not a suffix cache (no fingerprint and sequences)")
        self.stored = stored
        self._fill(stored)

    def _fill(self, stored: dict) -> None:
        self.fingerprint = stored["fingerprint"]
        for sequence in stored["sequences"]:
            self.extend(self._new_sequence(), sequence.tolist())

    def _evict(self, key: int) -> None:
        tokens = self.sequences.pop(key)
        del self.open_nodes[key]
        self.trie.extend(self.trie.open(), tokens, sign=-1)
        self.tokens -= len(tokens)
        self.evicted += 1
