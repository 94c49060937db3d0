"""What a verification step returns: the core type every role reads (a proposer's and a target's commit, a policy's
observe), made by the rules in verifiers/."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Verification:
    tokens: torch.Tensor  # [B, N+1] accepted tokens, then one recovered or bonus token; -1 padded
    num_accepted: torch.Tensor  # [B] accepted tree nodes
    path: torch.Tensor  # [B, depth] accepted node indices, root's child first; -1 padded

    @property
    def num_emitted(self) -> torch.Tensor:
        """[B] tokens emitted this step (accepted + 1, or accepted alone after an EOS)."""
        return (self.tokens >= 0).sum(-1)
