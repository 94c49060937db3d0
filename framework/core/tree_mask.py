"""The compact tree-attention mask: who each query row may see, without a dense [M, S] mask.

Keys are laid out as [committed past (S0 slots) | tree part (T slots)]. A query sees a past slot
iff that slot is valid for its batch row (holes left by ragged commits are not), and a tree slot
iff the tree part says so (its ancestors and itself). The tree part is shared by the batch, or, for
the dense paths only, one per row ([B, M, T]: rows whose inputs differ in shape, e.g. PARD's ragged
leading tokens). A sliding-window layer further hides keys `window` or more positions behind the query's
own position (transformers' rule: key position > query position - window); that needs the positions of
the queries and keys, which a model with such layers gives the mask.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch


@dataclass(frozen=True)
class TreeMask:
    past_valid: torch.Tensor  # [B, S0] bool
    tree: torch.Tensor  # [M, T] (or [B, M, T], dense paths only) bool: query row i may see tree slot j
    query_positions: torch.Tensor | None = None  # [B, M] position ids of the query rows (sliding windows)
    key_positions: torch.Tensor | None = None  # [B, S0+T] position of each key slot (holes: any value)

    @property
    def num_keys(self) -> int:
        return self.past_valid.shape[1] + self.tree.shape[1]

    def dense(self, window: int | None = None) -> torch.Tensor:
        """[B, 1, M, S0+T] bool: the same pattern, materialised (reference and SDPA paths), once per
        forward and window: every layer of a kind reads the same mask."""
        if window is None:
            return self._dense
        if window not in self._windowed:
            self._windowed[window] = self._dense & self.in_window(window)[:, None]
        return self._windowed[window]

    def in_window(self, window: int) -> torch.Tensor:
        """[B, M, S0+T] bool: keys fewer than `window` positions behind each query."""
        if self.query_positions is None or self.key_positions is None:
            raise ValueError("a sliding-window layer needs the positions of the queries and keys in the tree mask")
        return self.query_positions[:, :, None] - self.key_positions[:, None, :] < window

    @cached_property
    def _windowed(self) -> dict:
        return {}

    @cached_property
    def _dense(self) -> torch.Tensor:
        B, M = self.past_valid.shape[0], self.tree.shape[-2]
        past = self.past_valid[:, None, :].expand(B, M, -1)
        tree = self.tree if self.tree.dim() == 3 else self.tree[None].expand(B, -1, -1)
        return torch.cat([past, tree], dim=-1)[:, None]

    @cached_property
    def is_causal(self) -> bool:
        """No past slot and a tree part that is the causal pattern (a prefill: each query sees itself and the
        queries before it), the same for every row: attention needs no mask at all."""
        M = self.tree.shape[-2]
        return self.past_valid.shape[1] == 0 and self.tree.dim() == 2 and self.tree.shape[1] == M and \
            bool((self.tree == torch.ones(M, M, dtype=torch.bool, device=self.tree.device).tril()).all())

    @cached_property
    def sees_all(self) -> bool:
        """Every query sees every key (one query per row, a plain decoding step with no hole in any row's past):
        attention needs no mask at all."""
        return self.tree.shape[-2] == 1 and bool(self.tree.all()) and bool(self.past_valid.all())

    def additive(self, dtype: torch.dtype, window: int | None = None) -> torch.Tensor:
        """[B, 1, M, S0+T] of 0 (may attend) and -inf: SDPA converts a boolean mask to this form in
        every call, i.e. in every layer; built here once per forward, dtype and window."""
        if (dtype, window) not in self._additive:
            zero = torch.zeros((), dtype=dtype, device=self.tree.device)
            self._additive[dtype, window] = torch.where(self.dense(window), zero, float("-inf"))
        return self._additive[dtype, window]

    @cached_property
    def _additive(self) -> dict:
        return {}

    def to(self, device: torch.device | str, non_blocking: bool = False) -> TreeMask:
        """The same mask on `device` (a layer of a target placed across devices), made once per device."""
        device = torch.device(device)
        if self.past_valid.device == device:
            return self
        if device not in self._moved:
            moved = (None if t is None else t.to(device, non_blocking=non_blocking)
                     for t in (self.past_valid, self.tree, self.query_positions, self.key_positions))
            self._moved[device] = TreeMask(*moved)
        return self._moved[device]

    @cached_property
    def _moved(self) -> dict:
        return {}

    def packed_tree(self) -> torch.Tensor:
        """[M, ceil(T/32)] int32 bitmask words: bit j % 32 of word j // 32 is tree[i, j]."""
        if self.tree.dim() != 2:
            raise ValueError("a per-row tree mask runs on the dense attention paths only (tree_backend=None)")
        M, T = self.tree.shape
        words = max(1, -(-T // 32))
        bits = torch.zeros(M, words * 32, dtype=torch.int64, device=self.tree.device)
        bits[:, :T] = self.tree.to(torch.int64)
        packed = (bits.view(M, words, 32) << torch.arange(32, device=self.tree.device)).sum(-1)  # [M, W] < 2^32
        return torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32)
