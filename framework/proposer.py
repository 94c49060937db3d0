"""The proposer role and the decoding state it sees (DESIGN sections 2 and 8)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from framework.randomness import RandomSource
from framework.sampling import SamplingConfig
from framework.tree import CandidateTree


@dataclass
class DecodeState:
    """What a proposer may look at: the committed state, never the verifier's coins to come."""

    root: torch.Tensor  # [B] last emitted token (the tree's root; not yet in any KV cache)
    seen: torch.Tensor  # [B, V] bool: tokens in each row's sequence, root included
    sampling: SamplingConfig  # the target's sampling law
    rng: RandomSource  # for the proposer's own draws
    target_hidden: torch.Tensor | None = None  # [B, L, H] target hidden states of the root row, if asked for


class Proposer(Protocol):
    hidden_layers: tuple[int, ...]  # target hidden layers it reads (HF hidden_states indices; -1 = last, post-norm)

    def prefill(self, input_ids: torch.Tensor, target) -> None:
        """See the prompt [B, L]; check compatibility with the target (vocabulary, device, dtype)."""
        ...

    def propose(self, state: DecodeState) -> CandidateTree:
        """Candidates after state.root, with the kind that says how children were chosen."""
        ...

    def commit(self, result) -> None:
        """Keep the accepted path (a verifiers.Verification: .path [B, depth], .num_accepted [B])."""
        ...

    def expand(self, batch_size: int) -> None:
        """Replicate a one-row state (after prefill) into batch_size rows."""
        ...
