"""A packed forward: only a batch's real inputs, one after another in a single sequence.

A verification forward is [B, M] (each row's root and tree nodes), but a row that may not speculate this step
needs its root alone: its other M - 1 inputs would be computed and thrown away. Packed, the model runs the T
real inputs as one sequence [1, T] (embeddings, projections, MLPs, the LM head: T tokens, not B x M); attention,
the one part that mixes tokens, sees them again as rows: the KV cache unpacks the new keys and values into each
row's slots ([B, H, M, D], zeros where a row has no input, slots the row's tree mask never shows a real input),
and the tree attention unpacks the queries the same way and packs its output back. Positions come with the
inputs, so rotary embeddings need nothing more. Not for recurrent layers (their state runs along rows).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Packing:
    rows: torch.Tensor  # [T] each real input's batch row
    cols: torch.Tensor  # [T] its column in the dense [B, M] layout
    batch: int  # B
    width: int  # M

    @staticmethod
    def of(real: torch.Tensor) -> Packing:
        """real [B, M] bool: which inputs the forward must compute."""
        rows, cols = real.nonzero(as_tuple=True)
        return Packing(rows, cols, real.shape[0], real.shape[1])

    def pack(self, dense: torch.Tensor) -> torch.Tensor:
        """[B, M, ...] -> [1, T, ...]"""
        return dense[self.rows.to(dense.device), self.cols.to(dense.device)][None]

    def unpack(self, packed: torch.Tensor) -> torch.Tensor:
        """[1, T, ...] -> [B, M, ...], zeros where a row has no input."""
        dense = packed.new_zeros(self.batch, self.width, *packed.shape[2:])
        dense[self.rows.to(packed.device), self.cols.to(packed.device)] = packed[0]
        return dense

    def unpack_heads(self, packed: torch.Tensor) -> torch.Tensor:
        """Queries, keys or values [1, H, T, D] -> [B, H, M, D], zeros where a row has no input."""
        return self.unpack(packed.transpose(1, 2)).transpose(1, 2)
