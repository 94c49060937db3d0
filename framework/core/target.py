"""The target role: what the loop asks of the model it speculates for (docs/design.md section 5).

`framework.lm.target.HFTarget` is the one implementation (any Hugging Face causal LM); an engine or
a test may bring its own. The loop (engine.loop) knows a target only through this Protocol.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import torch

from framework.core.side_rows import SideRows
from framework.core.tree import CandidateTree
from framework.core.verification import Verification


@dataclass
class TargetOutput:
    logits: torch.Tensor  # [B, M, V]: M = 1 after prefill, N+1 after forward_tree (row 0 = root)
    hidden: torch.Tensor | None  # [B, M, L, H] for the requested layers (after prefill: every prompt row), else None
    side_logits: torch.Tensor | None = None  # [B, S, V] of a proposer's side rows, if it added any


class Target(Protocol):
    vocab_size: int
    device: torch.device
    dtype: torch.dtype
    # What a proposer may read of the model besides the forwards (the only way in: proposers do not reach past the
    # target): `model`, the model itself (its config, embeddings and head, its layers for a drafter that runs part
    # of it, its tokenizer), and `tree_backend`, the tree attention it runs (None: the model's own attention).
    # Its features come with the forwards (provide_hidden, TargetOutput.hidden).
    model: object
    tree_backend: str | None
    max_positions: int | None  # the model's context, None if unbounded
    packs_rows: bool  # forward_tree skips the nodes of rows not speculating (each costs one position)

    def room(self) -> int | None:
        """Positions left in the context of the fullest row (None: unbounded)."""
        ...

    def provide_hidden(self, layers: tuple[int, ...]) -> None:
        """Return these hidden-state layers with the logits from now on (what the proposer declared)."""
        ...

    def prefill(self, input_ids: torch.Tensor) -> TargetOutput:
        """Run the prompt [B, L] into the cache; logits of its last position."""
        ...

    def forward_tree(self, root: torch.Tensor, tree: CandidateTree, side: SideRows | None = None,
                     speculating: torch.Tensor | None = None) -> TargetOutput:
        """Logits [B, N+1, V] at the root [B] (the last emitted token, not yet in the cache) and every
        node, each node seeing the committed past, its ancestors and itself. speculating [B] bool (None: all):
        the rows whose nodes the loop reads; a target may skip the others' nodes (their logits: anything finite)."""
        ...

    def commit(self, result: Verification) -> None:
        """Keep the KV of the root and the accepted path only."""
        ...

    def select(self, rows: torch.Tensor) -> None:
        """Keep the batch rows `rows` [B'] of the cache, in that order."""
        ...

    def join(self, other) -> None:
        """Append the rows of `other` (a target of the same model, prefilled on newcomers) after this batch's."""
        ...

    def cost_key(self) -> str:
        """Names what a forward's cost depends on (model, dtype, device, threads): measured costs are
        cached under it (framework/control/costs.py)."""
        ...

    def forward_costs(self, sizes: Sequence[int]) -> dict[int, float]:
        """Seconds per forward_tree of n nodes, n in sizes, at the current batch; the state unchanged."""
        ...
