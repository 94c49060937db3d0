"""How deep to draft next, from how much of the last draft was accepted (transformers' "heuristic").

After a step whose every row accepted everything drafted, draft two levels deeper; otherwise one
level shallower; always within [1, max_depth]. The depth of step t is a function of steps
before t only, so it is fixed before any of step t's coins are drawn: given the past, the tree is
a constant and the verifier's law for that step is exact, whatever the depth.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class DepthSchedule:
    depth: int  # levels to draft at the next step
    max_depth: int

    def __post_init__(self) -> None:
        if not 1 <= self.depth <= self.max_depth:
            raise ValueError(f"need 1 <= depth <= max_depth, got depth {self.depth}, max_depth {self.max_depth}")

    def update(self, accepted: torch.Tensor, drafted: int) -> None:
        """accepted [B] nodes accepted per row at the step that drafted `drafted` levels."""
        if bool((accepted >= drafted).all()):
            self.depth = min(self.max_depth, self.depth + 2)
        else:
            self.depth = max(1, self.depth - 1)
