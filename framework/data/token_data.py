"""Token data for training drafters: int32 ids, a loss mask, and the identity of the tokenizer that made them.

A stream of one tokenizer fed to a target of another trains a drafter on noise without a sign, so
every `TokenData` records `tokenizer_hash(tokenizer)` and `check(tokenizer)` refuses a mismatch by
name. Ids are int32: vocabularies past 32,768 tokens (every modern chat model) fit.

Two layouts: a flat stream `[S]` (documents packed back to back; windows at random offsets, so
repeated epochs see new alignments) or ready rows `[N, T]` (the target's own continuations; a
batch is random rows). `loss_mask` has the ids' shape: True where the token is a training label
(every token of plain text; the assistant's tokens of a conversation).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import torch

from framework.core import files


def tokenizer_hash(tokenizer) -> str:
    """sha256 of what maps text to ids: the fast tokenizer's full serialisation (vocabulary, merges,
    normaliser, added tokens), or for a slow one its vocabulary."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    spec = backend.to_str() if backend is not None else json.dumps(sorted(tokenizer.get_vocab().items()))
    return hashlib.sha256(spec.encode("utf-8")).hexdigest()


@dataclass
class TokenData:
    ids: torch.Tensor  # [S] or [N, T] int32
    loss_mask: torch.Tensor  # same shape, bool: the token is a training label
    tokenizer_hash: str
    tokenizer_name: str = ""  # where the tokenizer came from, for the error that names a mismatch

    def __post_init__(self) -> None:
        if self.ids.shape != self.loss_mask.shape:
            raise ValueError(f"ids {tuple(self.ids.shape)} and loss_mask {tuple(self.loss_mask.shape)} differ in shape")
        self.ids = self.ids.to(torch.int32)
        self.loss_mask = self.loss_mask.to(torch.bool)

    @classmethod
    def of_documents(cls, documents: list[tuple[list[int], list[bool]]], tokenizer, name: str = "") -> TokenData:
        """Documents (ids, mask) packed into one stream."""
        ids = [t for doc, _ in documents for t in doc]
        mask = [m for _, doc_mask in documents for m in doc_mask]
        return cls(torch.tensor(ids, dtype=torch.int32), torch.tensor(mask, dtype=torch.bool),
                   tokenizer_hash(tokenizer), name)

    def check(self, tokenizer, where: str = "") -> TokenData:
        """Self, if `tokenizer` made it; else a ValueError naming both tokenizers."""
        found = tokenizer_hash(tokenizer)
        if found != self.tokenizer_hash:
            theirs = getattr(tokenizer, "name_or_path", "") or "the given tokenizer"
            raise ValueError(f"token data{' ' + where if where else ''} was made by tokenizer "
                             f"{self.tokenizer_name or '?'} (hash {self.tokenizer_hash[:12]}), not by {theirs} "
                             f"(hash {found[:12]}): make it again with the target's tokenizer")
        if len(self.ids) and int(self.ids.max()) >= len(tokenizer):
            raise ValueError(f"token data holds id {int(self.ids.max())}, past the tokenizer's {len(tokenizer)} tokens")
        return self

    @property
    def tokens(self) -> int:
        return self.ids.numel()

    def batch(self, batch_size: int, block_size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Random training windows (ids [B, T] long, mask [B, T] bool)."""
        if self.ids.dim() == 2:
            rows = torch.randint(len(self.ids), (batch_size,), generator=generator)
            return self.ids[rows, :block_size].long(), self.loss_mask[rows, :block_size]
        if len(self.ids) <= block_size:
            raise ValueError(f"{len(self.ids)} tokens: not one window of {block_size}")
        starts = torch.randint(len(self.ids) - block_size, (batch_size, 1), generator=generator)  # [B, 1]
        where = starts + torch.arange(block_size)  # [B, T]
        return self.ids[where].long(), self.loss_mask[where]

    def fixed(self, block_size: int, tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The first windows (a fixed evaluation set): ids [N, T] long, mask [N, T]."""
        if self.ids.dim() == 2:
            n = max(1, min(len(self.ids), tokens // self.ids.shape[1]))
            return self.ids[:n, :block_size].long(), self.loss_mask[:n, :block_size]
        n = min(len(self.ids) // block_size, max(1, tokens // block_size))
        if n == 0:
            raise ValueError(f"{len(self.ids)} tokens: not one window of {block_size}")
        return (self.ids[: n * block_size].view(n, block_size).long(),
                self.loss_mask[: n * block_size].view(n, block_size))

    def fields(self) -> dict:
        return {"ids": self.ids, "loss_mask": self.loss_mask, "tokenizer_hash": self.tokenizer_hash,
                "tokenizer_name": self.tokenizer_name}


def load_splits(path: str | Path) -> dict[str, TokenData] | None:
    """{split: TokenData} saved by `save_splits`; None when absent or unreadable (moved aside)."""
    stored = files.load_torch(path, "token data")
    if stored is None:
        return None
    if not isinstance(stored, dict) or not all(isinstance(v, dict) and "tokenizer_hash" in v for v in stored.values()):
        raise ValueError(f"{path} holds no tokenizer hash (made before token data recorded its tokenizer): "
                         "delete it and it is made again")
    return {split: TokenData(**fields) for split, fields in stored.items()}


def save_splits(splits: dict[str, TokenData], path: str | Path) -> Path:
    return files.save_torch({split: data.fields() for split, data in splits.items()}, path)
