"""Distillation losses: how far a drafter's law q is from the target's law p, per position.

A drafted token is accepted with probability sum_x min(p(x), q(x)) = 1 - TV(p, q) (docs/design.md
section 4), so the loss a drafter should minimise is the total variation, not KL. KL is the usual
proxy (it shares the optimum q = p, but a drafter too small to reach it settles elsewhere); TV's
gradient is small and flat where acceptance is low, so from scratch it learns slowly. The LK loss
(Samarin et al. 2026, "LK losses") takes -log acceptance, whose gradient is TV's divided by the
acceptance: large where the drafter is far off. `Hybrid` adds a KL share to steady the start.

Every loss takes log-laws [N, V] over the same vocabulary (a drafter with a smaller vocabulary gets
the target's law restricted to it, renormalised) and the text's next tokens [N] (read by the
cross-entropy only) and returns one value per position [N]: the loop masks and averages them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch


class DistillationLoss(Protocol):
    def __call__(self, draft_logp: torch.Tensor, target_logp: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """draft_logp, target_logp [N, V]; labels [N] -> loss per position [N]."""
        ...


def acceptance(draft_logp: torch.Tensor, target_logp: torch.Tensor) -> torch.Tensor:
    """sum_x min(p, q) per position [N]: the chance a token drawn from q is accepted against p."""
    return torch.minimum(draft_logp.exp(), target_logp.exp()).sum(-1)


@dataclass(frozen=True)
class KL:
    """KL(p || q): the target's law to the drafter's (what EAGLE, Medusa-2 and SpecForge train)."""

    def __call__(self, draft_logp, target_logp, labels):
        return (target_logp.exp() * (target_logp - draft_logp)).sum(-1)


@dataclass(frozen=True)
class TotalVariation:
    """TV(p, q) = 1 - acceptance: the rejection chance itself."""

    def __call__(self, draft_logp, target_logp, labels):
        return 1 - acceptance(draft_logp, target_logp)


@dataclass(frozen=True)
class LogAcceptance:
    """LK: -log acceptance, floored so that a position with no overlap keeps a finite gradient."""

    floor: float = 1e-6

    def __call__(self, draft_logp, target_logp, labels):
        return -acceptance(draft_logp, target_logp).clamp_min(self.floor).log()


@dataclass(frozen=True)
class Hybrid:
    """kl_weight x KL + (1 - kl_weight) x LK: KL's steady gradient early, acceptance's aim throughout."""

    kl_weight: float = 0.5

    def __post_init__(self) -> None:
        if not 0.0 <= self.kl_weight <= 1.0:
            raise ValueError(f"kl_weight must be in [0, 1], got {self.kl_weight}")

    def __call__(self, draft_logp, target_logp, labels):
        return (self.kl_weight * KL()(draft_logp, target_logp, labels)
                + (1 - self.kl_weight) * LogAcceptance()(draft_logp, target_logp, labels))


@dataclass(frozen=True)
class CrossEntropy:
    """-log q(the text's next token): training on the text instead of the target's law (Medusa-1)."""

    def __call__(self, draft_logp, target_logp, labels):
        return -draft_logp.gather(-1, labels[:, None].long()).squeeze(-1)
