"""Toy language models for the exact harness: next-token tables that depend on the prefix."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ToyLM:
    """logits(next | prefix) = table[len(prefix) % 2, second-last token, last token].

    table [2, V+1, V+1, V] float64; index V stands for "no token" in prefixes shorter than 2.
    """

    table: torch.Tensor

    @property
    def vocab(self) -> int:
        return self.table.shape[-1]

    @staticmethod
    def random(vocab: int, seed: int, scale: float = 1.5, banned: int = 0) -> ToyLM:
        """Random logits; `banned` tokens per context get -inf (zeros in p)."""
        g = torch.Generator().manual_seed(seed)
        table = torch.randn(2, vocab + 1, vocab + 1, vocab, generator=g, dtype=torch.float64) * scale
        if banned:
            ban = torch.rand(table.shape, generator=g).argsort(-1)[..., :banned]
            table = table.scatter(-1, ban, float("-inf"))
        return ToyLM(table)

    @staticmethod
    def unigram(logits: torch.Tensor) -> ToyLM:
        """The same law after every prefix."""
        v = logits.shape[-1]
        return ToyLM(logits.to(torch.float64).expand(2, v + 1, v + 1, v).clone())

    def opposite(self) -> ToyLM:
        """Heavy where this model is light (finite tables only)."""
        if torch.isinf(self.table).any():
            raise ValueError("opposite() needs finite logits")
        return ToyLM(-self.table)

    def _lookup(self, length: torch.Tensor, prev: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
        return self.table[length % 2, prev, last]

    def logits(self, context: torch.Tensor) -> torch.Tensor:
        """context [B, L] -> next-token logits [B, V]."""
        B, L = context.shape
        none = torch.full((B,), self.vocab, dtype=torch.long)
        last = context[:, -1] if L >= 1 else none
        prev = context[:, -2] if L >= 2 else none
        return self._lookup(torch.full((B,), L), prev, last)

    def tree_logits(self, context: torch.Tensor, tokens: torch.Tensor, parents: torch.Tensor) -> torch.Tensor:
        """Logits after the context (row 0) and after each node's own path (row i+1).  # [B, N+1, V]"""
        B, L = context.shape
        none = torch.full((B,), self.vocab, dtype=torch.long)
        last = [context[:, -1] if L >= 1 else none]
        prev = [context[:, -2] if L >= 2 else none]
        length = [L]
        for i, p in enumerate(parents.tolist()):
            last.append(tokens[:, i])
            prev.append(last[p + 1])
            length.append(length[p + 1] + 1)
        lengths = torch.tensor(length).expand(B, -1)
        return self._lookup(lengths, torch.stack(prev, 1), torch.stack(last, 1))
